"""Values an extern step reads, and graph outputs that only rename another output, are taken as
strided views of a buffer instead of written by a fused kernel (Note [Strided views of buffers]).
Against eager on the hardware device, with every graph fused."""

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from helpers import reference, to_lazy, train_side_by_side


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")


def inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in ((5, 6), (4, 6), (6, 1), (12, 4), (3, 5, 6))]


MATMULS = {
    "transposed weight": lambda x, w, b, big, x3: x @ w.t(),
    "linear": lambda x, w, b, big, x3: F.linear(x, w, w[:, 0]),
    "rows of an input": lambda x, w, b, big, x3: torch.mm(x, big[3:9]),
    "broadcast column": lambda x, w, b, big, x3: torch.mm(x, b.expand(6, 4)),
    "batched transposed": lambda x, w, b, big, x3: torch.bmm(x3, x3.transpose(1, 2)),
    "transpose of a transpose": lambda x, w, b, big, x3: x @ w.t().t().t(),
    # Note [Affine over a domain]: reshapes that merge or split dimensions read through / and %.
    "merged batch dimensions": lambda x, w, b, big, x3: x3.reshape(15, 6) @ w.t(),
    "split then merged": lambda x, w, b, big, x3: big.view(3, 4, 4).view(12, 4).t() @ big,
    "transposed merge": lambda x, w, b, big, x3: x3.reshape(15, 6).t() @ x3.reshape(15, 6),
}


@pytest.mark.parametrize("name", MATMULS)
def test_matmul_reading_views_of_inputs_launches_no_kernel(name, counters):
    fn = MATMULS[name]
    cpu = inputs()
    lazy = to_lazy(cpu)
    lazyfuse.mark_step()
    before = counters()["KernelsLaunched"]
    actual = fn(*lazy).cpu()
    torch.testing.assert_close(actual, reference(fn, *cpu))
    assert counters()["KernelsLaunched"] == before


def test_matmul_reading_a_view_of_an_offset_input():
    # The input buffer itself starts past its storage's start: a view of a view.
    base = torch.randn(20, 6)
    x = torch.randn(5, 6)
    lazy_base, lazy_x = base.to("lazy"), x.to("lazy")
    rows = lazy_base[7:11]
    lazyfuse.mark_step()
    torch.testing.assert_close((lazy_x @ rows.t()).cpu(),
                               reference(lambda x, base: x @ base[7:11].t(), x, base))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_small_graph_of_externs_and_views_takes_views_without_fusion(dtype, monkeypatch):
    # Under LAZYFUSE_FUSION=auto a small graph runs node by node, unless its fused plan has no
    # kernel to compile: `x @ w.t()` of two inputs then reads w transposed in place, where node
    # by node an extern t_copy copied it at every run (Note [When graphs are fused]).
    monkeypatch.setenv("LAZYFUSE_FUSION", "auto")
    torch.manual_seed(0)
    x, w = torch.randn(7, 13, dtype=dtype), torch.randn(11, 13, dtype=dtype)
    lazy_x, lazy_w = x.to("lazy"), w.to("lazy")
    lazyfuse.mark_step()
    actual = lazy_x @ lazy_w.t()
    lazyfuse.mark_step()
    steps = [name for name, _ in lazyfuse.last_plan_profile()]
    assert "lazyfuse::view" in steps, steps
    assert not any("t_copy" in name for name in steps), steps
    torch.testing.assert_close(actual.cpu(), x @ w.t())


def test_matmul_of_a_computed_transposed_value():
    x, w = torch.randn(5, 6), torch.randn(4, 6)
    lx, lw = x.to("lazy"), w.to("lazy")
    torch.testing.assert_close((lx @ (lw * 2).sin().t()).cpu(),
                               reference(lambda x, w: x @ (w * 2).sin().t(), x, w))


def test_output_renaming_another_output_then_mutated_like_eager():
    def run(x, sync):
        y = x * 3
        detached, copied = y.detach(), y.clone()
        sync()
        detached.add_(1)  # a view of y in eager: y changes too
        copied.mul_(2)    # its own memory: y does not change
        sync()
        return y, detached, copied

    x = torch.randn(4, 5)
    expected = reference(lambda x: run(x, lambda: None), x)
    actual = run(x.to("lazy"), lazyfuse.mark_step)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e)


def test_transposed_output_keeps_eagers_strides():
    x = torch.randn(4, 5)
    expected = (x * 3).t()
    actual = (x.to("lazy") * 3).t()
    lazyfuse.mark_step()
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected)


