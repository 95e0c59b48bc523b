"""View geometry on the lazy device against eager CPU: the shape, strides, storage offset and
contiguity of views and of other ops' results, kept through writes and transfers to the CPU, and
which reshapes view and which copy (Note [View geometry])."""

import pytest
import torch

from helpers import assert_mutation_same, base


# ---- view metadata -------------------------------------------------------------------------

# See Note [View geometry] in backend/view_geometry.cpp.
@pytest.mark.parametrize(
    "make_view",
    [
        lambda x: x.t(),
        lambda x: x[:, ::2],
        lambda x: x[1:],
        lambda x: x.unsqueeze(1).expand(4, 3, 5),
        lambda x: x[1:][1:].t(),
        lambda x: x.unbind(1)[2],
        lambda x: x.diagonal(),
        lambda x: x[2],
        lambda x: x.t().t(),
        lambda x: x.as_strided((2, 2), (1, 5), 3),
        lambda x: x.view(5, 4).permute(1, 0)[::2],
    ],
    ids=["t", "column_step", "rows", "expand", "chained_offset", "unbind", "diagonal", "select",
         "t_t", "as_strided", "permute_step"],
)
def test_view_metadata_like_eager(make_view):
    cpu = base()
    lazy = cpu.to("lazy")
    v_cpu, v_lazy = make_view(cpu), make_view(lazy)
    assert v_lazy.shape == v_cpu.shape
    assert (v_lazy.stride(), v_lazy.storage_offset(), v_lazy.is_contiguous()) == (
        v_cpu.stride(), v_cpu.storage_offset(), v_cpu.is_contiguous())


def test_contiguous_tensor_metadata_like_eager():
    cpu = base()
    lazy = cpu.to("lazy")
    for c, lz in ((cpu, lazy), (cpu + 1, lazy + 1), (cpu.t().contiguous(), lazy.t().contiguous())):
        assert (lz.shape, lz.stride(), lz.is_contiguous()) == (c.shape, c.stride(),
                                                                c.is_contiguous())


