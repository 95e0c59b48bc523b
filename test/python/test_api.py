"""The lazyfuse Python API: metrics, IR dumps, loading, autoload and the device module."""

import glob
import os
import random
import re
import textwrap

import pytest
import torch

import lazyfuse

COUNTERS = ["CachedCompile", "UncachedCompile", "OpsRecorded", "GraphsExecuted", "GraphNodes",
            "MetaCacheMiss", "EagerFallback", "TransferToLazy", "TransferFromLazy",
            "GraphCacheSize"]
TIMERS = ["CompileTime", "ExecuteTime"]


def some_work():
    x = torch.arange(6.0).reshape(2, 3).to("lazy")
    y = (x * 2 + 1).sum(dim=0)
    torch.testing.assert_close(y.cpu(), (torch.arange(6.0).reshape(2, 3) * 2 + 1).sum(dim=0))


# ---- metrics -------------------------------------------------------------------------------


def test_metrics_keys_and_types():
    some_work()
    m = lazyfuse.metrics()
    assert isinstance(m, dict)
    assert list(m) == sorted(m)
    for name in COUNTERS:
        assert name in m, name
        assert type(m[name]) is int and m[name] >= 0, (name, m[name])
    for name in TIMERS:
        assert isinstance(m[name], dict), name
        assert set(m[name]) == {"count", "total_ns"}
        assert all(type(v) is int and v >= 0 for v in m[name].values())
    for name, value in m.items():
        assert isinstance(value, (int, dict)), name


def test_metrics_count_what_happened():
    before = lazyfuse.metrics()
    some_work()
    after = lazyfuse.metrics()
    assert after["OpsRecorded"] > before["OpsRecorded"]
    assert after["GraphsExecuted"] == before["GraphsExecuted"] + 1
    assert after["TransferToLazy"] == before["TransferToLazy"] + 1
    assert after["TransferFromLazy"] == before["TransferFromLazy"] + 1
    assert (after["CachedCompile"] + after["UncachedCompile"]
            == before["CachedCompile"] + before["UncachedCompile"] + 1)
    assert after["ExecuteTime"]["count"] == before["ExecuteTime"]["count"] + 1
    assert after["ExecuteTime"]["total_ns"] > before["ExecuteTime"]["total_ns"]


def test_eager_fallback_counter_is_per_op():
    x = torch.tensor([0.0, 1.0, 2.0]).to("lazy")
    torch.nonzero(x).cpu()
    m = lazyfuse.metrics()
    assert m["aten::nonzero"] == 1
    assert m["EagerFallback"] >= 1



def test_unfused_nodes_are_counted_and_run_with_eagers_numbers():
    """A node a fused plan does not fuse (cummax has no lowering) runs its ATen kernel in the
    plan, with eager's result, and UnfusedNodes counts it once per plan made; a graph that fuses
    whole counts none."""
    rows = 307 + random.randrange(1000)  # a shape no earlier test compiled: a new plan here
    x = torch.randn(rows, 211)  # enough work to fuse under LAZYFUSE_FUSION=auto
    before = lazyfuse.metrics()["UnfusedNodes"]
    got = (torch.cummax(x.to("lazy") * 2, 1)[0] + 1).cpu()
    torch.testing.assert_close(got, torch.cummax(x * 2, 1)[0] + 1)
    assert lazyfuse.metrics()["UnfusedNodes"] == before + 1
    got = (x.to("lazy") * 3 + 1).sum(1).cpu()
    torch.testing.assert_close(got, (x * 3 + 1).sum(1))
    assert lazyfuse.metrics()["UnfusedNodes"] == before + 1


def test_reset_metrics():
    some_work()
    assert lazyfuse.metrics()["GraphsExecuted"] > 0
    lazyfuse.reset_metrics()
    m = lazyfuse.metrics()
    for name in COUNTERS:
        if name != "GraphCacheSize":  # a gauge of the cache, not an event count
            assert m[name] == 0, name
    for name in TIMERS:
        assert m[name] == {"count": 0, "total_ns": 0}
    for name, value in m.items():
        if name.startswith("aten::"):
            assert value == 0, name
    assert m["GraphCacheSize"] > 0


