"""Errors of in-place and out= ops on the lazy device: casts into the written tensor, eager's
checks of writes in every grad mode, and what those checks allow. The same exception type and
message as eager CPU, raised by the op itself."""

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from error_cases import case, check_raises_at_op, data, on
from helpers import LAZY, REFERENCE


# ---- casts into the tensor an in-place or out= op writes -----------------------------------
# See Note [In-place result casts] in backend/write_checks.cpp.

WRITTEN_CAST_ERRORS = {
    "div_int": ([data(3, dtype=torch.int64)], lambda a: a.div_(2)),
    "mul_view_of_int": ([data(4, dtype=torch.int32), data(3)], lambda a, b: a[1:].mul_(b)),
    "long_into_bool_out": ([data(3, dtype=torch.int64), data(3, dtype=torch.bool)],
                           lambda a, o: torch.add(a, a, out=o)),
    "complex_into_half": ([data(3, dtype=torch.float16), torch.ones(3, dtype=torch.complex64)],
                          lambda a, b: a.add_(b)),
    "foreach_mul_into_int": ([data(3, dtype=torch.int64), data(3)],
                             lambda a, b: torch._foreach_mul_([a], [b])),
    "max_values_into_int_out": (
        [data(2, 3), data(3, dtype=torch.int64), data(3, dtype=torch.int64)],
        lambda a, v, i: torch.max(a, 0, out=(v, i))),
    "float_into_int_under_no_grad": ([data(3, dtype=torch.int64), data(3)],
                                     lambda a, b: _no_grad(lambda: a.sub_(b, alpha=2))),
}


def _no_grad(fn):
    with torch.no_grad():
        return fn()


@pytest.mark.parametrize(
    "inputs, op", [case(WRITTEN_CAST_ERRORS, n) for n in sorted(WRITTEN_CAST_ERRORS)]
)
def test_written_cast_error_at_op(inputs, op):
    check_raises_at_op(inputs, op)


def test_written_cast_error_says_what_eager_says():
    a, b = data(3, dtype=torch.int32), data(3)
    with pytest.raises(RuntimeError) as eager:
        a.clone().mul_(b)
    with pytest.raises(RuntimeError) as lazy:
        a.to("lazy").clone().mul_(b.to("lazy"))
    assert str(lazy.value) == str(eager.value)


WRITTEN_CASTS_ALLOWED = {
    "double_into_float": ([data(3), data(3, dtype=torch.float64)], lambda a, b: a.add_(b)),
    "long_into_int": ([data(3, dtype=torch.int32), data(3, dtype=torch.int64)],
                      lambda a, b: a.add_(b)),
    "long_into_float_out": ([data(3, dtype=torch.int64), data(3)],
                            lambda a, o: torch.add(a, a, out=o)),
    "bool_into_long_out": ([data(3), data(3, dtype=torch.int64)],
                           lambda a, o: torch.eq(a, a, out=o)),
    "float_fill_into_int": ([data(3, dtype=torch.int64)], lambda a: a.masked_fill_(a > 1, 2.5)),
    "float_copy_into_int": ([data(3, dtype=torch.int64), data(3)], lambda a, b: a.copy_(b)),
    # matmul.out decomposes (CompositeImplicitAutograd): autograd's kernel never runs for it.
    "matmul_out": ([data(2, 3), data(3, 2), data(2, 2)],
                   lambda a, b, o: torch.matmul(a, b, out=o)),
    # Eager sums in the out tensor's dtype when no dtype is given: the values differ from a cast
    # of the float sum, so these also pin that the lazy sum runs in that dtype.
    "sum_into_long_out": ([data(4, 3) * 3, data(3, dtype=torch.int64)],
                          lambda a, o: torch.sum(a, 0, out=o)),
    "prod_into_long_out": ([data(4, 3) * 3, data(3, dtype=torch.int64)],
                           lambda a, o: torch.prod(a, 0, out=o)),
    "cumsum_into_long_out": ([data(4, 3) * 3, data(4, 3, dtype=torch.int64)],
                             lambda a, o: torch.cumsum(a, 0, out=o)),
}


