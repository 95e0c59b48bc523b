"""Everything that needs a value forces a sync, and gives eager's value."""

import contextlib
import io
import re

import numpy as np
import pytest
import torch

import lazyfuse
from helpers import REFERENCE, randn, reference, to_reference


def pair(fn, *cpu_inputs):
    """(eager result on the CPU, lazy result) of fn; the lazy inputs are uploaded and synced
    first."""
    lazy_inputs = [t.to("lazy") for t in cpu_inputs]
    lazyfuse.mark_step()
    return reference(fn, *cpu_inputs), fn(*lazy_inputs)


def test_ops_are_recorded_not_run(counters):
    x = randn(3, 3).to("lazy")
    lazyfuse.mark_step()
    before = counters()
    y = (x + 1).relu() * 2
    after = counters()
    assert after["GraphsExecuted"] == before["GraphsExecuted"]
    assert after["OpsRecorded"] > before["OpsRecorded"]
    y.cpu()
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"] + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.bool, torch.float16])
def test_item(dtype, counters):
    x = (randn(4) * 10).to(dtype)
    expected = (x * 2).sum().item() if dtype != torch.bool else x.any().item()
    lazy = x.to("lazy")
    lazyfuse.mark_step()
    before = counters()
    actual = ((lazy * 2).sum() if dtype != torch.bool else lazy.any()).item()
    assert type(actual) is type(expected)
    assert actual == pytest.approx(expected)
    assert counters()["GraphsExecuted"] > before["GraphsExecuted"]


def test_item_of_element_and_float_conversions():
    expected, actual = pair(lambda x: x[1, 2] * 3, randn(3, 4))
    assert actual.item() == pytest.approx(expected.item())
    assert float(actual) == pytest.approx(float(expected))
    assert int(actual * 10) == int(expected * 10)


@pytest.mark.parametrize("threshold", [-10.0, 0.0, 10.0])
def test_bool(threshold):
    expected, actual = pair(lambda x: (x > threshold).any(), randn(5))
    assert bool(actual) == bool(expected)
    assert (True if actual else False) == bool(expected)
    expected, actual = pair(lambda x: x.sum() > threshold, randn(5))
    assert bool(actual) == bool(expected)


def test_bool_in_control_flow():
    results = []
    for device in (REFERENCE, "lazy"):
        x = randn(6).to(device)
        steps = 0
        while (x.abs().max() > 0.1) and steps < 50:
            x = x * 0.5
            steps += 1
        results.append(steps)
    assert results[0] == results[1]


def test_bool_of_multi_element_raises_like_eager():
    with pytest.raises(RuntimeError) as eager:
        bool(randn(3) > 0)
    with pytest.raises(type(eager.value)):
        bool(randn(3).to("lazy") > 0)


def _value_text(text):
    """The values of a tensor repr, without the device and grad suffixes."""
    return re.sub(r",\s*device='lazy:0'", "", text)


@pytest.mark.parametrize(
    "make",
    [
        lambda: randn(3, 4),
        lambda: randn(5) * 1e6,
        lambda: torch.arange(12).reshape(3, 4),
        lambda: randn(2, 2) > 0,
        lambda: torch.tensor(3.25),
        lambda: randn(2, 3).to(torch.float16),
        lambda: randn(0, 3),
        lambda: randn(2000),  # summarized with "..."
    ],
    ids=["float", "large", "int", "bool", "scalar", "half", "empty", "summarized"],
)
def test_print_and_repr(make):
    x = make()
    lazy = x.to("lazy") * 1 if x.dtype != torch.bool else x.to("lazy") & True
    text = repr(lazy)
    assert "device='lazy:0'" in text
    assert _value_text(text) == repr(x)
    assert _value_text(str(lazy)) == str(x)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print(lazy)
    assert _value_text(out.getvalue()) == str(x) + "\n"


def test_repr_of_requires_grad_tensor():
    x = randn(2, 2).requires_grad_()
    lazy = x.detach().to("lazy").requires_grad_()
    assert _value_text(repr(lazy * 2)).replace("MulBackward0", "X") == repr(x * 2).replace(
        "MulBackward0", "X"
    )


@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (2, 0)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_tolist(shape, dtype):
    x = (randn(*shape) * 10).to(dtype)
    expected, actual = pair(lambda x: x.clone(), x)
    assert actual.tolist() == expected.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.uint8,
                                   torch.bool, torch.float16])
def test_numpy(dtype):
    x = (randn(3, 4) * 10).to(dtype)
    expected, actual = pair(lambda x: x.t() + 0 if dtype != torch.bool else ~x.t(), x)
    array = actual.numpy()
    assert isinstance(array, np.ndarray)
    assert array.dtype == expected.numpy().dtype
    np.testing.assert_array_equal(array, expected.numpy())
    assert isinstance(np.asarray(actual.cpu()), np.ndarray)


def test_numpy_of_cpu_tensor_still_shares_memory():
    x = torch.zeros(3)
    a = x.numpy()
    a[0] = 5
    assert x[0].item() == 5