# See Note [View geometry]: results of other ops report the strides eager gives them, and a
# transfer to the CPU has those strides too.
RESULT_LAYOUTS = {
    "t_add": (base, lambda x: x.t() + 1),
    "t_clone": (base, lambda x: x.t().clone()),
    "t_exp": (base, lambda x: x.t().exp()),
    "t_mul_t": (base, lambda x: x.t() * x.t()),
    "t_where": (base, lambda x: torch.where(x.t() > 0, x.t(), 0.0)),
    "t_add_then_mul": (base, lambda x: (x.t() + 1) * 2),
    "t_to_double": (base, lambda x: x.t().double()),
    "t_contiguous": (base, lambda x: x.t().contiguous()),
    "t_sum": (base, lambda x: x.t().sum(0)),
    "t_mm": (base, lambda x: x.t() @ x),
    "column_step_add": (base, lambda x: x[:, ::2] + 1),
    "t_view": (base, lambda x: x.t()),
    "column_step_view": (base, lambda x: x[:, ::2]),
    "permute_add": (lambda: torch.randn(2, 3, 4, 5), lambda y: y.permute(0, 2, 3, 1) + 1),
    "channels_last_add": (lambda: torch.randn(2, 3, 4, 5),
                          lambda y: y.contiguous(memory_format=torch.channels_last) + 1),
    "channels_last_relu_clone": (
        lambda: torch.randn(2, 3, 4, 5),
        lambda y: y.contiguous(memory_format=torch.channels_last).relu().clone()),
    "permuted_channels_last_add": (
        lambda: torch.randn(2, 4, 5, 3), lambda y: y.permute(0, 3, 1, 2) + y.permute(0, 3, 1, 2)),
    # Note [Meta layout corrections], kIterator: their Meta kernels give contiguous results.
    "t_logical_or_keepdim_amin": (
        lambda: torch.randn(3, 4),
        lambda y: torch.logical_or(y.amin(1, keepdim=True).amin(0, keepdim=True), y.t() > 0)),
    "t_logical_and": (base, lambda x: torch.logical_and(x.t(), x[:1, :1])),
    "t_logical_xor": (base, lambda x: torch.logical_xor(x[:1, :1], x.t())),
    "t_logaddexp": (base, lambda x: torch.logaddexp(x[:1, :1], x.t())),
    "t_logaddexp2": (base, lambda x: torch.logaddexp2(x.t(), x.t())),
    "t_heaviside": (base, lambda x: torch.heaviside(x.t(), x[:1, :1])),
    # Note [Meta layout corrections], kContiguous and kLdexp: a number raised to a tensor.
    "t_pow_scalar": (base, lambda x: torch.pow(2.0, x.t())),
    "t_rpow": (base, lambda x: 3 ** x.t()),
    "t_float_power_scalar": (base, lambda x: torch.float_power(2.0, x.t())),
    "t_int_pow_scalar": (lambda: torch.randint(0, 5, (3, 4)), lambda y: torch.pow(2, y.t())),
    "t_ldexp": (lambda: torch.randn(3, 4), lambda y: torch.ldexp(y[:1].t(), y.t().round())),
    # The same ops over inputs whose trace is laid out as they report (channels_last copies):
    # Meta's results are corrected where the trace takes them.
    "cl_pow_scalar": (lambda: torch.randn(2, 3, 4, 5),
                      lambda y: torch.pow(2.0, y.contiguous(memory_format=torch.channels_last))),
    "cl_heaviside": (lambda: torch.randn(2, 3, 4, 5),
                     lambda y: torch.heaviside(y.contiguous(memory_format=torch.channels_last),
                                               y[:1, :1, :1, :1].contiguous())),
    "cl_logaddexp": (lambda: torch.randn(2, 3, 4, 5),
                     lambda y: torch.logaddexp(y.contiguous(memory_format=torch.channels_last), y)),
    "cl_ldexp": (lambda: torch.randn(2, 3, 4, 5),
                 lambda y: torch.ldexp(y, y.round().contiguous(memory_format=torch.channels_last))),
    # Note [Meta layout corrections], kAlpha: operands whose layouts tie in TensorIterator's order.
    "t_add_alpha": (lambda: torch.randn(5, 4),
                    lambda y: y.t().relu().add(y.t().relu().unsqueeze(-2), alpha=2)),
    "t_sub_alpha": (lambda: torch.randn(5, 4),
                    lambda y: y.t().relu().sub(y.t().relu().unsqueeze(-2), alpha=0.5)),
    # Note [Row-major pointwise results]: inputs whose strides fall from the first dim to the
    # last (expanded, broadcast, sliced, overlapping) give contiguous results without Meta; a
    # result with a dim of one element, or a transposed input among them, is left to Meta.
    "expanded_sum_mul": (base, lambda x: x.sum().expand_as(x) * x),
    "slice_mul_row": (base, lambda x: x[:, 1:3] * x[0, 1:3]),
    "expanded_rows_where": (base, lambda x: torch.where(x > 0, x.sum().expand_as(x),
                                                        x[:1].expand_as(x))),
    "overlapping_mul": (base, lambda x: x.reshape(-1).as_strided((3, 3), (2, 1)) * 2),
    "expanded_keepdim_size_one": (base, lambda x: x.sum(0, keepdim=True).expand_as(x[:1]) * x[:1]),
    "expanded_with_transposed": (lambda: torch.randn(4, 4),
                                 lambda y: y.sum().expand(4, 4) * y.t()),
    "batch_one_slice_add": (lambda: torch.randn(1, 6, 4), lambda y: y[:, :3] + y[:, 1:4] * 2),
    "size_one_dims_where": (lambda: torch.randn(4, 1, 6),
                            lambda y: torch.where(y[:, :, 1:] > 0, y[:, :, 1:], y[:, :, :5])),
    "attention_matmul": (lambda: torch.randn(1, 5, 4, 8),
                         lambda y: y.transpose(1, 2) @ y.transpose(1, 2).transpose(-2, -1)),
    "matrix_times_batch": (lambda: torch.randn(3, 4, 5),
                           lambda y: y[0].t()[:4] @ y.transpose(-2, -1)[:, :4, 1:]),
    "reshape_copy": (lambda: torch.randn(1, 4, 3, 2),
                     lambda y: y.transpose(1, 2).reshape(1, 3, 8) + 1),
    "unsqueezed_expand_add": (lambda: torch.randn(3, 5),
                              lambda y: y.unsqueeze(1).expand(3, 2, 5) + y[:, None, :2].sum(-1,
                                                                                   keepdim=True)),
}


