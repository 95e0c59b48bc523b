"""A loop that never syncs is cut into steps by lazyfuse itself (Note [Automatic step
boundaries] in backend/step_boundaries.h): at a repeated step, where its graphs come back from
the graph cache, or at LAZYFUSE_TRACE_LIMIT ops where no step repeats. The numbers are eager's
either way."""

import os

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from helpers import INDEXES_OUT_OF_RANGE, LAZY, REFERENCE


@pytest.fixture(autouse=True)
def short_rhythm():
    """A cut waits until the program has gone twice as long without a sync as between its last
    two syncs (Note [Automatic step boundaries]): start each test as a program that just synced
    after one op, not after whatever the test before it recorded."""
    (torch.ones(2).to(LAZY) + 1).cpu()
    yield


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train(device, steps, read_loss=False, make_optimizer=None):
    """`steps` SGD-momentum steps on `device` with no mark_step; the model and the losses read."""
    model = make_model().to(device)
    opt = (make_optimizer or (lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)))(
        model.parameters())
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 12, generator=g).to(device), torch.randn(16, 4, generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if read_loss:
            losses.append(loss.item())
    return model, losses


@pytest.fixture
def trace_limit():
    """Sets LAZYFUSE_TRACE_LIMIT for one test (read again at the next sync)."""
    before = os.environ.get("LAZYFUSE_TRACE_LIMIT")

    def set_limit(value):
        os.environ["LAZYFUSE_TRACE_LIMIT"] = str(value)
        lazyfuse.mark_step()

    yield set_limit
    if before is None:
        os.environ.pop("LAZYFUSE_TRACE_LIMIT", None)
    else:
        os.environ["LAZYFUSE_TRACE_LIMIT"] = before
    lazyfuse.mark_step()


def assert_same_parameters(lazy, eager):
    for p_lazy, p_eager in zip(lazy.parameters(), eager.parameters()):
        torch.testing.assert_close(p_lazy.cpu(), p_eager.cpu(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam"])
def test_a_loop_that_never_syncs_is_cut_at_its_steps(optimizer, counters):
    make_optimizer = {
        "sgd_momentum": None,
        "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    }[optimizer]
    eager, _ = train(REFERENCE, 60, make_optimizer=make_optimizer)
    lazy, _ = train(LAZY, 60, make_optimizer=make_optimizer)
    seen = counters()
    # Found a step and cut there, with nothing synced by the loop; none at the bound.
    assert seen["StepCuts"] >= 3, seen
    assert seen.get("TraceLimitCuts", 0) == 0, seen
    # The cuts fall at the same op of a step each time: the graphs after the first few are the
    # graph cache's (without cuts this loop is one graph of every step).
    assert seen["CachedCompile"] >= seen["StepCuts"] - 3, seen
    assert seen["UncachedCompile"] <= 4, seen
    assert_same_parameters(lazy, eager)


def test_cuts_keep_the_trace_short(counters):
    """Each graph that runs holds a bounded number of steps, however long the loop."""
    model, _ = train(LAZY, 100)
    lazyfuse.mark_step()
    seen = counters()
    assert seen["GraphsExecuted"] >= 10, seen
    per_graph = seen["GraphNodes"] / seen["GraphsExecuted"]
    assert per_graph < 1000, seen


def test_a_loop_that_reads_its_loss_is_not_cut(counters):
    eager, eager_losses = train(REFERENCE, 30, read_loss=True)
    lazy, lazy_losses = train(LAZY, 30, read_loss=True)
    seen = counters()
    assert seen.get("StepCuts", 0) == 0 and seen.get("TraceLimitCuts", 0) == 0, seen
    assert lazy_losses == pytest.approx(eager_losses, rel=1e-5, abs=1e-6)
    assert_same_parameters(lazy, eager)


def test_mark_step_loops_are_not_cut(counters):
    model = make_model().to(LAZY)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(16, 12).to(LAZY), torch.randn(16, 4).to(LAZY)
    graphs = []
    for _ in range(40):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        lazyfuse.mark_step()
        graphs.append(counters()["GraphsExecuted"])
    # One graph a step after the first (which the tracker may cut: it knows no rhythm yet).
    assert [b - a for a, b in zip(graphs, graphs[1:])] == [1] * 39, graphs
    assert counters()["TraceLimitCuts"] == 0


def test_loops_that_sync_each_step_are_cut_in_no_step_after_the_first(counters):
    """Equal layers repeat inside a step (and so do their per-parameter optimizer updates). The
    first step may be cut there: the tracker does not know the program's rhythm yet. Once the
    loop has called mark_step, or read a value, once per step, no step is cut."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(40)
                                  for m in (torch.nn.Linear(8, 8), torch.nn.Tanh())]).to(LAZY)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
    x = torch.randn(4, 8).to(LAZY)
    cuts = []
    for _ in range(6):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        lazyfuse.mark_step()
        cuts.append(counters()["StepCuts"])
    ws = [torch.randn(16, 16).to(LAZY) / 4 for _ in range(2)]
    h = torch.randn(4, 16).to(LAZY)
    for _ in range(6):
        for k in range(150):
            h = torch.tanh(h @ ws[k % 2])
        h.sum().item()
        cuts.append(counters()["StepCuts"])
    assert len(set(cuts[1:])) == 1, cuts  # the first training step's cuts, then none
    assert counters()["TraceLimitCuts"] == 0


def changing_steps(device, steps):
    """A loop whose steps never repeat: each reads a slice of another length."""
    x = torch.linspace(0, 1, 64).to(device)
    table = torch.linspace(-1, 1, 200).to(device)
    for i in range(steps):
        x = x * 0.9 + table[: i + 1].sum() / 100
    return x


def test_the_trace_limit_bounds_a_loop_whose_steps_do_not_repeat(trace_limit, counters):
    trace_limit(40)
    lazy = changing_steps(LAZY, 150)
    seen = counters()
    assert seen.get("StepCuts", 0) == 0, seen
    # A cut as the 41st op since the last one starts recording.
    assert seen["TraceLimitCuts"] == (seen["OpsRecorded"] - 1) // 40 >= 10, seen
    torch.testing.assert_close(lazy.cpu(), changing_steps(REFERENCE, 150).cpu())


def test_a_zero_limit_turns_cuts_off(trace_limit, counters):
    trace_limit(0)
    lazy = changing_steps(LAZY, 150)
    torch.testing.assert_close(lazy.cpu(), changing_steps(REFERENCE, 150).cpu())
    eager, _ = train(REFERENCE, 30)
    model, _ = train(LAZY, 30)
    assert_same_parameters(model, eager)
    seen = counters()
    assert seen["TraceLimitCuts"] == 0 and seen["StepCuts"] == 0, seen
    # One graph for the chain, at most one per parameter read for the loop.
    assert seen["GraphsExecuted"] <= 2 + len(list(model.parameters())), seen


def test_a_short_step_still_fuses_many_steps(counters):
    """A period of two ops is cut every 256 ops, not every step."""
    x = torch.linspace(0, 1, 1000)
    lazy = x.to(LAZY)
    for _ in range(1000):
        x = x * 0.999 + 0.001
        lazy = lazy * 0.999 + 0.001
    torch.testing.assert_close(lazy.cpu(), x)
    seen = counters()
    # The first cut comes one period after the step is found (at 64 ops), then one every 256.
    assert 1 <= seen["StepCuts"] <= 2000 // 256 + 1, seen


def test_a_limit_that_is_not_a_number_raises(trace_limit):
    trace_limit(100)
    os.environ["LAZYFUSE_TRACE_LIMIT"] = "lots"
    pending = torch.ones(3).to(LAZY) + 1
    with pytest.raises(RuntimeError, match="LAZYFUSE_TRACE_LIMIT must be a whole number"):
        lazyfuse.mark_step()
    os.environ["LAZYFUSE_TRACE_LIMIT"] = "100"
    torch.testing.assert_close(pending.cpu(), torch.full((3,), 2.0))


def largest_kernel_reads(plan):
    """The most buffers one fused kernel of a plan dump reads."""
    reads = [len(line.split(" reads ")[1].split(",")[0].split()) for line in plan.splitlines()
             if " kernel " in line and " reads " in line]
    return max(reads)


def test_one_trace_of_many_steps_recomputes_no_earlier_step(trace_limit, monkeypatch):
    """Note [Values read on both sides of an extern call]: with cuts off, a trace of 30
    SGD-momentum steps writes each step's momentum buffer instead of recomputing every earlier
    step in each step's update kernel (whose reads then grew with the step)."""
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    trace_limit(0)
    plans = {}
    for steps in (3, 30):
        model, _ = train(LAZY, steps)
        plans[steps] = lazyfuse.dump_ir(list(model.parameters()), "plan")
        lazyfuse.mark_step()
    assert largest_kernel_reads(plans[30]) <= largest_kernel_reads(plans[3]), plans[30]
    eager, _ = train(REFERENCE, 30)
    model, _ = train(LAZY, 30)
    assert_same_parameters(model, eager)


@INDEXES_OUT_OF_RANGE
def test_an_error_in_a_cut_says_it_comes_from_a_cut(trace_limit):
    """A cut's graph runs while some op is recorded; its error, eager's type and message, says
    that the sync was lazyfuse's own, and the program goes on."""
    trace_limit(20)
    x = torch.arange(3.0).to(LAZY)
    bad = x.index_select(0, torch.tensor([5]).to(LAZY))  # out of range: raises when it runs
    y = x
    with pytest.raises(IndexError, match="index out of range(.|\n)*LAZYFUSE_TRACE_LIMIT=0"):
        for _ in range(40):
            y = y + 1
    del bad
    steps = round(y[0].item())  # the loop stopped at the op the failed cut raised at
    torch.testing.assert_close(y.cpu(), torch.arange(3.0) + steps)
    assert 10 <= steps < 40
