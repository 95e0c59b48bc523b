"""Under the default LAZYFUSE_FUSION=auto, a graph too small to be worth compiling runs node by
node, and is compiled into fused kernels once it recurs (Note [Fusing recurring small graphs]).
Every run computes eager's values."""

import pytest
import torch

import lazyfuse
from helpers import train_side_by_side

RUNS_BEFORE_FUSING = 3


@pytest.fixture(autouse=True)
def auto_fusion(monkeypatch):
    monkeypatch.delenv("LAZYFUSE_FUSION", raising=False)
    torch.ops.lazyfuse.clear_graph_cache()


def small_chain(x):
    for _ in range(12):
        x = (x * 1.01 + 0.5).tanh()
    return x.sum(0)


def test_small_graph_runs_node_by_node_then_fused_from_its_third_run(counters):
    x = torch.randn(8, 5)
    expected = small_chain(x)
    lazy_x = x.to("lazy")
    lazyfuse.mark_step()
    for run in range(1, 6):
        before = counters()
        torch.testing.assert_close(small_chain(lazy_x).cpu(), expected)
        after = counters()
        fused_now = after["RecurringGraphsFused"] - before["RecurringGraphsFused"]
        launched = after["KernelsLaunched"] - before["KernelsLaunched"]
        assert fused_now == (1 if run == RUNS_BEFORE_FUSING else 0), run
        assert (launched > 0) == (run >= RUNS_BEFORE_FUSING), run
        assert after["UncachedCompile"] - before["UncachedCompile"] == (1 if run == 1 else 0)


def test_fusion_off_never_fuses_a_recurring_graph(monkeypatch, counters):
    monkeypatch.setenv("LAZYFUSE_FUSION", "0")
    lazy_x = torch.randn(8, 5).to("lazy")
    for _ in range(RUNS_BEFORE_FUSING + 1):
        small_chain(lazy_x).cpu()
    assert counters()["RecurringGraphsFused"] == 0
    assert counters()["KernelsLaunched"] == 0


def test_graph_of_aten_calls_only_is_never_recompiled(counters):
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    la, lb = a.to("lazy"), b.to("lazy")
    for _ in range(RUNS_BEFORE_FUSING + 1):
        torch.testing.assert_close(torch.mm(la, lb).cpu(), a @ b)
    assert counters()["RecurringGraphsFused"] == 0


def test_small_model_training_matches_eager_across_the_switch():
    torch.manual_seed(0)
    fused_before = lazyfuse.metrics().get("RecurringGraphsFused", 0)
    model, lazy_model = train_side_by_side(
        lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)),
        lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9), torch.randn(5, 6),
        torch.randn(5, 2), steps=6)
    assert lazyfuse.metrics().get("RecurringGraphsFused", 0) > fused_before
    for p, lp in zip(model.parameters(), lazy_model.parameters()):
        torch.testing.assert_close(lp.cpu(), p)
