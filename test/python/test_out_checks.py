"""Writes into memory a call also reads or writes elsewhere, on the lazy device against eager CPU:
eager's "unsupported operation" errors raised by the op itself (Note [Overlapping writes]), the
same results where eager allows the overlap, and foreach writes whose elements alias each other
applied in eager's order (Note [Functionalizing foreach writes]), in-place writes of one tensor
functionalized after their cached check (Note [Functionalizing in-place writes]). Then the errors of calls whose
checks PyTorch's meta kernels miss, raised at the op as eager raises them (Note [Lax meta
kernels])."""

import pytest
import torch

import lazyfuse


def base():
    return torch.arange(8, dtype=torch.float32) - 3.5


def arange(n, x):
    return torch.arange(n, device=x.device)


def long_scalar(x):
    return torch.empty((), dtype=torch.long, device=x.device)


def run(device, fn):
    """`fn(x)` on a fresh base tensor on `device`: what it raised (or None), and x afterwards."""
    x = base() if device == "cpu" else base().to("lazy")
    try:
        fn(x)
    except RuntimeError as e:
        return e, x.cpu()
    return None, x.cpu()


OVERLAPS_EAGER_REFUSES = {
    "inplace_partial": lambda x: x[1:].add_(x[:-1]),
    "inplace_partial_scalar_view": lambda x: x.mul_(x[0]),
    "inplace_transposed_view": lambda x: x.view(2, 4).t().add_(x.view(4, 2)),
    "inplace_expanded": lambda x: x[:1].expand(8).add_(1),
    "copy_partial": lambda x: x[1:].copy_(x[:-1]),
    "setitem_partial": lambda x: x.__setitem__(slice(1, None), x[:-1]),
    "out_partial": lambda x: torch.add(x[:4], 1, out=x[2:6]),
    "cat_out_same": lambda x: torch.cat([x, x], out=x),
    "cat_out_partial": lambda x: torch.cat([x[:2], x[2:4]], out=x[1:5]),
    "cat_out_expanded": lambda x: torch.cat([x[:2], x[2:4]], out=x[:1].expand(4)),
    "index_select_out": lambda x: torch.index_select(x, 0, arange(2, x), out=x[:2]),
    "take_out": lambda x: torch.take(x, arange(3, x), out=x[:3]),
    "gather_out": lambda x: torch.gather(x, 0, arange(3, x), out=x[1:4]),
    "masked_select_out": lambda x: torch.masked_select(x, x > 0, out=x),
    "kthvalue_out": lambda x: torch.kthvalue(x, 2, out=(x, long_scalar(x))),
    "bernoulli_out_expanded": lambda x: torch.bernoulli(x.sigmoid(), out=x[:1].expand(8)),
    "foreach_partial": lambda x: torch._foreach_add_([x[1:]], [x[:-1]]),
}


@pytest.mark.parametrize("fn", OVERLAPS_EAGER_REFUSES.values(), ids=OVERLAPS_EAGER_REFUSES.keys())
def test_overlap_error_at_op(fn):
    expected, _ = run("cpu", fn)
    assert expected is not None and str(expected).startswith("unsupported operation")
    actual, after = run("lazy", fn)
    assert actual is not None, "lazy did not raise at the op"
    assert str(actual) == str(expected)
    torch.testing.assert_close(after, base())  # nothing was written


OVERLAPS_EAGER_ALLOWS = {
    "inplace_same": lambda x: x.add_(x),
    "out_same_memory": lambda x: torch.mul(x[:4], 2, out=x[:4]),
    "out_full_view": lambda x: torch.add(x, 1, out=x.view(2, 4).view(8)),
    "copy_disjoint": lambda x: x[:4].copy_(x[4:]),
    "inplace_disjoint_views": lambda x: x[:4].add_(x[4:]),
    "cat_out_disjoint": lambda x: torch.cat([x[:2], x[2:4]], out=x[4:]),
    "foreach_same_element": lambda x: torch._foreach_mul_([x[:4], x[4:]], [x[:4], x[4:]]),
}


@pytest.mark.parametrize("fn", OVERLAPS_EAGER_ALLOWS.values(), ids=OVERLAPS_EAGER_ALLOWS.keys())
def test_overlap_allowed_like_eager(fn):
    expected_error, expected = run("cpu", fn)
    assert expected_error is None
    actual_error, actual = run("lazy", fn)
    assert actual_error is None
    torch.testing.assert_close(actual, expected)


def test_overlap_check_of_a_passing_call_does_not_hide_an_overlapping_one():
    # The same metadata and aliasing once disjoint, then overlapping: only the second raises.
    x = base().to("lazy")
    torch.add(x[:4], 1, out=x[4:])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.add(x[:4], 1, out=x[2:6])
    y = base().to("lazy")
    torch.add(y[:4], 1, out=y[4:])
    lazyfuse.mark_step()
    expected = base()
    torch.add(expected[:4], 1, out=expected[4:])
    torch.testing.assert_close(y.cpu(), expected)


def pair(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)