@pytest.mark.parametrize(
    "inputs, op", [case(WRITTEN_CASTS_ALLOWED, n) for n in sorted(WRITTEN_CASTS_ALLOWED)]
)
def test_written_cast_allowed(inputs, op):
    cpu_inputs = on("eager", *inputs)
    lazy_inputs = on("lazy", *inputs)
    expected = op(*cpu_inputs)
    actual = op(*lazy_inputs)
    torch.testing.assert_close(actual.cpu(), expected.cpu())
    for lazy_t, cpu_t in zip(lazy_inputs, cpu_inputs):
        torch.testing.assert_close(lazy_t.cpu(), cpu_t.cpu())


# ---- eager's checks of writes, in every grad mode -------------------------------------------
# See Note [In-place result casts] in backend/write_checks.cpp: the checks run on the
# Functionalize key, which InferenceMode does not skip, as it skips the autograd keys.

GRAD_MODES = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


def _first_line(err):
    return type(err), str(err).split("\n")[0]


def _run_in_mode(mode, make_inputs, op):
    """(error, inputs afterwards): op on fresh inputs under `mode`; inputs are made inside it
    when `make_inputs` says so, else outside (tensors made in InferenceMode are inference
    tensors, which carry no autograd keys at all)."""
    inputs = None
    with GRAD_MODES[mode]():
        inputs = make_inputs()
        try:
            op(*inputs)
        except Exception as err:  # noqa: BLE001 (any type: compared with eager's)
            return _first_line(err), inputs
    return None, inputs


WRITE_ERRORS = {
    # result dtypes that cannot be cast to the written tensor (eager's TensorIterator rule)
    "int_add_float_scalar": ([data(3, dtype=torch.int64)], lambda a: a.add_(1.5)),
    "int_mul_float": ([data(3, dtype=torch.int32), data(3)], lambda a, b: a.mul_(b)),
    "int_clamp_float": ([data(3, dtype=torch.int64)], lambda a: a.clamp_(0.5, 2.5)),
    "add_out_int": ([data(3), data(3), data(3, dtype=torch.int64)],
                    lambda a, b, o: torch.add(a, b, out=o)),
    "exp_out_int": ([data(3), data(3, dtype=torch.int64)], lambda a, o: torch.exp(a, out=o)),
    "div_out_int": ([data(3), data(3), data(3, dtype=torch.int64)],
                    lambda a, b, o: torch.div(a, b, out=o)),
    "foreach_mul_into_int": ([data(3, dtype=torch.int64), data(3)],
                             lambda a, b: torch._foreach_mul_([a], [b])),
    # structured ops: the out tensor must have exactly the dtype the op computes
    "softmax_out_double": ([data(3), data(3, dtype=torch.float64)],
                           lambda a, o: torch.softmax(a, 0, out=o)),
    "log_softmax_out_double": ([data(3), data(3, dtype=torch.float64)],
                               lambda a, o: torch.log_softmax(a, 0, out=o)),
    "mm_out_double": ([data(2, 3), data(3, 2), data(2, 2, dtype=torch.float64)],
                      lambda a, b, o: torch.mm(a, b, out=o)),
    "bmm_out_double": ([data(2, 2, 3), data(2, 3, 2), data(2, 2, 2, dtype=torch.float64)],
                       lambda a, b, o: torch.bmm(a, b, out=o)),
    "addmm_out_double": ([data(2, 2), data(2, 3), data(3, 2), data(2, 2, dtype=torch.float64)],
                         lambda c, a, b, o: torch.addmm(c, a, b, out=o)),
    "matmul_out_double": ([data(2, 3), data(3, 2), data(2, 2, dtype=torch.float64)],
                          lambda a, b, o: torch.matmul(a, b, out=o)),
    "argmax_out_int32": ([data(3, 2), data(3, dtype=torch.int32)],
                         lambda a, o: torch.argmax(a, 1, out=o)),
    "topk_out_double": ([data(3), data(2, dtype=torch.float64), data(2, dtype=torch.int64)],
                        lambda a, v, i: torch.topk(a, 2, out=(v, i))),
    "sort_out_double": ([data(3), data(3, dtype=torch.float64), data(3, dtype=torch.int64)],
                        lambda a, v, i: torch.sort(a, out=(v, i))),
    "amax_out_int": ([data(3, 2), data(3, dtype=torch.int64)],
                     lambda a, o: torch.amax(a, 1, out=o)),
    "where_out_int": ([data(3), data(3, dtype=torch.int64)],
                      lambda a, o: torch.where(a > 0, a, a, out=o)),
    "cat_out_int": ([data(3), data(3, dtype=torch.int64)], lambda a, o: torch.cat([a, a], out=o)),
    "addmv_into_half": ([data(2, dtype=torch.float16), data(2, 3), data(3)],
                        lambda a, m, v: a.addmv_(m, v)),
    "float_power_into_half": ([data(3, dtype=torch.float16)], lambda a: a.float_power_(2)),
    "float_power_into_float": ([data(3)], lambda a: a.float_power_(2)),
    # dtypes only the CPU kernel refuses
    "cumsum_into_bool_out": ([data(3), data(3, dtype=torch.bool)],
                             lambda a, o: torch.cumsum(a, 0, out=o)),
    "cumprod_into_bool_out": ([data(3), data(3, dtype=torch.bool)],
                              lambda a, o: torch.cumprod(a, 0, out=o)),
    "nansum_into_int_out": ([data(3), torch.zeros((), dtype=torch.int64)],
                            lambda a, o: torch.nansum(a, out=o)),
}