def _tied_operands(device):
    g = torch.Generator().manual_seed(0)
    t1 = torch.randn(4, 5, 3, generator=g, dtype=torch.float64).to(device)
    t3 = torch.randn(4, 3, generator=g, dtype=torch.float64).to(device)
    t4 = t1.transpose(-2, -3)
    return (t4 == t3).double(), t4.unsqueeze(-3)


def test_add_and_sub_lay_out_like_eager_for_every_alpha():
    # The meta cache keys alpha by kind: the first call's alpha must not decide the later ones'.
    for alpha in (2, 1, 1.0, -0.5, 1):
        for op in (torch.add, torch.sub):
            expected = op(*_tied_operands("cpu"), alpha=alpha)
            actual = op(*_tied_operands("lazy"), alpha=alpha)
            assert _layout(actual) == _layout(expected), (op.__name__, alpha)
            torch.testing.assert_close(actual.cpu(), expected)


def _layout(t):
    cl = t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
    return t.shape, t.stride(), t.is_contiguous(), cl


@pytest.mark.parametrize("make_input, op", RESULT_LAYOUTS.values(), ids=list(RESULT_LAYOUTS))
def test_result_strides_like_eager(make_input, op):
    cpu = make_input()
    expected = op(cpu)
    actual = op(cpu.to("lazy"))
    assert _layout(actual) == _layout(expected)
    moved = actual.cpu()
    # Eager's _to_copy keeps the strides of a dense tensor and picks a dense layout for another
    # (a column step); a dtype change takes the same path as a device change.
    assert _layout(moved) == _layout(expected.double())
    torch.testing.assert_close(moved, expected)


def test_result_strides_like_eager_for_empty_like():
    cpu = base()
    expected, actual = torch.empty_like(cpu.t()), torch.empty_like(cpu.to("lazy").t())
    assert _layout(actual) == _layout(expected)
    assert actual.cpu().stride() == expected.stride()


def test_view_of_transposed_result_refused_like_eager():
    cpu = base()
    with pytest.raises(RuntimeError) as eager:
        (cpu.t() + 1).view(-1)
    with pytest.raises(RuntimeError) as lazy:
        (cpu.to("lazy").t() + 1).view(-1)
    assert str(lazy.value) == str(eager.value)
    expected = (cpu.t() + 1).reshape(-1)
    torch.testing.assert_close((cpu.to("lazy").t() + 1).reshape(-1).cpu(), expected)


def _mask_assign_into_transpose(x):
    v = x.t()
    v[v > 0] = 1  # boolean-mask indexing runs eagerly; its write keeps v's geometry
    return v


def _write_through_view_then_view(x):
    v = x.t()
    v.add_(1)
    v[1:].mul_(2)
    return v


