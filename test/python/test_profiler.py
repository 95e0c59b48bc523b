"""Plan steps in the profiler (Note [Plan steps in the profiler]): every fused kernel, extern call
and view of a plan appears in torch.profiler traces under a name that says which ops it computes,
next to lazyfuse's own ranges for mark_step, compile and execute; lazyfuse.last_plan_profile()
gives the same steps of the last plan with their times."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import lazyfuse


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")


def mlp_step(x, w1, w2):
    return F.linear(F.gelu(F.linear(x, w1)), w2).square().mean()


def lazy_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to("lazy") for s in ((16, 32), (64, 32), (8, 64))]


@pytest.mark.parametrize("asynchronous", ["0", "1"])
def test_chrome_trace_names_each_fused_kernel_and_extern_call(tmp_path, monkeypatch, asynchronous):
    # With LAZYFUSE_ASYNC=1 too: under a profiler, mark_step() runs the step on this thread.
    monkeypatch.setenv("LAZYFUSE_ASYNC", asynchronous)
    torch.ops.lazyfuse.clear_graph_cache()  # the graph is compiled (its kernels may come from disk)
    x, w1, w2 = lazy_inputs(0)
    lazyfuse.mark_step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = mlp_step(x, w1, w2)
        lazyfuse.mark_step()
        value = loss.item()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = [e.get("name", "") for e in json.loads(path.read_text())["traceEvents"]]
    assert "lazyfuse::mark_step" in names
    assert "lazyfuse::compile" in names  # a graph this process had not seen
    assert "lazyfuse::execute" in names
    kernels = [n for n in names if n.startswith("lazyfuse::lf_kernel_")]
    assert any("aten::gelu" in n for n in kernels), kernels
    externs = [n for n in names if n.startswith("lazyfuse::extern ")]
    # F.linear without autograd: one linear node (Note [Composite ops recorded whole])
    assert "lazyfuse::extern aten::linear" in externs, externs
    eager = mlp_step(*(t.cpu() for t in lazy_inputs(0)))
    assert value == pytest.approx(eager.item(), rel=1e-5)


def test_last_plan_profile_lists_the_steps_of_the_last_plan():
    x, w1, w2 = lazy_inputs(1)
    lazyfuse.mark_step()
    loss = mlp_step(x, w1, w2)
    plan = lazyfuse.dump_ir(loss, "plan")
    lazyfuse.sync(loss)
    steps = lazyfuse.last_plan_profile()
    # One entry per step of the plan dump_ir showed, in its order.
    plan_steps = [line.split(": ", 1)[1] for line in plan.splitlines()[1:]]
    assert len(steps) == len(plan_steps)
    for (label, ms), line in zip(steps, plan_steps):
        assert ms >= 0
        if line.startswith("kernel "):
            assert label.startswith("lazyfuse::" + line.split()[1] + " ["), (label, line)
        elif line.startswith("extern "):
            assert label == "lazyfuse::extern " + line.split(" = ")[1], (label, line)
        else:
            assert label == "lazyfuse::view", (label, line)
    report = lazyfuse.metrics_report(last_plan=True)
    assert "last plan step" in report
    assert steps[0][0] in report or len(steps) > 20


def test_steps_run_the_same_with_and_without_a_profiler():
    x, w1, w2 = lazy_inputs(2)
    lazyfuse.mark_step()
    plain = mlp_step(x, w1, w2).item()
    with profile(activities=[ProfilerActivity.CPU]):
        profiled = mlp_step(x, w1, w2).item()
    assert plain == profiled