@pytest.mark.parametrize("inputs_made_in_mode", [False, True], ids=["outside", "inside"])
@pytest.mark.parametrize("mode", sorted(GRAD_MODES))
@pytest.mark.parametrize("inputs, op", [case(WRITE_ERRORS, n) for n in sorted(WRITE_ERRORS)])
def test_write_checks_raise_eagers_error_at_op(inputs, op, mode, inputs_made_in_mode):
    def make(device):
        return lambda: on(device, *inputs) if inputs_made_in_mode else prepared[device]

    prepared = {} if inputs_made_in_mode else {"eager": on("eager", *inputs),
                                                "lazy": on("lazy", *inputs)}
    expected, cpu_inputs = _run_in_mode(mode, make("eager"), op)
    if expected is None:  # CUDA's kernels accept some calls the CPU's refuse; then so must lazy
        assert REFERENCE.type != "cpu", "eager accepts this call: not an error case"
    actual, lazy_inputs = _run_in_mode(mode, make("lazy"), op)
    assert actual == expected
    with GRAD_MODES[mode]():
        for lazy_t, cpu_t in zip(lazy_inputs, cpu_inputs):
            torch.testing.assert_close(lazy_t.cpu(), cpu_t.cpu())
    lazyfuse.mark_step()


WRITES_ALLOWED = {
    **WRITTEN_CASTS_ALLOWED,
    # In-place and out= ops that decompose (CompositeImplicitAutograd): autograd's key runs the
    # decomposition outside InferenceMode, and lazyfuse's Functionalize kernel inside it.
    "square_": ([data(3)], lambda a: a.square_()),
    "multiply_": ([data(3), data(3)], lambda a, b: a.multiply_(b)),
    "clip_": ([data(3)], lambda a: a.clip_(-0.5, 0.5)),
    "relu6_inplace": ([data(3) * 8], lambda a: F.relu6(a, inplace=True)),
    "fill_diagonal_": ([data(3, 3)], lambda a: a.fill_diagonal_(2.0)),
    "dropout_p0_inplace": ([data(3)], lambda a: F.dropout(a, 0.0, training=True, inplace=True)),
    "float_power_double": ([data(3, dtype=torch.float64)], lambda a: a.float_power_(2)),
    "matmul_out_float": ([data(2, 3), data(3, 2), data(2, 2)],
                         lambda a, b, o: torch.matmul(a, b, out=o)),
    "mm_out_of_another_size": ([data(2, 3), data(3, 2), data(3)],
                               lambda a, b, o: torch.mm(a, b, out=o)),
    "int_add_int_in_place": ([data(3, dtype=torch.int64)], lambda a: a.add_(2)),
    "half_addmv_half": ([data(2, dtype=torch.float16), data(2, 3, dtype=torch.float16),
                         data(3, dtype=torch.float16)], lambda a, m, v: a.addmv_(m, v)),
    "nansum_into_double_out": ([data(3), torch.zeros((), dtype=torch.float64)],
                               lambda a, o: torch.nansum(a, out=o)),
}