FOREACH_ALIASED_WRITES = {
    "swapped_lists": lambda a, b: torch._foreach_add_([a, b], [b, a]),
    "same_tensor_twice": lambda a, b: torch._foreach_mul_([a, a, b], 2.0),
    "one_other_tensor": lambda a, b: torch._foreach_add_([a[0, 0], b], a[0, 0], alpha=2.0),
    "scalar_list": lambda a, b: torch._foreach_add_([a, b], [b, a], alpha=0.5),
    "views_of_one_base": lambda a, b: torch._foreach_add_([a[0], a[1]], [a[1], a[0]]),
    "addcmul_scalar_list": lambda a, b: torch._foreach_addcmul_([a, b], [b, a], [a, a], [1.0, -2.0]),
    "lerp_scalar_list": lambda a, b: torch._foreach_lerp_([a, b], [b, a], [0.25, 0.75]),
    "unaliased_control": lambda a, b: torch._foreach_add_([a], [b]),
}


@pytest.mark.parametrize("fn", FOREACH_ALIASED_WRITES.values(), ids=FOREACH_ALIASED_WRITES.keys())
def test_foreach_write_of_aliased_elements_in_eager_order(fn):
    a, b = pair(0)
    fn(a, b)
    la, lb = (t.to("lazy") for t in pair(0))
    fn(la, lb)
    lazyfuse.mark_step()
    torch.testing.assert_close(la.cpu(), a)
    torch.testing.assert_close(lb.cpu(), b)


def test_foreach_write_of_aliased_elements_raises_eagers_error():
    a, b = pair(0)
    with pytest.raises(RuntimeError) as expected:
        torch._foreach_add_([a, b], [b])
    la, lb = (t.to("lazy") for t in pair(0))
    with pytest.raises(RuntimeError) as actual:
        torch._foreach_add_([la, lb], [lb])
    assert str(actual.value) == str(expected.value)


def lazy_args(args):
    return [a.to("lazy") if isinstance(a, torch.Tensor) else a for a in args]


def ones(*shape, dtype=torch.float32):
    return torch.ones(shape, dtype=dtype)


CHECKS_META_KERNELS_MISS = {
    "conv1d_negative_dilation": (torch.nn.functional.conv1d, (ones(1, 1, 4), ones(1, 1, 2)),
                                 {"dilation": (-1,)}),
    "conv3d_negative_padding": (torch.nn.functional.conv3d, (ones(1, 1, 4, 4, 4), ones(1, 1, 2, 2, 2)),
                                {"padding": (-1,)}),
    "avg_pool3d_zero_divisor": (torch.nn.functional.avg_pool3d, (ones(3, 3, 3, 3), (2, 2, 2)),
                                {"divisor_override": 0}),
    "bucketize_2d_boundaries": (torch.bucketize, (ones(5, 5), ones(5, 5)), {}),
    "complex_mixed_dtypes": (torch.complex, (ones(3), ones(3, dtype=torch.float64)), {}),
    "complex_out_dtype": (torch.complex, (ones(3), ones(3)),
                          {"out": torch.empty(3, dtype=torch.complex128)}),
    "index_add_source_shape": (torch.index_add, (ones(3, 2), 0, torch.tensor([0, 1]), ones(2)), {}),
    "index_select_out_dtype": (torch.index_select, (ones(3), 0, torch.tensor([0])),
                               {"out": torch.empty(1, dtype=torch.float64)}),
    "masked_scatter_uint8_mask": (torch.masked_scatter, (ones(3), ones(3, dtype=torch.uint8), ones(3)),
                                  {}),
    "as_strided_scatter_beyond_storage": (torch.as_strided_scatter, (ones(4, 4), ones(2, 2), (2, 2),
                                                                     (200, 200)), {}),
    "multinomial_3d": (torch.multinomial, (ones(1, 2, 3), 2), {}),
    "multinomial_out_dtype": (torch.multinomial, (ones(3), 2),
                              {"out": torch.empty(2, dtype=torch.float64)}),
}