def test_metrics_report_is_a_table():
    some_work()
    report = lazyfuse.metrics_report()
    assert isinstance(report, str)
    lines = report.splitlines()
    assert lines[0].split() == ["counter", "value"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    m = lazyfuse.metrics()
    for name in COUNTERS:
        row = next(line for line in lines if line.split() and line.split()[0] == name)
        assert row.split()[1].replace(",", "").isdigit()
    timer_header = next(i for i, line in enumerate(lines) if line.startswith("timer"))
    assert lines[timer_header].split() == ["timer", "count", "total", "ms", "mean", "us"]
    for name in TIMERS:
        row = next(line for line in lines[timer_header:] if line.startswith(name))
        assert int(row.split()[1].replace(",", "")) == m[name]["count"]


def test_metrics_report_of_given_values():
    report = lazyfuse.metrics_report({"A": 1234, "T": {"count": 2, "total_ns": 3_000_000}})
    assert "1,234" in report
    assert re.search(r"^T\s+2\s+3\.000\s+1,500\.0$", report, re.M), report
    assert lazyfuse.metrics_report({}) == "(no metrics recorded)"


# ---- dump_ir -------------------------------------------------------------------------------


def test_dump_ir_text():
    x = torch.ones(2, 3).to("lazy")
    y = torch.relu(x @ x.t()) + 1
    lazyfuse.reset_metrics()
    text = lazyfuse.dump_ir(y)
    assert isinstance(text, str)
    assert text.startswith("graph(")
    # x @ x.t() without autograd: one matmul node (Note [Composite ops recorded whole])
    assert "aten::matmul" in text and "aten::relu" in text and "aten::add" in text
    assert "return" in text
    assert lazyfuse.metrics()["GraphsExecuted"] == 0  # dumping runs nothing
    assert lazyfuse.dump_ir(y) == text  # deterministic
    torch.testing.assert_close(y.cpu(), torch.relu(torch.ones(2, 3) @ torch.ones(3, 2)) + 1)


def test_dump_ir_dot():
    x = torch.ones(3).to("lazy")
    a, b = x + 1, x.exp()
    dot = lazyfuse.dump_ir([a, b], format="dot")
    assert dot.lstrip().startswith("digraph")
    assert dot.rstrip().endswith("}")
    assert "->" in dot and "aten::exp" in dot
    assert dot.count("output") >= 2


def test_dump_ir_of_list_and_of_materialized():
    x = torch.ones(3).to("lazy")
    text = lazyfuse.dump_ir([x + 1, x * 2])
    assert "aten::add" in text and "aten::mul" in text
    lazyfuse.mark_step()
    assert "aten::" not in lazyfuse.dump_ir(x)


def test_dump_ir_scalars_are_parameters():
    """x + 1 and x + 2 are the same graph (See the cached-graph test in test_ops.py)."""
    x = torch.ones(4).to("lazy")
    assert lazyfuse.dump_ir(x + 1) == lazyfuse.dump_ir(x + 2)
    assert lazyfuse.dump_ir(x + 1) != lazyfuse.dump_ir(x * 2)


def test_dump_ir_errors():
    x = torch.ones(2).to("lazy")
    with pytest.raises(ValueError):
        lazyfuse.dump_ir(x, format="svg")
    with pytest.raises(TypeError):
        lazyfuse.dump_ir([x, "y"])
    with pytest.raises(RuntimeError, match="lazy"):
        lazyfuse.dump_ir(torch.ones(2))


def test_dump_to_directory(tmp_path, python_subprocess):
    code = textwrap.dedent(
        """
        import torch, lazyfuse
        x = torch.ones(3, 5, device="lazy")
        y = (x * 3).sum(dim=1)
        print(y.cpu().tolist())
        """
    )
    dump_dir = tmp_path / "dumps" / "ir"  # made when missing
    proc = python_subprocess(code, env={"LAZYFUSE_DUMP": "ir", "LAZYFUSE_DUMP_DIR": str(dump_dir)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(glob.glob(os.path.join(dump_dir, "*")))
    assert files, f"nothing written to {dump_dir}"
    texts = [open(f).read() for f in files]
    assert any("aten::mul" in t and "aten::sum" in t for t in texts), texts
    assert all(re.fullmatch(r"lazyfuse-graph-[0-9a-f]{16}\.txt", os.path.basename(f))
               for f in files), files


def test_no_dump_without_env(tmp_path, python_subprocess):
    code = "import torch, lazyfuse; (torch.ones(3, device='lazy') * 3).cpu()"
    env = {"LAZYFUSE_DUMP_DIR": str(tmp_path), "LAZYFUSE_DUMP": ""}
    proc = python_subprocess(code, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.listdir(tmp_path) == []


# ---- loading -------------------------------------------------------------------------------


def test_library_path():
    path = lazyfuse.library_path()
    assert os.path.isfile(path)
    assert os.path.basename(path) == "liblazyfuse.so"


def test_version_and_hardware_device():
    assert isinstance(lazyfuse.__version__, str) and lazyfuse.__version__
    assert lazyfuse.hardware_device() in ("cpu", "cuda:0")


def test_hardware_device_from_env(python_subprocess):
    code = "import lazyfuse; print(lazyfuse.hardware_device())"
    proc = python_subprocess(code, env={"LAZYFUSE_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "cpu"


def test_load_library_by_hand(python_subprocess):
    code = textwrap.dedent(
        """
        import sys
        import torch
        assert "lazyfuse" not in sys.modules
        torch.ops.load_library(sys.argv[1] if len(sys.argv) > 1 else LIB)
        torch.ops.lazyfuse.mark_step()
        x = torch.ones(2, 3, device="lazy") * 2
        torch.ops.lazyfuse.sync([x])
        torch.testing.assert_close(x.cpu(), torch.full((2, 3), 2.0))
        names, values = torch.ops.lazyfuse.metrics()
        assert "GraphsExecuted" in names
        print("OK")
        """
    ).replace("LIB", repr(lazyfuse.library_path()))
    proc = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "OK"


def test_autoload_by_import_torch(python_subprocess):
    code = textwrap.dedent(
        """
        import sys
        import torch
        x = torch.ones(2, device="lazy")
        assert x.device.type == "lazy"
        torch.testing.assert_close((x + 1).cpu(), torch.full((2,), 2.0))
        assert "lazyfuse" in sys.modules
        torch.ops.lazyfuse.mark_step()
        print("OK", torch.lazy.is_available())
        """
    )
    env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    proc = python_subprocess(code, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "OK True"
    assert "Warning" not in proc.stderr, proc.stderr


def test_autoload_off(python_subprocess):
    code = textwrap.dedent(
        """
        import sys
        import torch
        print("lazyfuse" in sys.modules)
        import lazyfuse
        print(torch.ones(2, device="lazy").sum().item())
        """
    )
    proc = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "2.0"]


def test_import_lazyfuse_twice_is_idempotent():
    import importlib

    import lazyfuse as again

    assert again is lazyfuse
    lazyfuse._initialize()
    importlib.import_module("lazyfuse")
    torch.testing.assert_close((torch.ones(2, device="lazy") * 3).cpu(), torch.full((2,), 3.0))


# ---- device module -------------------------------------------------------------------------


def test_device_module():
    assert torch.lazy.is_available() is True
    assert torch.lazy.is_initialized() is True
    assert torch.lazy.device_count() == 1
    assert torch.lazy.current_device() == 0
    assert torch.get_device_module("lazy") is torch.lazy
    torch.lazy.synchronize()



def test_device_module_streams_order_work_as_recorded():
    """Streams and events of the lazy device (what device-generic code such as FSDP2 asks for):
    work "on another stream" runs in recorded order, so waits order nothing more."""
    side = torch.lazy.Stream(priority=-1)
    assert torch.lazy.current_stream() == torch.lazy.default_stream()
    x = torch.arange(4.0, device="lazy")
    with torch.lazy.stream(side):
        y = x * 2
    event = side.record_event()
    torch.lazy.current_stream().wait_event(event)
    torch.lazy.current_stream().wait_stream(side)
    x.add_(1)
    assert event.query() and side.query()
    event.synchronize()
    torch.testing.assert_close(y.cpu(), torch.arange(4.0) * 2)
    torch.testing.assert_close(x.cpu(), torch.arange(4.0) + 1)
    torch.lazy.set_device(0)

def test_device_module_manual_seed():
    torch.lazy.manual_seed(7)
    a = torch.rand(8, device="lazy").cpu()
    torch.lazy.manual_seed_all(7)
    b = torch.rand(8, device="lazy").cpu()
    torch.testing.assert_close(a, b)
    torch.lazy.manual_seed(8)
    c = torch.rand(8, device="lazy").cpu()
    assert not torch.equal(a, c)


def test_lazy_device_objects():
    x = torch.ones(2, device="lazy")
    assert x.device == torch.device("lazy", 0)
    assert torch.ones(2, device="lazy:0").device == x.device
    assert torch.ones(2, device=torch.device("lazy")).device.type == "lazy"


# ---- transforms lazy tensors cannot go through (Note [Transforms lazy tensors cannot go through])


def test_transforms_refuse_lazy_tensors_clearly():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(a):
        b = a.clone()
        b.add_(1)
        return b * 2

    x = torch.arange(4.0, device="lazy")
    for call, what in [(lambda: torch.func.functionalize(f)(x), "torch.func.functionalize"),
                       (lambda: torch._to_functional_tensor(x), "torch._to_functional_tensor"),
                       (lambda: make_fx(f)(x), "make_fx")]:
        with pytest.raises(RuntimeError, match=what) as err:
            call()
        assert "lazy" in str(err.value) and "INTERNAL ASSERT" not in str(err.value)
    # The process keeps working, and the same transforms of CPU tensors are PyTorch's.
    torch.testing.assert_close(f(x).cpu(), f(torch.arange(4.0)))
    torch.testing.assert_close(torch.func.functionalize(f)(torch.arange(4.0)), f(torch.arange(4.0)))
    assert "clone" in make_fx(f)(torch.arange(4.0)).code


def test_resize_of_a_lazy_storage_to_zero_keeps_the_values():
    """FSDP2 frees storages with resize_(0) and sizes them again: on lazy both are accepted and
    change nothing; another size is refused clearly; CPU storages are untouched by lazyfuse."""
    x = torch.arange(4.0, device="lazy")
    storage = x.untyped_storage()
    storage.resize_(0)
    storage.resize_(storage.nbytes())
    torch.testing.assert_close(x.cpu(), torch.arange(4.0))
    with pytest.raises(NotImplementedError, match="cannot grow or shrink"):
        storage.resize_(8)
    cpu = torch.arange(4.0).untyped_storage()
    cpu.resize_(0)
    assert cpu.nbytes() == 0
