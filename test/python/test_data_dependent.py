"""Ops whose output shape depends on values (See Note [Data-dependent ops]): they sync their
inputs, run eagerly, count as aten::<op>, and the trace goes on lazily from their results."""

import pytest
import torch

import lazyfuse  # noqa: F401 (registers the lazy device)
from helpers import REFERENCE, randn, reference


def run_both(fn, *cpu_inputs):
    """(eager result on the CPU, lazy result) of fn; the lazy inputs start from a pending
    computation so the op must sync them first."""
    lazy_inputs = [t.to("lazy") * 1 for t in cpu_inputs]
    return reference(fn, *cpu_inputs), fn(*lazy_inputs)


def assert_continues_lazily(counters, lazy_result, expected_result, follow):
    """`follow(result)` is recorded (runs no graph) and matches eager when synced."""
    before = counters()
    lazy_next = follow(lazy_result)
    assert lazy_next.device.type == "lazy"
    assert counters()["GraphsExecuted"] == before["GraphsExecuted"]
    assert counters()["OpsRecorded"] > before["OpsRecorded"]
    torch.testing.assert_close(lazy_next.cpu(), follow(expected_result))


@pytest.mark.parametrize(
    "name, fn, follow",
    [
        ("aten::nonzero", lambda x: torch.nonzero(x > 0), lambda r: r * 2 + 1),
        ("aten::nonzero", lambda x: (x > 0).nonzero(as_tuple=True)[1], lambda r: r.sum() * 3),
        ("aten::masked_select", lambda x: torch.masked_select(x, x > 0), lambda r: r.exp()),
        ("aten::_unique2", lambda x: torch.unique((x * 2).round()), lambda r: r + 10),
        ("aten::nonzero", lambda x: torch.argwhere(x < 0), lambda r: r.float().mean()),
    ],
    ids=["nonzero", "nonzero_tuple", "masked_select", "unique", "argwhere"],
)
def test_data_dependent_op(name, fn, follow, counters):
    x = randn(4, 5)
    before = counters()
    expected, actual = run_both(fn, x)
    assert actual.device.type == "lazy"
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected)
    assert counters()[name] > before[name], {k: v for k, v in counters().items() if "::" in k}
    assert counters()["EagerFallback"] > before["EagerFallback"]
    assert_continues_lazily(counters, actual, expected, follow)


def test_unique_with_counts_and_inverse(counters):
    x = torch.tensor([3, 1, 3, 2, 1, 3])
    expected, actual = run_both(
        lambda x: torch.unique(x, sorted=True, return_inverse=True, return_counts=True), x
    )
    for a, e in zip(actual, expected):
        assert a.device.type == "lazy"
        torch.testing.assert_close(a.cpu(), e)
    assert counters()["aten::_unique2"] >= 1
    assert_continues_lazily(counters, actual[2], expected[2], lambda c: c * 10)


def test_unique_dim(counters):
    x = torch.tensor([[1, 2], [3, 4], [1, 2]])
    expected, actual = run_both(lambda x: torch.unique(x, dim=0), x)
    torch.testing.assert_close(actual.cpu(), expected)
    assert counters()["aten::unique_dim"] >= 1


def test_boolean_mask_indexing(counters):
    x = randn(4, 5)
    before = counters()
    expected, actual = run_both(lambda x: x[x > 0], x)
    assert actual.device.type == "lazy"
    torch.testing.assert_close(actual.cpu(), expected)
    assert counters()["aten::index"] > before["aten::index"]
    assert_continues_lazily(counters, actual, expected, lambda r: r.sum() + r.max())


def test_boolean_mask_rows_and_cpu_mask(counters):
    x = randn(5, 3)
    mask = torch.tensor([True, False, True, True, False])
    torch.testing.assert_close(x.to("lazy")[mask].cpu(), x[mask])
    torch.testing.assert_close(x.to("lazy")[mask.to("lazy")].cpu(), x[mask])
    expected, actual = run_both(lambda x: x[x[:, 0] > 0, 1:], x)
    torch.testing.assert_close(actual.cpu(), expected)


