"""Positions as plan arguments (Note [Positions as plan arguments] in lazy_ir/graph.h): a loop
that writes or reads a tensor at a Python-int position (`cache[:, t] = k`, narrow, select,
slices, negative positions) matches eager at every position, and one cached plan serves every
position it does not bake in: counted by UncachedCompile (plans lowered) and GraphCacheSize,
not by times."""

import math

import pytest
import torch

import lazyfuse
from helpers import LAZY


def meta_runs():
    """Ops run on Meta: for their outputs, or for the geometry of their results."""
    m = lazyfuse.metrics()
    return m["MetaCacheMiss"] + m.get("GeometryOnMeta", 0)


def plans_lowered():
    return lazyfuse.metrics()["UncachedCompile"]


def decode_step(x, w, cache, t):
    """One token of a decoder that writes its K and V rows at position t and attends to the
    whole cache (bench/dynamic_shapes.py's decode_at_t)."""
    k, v = (x @ w).split(cache.shape[-1], -1)
    cache[0, :, t] = k
    cache[1, :, t] = v
    scores = (cache[0] @ x.unsqueeze(-1)).squeeze(-1) / math.sqrt(cache.shape[-1])
    return (scores.softmax(-1).unsqueeze(-1) * cache[1]).sum(1)


@pytest.mark.parametrize("fusion", ["auto", "always"])
def test_a_cache_written_at_every_position_lowers_one_plan(monkeypatch, fusion):
    monkeypatch.setenv("LAZYFUSE_FUSION", fusion)
    torch.manual_seed(0)
    steps, width = 12, 16
    w = torch.randn(width, 2 * width) * 0.3
    xs = [torch.randn(3, width) for _ in range(steps)]
    cache = torch.zeros(2, 3, steps, width)
    lazy_cache, lazy_w = cache.to(LAZY), w.to(LAZY)
    lazyfuse.mark_step()
    lowered = []
    for sweep in range(3):  # the second and third sweeps find every plan cached
        for t in range(steps):
            before = plans_lowered()
            expected = decode_step(xs[t], w, cache, t)
            got = decode_step(xs[t].to(LAZY), lazy_w, lazy_cache, t)
            lazyfuse.sync(got, lazy_cache)
            lowered.append(plans_lowered() - before)
            torch.testing.assert_close(got.cpu(), expected)
        torch.testing.assert_close(lazy_cache.cpu(), cache)
    # One plan for every position; the fused plan's views of the cache at 0 and 1 (the K and V
    # slabs) are positions too, the same at every t.
    assert sum(lowered[1:]) == 0, lowered


WRITES = {
    "select": lambda c, t, v: c.select(1, t).copy_(v[:, 0]),
    "index": lambda c, t, v: c[:, t].copy_(v[:, 0]),
    "negative_index": lambda c, t, v: c[:, t - c.shape[1]].copy_(v[:, 0]),
    "narrow": lambda c, t, v: c.narrow(1, t, 1).copy_(v),
    "slice": lambda c, t, v: c[:, t:t + 1].copy_(v),
    "slice_of_a_slice": lambda c, t, v: c[1:][:, t:t + 1].copy_(v[1:]),
    "setitem": lambda c, t, v: c.__setitem__((slice(None), t), v[:, 0]),
    "index_copy_at_t": lambda c, t, v: c[:, t].index_copy_(0, torch.tensor([2, 0], device=c.device),
                                                          v[:2, 0]),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_writes_at_every_position_match_eager_with_one_plan(name):
    write = WRITES[name]
    g = torch.Generator().manual_seed(1)
    cache = torch.randn(3, 9, 5, generator=g)
    lazy_cache = cache.to(LAZY)
    lazyfuse.mark_step()
    lowered = []
    for t in list(range(9)) + [4, 0, 8]:
        v = torch.randn(3, 1, 5, generator=g)
        before = plans_lowered()
        write(cache, t, v * 1.5)
        write(lazy_cache, t, v.to(LAZY) * 1.5)
        total = lazy_cache.sum(-1)
        lazyfuse.sync(total, lazy_cache)
        lowered.append(plans_lowered() - before)
        torch.testing.assert_close(lazy_cache.cpu(), cache)
        torch.testing.assert_close(total.cpu(), cache.sum(-1))
    assert sum(lowered[1:]) == 0, lowered


def test_a_position_a_fused_kernel_reads_is_baked_in_and_right(monkeypatch):
    # A fused kernel indexes the column at t: each t has a plan of its own, each right.
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 7, generator=g)
    lazy_x = x.to(LAZY)
    lazyfuse.mark_step()
    lowered = []
    for t in (3, 5, 3, -1, 6, 0, 5):
        before = plans_lowered()
        got = (lazy_x[:, t] * 2.25).exp() + lazy_x.narrow(1, t, 1).squeeze(1)
        lazyfuse.sync(got)
        lowered.append(plans_lowered() - before)
        torch.testing.assert_close(got.cpu(), (x[:, t] * 2.25).exp() + x.narrow(1, t, 1)[:, 0])
    # A position seen before finds its plan; -1 and 6 are the same column, different positions.
    assert lowered[2] == 0 and lowered[6] == 0, lowered
    assert sum(lowered) == 5, lowered


