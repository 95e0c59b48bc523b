"""PyTorch's lazy tensor API (`torch._lazy`) run unchanged on lazyfuse, against eager PyTorch.
See Note [torch._lazy on lazyfuse]."""

import io
import textwrap

import pytest
import torch
import torch._lazy
import torch._lazy.debug
import torch._lazy.metrics
import torch.testing._utils

import lazyfuse
from helpers import REFERENCE, to_cpu


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    )


def batches(steps):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 8, generator=gen), torch.randn(6, 4, generator=gen))
            for _ in range(steps)]


def train_with_torch_lazy(device, data):
    """A training loop written only against torch._lazy, as code for upstream's lazy backend or
    torch_xla is: mark_step per step, a step closure for the log, metrics and an IR dump."""
    model = make_model(0).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    logged, dumps = [], []
    for x, y in data:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "lazy":
            dumps.append(torch._lazy.debug.dump_ir([loss], "text"))
            torch._lazy.add_step_closure(lambda t: logged.append(t.item()), args=(loss,))
            torch._lazy.mark_step()
        else:
            logged.append(loss.item())
    return logged, [p.detach() for p in model.parameters()], dumps


def test_training_loop_written_for_torch_lazy_matches_eager():
    data = batches(6)
    expected_losses, expected_params, _ = train_with_torch_lazy(REFERENCE, data)
    torch._lazy.metrics.reset()
    losses, params, dumps = train_with_torch_lazy(torch.device("lazy"), data)

    # The closures ran once per step, after the step's graph: each logged loss is eager's.
    assert len(losses) == len(expected_losses)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected_losses),
                               rtol=1e-5, atol=1e-6)
    for got, want in zip(params, expected_params):
        assert got.device.type == "lazy"
        torch.testing.assert_close(got.cpu(), to_cpu(want), rtol=1e-5, atol=1e-6)
    assert all("mse_loss" in d for d in dumps), dumps[0]

    # Upstream's counter names, read through torch._lazy.metrics.
    names = torch._lazy.metrics.counter_names()
    for name in ("MarkStep", "UncachedCompile", "CachedCompile", "CreateLtcTensor",
                 "DestroyLtcTensor"):
        assert name in names, (name, names)
    assert torch._lazy.metrics.counter_value("MarkStep") == len(data)
    # Every step records the same graph: compiled once or twice, then served from the cache.
    assert torch._lazy.metrics.counter_value("CachedCompile") >= len(data) - 2
    report = torch._lazy.metrics.metrics_report()
    assert "Counter: CachedCompile" in report and "Metric: ExecuteTime" in report, report


def test_torch_lazy_metrics_and_lazyfuse_metrics_are_one_store():
    x = torch.ones(3, device="lazy") * 2
    torch._lazy.mark_step()
    ours = lazyfuse.metrics()
    for name in torch._lazy.metrics.counter_names():
        if name in ours:
            assert torch._lazy.metrics.counter_value(name) == ours[name], name
    assert ours["MarkStep"] == 1 and ours["ExecuteTime"]["count"] >= 1

    torch._lazy.metrics.reset()
    ours = lazyfuse.metrics()
    assert ours["MarkStep"] == 0 and ours["GraphsExecuted"] == 0
    assert ours["ExecuteTime"] == {"count": 0, "total_ns": 0}
    assert "MarkStep" not in torch._lazy.metrics.counter_names()  # upstream lists non-zero ones
    assert torch._lazy.metrics.counter_value("NoSuchCounter") is None

    lazyfuse.mark_step()
    assert torch._lazy.metrics.counter_value("MarkStep") == 1
    lazyfuse.reset_metrics()
    assert "MarkStep" not in torch._lazy.metrics.counter_names()
    torch.testing.assert_close(x.cpu(), torch.full((3,), 2.0))


def test_sync_multi_materializes_only_what_it_is_given():
    a = torch.arange(4.0, device="lazy") + 1
    b = torch.arange(4.0, device="lazy") * 3
    before = lazyfuse.metrics()["GraphsExecuted"]
    cpu = torch.ones(2)
    torch._lazy.sync_multi([a, cpu], devices=[])  # tensors that are not lazy are skipped
    assert lazyfuse.metrics()["GraphsExecuted"] == before + 1
    assert "device_data" in lazyfuse.dump_ir(a) and "aten::add" not in lazyfuse.dump_ir(a)
    assert "aten::mul" in lazyfuse.dump_ir(b)  # still pending
    torch.testing.assert_close(a.cpu(), torch.arange(4.0) + 1)
    torch.testing.assert_close(b.cpu(), torch.arange(4.0) * 3)
    with pytest.raises(TypeError):
        torch._lazy.sync_multi(a, [])