def test_linear_training_steps_match_eager():
    torch.manual_seed(0)
    model, lazy_model = train_side_by_side(
        lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)),
        lambda params: torch.optim.Adam(params, lr=1e-2), torch.randn(6, 8), torch.randn(6, 4),
        steps=4)
    for p, lp in zip(model.parameters(), lazy_model.parameters()):
        torch.testing.assert_close(lp.cpu(), p.cpu())
        torch.testing.assert_close(lp.grad.cpu(), p.grad.cpu())


# Ops that read strides or storage get what eager gives them, never a view of a larger buffer.
STORAGE_READERS = {
    "as_strided of a contiguous copy": lambda x: x.t().contiguous().as_strided((6,), (1,), 0),
    "dtype view of a contiguous copy": lambda x: x.t().contiguous().view(torch.float16),
    "complex view of a sliced clone": lambda x: torch.view_as_complex(x[:, 1:3].clone()),
    "as_strided_scatter of a copy": lambda x: torch.as_strided_scatter(
        x.t().contiguous(), torch.zeros(2, device=x.device), (2,), (1,), 0),
}


@pytest.mark.parametrize("name", STORAGE_READERS)
def test_ops_reading_storage_get_a_fresh_tensor(name):
    fn = STORAGE_READERS[name]
    x = torch.randn(3, 4)
    torch.testing.assert_close(fn(x.to("lazy")).cpu(), reference(fn, x), equal_nan=True)


def test_output_slice_clone_gets_its_own_buffer():
    # Eager's clone owns exactly its elements: as_strided past them is out of bounds.
    base = torch.arange(24.0).reshape(4, 6)
    kept = base.to("lazy")[:2].clone()
    lazyfuse.mark_step()
    torch.testing.assert_close(kept.cpu(), base[:2])
    with pytest.raises(RuntimeError, match="out of bounds"):
        base[:2].clone().as_strided((4,), (1,), 10)
    with pytest.raises(RuntimeError, match="out of bounds"):
        kept.as_strided((4,), (1,), 10).cpu()


def test_reshape_of_a_computed_value_before_a_matmul_is_a_view():
    # A Linear over [B, T, C] multiplies its input as [B*T, C]: the value the fused kernel writes
    # is read by mm in place, with no second kernel that only copies it.
    x, w = torch.randn(4, 8, 16), torch.randn(32, 16)
    lx, lw = x.to("lazy"), w.to("lazy")
    lazyfuse.mark_step()
    fn = lambda x, w: (x.sin() * 2).reshape(32, 16) @ w.t()  # noqa: E731
    plan = lazyfuse.dump_ir(fn(lx, lw), "plan")
    assert plan.count(" kernel ") == 1, plan
    torch.testing.assert_close(fn(lx, lw).cpu(), reference(fn, x, w))


SPLITS = {
    "split": lambda x: x.split(3, dim=1),
    "split_uneven_last_dim": lambda x: x.split(4, dim=-1),
    "split_with_sizes": lambda x: x.split([1, 4, 2], dim=2),
    "chunk": lambda x: x.chunk(2, dim=0),
    "unbind": lambda x: x.unbind(1),
    "unbind_last": lambda x: x.unbind(-1),
}


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_split_outputs_are_views_fused_into_their_readers(name):
    # split_copy, split_with_sizes_copy and unbind_copy lower to views: each part is read where
    # it is used, as eager's split returns views, and nothing copies the parts first.
    fn = SPLITS[name]
    x = torch.randn(4, 6, 7)

    def use(t):
        return [(p * (i + 1)).sin() for i, p in enumerate(fn(t * 2))]

    lx = x.to("lazy")
    lazyfuse.mark_step()
    plan = lazyfuse.dump_ir(use(lx), "plan")
    assert "extern" not in plan, plan
    for got, want in zip(use(lx), reference(use, x)):
        torch.testing.assert_close(got.cpu(), want)


def test_gradients_through_split_of_a_linear_match_eager():
    def step(x, w):
        q, k, v = F.linear(x, w).split(5, dim=-1)
        return (q * k.sigmoid() + v).square().mean()

    x, w = torch.randn(3, 4, 8), torch.randn(15, 8)
    lw = w.to("lazy").requires_grad_()
    step(x.to("lazy"), lw).backward()
    ew = w.clone().requires_grad_()
    step(x, ew).backward()
    torch.testing.assert_close(lw.grad.cpu(), ew.grad)