@pytest.mark.parametrize("case", CHECKS_META_KERNELS_MISS.values(), ids=CHECKS_META_KERNELS_MISS.keys())
def test_lax_meta_error_at_op(case):
    fn, args, kwargs = case
    with pytest.raises(Exception) as expected:
        fn(*args, **kwargs)
    lazy_kwargs = {k: v.to("lazy") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with pytest.raises(Exception) as actual:
        fn(*lazy_args(args), **lazy_kwargs)  # at the op: nothing syncs here
    assert type(actual.value) is type(expected.value)
    assert str(actual.value) == str(expected.value)


def data(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


VALID_CALLS_OF_LAX_META_OPS = {
    "conv2d_groups_padding_same": lambda x: torch.nn.functional.conv2d(
        x, data(4, 1, 3, 3, seed=1).to(x.device), groups=4, padding="same"),
    "conv_transpose2d_stride": lambda x: torch.nn.functional.conv_transpose2d(
        x, data(4, 2, 3, 3, seed=1).to(x.device), stride=2, dilation=2),
    "avg_pool3d_divisor": lambda x: torch.nn.functional.avg_pool3d(x, 2, divisor_override=3),
    "bucketize": lambda x: torch.bucketize(x, torch.linspace(-1, 1, 5, device=x.device)),
    "complex": lambda x: torch.complex(x, x * 2),
    "index_add": lambda x: x.index_add(1, torch.tensor([0, 2], device=x.device), x[:, :2], alpha=2),
    "index_select_out": lambda x: torch.index_select(
        x, 1, torch.tensor([3, 0], device=x.device), out=torch.empty(0, device=x.device)),
    "masked_scatter": lambda x: x.masked_scatter(x > 0, x * 10),
    "as_strided_scatter": lambda x: torch.as_strided_scatter(
        x.flatten(), torch.zeros(2, 2, device=x.device), (2, 2), (3, 1), 4),
}


@pytest.mark.parametrize("fn", VALID_CALLS_OF_LAX_META_OPS.values(),
                         ids=VALID_CALLS_OF_LAX_META_OPS.keys())
def test_lax_meta_checks_pass_valid_calls(fn):
    x = data(1, 4, 6, 6)
    expected = fn(x)
    actual = fn(x.to("lazy"))
    torch.testing.assert_close(actual.cpu(), expected)


def test_lax_meta_check_of_a_random_op_draws_nothing_eager_would_see():
    # Recording a random op draws its node's seed (Note [Random ops draw when recorded]); the
    # check of its arguments on CPU stand-ins draws nothing more.
    probs = torch.rand(4, 5).to("lazy")
    lazyfuse.mark_step()
    torch.manual_seed(0)
    torch.multinomial(probs, 2)  # checked on the CPU, not run: nothing syncs
    after = torch.rand(3)
    torch.manual_seed(0)
    torch.rand(2, device="lazy")  # recorded with no check: the one draw alone
    torch.testing.assert_close(after, torch.rand(3))


# Note [Functionalizing in-place writes]: an in-place op on one lazy tensor is functionalized by
# lazyfuse after its cached check, not by PyTorch's kernel, which would run the op's Python meta
# kernel on every call.
IN_PLACE_WRITES = {
    "add_alpha": lambda x, y: x.add_(y, alpha=-0.5),
    "mul_view_of_base": lambda x, y: x.view(2, 4)[:, 1].mul_(y[:2]),
    "sub_transposed": lambda x, y: x.view(2, 4).t().sub_(y.view(4, 2)),
    "lerp_chain": lambda x, y: x.lerp_(y, 0.25).mul_(2).add_(1),
    "addcmul_broadcast": lambda x, y: x.view(2, 4).addcmul_(y[:4], y[4:], value=3),
    "clamp_min_of_slice": lambda x, y: x[::2].clamp_(min=0.5),
    "int_pow_": lambda x, y: x.to(torch.long).pow_(2),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_WRITES))
def test_in_place_write_matches_eager(name):
    fn = IN_PLACE_WRITES[name]
    y = torch.linspace(-2, 2, 8)
    x = base()
    out = fn(x, y)
    lx = base().to("lazy")
    lout = fn(lx, y.to("lazy"))
    lazyfuse.mark_step()
    torch.testing.assert_close(lx.cpu(), x)
    torch.testing.assert_close(lout.cpu(), out)


IN_PLACE_ERRORS = {
    "broadcast_into_smaller_self": lambda x: x[:2].add_(x.view(2, 4)[:, :1].expand(2, 2).t()
                                                          .reshape(4)),
    "float_into_long": lambda x: x.to(torch.long).mul_(x),
    "negative_int_power": lambda x: x.to(torch.long).pow_(-1),
    "alpha_float_on_long": lambda x: x.to(torch.long).add_(x.to(torch.long), alpha=0.5),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_ERRORS))
def test_in_place_write_raises_eagers_error_after_a_valid_call(name):
    # A valid call of the same op with the same metadata first: the cached check must not let
    # the refused one through.
    fn = IN_PLACE_ERRORS[name]
    lx = base().to("lazy")
    lx.to(torch.long).add_(lx.to(torch.long))
    lx.to(torch.long).mul_(lx.to(torch.long))
    lx.to(torch.long).pow_(2)
    lx[:2].add_(lx[2:4])
    with pytest.raises(RuntimeError) as expected:
        fn(base())
    with pytest.raises(RuntimeError) as actual:
        fn(base().to("lazy"))
    assert str(actual.value) == str(expected.value)


def test_in_place_write_runs_no_python_meta_kernel_once_checked():
    import sys

    x, y = base().to("lazy"), base().to("lazy")
    x.add_(y, alpha=2).mul_(y)  # each checked once on Meta, then remembered
    seen = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("_meta_registrations.py"):
            seen.append(frame.f_code.co_name)

    sys.setprofile(tracer)
    try:
        x.add_(y, alpha=3)
        x.mul_(y).mul_(y)
    finally:
        sys.setprofile(None)
    assert seen == []
    lazyfuse.mark_step()
    ex, ey = base(), base()
    ex.add_(ey, alpha=2).mul_(ey).add_(ey, alpha=3).mul_(ey).mul_(ey)
    torch.testing.assert_close(x.cpu(), ex)
