"""A sync stores the values that something outside its graph still reads (Note [Values a sync
keeps for later] in backend/kept_values.cpp): a loop that only calls `loss.item()` runs the
same graph every step, a value is computed once however many syncs read it, and a random op
keeps the values it drew."""

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from helpers import LAZY, REFERENCE, base


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 12, generator=g), torch.randn(8, 3, generator=g)


OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw_no_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_loop_that_only_reads_the_loss_runs_one_graph_per_step(name, counters):
    """No mark_step(): each step's `loss.item()` syncs the forward pass, whose parameters the
    last step's optimizer update computed (pending until then)."""
    make_optimizer = OPTIMIZERS[name]
    eager = make_model().to(REFERENCE)
    lazy = make_model().to(LAZY)
    sides = [(eager, make_optimizer(eager.parameters()), REFERENCE),
             (lazy, make_optimizer(lazy.parameters()), LAZY)]
    per_step = []
    for step in range(10):
        x, y = batch(step)
        losses = []
        before = counters()
        for model, opt, device in sides:
            opt.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        after = counters()
        per_step.append({k: after[k] - before[k]
                         for k in ("GraphsExecuted", "GraphNodes", "UncachedCompile")})
        assert losses[1] == pytest.approx(losses[0], rel=1e-5, abs=1e-6)
    for p_eager, p_lazy in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(p_lazy.cpu(), p_eager.cpu(), rtol=1e-5, atol=1e-6)
    # Each step's graph holds the last step's backward and update and this step's forward. The
    # first three differ (no update yet; the optimizer's first update, which makes its state);
    # from the fourth step on each step is one cached graph of the same size: it starts from the
    # values the step before stored, rather than from the first step's parameters.
    steady = per_step[3:]
    assert all(s["UncachedCompile"] == 0 for s in steady), "\n".join(map(str, per_step))
    assert all(s["GraphsExecuted"] == 1 for s in steady), per_step
    assert len({s["GraphNodes"] for s in steady}) == 1, per_step
    assert counters()["ValuesKept"] > 0


def test_a_value_read_by_pending_ops_is_computed_once(counters):
    x = base((64, 64)).to(LAZY)
    lazyfuse.mark_step()
    y = x
    for _ in range(20):
        y = torch.tanh(y * 1.5 + 0.1)
    z = y * 2  # reads y; pending while y's sum is synced
    w = y.exp()
    del y
    expected_y = base((64, 64)).to(REFERENCE)
    for _ in range(20):
        expected_y = torch.tanh(expected_y * 1.5 + 0.1)
    assert z.sum().item() == pytest.approx((expected_y * 2).sum().item(), rel=1e-5)
    before = counters()
    torch.testing.assert_close(w.cpu(), expected_y.exp().cpu())
    after = counters()
    # w's graph reads the stored y: device data and one exp, not the 60 nodes of y's chain.
    assert after["GraphsExecuted"] - before["GraphsExecuted"] == 1
    assert after["GraphNodes"] - before["GraphNodes"] <= 2


def test_a_live_tensor_a_sync_computed_on_the_way_takes_the_stored_value(counters):
    x = base((32, 32)).to(LAZY)
    lazyfuse.mark_step()
    y = (x * 3).sin()
    total = (y + 1).sum().item()
    before = counters()
    y_cpu = y.cpu()  # computed by the sync above: nothing runs
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"]
    expected = (base((32, 32)) * 3).sin()
    torch.testing.assert_close(y_cpu, expected)
    assert total == pytest.approx((expected + 1).sum().item(), rel=1e-5)


def test_dropout_values_read_by_two_syncs_are_drawn_once():
    x = torch.ones(4096).to(LAZY)
    mask = F.dropout(x, 0.5)
    a = mask + 1
    b = mask * 2
    del mask  # reached only through a and b from here
    sum_a = a.sum().item()
    b_cpu = b.cpu()
    kept = (b_cpu != 0).sum().item()
    assert 0 < kept < 4096
    assert sum_a == pytest.approx(4096 + 2 * kept)
    torch.testing.assert_close(a.cpu(), b_cpu / 2 + 1)


def test_backward_after_reading_the_loss_uses_the_forward_dropout_mask():
    """The loss is read before backward: backward must see the mask the loss was computed with."""
    x = torch.ones(8, 512, device=LAZY, requires_grad=True)
    out = F.dropout(x, 0.5) * 3
    loss = out.sum()
    value = loss.item()
    loss.backward()
    grad = x.grad.cpu()
    # Each kept element contributes 3 * 2 to the loss and has gradient 6; the others 0.
    assert set(grad.unique().tolist()) <= {0.0, 6.0}
    assert grad.sum().item() == pytest.approx(value)
    torch.testing.assert_close(out.detach().cpu(), grad)


@pytest.mark.parametrize("fusion", ["always", "auto"])
def test_a_stored_value_read_again_is_never_overwritten(fusion, monkeypatch):
    # A later graph that reads a stored value may write its result into that value's memory
    # only when nothing else reads it (Note [Donated buffers]): here y and w still do.
    monkeypatch.setenv("LAZYFUSE_FUSION", fusion)
    x_cpu = base((64, 64))
    x = x_cpu.to(LAZY)
    lazyfuse.mark_step()
    y = x.sin()
    w = y * 3  # pending: reads y's node
    assert (y * 2).sum().item() == pytest.approx((x_cpu.sin() * 2).sum().item(), rel=1e-5)
    z = y + 1  # reads the stored y
    torch.testing.assert_close(z.cpu(), x_cpu.sin() + 1)
    torch.testing.assert_close(y.cpu(), x_cpu.sin())
    v = y.exp()  # y took the stored buffer: reads it directly
    del y
    torch.testing.assert_close(w.cpu(), x_cpu.sin() * 3)
    torch.testing.assert_close(v.cpu(), x_cpu.sin().exp())


def test_randint_like_with_a_cpu_scalar_high_like_eager():
    x = base((3, 4))
    expected = torch.randint_like(x, torch.tensor(10))
    got = torch.randint_like(x.to(LAZY), torch.tensor(10)).cpu()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert bool((got >= 0).all()) and bool((got < 10).all())