# Ops that write into a copy of `self`, read as a slab of a larger buffer (a KV cache).
INDEX_WRITES = {
    "index_copy": lambda slab, idx, src: slab.index_copy(1, idx, src),
    "index_add": lambda slab, idx, src: slab.index_add(1, idx, src, alpha=2),
    "index_put": lambda slab, idx, src: slab.index_put(
        (torch.arange(3, device=idx.device)[:, None], idx[None]), src),
    "index_put_accumulate": lambda slab, idx, src: slab.index_put(
        (torch.arange(3, device=idx.device)[:, None], idx[None]), src, accumulate=True),
    "scatter": lambda slab, idx, src: slab.scatter(1, idx.view(1, -1, 1).expand(3, -1, 5), src),
    "scatter_add": lambda slab, idx, src: slab.scatter_add(
        1, idx.view(1, -1, 1).expand(3, -1, 5), src),
}


@pytest.mark.parametrize("name", sorted(INDEX_WRITES))
@pytest.mark.parametrize("slab", ["select", "transposed"])
def test_index_writes_read_a_slab_of_their_input_in_place(name, slab):
    # The slab is a strided view of the cache's buffer, not a copy written by a kernel first;
    # the result is a fresh tensor with eager's layout.
    def fn(cache, idx, src):
        part = cache[1] if slab == "select" else cache[0].transpose(0, 1).transpose(0, 1)
        return INDEX_WRITES[name](part * 1 if slab == "transposed" else part, idx, src)

    cache, src = torch.randn(2, 3, 8, 5), torch.randn(3, 2, 5)
    idx = torch.tensor([6, 2])
    lazy = to_lazy([cache, idx, src])
    lazyfuse.mark_step()
    out = fn(*lazy)
    if slab == "select":
        plan = lazyfuse.dump_ir(out, "plan")
        slab_copies = [line for line in plan.splitlines()
                       if " kernel " in line and ("[120]" in line or "[3, 8, 5]" in line)]
        assert not slab_copies, plan
    expected = reference(fn, cache, idx, src)
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out.cpu(), expected)


def test_attention_reads_slabs_of_an_updated_cache_through_views():
    # A decoding step writes a row into each layer's K and V slabs, then multiplies by them:
    # the rows are written into the cache's memory (Note [Region writes]) and the matmuls read
    # its slabs in place (Note [Strided views of buffers]).
    def step(cache, idx, k, q):
        for layer in range(2):
            cache[layer, 0].index_copy_(1, idx, k * (layer + 1))
            cache[layer, 1].index_copy_(1, idx, k - layer)
            scores = (q @ cache[layer, 0].transpose(-2, -1)).softmax(-1)
            q = scores @ cache[layer, 1]
        return q, cache

    cache, k, q = torch.randn(2, 2, 3, 8, 5), torch.randn(3, 1, 5), torch.randn(3, 1, 5)
    idx = torch.tensor([6])
    lazy = to_lazy([cache, idx, k, q])
    lazyfuse.mark_step()
    out = step(*lazy)
    plan = lazyfuse.dump_ir(list(out), "plan")
    slab_copies = [line for line in plan.splitlines()
                   if " kernel " in line and ("[120]" in line or "[3, 8, 5]" in line)]
    assert not slab_copies, plan
    assert plan.count("region write") == 4 and "aten::index_copy" not in plan, plan
    assert plan.count(" view ") >= 4, plan
    for got, want in zip(out, reference(step, cache, idx, k, q)):
        torch.testing.assert_close(got.cpu(), want)


# Values an ATen call reads as a fresh tensor stay fresh when a matmul also reads them, and a
# view taken of a value that itself became a view still finds its memory.
FRESH_AND_VIEWED = {
    # x is device data, in memory: the copy that as_strided reads must stay a copy.
    "as_strided of a transposed copy": lambda x, w: (
        lambda y: (y @ w, y.as_strided((4,), (1,))))(x.t().contiguous()),
    "dtype view of a transposed copy": lambda x, w: (
        lambda y: (y @ w, y.view(torch.int16)))(x.t().contiguous()),
    "view of a view's root": lambda x, w: (
        lambda r: (lambda a: (lambda b: (b @ w[:4, :4], a @ w[:6, :4], r.unsqueeze(0) + 1))(
            a[:, 0:4].clone()))(r[0:4].clone()))(x * 2),
    "region write into a slice a matmul reads": lambda x, w: (
        lambda c: (c @ w[:6], c.__setitem__(1, x[0]) or c))((x @ w.t())[2:4].clone()),
}


@pytest.mark.parametrize("name", sorted(FRESH_AND_VIEWED))
def test_fresh_inputs_and_views_of_views_match_eager(name):
    fn = FRESH_AND_VIEWED[name]
    x, w = torch.randn(6, 6), torch.randn(6, 6)
    lazy = to_lazy([x, w])
    lazyfuse.mark_step()
    got, want = fn(*lazy), reference(fn, x, w)
    for g, e in zip(got, want):
        torch.testing.assert_close(g.cpu(), e)
        assert g.stride() == e.stride() and g.storage_offset() == e.storage_offset()
