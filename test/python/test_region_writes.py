"""An index_copy_ or a slice assignment into a view of a tensor (a row of a KV cache) runs as
index_copy_ or copy_ into that region of the tensor's memory, or of a copy of it, instead of
kernels that write the whole tensor again (Note [Region writes]). Against eager on the hardware
device, with every graph fused."""

import pytest
import torch

import lazyfuse
from helpers import INDEXES_OUT_OF_RANGE, reference, to_lazy


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")


def cache_inputs(rows=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(2, 2, 3, 8, 5, generator=g)
    index = torch.tensor([6, 1, 3][:rows])
    src = torch.randn(3, rows, 5, generator=g)
    return cache, index, src


def plan_of(*tensors):
    return lazyfuse.dump_ir(list(tensors), "plan")


def assert_loop_matches_eager(run):
    """`run(device, sync)` on the CPU, then on lazy with one mark_step per iteration: the same
    results."""
    expected = run("cpu", lambda: None)
    actual = run("lazy", lazyfuse.mark_step)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want)


# Views of the cache an index_copy_ writes into: selects, slices (with steps, negative dims and
# bounds) and both mixed. Each takes (cache, index, src) and returns what it wrote.
WRITES = {
    "select of select": lambda c, i, s: c[1, 0].index_copy_(1, i, s),
    "negative dims": lambda c, i, s: c.select(-5, 1).select(-4, 1).index_copy_(-2, i, s),
    "slice": lambda c, i, s: c[0, 1, :, 1:7].index_copy_(1, i - 1, s),
    "stepped slice": lambda c, i, s: c[1, 1, :, ::2].index_copy_(1, i // 2, s),
    "slice of another dim": lambda c, i, s: c[0, 0][..., 1:4].index_copy_(1, i, s[..., :3]),
    # A reshape is no select or slice: its scatter runs as kernels, as before.
    "reshaped": lambda c, i, s: c.view(4, 3, 8, 5)[2].index_copy_(1, i, s),
}


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("name", sorted(WRITES))
def test_index_copy_into_a_view_matches_eager(name, rows):
    write = WRITES[name]

    def fn(cache, index, src):
        cache = cache * 2  # an intermediate: its memory may be written in place
        written = write(cache, index, src)
        return cache, written + 1

    cache, index, src = cache_inputs(rows)
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    out = fn(*lazy)
    plan = plan_of(*out)
    if name != "reshaped":
        assert "region write" in plan and "aten::index_copy" not in plan, plan
    for got, want in zip(out, reference(fn, cache, index, src)):
        torch.testing.assert_close(got.cpu(), want)


# Slice assignments (copy_ into a view): the source is broadcast and converted as copy_ does.
ASSIGNMENTS = {
    "row at a position": lambda c, s: c[0, 1].__setitem__((slice(None), 5), s[:, 0]),
    "slice of rows": lambda c, s: c[1, 0].__setitem__((slice(None), slice(2, 4)), s[:, :2]),
    "broadcast source": lambda c, s: c[1, 1].__setitem__((slice(None), 7), s[0, 0]),
    "converted source": lambda c, s: c[0, 0].__setitem__((1, 3), s[1, 0].double()),
    "source from the same tensor": lambda c, s: c[0, 0].__setitem__(
        (slice(None), 0), c[1, 1, :, 6]),
    "stepped slice": lambda c, s: c[:, 1, :, ::3].copy_(s[:, :1].expand(2, 3, 3, 5)),
}


@pytest.mark.parametrize("intermediate", [False, True])
@pytest.mark.parametrize("name", sorted(ASSIGNMENTS))
def test_slice_assignment_matches_eager(name, intermediate):
    def fn(cache, src):
        if intermediate:
            cache = cache - 1
        ASSIGNMENTS[name](cache, src)
        return cache

    cache, _, src = cache_inputs(rows=3)
    lazy = to_lazy([cache, src])
    lazyfuse.mark_step()
    out = fn(*lazy)
    assert "region write" in plan_of(out)
    torch.testing.assert_close(out.cpu(), reference(fn, cache, src))
    if not intermediate:
        torch.testing.assert_close(lazy[0].cpu(), reference(fn, cache, src))


def test_rows_are_written_in_place_of_an_intermediate(counters):
    def fn(cache, index, src):
        cache = cache + 1
        cache[0, 1].index_copy_(1, index, src)
        cache[1, 0].index_copy_(1, index, src * 2)
        return cache

    cache, index, src = cache_inputs()
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    out = fn(*lazy)
    plan = plan_of(out)
    assert plan.count("region write") == 2 and plan.count("may write in place") == 2, plan
    before = counters()["BuffersDonated"]
    torch.testing.assert_close(out.cpu(), reference(fn, cache, index, src))
    assert counters()["BuffersDonated"] - before >= 2


def test_a_value_read_after_the_write_keeps_its_rows():
    # The cache before the second write is read after it (a sum, and a view a matmul reads):
    # that write copies it instead of writing into its memory.
    def fn(cache, index, src):
        cache = cache * 3
        cache[0, 0].index_copy_(1, index, src)
        before = cache.clone()
        slab = cache[0, 0]
        cache[0, 0].index_copy_(1, index, src - 5)
        return cache, before.sum(), slab @ slab.transpose(-2, -1), cache.mean()

    cache, index, src = cache_inputs()
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    out = fn(*lazy)
    for got, want in zip(out, reference(fn, cache, index, src)):
        torch.testing.assert_close(got.cpu(), want)


def test_source_that_views_the_written_tensor():
    # index_copy_ refuses a source overlapping what it writes: the write copies the base first.
    def fn(cache, index, src):
        cache = cache * 1.5
        cache[0, 0].index_copy_(1, index, cache[1, 1, :, 2:3])
        return cache

    cache, index, src = cache_inputs()
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    torch.testing.assert_close(fn(*lazy).cpu(), reference(fn, cache, index, src))


def test_decode_loop_with_a_cache_matches_eager():
    # One mark_step per token: the cache is device data at each step's start.
    torch.manual_seed(0)
    layers, b, heads, t_max, dh = 2, 2, 2, 6, 4
    w = torch.randn(layers, heads * dh, 3 * heads * dh) * 0.3

    def run(device, sync):
        cache = torch.zeros(layers, 2, b, heads, t_max, dh, device=device)
        x = torch.ones(b, 1, heads * dh, device=device)
        weights = w.to(device)
        outs = []
        for t in range(t_max):
            pos = torch.tensor([t], device=device)
            for i in range(layers):
                q, k, v = (x @ weights[i]).split(heads * dh, dim=-1)
                q, k, v = (z.view(b, 1, heads, dh).transpose(1, 2) for z in (q, k, v))
                cache[i, 0].index_copy_(2, pos, k)
                cache[i, 1].index_copy_(2, pos, v)
                att = (q @ cache[i, 0].transpose(-2, -1)).softmax(-1) @ cache[i, 1]
                x = x + att.transpose(1, 2).reshape(b, 1, heads * dh).tanh()
            sync()
            outs.append(x.cpu())
        return torch.stack(outs), cache.cpu()

    assert_loop_matches_eager(run)


def test_cache_written_at_python_int_positions_matches_eager():
    # `cache[:, t] = k` in a loop with one mark_step per position, attending over the cache.
    torch.manual_seed(0)
    proj, x0 = torch.randn(16, 32) * 0.2, torch.randn(3, 16)

    def run(device, sync):
        cache = torch.zeros(2, 3, 6, 16, device=device)
        x = x0.to(device)
        w = proj.to(device)
        outs = []
        for t in range(6):
            k, v = (x @ w).split(16, dim=-1)
            cache[0, :, t] = k
            cache[1, :, t] = v
            scores = (cache[0] @ x.unsqueeze(-1)).squeeze(-1)
            x = (scores.softmax(-1).unsqueeze(-1) * cache[1]).sum(1).tanh()
            sync()
            outs.append(x.cpu())
        return torch.stack(outs), cache.cpu()

    assert_loop_matches_eager(run)


@INDEXES_OUT_OF_RANGE
def test_index_out_of_range_raises_like_eager():
    def fn(cache, index, src):
        cache = cache * 2
        cache[0, 0].index_copy_(1, index, src)
        return cache

    cache, _, src = cache_inputs()
    index = torch.tensor([9])
    with pytest.raises(IndexError, match="out of bounds") as eager:
        fn(cache, index, src)
    out = fn(*to_lazy([cache, index, src]))
    with pytest.raises(type(eager.value), match="out of bounds"):
        out.cpu()


def test_unfused_plans_run_index_copy_as_eager(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "0")

    def fn(cache, index, src):
        cache = cache * 2
        cache[1, 1].index_copy_(1, index, src)
        return cache

    cache, index, src = cache_inputs()
    lazy = to_lazy([cache, index, src])
    out = fn(*lazy)
    assert "region write" not in plan_of(out)
    torch.testing.assert_close(out.cpu(), reference(fn, cache, index, src))


def test_small_graphs_left_unfused_still_write_regions(monkeypatch):
    # Under LAZYFUSE_FUSION=auto a graph with little work runs node by node, compiling nothing;
    # its writes into a slice still run as region writes, not as scatters of the whole tensor.
    monkeypatch.setenv("LAZYFUSE_FUSION", "auto")

    def fn(cache, index, src):
        cache = cache + 1
        cache[0, 1].index_copy_(1, index, src)
        cache[1, 0, :, 2] = src[:, 0]
        return cache, cache[1].sum()

    cache, index, src = cache_inputs()
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    out = fn(*lazy)
    plan = plan_of(*out)
    assert "kernel" not in plan.split("\n", 1)[1], plan
    assert plan.count("region write") == 2 and "scatter" not in plan, plan
    for got, want in zip(out, reference(fn, cache, index, src)):
        torch.testing.assert_close(got.cpu(), want)


# A cache the program holds is device data at each step's start: the rows are written into its
# memory, not into a copy of the whole cache (Note [Region writes]).
CACHE_WRITES = {
    "whole tensor": lambda c, i, s: c.index_copy_(3, i, s.expand(2, 2, 3, -1, 5)),
    "slab": lambda c, i, s: c[1, 0].index_copy_(1, i, s),
    "slice assignment": lambda c, i, s: c[0, :, :, 4:5].copy_(s[:, :1]),
}


@pytest.mark.parametrize("name", sorted(CACHE_WRITES))
def test_a_held_cache_is_written_in_place(name, counters, monkeypatch):
    # A CUDA graph capture (emulated here) copies the cache: its replays could not check it.
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", "0")
    cache, index, src = cache_inputs(rows=2)
    expected = cache.clone()
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    for step in range(3):
        CACHE_WRITES[name](lazy[0], lazy[1] + 0 if step else lazy[1], lazy[2] * (step + 1))
        CACHE_WRITES[name](expected, index, src * (step + 1))
        plan = plan_of(lazy[0])
        assert "region write %" in plan and "may write in place" in plan, plan
        before = counters()["BuffersDonated"]
        lazyfuse.mark_step()
        assert counters()["BuffersDonated"] - before >= 1
        torch.testing.assert_close(lazy[0].cpu(), expected)


def test_a_cache_still_read_elsewhere_is_copied():
    # `before` still reads the old cache's buffer when only the cache is synced: the write must
    # not change what `before` computes.
    cache, index, src = cache_inputs(rows=2)
    lazy = to_lazy([cache, index, src])
    lazyfuse.mark_step()
    before = lazy[0] * 2
    lazy[0][0, 1].index_copy_(1, lazy[1], lazy[2])
    lazyfuse.sync(lazy[0])
    expected = cache.clone()
    expected[0, 1].index_copy_(1, index, src)
    torch.testing.assert_close(lazy[0].cpu(), expected)
    torch.testing.assert_close(before.cpu(), cache * 2)


@INDEXES_OUT_OF_RANGE
@pytest.mark.parametrize("bad", [[9], [1, -1]])
def test_index_out_of_range_into_a_held_cache_raises_like_eager(bad):
    cache, _, src = cache_inputs(rows=len(bad))
    index = torch.tensor(bad)
    with pytest.raises(IndexError) as eager:
        cache.clone()[0, 0].index_copy_(1, index, src)
    lazy = to_lazy([cache, index, src])
    other = lazy[2] * 3
    lazyfuse.mark_step()
    lazy[0][0, 0].index_copy_(1, lazy[1], lazy[2])
    with pytest.raises(type(eager.value), match="out of bounds"):
        lazyfuse.mark_step()
    # The failed write touched nothing: values synced before it keep theirs.
    torch.testing.assert_close(other.cpu(), src * 3)


def test_a_new_cache_is_written_in_place_from_its_first_step():
    # The cache is still pending (zeros) when the first rows are written into it.
    rows = torch.randn(2, 3, 2, 5)
    index = torch.tensor([4, 0])
    cache = torch.zeros(2, 3, 8, 5, device="lazy")
    cache.index_copy_(2, index.to("lazy"), rows.to("lazy"))
    plan = plan_of(cache)
    assert "may write in place" in plan and "aten::index_copy" not in plan, plan
    torch.testing.assert_close(cache.cpu(), torch.zeros(2, 3, 8, 5).index_copy_(2, index, rows))


@INDEXES_OUT_OF_RANGE
def test_an_index_out_of_range_after_a_write_into_a_held_cache_never_gives_wrong_values():
    # The first write goes into the cache's memory; the second, out of range, raises eager's
    # error. The cache then holds what eager's does, or raises: never other values.
    cache, index, src = cache_inputs(rows=1)
    bad = torch.tensor([9])
    expected = cache.clone()
    expected[0, 0].index_copy_(1, index, src)
    with pytest.raises(IndexError) as eager:
        expected[1, 0].index_copy_(1, bad, src)
    lazy = to_lazy([cache, index, src, bad])
    lazyfuse.mark_step()
    lazy[0][0, 0].index_copy_(1, lazy[1], lazy[2])
    lazy[0][1, 0].index_copy_(1, lazy[3], lazy[2])
    with pytest.raises(type(eager.value), match="out of bounds"):
        lazyfuse.mark_step()
    try:
        got = lazy[0].cpu()
    except RuntimeError:
        return
    torch.testing.assert_close(got, expected)