def test_boolean_mask_assignment(counters):
    x = randn(4, 5)
    cpu, lazy = x.clone(), x.to("lazy") * 1
    cpu[cpu > 0] = 0.0  # a scalar value: torch turns this into masked_fill_, no sync needed
    lazy[lazy > 0] = 0.0
    torch.testing.assert_close(lazy.cpu(), cpu)
    cpu[cpu < -0.5] = cpu[cpu < -0.5] * 2
    lazy[lazy < -0.5] = lazy[lazy < -0.5] * 2
    torch.testing.assert_close(lazy.cpu(), cpu)
    # The mutated tensor keeps computing lazily.
    assert_continues_lazily(counters, lazy, cpu, lambda t: t.abs() + 1)


def test_boolean_mask_assignment_of_tensor_runs_eagerly(counters):
    x = randn(4, 5)
    cpu, lazy = x.clone(), x.to("lazy") * 1
    values_cpu = cpu[cpu < -0.5] * 2
    values_lazy = lazy[lazy < -0.5] * 2
    mask_lazy = lazy < -0.5
    before = counters()
    cpu[cpu < -0.5] = values_cpu
    lazy[mask_lazy] = values_lazy
    fallbacks = counters()["EagerFallback"] - before["EagerFallback"]
    torch.testing.assert_close(lazy.cpu(), cpu)
    assert fallbacks >= 1, "a boolean-mask index_put must sync and run eagerly"


def test_masked_fill_is_not_data_dependent(counters):
    x = randn(3, 3)
    before = counters()
    expected, actual = run_both(lambda x: x.masked_fill(x > 0, 1.0), x)
    assert counters()["EagerFallback"] == before["EagerFallback"]
    torch.testing.assert_close(actual.cpu(), expected)


def test_item_counts_and_value(counters):
    x = randn(6)
    before = counters()
    expected, actual = run_both(lambda x: (x * 3).sum().item(), x)
    assert actual == pytest.approx(expected)
    assert counters()["aten::_local_scalar_dense"] > before["aten::_local_scalar_dense"]


def test_item_feeds_later_lazy_ops():
    x = randn(5)
    results = []
    for device in (REFERENCE, "lazy"):
        t = x.to(device)
        scale = t.abs().max().item()
        results.append((t / scale + scale).cpu())
    torch.testing.assert_close(results[1], results[0])


def test_data_dependent_ops_in_a_loop_match_eager():
    x = randn(6, 4, seed=3)
    outs = []
    for device in (REFERENCE, "lazy"):
        t = x.to(device)
        acc = torch.zeros((), device=device)
        for k in range(3):
            picked = t[t > (k - 1) * 0.5]
            idx = torch.nonzero(t[:, 0] > 0).flatten()
            acc = acc + picked.sum() + t[idx].sum()
            t = t * 0.9
        outs.append(acc.cpu())
    torch.testing.assert_close(outs[1], outs[0])


def test_empty_results():
    x = -randn(3, 3).abs() - 1
    expected, actual = run_both(lambda x: torch.nonzero(x > 0), x)
    assert actual.shape == expected.shape == (0, 2)
    torch.testing.assert_close((actual + 1).cpu(), expected + 1)
    expected, actual = run_both(lambda x: x[x > 0], x)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual.sum().cpu(), expected.sum())


def test_repeat_interleave_and_bincount(counters):
    counts = torch.tensor([1, 0, 3, 2])
    expected, actual = run_both(lambda c: torch.repeat_interleave(c), counts)
    torch.testing.assert_close(actual.cpu(), expected)
    expected, actual = run_both(lambda c: torch.bincount(c), torch.tensor([0, 2, 2, 5, 1]))
    torch.testing.assert_close(actual.cpu(), expected)
    assert counters()["aten::bincount"] >= 1


def test_equal_and_allclose():
    a, b = randn(3), randn(3)
    for fn in (torch.equal, torch.allclose):
        assert fn(a.to("lazy") * 1, b.to("lazy")) == fn(a, b)
        assert fn(a.to("lazy") + 1, b.to("lazy")) == fn(a + 1, b)