@pytest.mark.parametrize(
    "write",
    [
        lambda x: x.t().add_(1),
        lambda x: x.t()[0].add_(1),
        lambda x: x.t().unsqueeze(0)[0].add_(1),
        lambda x: x.t()[1:].mul_(2),
        lambda x: x[1:][1:].t().mul_(2),
        lambda x: x.diagonal().add_(1),
        lambda x: x.unbind(1)[2].add_(1),
        lambda x: x.view(20)[3:].view(1, 17).t().add_(1),
        lambda x: x.permute(1, 0)[::2].mul_(2),
        lambda x: x.as_strided((2, 2), (1, 5), 3).mul_(2),
        lambda x: torch.mul(x.t(), 2, out=x.t()),
        lambda x: x.t().copy_(torch.ones(5, 4, device=x.device)),
        lambda x: x.t().zero_(),
        _write_through_view_then_view,
        _mask_assign_into_transpose,
    ],
    ids=["t", "t_select", "t_unsqueeze_select", "t_rows", "chained_offset_t", "diagonal",
         "unbind", "view_slice_view_t", "permute_step", "as_strided", "out_into_view", "copy_",
         "zero_", "view_of_written_view", "mask_assign_t"],
)
def test_view_metadata_after_write_like_eager(write):
    # A write keeps the geometry of the view it writes and of its base, also once the base's
    # value is recomputed from the write (the second read, after .cpu()).
    cpu = base()
    lazy = cpu.to("lazy").clone()
    v_cpu, v_lazy = write(cpu), write(lazy)
    expected = (cpu.stride(), v_cpu.stride(), v_cpu.storage_offset(), v_cpu.is_contiguous())
    assert (lazy.stride(), v_lazy.stride(), v_lazy.storage_offset(),
            v_lazy.is_contiguous()) == expected
    torch.testing.assert_close(lazy.cpu(), cpu)
    torch.testing.assert_close(v_lazy.cpu(), v_cpu)
    assert (lazy.stride(), v_lazy.stride(), v_lazy.storage_offset(),
            v_lazy.is_contiguous()) == expected


def test_view_of_transposed_raises_like_eager():
    with pytest.raises(RuntimeError) as eager:
        base().t().view(-1)
    with pytest.raises(type(eager.value)):
        base().to("lazy").t().view(-1)


def test_reshape_of_transposed_copies_like_eager():
    # Not viewable, so eager's reshape copies: writing the result leaves the base alone.
    def fn(x):
        r = x.t().reshape(-1)
        r.add_(1)
        return r

    assert_mutation_same(fn, base())


def test_contiguous_of_transposed_copies_like_eager():
    def fn(x):
        c = x.t().contiguous()
        c.mul_(2)
        return c

    assert_mutation_same(fn, base())


def test_contiguous_view_still_aliases_like_eager():
    def fn(x):
        r = x[1:].reshape(-1)
        r.add_(1)
        return r

    assert_mutation_same(fn, base())


def test_view_values_and_later_ops_unchanged_by_view_metadata():
    cpu = base()
    lazy = cpu.to("lazy")
    makes = (lambda x: x.t() @ x, lambda x: x[:, ::2].sum(0),
             lambda x: x.t()[1:] * 2 + x[:, 1:].t())
    for make in makes:
        torch.testing.assert_close(make(lazy).cpu(), make(cpu))


# ---- data_ptr and storage ----------------------------------------------------------------------
# See Note [Addresses of lazy storages] in backend/storage_addresses.cpp.

VIEW_CHAINS = [
    lambda x: x[1:],
    lambda x: x[1::2][:, 1:],
    lambda x: x[1:][1:].t()[2:],
    lambda x: x[2],
    lambda x: x.diagonal(),
    lambda x: x.view(5, 4).permute(1, 0)[::2],
    lambda x: x[1:].view(torch.int32),
    lambda x: x[:, 2:].view(torch.int16),
    lambda x: x.split(2)[1][:, 1:],
    lambda x: x.unfold(1, 2, 1)[1:],
    lambda x: x[1].unsqueeze_(0),
    lambda x: x[1:].t_(),
]


@pytest.mark.parametrize("make_view", VIEW_CHAINS, ids=[
    "rows", "step_then_columns", "chained_t", "select", "diagonal", "permute_step", "view_dtype",
    "columns_view_dtype", "split", "unfold", "unsqueeze_", "t_"])