@pytest.mark.parametrize("inputs_made_in_mode", [False, True], ids=["outside", "inside"])
@pytest.mark.parametrize("mode", sorted(GRAD_MODES))
@pytest.mark.parametrize("inputs, op", [case(WRITES_ALLOWED, n) for n in sorted(WRITES_ALLOWED)])
def test_write_checks_allow_what_eager_allows(inputs, op, mode, inputs_made_in_mode):
    results = {}
    for device in ("eager", "lazy"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an out= of another size is resized, with a warning
            with GRAD_MODES[mode]():
                ins = on(device, *inputs) if inputs_made_in_mode else None
            if ins is None:
                ins = on(device, *inputs)
            with GRAD_MODES[mode]():
                returned = op(*ins)
                results[device] = (returned.cpu(), [t.cpu() for t in ins])
    (expected, expected_inputs), (actual, actual_inputs) = results["eager"], results["lazy"]
    torch.testing.assert_close(actual, expected)
    for lazy_t, cpu_t in zip(actual_inputs, expected_inputs):
        torch.testing.assert_close(lazy_t, cpu_t)
    lazyfuse.mark_step()


def test_write_check_runs_again_after_a_passing_call():
    # Calls that pass are remembered by metadata; a refused one is not, and raises every time.
    a, o = data(3).to("lazy"), torch.zeros(3, device="lazy")
    torch.cumsum(a, 0, out=o)
    bad = torch.zeros(3, dtype=torch.bool, device="lazy")
    for _ in range(2):
        with pytest.raises(NotImplementedError):
            torch.cumsum(a, 0, out=bad)
    torch.testing.assert_close(o.cpu(), torch.cumsum(data(3), 0))


def test_write_of_a_non_lazy_functional_tensor_is_untouched():
    # torch.func.functionalize wraps CPU tensors: lazyfuse's Functionalize kernels hand those
    # calls on unchanged (eager's own meta reference run still checks the in-place op).
    def f(a, o):
        torch.add(a, a, out=o)
        return o.mul_(3)

    a, o = data(3), torch.zeros(3)
    torch.testing.assert_close(torch.func.functionalize(f)(a, o.clone()), (a + a) * 3)


def test_random_out_into_int_allowed():
    out = torch.zeros(3, dtype=torch.int64, device="lazy")
    torch.bernoulli(torch.full((3,), 0.5, device="lazy"), out=out)
    assert out.dtype == torch.int64
    assert set(out.cpu().tolist()) <= {0, 1}


@pytest.mark.parametrize("write", [
    lambda v: v.zero_(),
    lambda v: v.fill_(2.0),
    lambda v: v.masked_fill_(torch.tensor([True, False, True], device=v.device), 1.0),
], ids=["zero_", "fill_", "masked_fill_"])
def test_write_into_expanded_tensor_like_eager(write):
    """Eager lets these ops write each shared element once per view element (masked_fill_ with a
    warning); the lazy device writes on memory as eager does (Note [Writes into expanded
    tensors]), with eager's warnings."""
    results = {}
    for device in (REFERENCE, LAZY):  # the warnings name the kernel's source file: same device
        x = torch.ones(1, 3).to(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write(x.expand(2, 3))
        results[device] = (x.cpu(), sorted(str(w.message) for w in caught))
    torch.testing.assert_close(results[LAZY][0], results[REFERENCE][0])
    assert results[LAZY][1] == results[REFERENCE][1]


@pytest.mark.parametrize("write", [
    lambda v: v.add_(1),
    lambda v: v.mul_(torch.ones(2, 3, device=v.device)),
    lambda v: v.exp_(),
], ids=["add_", "mul_", "exp_"])
def test_write_into_expanded_tensor_refused_like_eager(write):
    """Most ops refuse to write into a tensor whose elements share memory: eager's error, and the
    base is left as it was."""
    with pytest.raises(RuntimeError) as eager:
        write(torch.ones(1, 3).expand(2, 3))
    x = torch.ones(1, 3).to("lazy")
    with pytest.raises(RuntimeError) as lazy:
        write(x.expand(2, 3))
    assert str(lazy.value) == str(eager.value)
    torch.testing.assert_close(x.cpu(), torch.ones(1, 3))


def test_write_into_empty_tensor_with_zero_stride_works():
    """Without elements nothing is written twice, whatever the strides: zeros_like of an empty
    result with a zero stride (nonzero's of an all-zero input) is no expanded write."""
    like = torch.empty_strided((0, 2), (1, 0))
    zeros = torch.zeros_like(like, device="lazy")
    assert zeros.shape == like.shape and zeros.device.type == "lazy"
    assert zeros.cpu().shape == like.shape
