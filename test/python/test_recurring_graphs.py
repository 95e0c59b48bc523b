"""Under the default LAZYFUSE_FUSION=auto, a graph too small to be worth compiling runs node by
node, and is compiled into fused kernels once it recurs (Note [Fusing recurring small graphs]).
Every run computes eager's values."""

import re

import pytest
import torch

import lazyfuse
from helpers import reference, train_side_by_side

# A graph is fused once its runs times its nodes reach this, and not before its third run.
NODE_RUNS_BEFORE_FUSING = 2000


@pytest.fixture(autouse=True)
def auto_fusion(monkeypatch):
    monkeypatch.delenv("LAZYFUSE_FUSION", raising=False)
    torch.ops.lazyfuse.clear_graph_cache()


def chain(x, length):
    for _ in range(length // 2):
        x = x * 1.001 + 0.01
    return x


def nodes_of(tensor):
    """Nodes of the graph a sync of `tensor` would run, from its text dump."""
    return int(re.search(r"nodes=(\d+)", lazyfuse.dump_ir(tensor)).group(1))


@pytest.mark.parametrize("length", [700, 100])
def test_small_graph_is_fused_once_it_has_run_often_enough(length, counters, monkeypatch):
    # One graph of `length` nodes: no automatic cut at the chain's repeated op (Note [Automatic
    # step boundaries]).
    monkeypatch.setenv("LAZYFUSE_TRACE_LIMIT", "0")
    x = torch.randn(4, 5)
    expected = reference(lambda x: chain(x, length), x)
    lazy_x = x.to("lazy")
    lazyfuse.mark_step()
    nodes = nodes_of(chain(lazy_x, length))
    fuse_at = max(3, -(-NODE_RUNS_BEFORE_FUSING // nodes))
    for run in range(1, fuse_at + 3):
        before = counters()
        torch.testing.assert_close(chain(lazy_x, length).cpu(), expected)
        after = counters()
        fused_now = after["RecurringGraphsFused"] - before["RecurringGraphsFused"]
        launched = after["KernelsLaunched"] - before["KernelsLaunched"]
        assert fused_now == (1 if run == fuse_at else 0), (run, nodes)
        assert (launched > 0) == (run >= fuse_at), (run, nodes)
        assert after["UncachedCompile"] - before["UncachedCompile"] == (1 if run == 1 else 0)


def test_few_node_graph_run_a_few_times_stays_node_by_node(counters):
    lazy_x = torch.randn(4, 5).to("lazy")
    for _ in range(10):
        chain(lazy_x, 4).cpu()
    assert counters()["RecurringGraphsFused"] == 0
    assert counters()["KernelsLaunched"] == 0


def test_fusion_off_never_fuses_a_recurring_graph(monkeypatch, counters):
    monkeypatch.setenv("LAZYFUSE_FUSION", "0")
    lazy_x = torch.randn(4, 5).to("lazy")
    for _ in range(5):
        chain(lazy_x, 1000).cpu()
    assert counters()["RecurringGraphsFused"] == 0
    assert counters()["KernelsLaunched"] == 0


def test_graph_of_aten_calls_only_is_never_recompiled(counters):
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    la, lb = a.to("lazy"), b.to("lazy")
    expected = reference(torch.mm, a, b)
    for _ in range(60):
        torch.testing.assert_close(torch.mm(la, lb).cpu(), expected)
    assert counters()["RecurringGraphsFused"] == 0


def test_small_model_training_matches_eager_across_the_switch():
    torch.manual_seed(0)
    fused_before = lazyfuse.metrics().get("RecurringGraphsFused", 0)
    model, lazy_model = train_side_by_side(
        lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)),
        lambda params: torch.optim.Adam(params, lr=1e-2), torch.randn(5, 6),
        torch.randn(5, 2), steps=60)
    assert lazyfuse.metrics().get("RecurringGraphsFused", 0) > fused_before
    for p, lp in zip(model.parameters(), lazy_model.parameters()):
        torch.testing.assert_close(lp.cpu(), p.cpu())