@pytest.mark.parametrize("transfer", [True, False], ids=["to_lazy", "op_result"])
def test_data_ptr_of_views_like_eager(make_view, transfer):
    cpu = base()  # 4 x 5 float32
    lazy = cpu.to("lazy") if transfer else cpu.to("lazy") * 1  # an op's result: viewed first here
    v_cpu, v_lazy = make_view(cpu), make_view(lazy)
    assert v_lazy.data_ptr() - lazy.data_ptr() == v_cpu.data_ptr() - cpu.data_ptr()
    assert lazy.data_ptr() != 0
    assert v_lazy.untyped_storage().data_ptr() == lazy.untyped_storage().data_ptr()
    assert v_lazy.untyped_storage().nbytes() == v_cpu.untyped_storage().nbytes()
    torch.testing.assert_close(v_lazy.cpu(), v_cpu)


def test_data_ptr_of_distinct_tensors_differs():
    made = [torch.randn(3, 4, device="lazy"), torch.zeros(100, device="lazy"),
            torch.arange(6.0).to("lazy"), torch.empty(0, device="lazy"),
            torch.ones(2, 2, device="lazy").t().reshape(4)]  # reshape copies a transpose
    ranges = sorted((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in made)
    assert len({start for start, _ in ranges}) == len(made)
    for (start, nbytes), (next_start, _) in zip(ranges, ranges[1:]):
        assert start + nbytes <= next_start  # no storage's bytes overlap another's
    t = made[0]
    copy = t.t().reshape(12)  # a copy in eager too
    assert copy.data_ptr() != t.data_ptr()
    assert t.reshape(12).data_ptr() == t.data_ptr()  # a view


@pytest.mark.parametrize("read", [
    lambda s: s[0], lambda s: s.tolist(), lambda s: s.cpu(), lambda s: bytes(s)],
    ids=["getitem", "tolist", "cpu", "bytes"])
def test_reading_a_lazy_storage_raises_clearly(read):
    t = torch.arange(4.0).to("lazy")
    with pytest.raises(RuntimeError, match="a lazy storage holds no memory"):
        read(t.untyped_storage())
    torch.testing.assert_close((t + 1).cpu(), torch.arange(4.0) + 1)  # the program goes on


def test_set_with_another_storage_raises_clearly():
    t = torch.randn(1, 4, device="lazy")
    other = torch.randn(4, device="lazy")
    with pytest.raises(RuntimeError, match="set_ with a storage is not supported on lazy"):
        t.set_(other.untyped_storage(), 0, (4,), (1,))
    with pytest.raises(RuntimeError, match="set_ with a storage is not supported on lazy"):
        t[0].set_(t.untyped_storage(), 0, (4,), (1,))  # a view
    assert t.shape == (1, 4)


@pytest.mark.parametrize("offset,sizes,strides", [
    (0, (1, 16, 5, 5), (20, 25, 5, 1)),  # a stride of a size-1 dim changed: still contiguous
    (0, (16, 25), (25, 1)), (5, (3, 5), (1, 3)), (0, (400,), (1,))])
def test_set_with_its_own_storage_like_eager(offset, sizes, strides):
    base = torch.randn(1, 16, 5, 5)
    for t in (base.clone(), base.to("lazy")):
        t.set_(t.untyped_storage(), offset, sizes, strides)
        if t.device.type == "cpu":
            expected = t
        else:
            assert (t.shape, t.stride(), t.storage_offset(), t.is_contiguous()) == (
                expected.shape, expected.stride(), expected.storage_offset(),
                expected.is_contiguous())
            torch.testing.assert_close(t.cpu(), expected)
            torch.testing.assert_close((t * 2).cpu(), expected * 2)
    whole = torch.randn(2, 3, device="lazy")
    keep = whole.cpu()
    whole.set_(whole.untyped_storage())
    assert whole.shape == (6,)
    torch.testing.assert_close(whole.cpu(), keep.reshape(6))