def test_cpu_value_is_a_snapshot():
    cpu = randn(4)
    lazy = cpu.to("lazy")
    snapshot = lazy.cpu()
    lazy.add_(1)
    cpu_snapshot = cpu.clone()
    cpu.add_(1)
    torch.testing.assert_close(snapshot, cpu_snapshot)
    torch.testing.assert_close(lazy.cpu(), cpu)


def test_mark_step_materializes_every_live_tensor(counters):
    cpu = [randn(3, 3, seed=k) for k in range(3)]
    lazy = [t.to("lazy") for t in cpu]
    cpu = to_reference(cpu)
    outs_cpu = [cpu[0] @ cpu[1], (cpu[1] + cpu[2]).relu(), cpu[2].sum(dim=0)]
    outs_lazy = [lazy[0] @ lazy[1], (lazy[1] + lazy[2]).relu(), lazy[2].sum(dim=0)]
    lazy[0].mul_(2)
    cpu[0].mul_(2)
    lazyfuse.mark_step()
    after_step = counters()
    assert after_step["GraphsExecuted"] >= 1
    for a, e in zip(outs_lazy + lazy, outs_cpu + cpu):
        torch.testing.assert_close(a.cpu(), e.cpu())
        a.tolist()
    # Reading what mark_step materialized runs nothing.
    before_reads = counters()
    for a in outs_lazy + lazy:
        a.cpu()
        a.numpy()
        repr(a)
    assert counters()["GraphsExecuted"] == before_reads["GraphsExecuted"]
    assert after_step["GraphsExecuted"] <= before_reads["GraphsExecuted"]


def test_reads_after_mark_step_run_no_graph(counters):
    x = randn(4, 4).to("lazy")
    y = torch.tanh(x @ x) + 1
    z = y.sum()
    lazyfuse.mark_step()
    before = counters()
    y.cpu()
    z.item()
    z.tolist()
    y.numpy()
    print(y, file=io.StringIO())
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"]
    assert counters()["TransferFromLazy"] > before["TransferFromLazy"]


def test_mark_step_with_nothing_pending_runs_nothing(counters):
    lazyfuse.mark_step()
    before = counters()
    lazyfuse.mark_step()
    lazyfuse.mark_step()
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"]


def test_sync_materializes_only_the_given_tensors(counters):
    x = randn(3).to("lazy")
    lazyfuse.mark_step()
    a, b = x + 1, x * 5
    lazyfuse.sync(a)
    before = counters()
    a.cpu()
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"]
    torch.testing.assert_close(b.cpu(), randn(3) * 5)
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"] + 1


def test_sync_accepts_lists_and_rejects_non_tensors():
    x = randn(2).to("lazy")
    a, b, c = x + 1, x + 2, x + 3
    lazyfuse.sync([a, (b,)], c)
    torch.testing.assert_close(torch.stack([a, b, c]).cpu(), torch.stack(
        [randn(2) + 1, randn(2) + 2, randn(2) + 3]))
    with pytest.raises(TypeError):
        lazyfuse.sync(a, 3)


def test_wait_and_synchronize():
    x = randn(3).to("lazy") * 2
    lazyfuse.mark_step()
    lazyfuse.wait()
    torch.lazy.synchronize()
    torch.testing.assert_close(x.cpu(), randn(3) * 2)


def test_dead_tensors_are_not_computed(counters):
    x = randn(5).to("lazy")
    lazyfuse.mark_step()
    keep = x + 1
    for _ in range(3):
        _ = x * 100  # dropped at once
    del _
    lazyfuse.mark_step()
    nodes = counters()["GraphNodes"]
    torch.testing.assert_close(keep.cpu(), randn(5) + 1)
    assert nodes <= 3, nodes


@pytest.mark.parametrize("rename", [torch.Tensor.detach, torch.ops.aten.alias],
                         ids=["detach", "alias"])
def test_detached_device_data_syncs_without_a_graph(rename):
    # Note [Renaming ops share their input's buffer]: no plan, no compile, no copy kernel.
    base = torch.randn(300, 200)
    x = base.to("lazy")
    lazyfuse.mark_step()
    lazyfuse.reset_metrics()
    y = rename(x)
    snapshot = y.cpu()
    counters = lazyfuse.metrics()
    assert counters.get("GraphsExecuted", 0) == 0 and counters.get("UncachedCompile", 0) == 0
    torch.testing.assert_close(snapshot, base, rtol=0, atol=0)
    # The detached tensor still aliases x as in eager, and the snapshot stays a snapshot.
    y.add_(1)
    snapshot.mul_(0)
    torch.testing.assert_close(x.cpu(), base + 1, rtol=0, atol=0)
    torch.testing.assert_close(y.cpu(), base + 1, rtol=0, atol=0)
    x.mul_(2)
    torch.testing.assert_close(y.cpu(), (base + 1) * 2, rtol=0, atol=0)
    assert y.cpu().data_ptr() != x.cpu().data_ptr()