def test_a_write_and_a_fused_read_at_one_position(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    g = torch.Generator().manual_seed(3)
    cache = torch.zeros(4, 8)
    lazy_cache = cache.to(LAZY)
    lazyfuse.mark_step()
    for t in (0, 1, 2, 7, 2, 5):
        v = torch.randn(4, generator=g)
        cache[:, t] = v
        lazy_cache[:, t] = v.to(LAZY)
        got = lazy_cache[:, t].sigmoid() + lazy_cache.sum(1)
        lazyfuse.sync(got, lazy_cache)
        torch.testing.assert_close(got.cpu(), cache[:, t].sigmoid() + cache.sum(1))
        torch.testing.assert_close(lazy_cache.cpu(), cache)


def test_the_recompile_log_names_baked_positions(tmp_path, python_subprocess):
    program = (
        "import torch, lazyfuse\n"
        "x = torch.randn(6, 7).to('lazy')\n"
        "for t in (2, 3):\n"
        "    lazyfuse.sync((x[:, t] * 2.5).exp())\n")
    proc = python_subprocess(program, env={
        "LAZYFUSE_FUSION": "always", "LAZYFUSE_LOG_RECOMPILES": "1",
        "LAZYFUSE_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    assert "its cached plan bakes the positions of" in proc.stderr, proc.stderr
    assert "aten::select_copy.int ([2]), here [3]" in proc.stderr, proc.stderr


def test_errors_at_a_position_out_of_range_are_eagers():
    cache = torch.zeros(3, 4, device=LAZY)
    lazyfuse.mark_step()
    for t in (0, 1):
        cache[:, t] = 1.0
        lazyfuse.mark_step()
    with pytest.raises(IndexError) as eager_error:
        torch.zeros(3, 4)[:, 4] = 1.0
    with pytest.raises(IndexError, match=str(eager_error.value)):
        cache[:, 4] = 1.0
    torch.testing.assert_close(cache.cpu(), torch.tensor([[1.0, 1.0, 0.0, 0.0]] * 3))


def test_ops_on_a_view_at_a_new_position_run_no_meta_kernel():
    # A result's geometry does not depend on where its inputs start (it aliases none of them),
    # so a loop over x[t] records its ops at a new t from caches: no meta kernel (a Python
    # decomposition for addmm) per position.
    torch.manual_seed(4)
    linear = torch.nn.Linear(16, 24)
    xs = torch.randn(12, 3, 16)
    lazy_linear = torch.nn.Linear(16, 24).to(LAZY)
    lazy_linear.load_state_dict(linear.state_dict())
    lazy_xs = xs.to(LAZY)
    lazyfuse.mark_step()
    misses = []
    with torch.no_grad():
        for t in range(12):
            before = meta_runs()
            got = (lazy_linear(lazy_xs[t]).t() @ lazy_xs[t]).softmax(-1)
            misses.append(meta_runs() - before)
            torch.testing.assert_close(got.cpu(), (linear(xs[t]).t() @ xs[t]).softmax(-1))
    assert misses[2:] == [0] * 10, misses


@pytest.mark.parametrize("fusion", ["auto", "always"])
def test_strided_views_at_a_position_take_their_offset_from_the_graph(monkeypatch, fusion):
    # The matmuls read xs[t] and xs[t].t() as strided views of xs's buffer (Note [Strided views
    # of buffers]): their offsets move with t, and one plan serves every t.
    monkeypatch.setenv("LAZYFUSE_FUSION", fusion)
    torch.ops.lazyfuse.clear_graph_cache()  # a plan of the other fusion setting would serve
    g = torch.Generator().manual_seed(9)
    xs = torch.randn(10, 4, 6, generator=g)
    w = torch.randn(6, 6, generator=g)
    lazy_xs, lazy_w = xs.to(LAZY), w.to(LAZY)
    lazyfuse.mark_step()
    lowered = []
    with torch.no_grad():
        for t in (0, 1, 2, 9, -3, 5, 5, 3, -10):
            before = plans_lowered()
            got = ((lazy_xs[t] @ lazy_w).tanh() @ lazy_xs[t].t()).exp()
            lazyfuse.sync(got)
            lowered.append(plans_lowered() - before)
            expected = ((xs[t] @ w).tanh() @ xs[t].t()).exp()
            torch.testing.assert_close(got.cpu(), expected)
    assert sum(lowered[1:]) == 0, lowered