def test_to_cpu_and_save_keep_structure_and_values():
    a = torch.arange(6.0, device="lazy").reshape(2, 3) + 1
    b = a.t() * 2
    out = torch._lazy.to_cpu({"a": a, "pair": [b, a.sum()]})
    assert out["a"].device.type == "cpu"
    torch.testing.assert_close(out["a"], torch.arange(6.0).reshape(2, 3) + 1)
    torch.testing.assert_close(out["pair"][0], (torch.arange(6.0).reshape(2, 3) + 1).t() * 2)
    torch.testing.assert_close(out["pair"][1], torch.tensor(21.0))

    buffer = io.BytesIO()
    torch._lazy.save([a, b], buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert [t.device.type for t in loaded] == ["cpu", "cpu"]
    torch.testing.assert_close(loaded[1], out["pair"][0])


def test_get_tensor_id():
    a = torch.ones(3, device="lazy")
    b = a + 1
    ids = {torch._lazy.get_tensor_id(a), torch._lazy.get_tensor_id(b)}
    assert len(ids) == 2 and all(isinstance(i, int) for i in ids)
    assert torch._lazy.get_tensor_id(a) == torch._lazy.get_tensor_id(a)
    c = torch.ones(3, device="lazy")
    assert torch._lazy.get_tensor_id(c) not in ids
    with pytest.raises(RuntimeError, match="lazy tensor"):
        torch._lazy.get_tensor_id(torch.ones(3))  # upstream dereferences a null pointer here


def test_debug_dumps():
    x = torch.randn(4, 4, device="lazy")
    y = (x @ x).relu() + 1
    text = torch._lazy.debug.dump_ir([y], "text")
    # x @ x without autograd: one matmul node (Note [Composite ops recorded whole])
    assert "aten::matmul" in text and "aten::relu" in text and text == lazyfuse.dump_ir(y)
    backend = torch._lazy.debug.dump_ir([y], "backend")
    assert backend.startswith("plan(") and "extern" in backend and "aten::matmul" in backend
    assert torch._lazy.debug.render_ir_graph([y]).startswith("digraph")
    with pytest.raises(RuntimeError, match="Unrecognized IR format"):
        torch._lazy.debug.dump_ir([y], "xml")
    with pytest.raises(RuntimeError, match="lazy tensors"):
        torch._lazy.debug.dump_ir([torch.ones(2)], "text")
    # Dumping runs nothing.
    assert "aten::matmul" in lazyfuse.dump_ir(y)


def test_mark_step_device_argument_and_wait():
    x = torch.ones(2, device="lazy") + 1
    torch._lazy.mark_step("lazy:0", wait=True)
    torch._lazy.wait_device_ops()
    torch._lazy.wait_device_ops(devices=["lazy:0"])
    assert "device_data" in lazyfuse.dump_ir(x)
    with pytest.raises(RuntimeError, match="single device"):
        torch._lazy.mark_step("lazy:1")
    torch.testing.assert_close(x.cpu(), torch.full((2,), 2.0))


def test_step_closures_run_after_the_step_in_order():
    x = torch.arange(3.0, device="lazy") * 2
    order = []
    torch._lazy.add_step_closure(lambda t: order.append(("first", t.tolist())), args=(x,))
    lazyfuse.add_step_closure(lambda: order.append(("second", None)))
    assert order == []  # nothing runs before the step ends
    before = lazyfuse.metrics()["GraphsExecuted"]
    lazyfuse.mark_step()  # lazyfuse's mark_step runs them too, after the step's graph
    assert order == [("first", [0.0, 2.0, 4.0]), ("second", None)]
    assert lazyfuse.metrics()["GraphsExecuted"] == before + 1  # the closure's read cost no sync
    torch._lazy.mark_step()
    assert len(order) == 2  # each closure runs once


def test_async_step_closure():
    done = []
    torch._lazy.add_step_closure(lambda v: done.append(v), args=(7,), run_async=True)
    torch._lazy.mark_step()
    devctx = torch._lazy.closure.get_device_context()
    devctx.async_closure_handler._closure_queue.join()
    assert done == [7]


def test_wrapper_set_seed_runs_random_ops_as_shipped():
    # torch.testing's wrapper_set_seed (used by the OpInfos of every random op) calls
    # torch._lazy.mark_step() when the result is lazy.
    first = torch.testing._utils.wrapper_set_seed(torch.rand, 5, device="lazy")
    second = torch.testing._utils.wrapper_set_seed(torch.rand, 5, device="lazy")
    assert "device_data" in lazyfuse.dump_ir(first)  # the wrapper's mark_step ran it
    torch.testing.assert_close(first.cpu(), second.cpu())


def test_ts_backend_still_refused_and_torch_lazy_without_lazy_tensors(python_subprocess):
    code = textwrap.dedent(
        """
        import torch, lazyfuse, torch._lazy, torch._lazy.metrics
        torch._lazy.mark_step()  # nothing live: nothing runs
        torch._lazy.sync_multi([torch.ones(2)], [])
        assert torch._lazy.metrics.counter_value("GraphsExecuted") in (None, 0)
        print("DEVICE", torch._C._lazy._get_default_device_type())
        try:
            torch._lazy.ts_backend.init()
        except RuntimeError as err:
            print("REFUSED:", err)
        x = torch.ones(3, device="lazy") + 1
        torch._lazy.mark_step()
        print("OK", x.cpu().tolist())
        """
    )
    proc = python_subprocess(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED:" in proc.stdout and "OK [2.0, 2.0, 2.0]" in proc.stdout, proc.stdout
    assert f"DEVICE {REFERENCE.type.upper()}" in proc.stdout, proc.stdout
