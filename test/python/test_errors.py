"""User errors on the lazy device: the same exception type as eager CPU, raised by the op itself
(not by a later sync), with every existing tensor left intact."""

import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from error_cases import case, check_raises_at_op, data, on
from helpers import INDEXES_OUT_OF_RANGE, LAZY, REFERENCE, randn


# ---- shape errors --------------------------------------------------------------------------

SHAPE_ERRORS = {
    "add": ([data(2, 3), data(4)], lambda a, b: a + b),
    "add_": ([data(3), data(2, 3)], lambda a, b: a.add_(b)),
    "mul_3d": ([data(2, 3, 4), data(2, 5, 4)], torch.mul),
    "mm": ([data(2, 3), data(4, 2)], torch.mm),
    "matmul_vec": ([data(2, 3), data(2)], torch.matmul),
    "bmm": ([data(2, 3, 4), data(3, 4, 5)], torch.bmm),
    "linear": ([data(2, 3), data(4, 5)], F.linear),
    "conv2d_channels": ([data(1, 3, 5, 5), data(2, 4, 3, 3)], F.conv2d),
    "cat": ([data(2, 3), data(2, 4)], lambda a, b: torch.cat([a, b])),
    "stack": ([data(2, 3), data(3, 2)], lambda a, b: torch.stack([a, b])),
    "view": ([data(2, 3)], lambda a: a.view(4)),
    "reshape": ([data(6)], lambda a: a.reshape(4, -1)),
    "expand": ([data(3)], lambda a: a.expand(4, 2)),
    "copy_": ([data(3), data(4)], lambda a, b: a.copy_(b)),
    "where": ([data(2, 3), data(3, 2)], lambda a, b: torch.where(a > 0, a, b)),
    "setitem": ([data(4, 3), data(2, 2)], lambda a, b: a.__setitem__(slice(0, 2), b)),
}


@pytest.mark.parametrize("inputs, op", [case(SHAPE_ERRORS, n) for n in sorted(SHAPE_ERRORS)])
def test_shape_error_at_op(inputs, op):
    check_raises_at_op(inputs, op)


# ---- dtype errors --------------------------------------------------------------------------

DTYPE_ERRORS = {
    "in_place_float_into_int": ([data(3, dtype=torch.int64)], lambda a: a.add_(1.5)),
    "mean_of_int": ([data(3, dtype=torch.int64)], lambda a: a.mean()),
    "where_float_condition": ([data(3)], lambda a: torch.where(a, a, 0.0)),
    "neg_bool": ([data(3, dtype=torch.bool)], lambda a: -a),
    "sub_bool": ([data(3, dtype=torch.bool)], lambda a: a - a),
    "float_index": ([data(4), data(2)], lambda a, i: a[i]),
    "in_place_float_tensor_into_int": ([data(3, dtype=torch.int32), data(3)],
                                       lambda a, b: a.mul_(b)),
    "out_sqrt_into_int": ([data(3).abs(), data(3, dtype=torch.int64)],
                          lambda a, o: torch.sqrt(a, out=o)),
    "out_add_into_int": ([data(3), data(3, dtype=torch.int64)],
                         lambda a, o: torch.add(a, 1.5, out=o)),
    "mm_mixed": ([data(2, 3), data(3, 2, dtype=torch.float64)], torch.mm),
    "bitwise_and_float": ([data(3), data(3)], lambda a, b: a & b),
    "softmax_int": ([data(3, dtype=torch.int64)], lambda a: torch.softmax(a, 0)),
    "conv_int_input": ([data(1, 1, 4, 4, dtype=torch.int64), data(1, 1, 3, 3)], F.conv2d),
    "int_pow_negative": ([data(3, dtype=torch.int64)], lambda a: a ** -1),
    "abs_bool": ([data(3, dtype=torch.bool)], lambda a: a.abs()),
    "silu_int": ([data(3, dtype=torch.int64)], F.silu),
    "addmm_mixed": ([data(2), data(2, 3), data(3, 2, dtype=torch.float64)], torch.addmm),
    "log_softmax_int": ([data(2, 3, dtype=torch.int64)], lambda a: torch.log_softmax(a, 1)),
}


def _error_of(fn, *inputs):
    try:
        fn(*inputs)
    except Exception as err:  # noqa: BLE001 (any type: compared with eager's)
        return type(err), str(err)
    return None


# See Note [Eager's errors] in backend/eager_fallback.cpp.
@pytest.mark.parametrize(
    "inputs, op",
    [
        pytest.param([data(4), data(2)], lambda a, i: a[i], id="float_index"),
        pytest.param([torch.ones(0, 3)], lambda a: a.amax(0), id="amax_empty"),
        pytest.param([data(2, 3), data(4, 2)], torch.mm, id="mm_shapes"),
        pytest.param([data(3), data(3)], lambda a, b: a & b, id="bitwise_and_float"),
        pytest.param([data(2, 3), data(3, 2, dtype=torch.float64)], torch.mm, id="mm_dtypes"),
    ],
)
def test_error_message_is_eagers(inputs, op):
    expected = _error_of(op, *on("eager", *inputs))
    assert expected is not None
    assert _error_of(op, *on("lazy", *inputs)) == expected
    lazyfuse.mark_step()


def test_cpu_only_check_raises_on_every_call():
    # A refused call is not cached: the same call raises again, and a valid one still records.
    a, b = data(3).to("lazy"), data(3).to("lazy")
    for _ in range(2):
        with pytest.raises(NotImplementedError):
            a & b
    torch.testing.assert_close((a + b).cpu(), data(3) * 2)


@pytest.mark.parametrize(
    "valid, invalid",
    [
        (lambda a: a ** 2, lambda a: a ** -1),
        (lambda a: a // 2, lambda a: a // 0),
        (lambda a: a % torch.tensor(3), lambda a: a % torch.tensor(0)),
    ],
    ids=["pow", "floor_divide", "remainder_cpu_scalar"],
)
def test_scalar_value_check_after_a_valid_call(valid, invalid):
    # Scalars are not part of the meta-cache key; their values are still checked as eager does.
    cpu = data(3, dtype=torch.int64)
    try:
        invalid(cpu.to(REFERENCE))
    except Exception as err:  # noqa: BLE001 (its type is lazy's to raise)
        eager_error = err
    else:  # CUDA's kernels leave int // 0 undefined; only the CPU's check it
        assert REFERENCE.type != "cpu", "eager accepts this call: not an error case"
        pytest.skip(f"eager on {REFERENCE} accepts this call")
    lazy = cpu.to("lazy")
    torch.testing.assert_close(valid(lazy).cpu(), valid(cpu))
    with pytest.raises(type(eager_error)):
        invalid(lazy)
    lazyfuse.mark_step()


def test_cpu_checks_do_not_warn():
    x = data(3, 1).to("lazy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.var_mean(x, dim=0)
    lazyfuse.mark_step()


# ---- reductions over empty tensors ---------------------------------------------------------

EMPTY_REDUCTION_ERRORS = {
    "sum_dim_out_of_range": ([torch.ones(0, 3)], lambda a: a.sum(dim=3)),
    "max_no_dim": ([torch.ones(0)], lambda a: a.max()),
    "amax_dim": ([torch.ones(0, 3)], lambda a: a.amax(0)),
    "argmax_no_dim": ([torch.ones(0)], lambda a: a.argmax()),
    "min_dim_empty": ([torch.ones(2, 0)], lambda a: a.min(1)),
}


@pytest.mark.parametrize(
    "inputs, op", [case(EMPTY_REDUCTION_ERRORS, n) for n in sorted(EMPTY_REDUCTION_ERRORS)]
)
def test_empty_reduction_error_at_op(inputs, op):
    check_raises_at_op(inputs, op)


@pytest.mark.parametrize("inputs, op", [case(DTYPE_ERRORS, n) for n in sorted(DTYPE_ERRORS)])
def test_dtype_error_at_op(inputs, op):
    check_raises_at_op(inputs, op)


# ---- index errors --------------------------------------------------------------------------

INDEX_VALUE_CHECK = pytest.mark.xfail(
    reason="design: a check on tensor values (an index out of range, an integer division by "
    "zero) runs in the kernel, which a lazy op does not run: it raises at the sync", strict=True)

INDEX_ERRORS = {
    "int": ([data(5)], lambda a: a[10]),
    "negative_int": ([data(5)], lambda a: a[-6]),
    "second_dim": ([data(3, 4)], lambda a: a[:, 4]),
    "dim": ([data(3)], lambda a: a.sum(dim=2)),
    "select": ([data(2, 3)], lambda a: a.select(1, 3)),
    "narrow": ([data(5)], lambda a: a.narrow(0, 3, 4)),
    "too_many_indices": ([data(5)], lambda a: a[0, 0]),
    # Out-of-range values inside an index tensor: eager checks them in the kernel.
    "tensor_index": pytest.param([data(5), torch.tensor([1, 10])], lambda a, i: a[i],
                                 marks=(INDEX_VALUE_CHECK, INDEXES_OUT_OF_RANGE)),
    "index_select": pytest.param([data(4), torch.tensor([7])],
                                 lambda a, i: torch.index_select(a, 0, i), marks=(INDEX_VALUE_CHECK, INDEXES_OUT_OF_RANGE)),
    "gather": pytest.param([data(2, 3), torch.tensor([[0, 5], [1, 1]])],
                           lambda a, i: torch.gather(a, 1, i), marks=(INDEX_VALUE_CHECK, INDEXES_OUT_OF_RANGE)),
    "embedding": pytest.param([data(10, 3), torch.tensor([0, 12])],
                              lambda w, i: F.embedding(i, w), marks=(INDEX_VALUE_CHECK, INDEXES_OUT_OF_RANGE)),
    "setitem_tensor_index": pytest.param([data(5), torch.tensor([9])],
                                         lambda a, i: a.__setitem__(i, 1.0),
                                         marks=(INDEX_VALUE_CHECK, INDEXES_OUT_OF_RANGE)),
    # Not an index, but the same kind of check: on values, in the kernel.
    # CUDA's kernels do not check it (in eager too): there, lazy must give eager's values.
    "int_div_by_zero": pytest.param([torch.tensor([1, 2]), torch.tensor([0, 1])],
                                    lambda a, b: a // b,
                                    marks=INDEX_VALUE_CHECK if REFERENCE.type == "cpu" else ()),
}


@pytest.mark.parametrize("inputs, op", [case(INDEX_ERRORS, n) for n in sorted(INDEX_ERRORS)])
def test_index_error_at_op(inputs, op):
    check_raises_at_op(inputs, op)


def test_boolean_mask_assignment_shape_error_at_op():
    x = data(4, 5)
    check_raises_at_op([x, x > 0, torch.ones(100)], lambda a, m, v: a.__setitem__(m, v))


@INDEXES_OUT_OF_RANGE
def test_failed_sync_does_not_break_later_mark_steps():
    x = torch.arange(5.0).to("lazy")
    bad = x[torch.tensor([9], device="lazy")]  # only found to be out of range when it runs
    with pytest.raises(IndexError):
        bad.cpu()
    try:
        lazyfuse.mark_step()
    except IndexError:
        pass  # reporting the error once more is fine; it must not stick
    y = x * 3
    lazyfuse.mark_step()
    torch.testing.assert_close(y.cpu(), torch.arange(5.0) * 3)


@INDEXES_OUT_OF_RANGE
def test_tensor_of_a_failed_sync_raises_when_used_again():
    x = torch.arange(5.0).to("lazy")
    bad = x[torch.tensor([9], device="lazy")]
    with pytest.raises(IndexError):
        bad.cpu()
    for use in (lambda: bad.cpu(), lambda: bad + 1, lambda: lazyfuse.sync(bad)):
        with pytest.raises(RuntimeError, match="failed at sync with: .*out of bounds"):
            use()
    lazyfuse.mark_step()


@INDEXES_OUT_OF_RANGE
def test_failed_mark_step_keeps_the_values_that_do_not_depend_on_the_failure():
    x = torch.arange(5.0).to("lazy")
    good = x * 2
    bad = x[torch.tensor([9], device="lazy")] + 1
    with pytest.raises(IndexError):
        lazyfuse.mark_step()
    lazyfuse.mark_step()
    torch.testing.assert_close(good.cpu(), torch.arange(5.0) * 2)
    with pytest.raises(RuntimeError, match="failed at sync"):
        bad.cpu()


@INDEXES_OUT_OF_RANGE
def test_other_tensors_compute_after_a_failed_sync():
    x = torch.arange(5.0).to("lazy")
    good = x * 2
    bad = x[torch.tensor([9], device="lazy")]
    with pytest.raises(IndexError):
        bad.cpu()
    del bad
    torch.testing.assert_close(good.cpu(), torch.arange(5.0) * 2)
    torch.testing.assert_close((x + 1).cpu(), torch.arange(5.0) + 1)
    lazyfuse.mark_step()


# ---- factories and random ------------------------------------------------------------------


@pytest.mark.parametrize(
    "factory",
    [
        lambda d: torch.randint(5, 2, (3,), device=d),
        lambda d: torch.arange(0, 10, -1, device=d),
        lambda d: torch.empty(-1, device=d),
        lambda d: torch.eye(-2, device=d),
        lambda d: torch.full((2,), 1.5, dtype=torch.int64, device=d).add_(0.5),
    ],
    ids=["randint", "arange", "empty", "eye", "full_in_place"],
)
def test_factory_error_at_op(factory):
    with pytest.raises(Exception) as eager:
        factory("cpu")
    with pytest.raises(Exception) as lazy:
        factory("lazy")
    assert type(lazy.value) is type(eager.value), lazy.value
    lazyfuse.mark_step()


# ---- devices -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [
        lambda lz, c: lz + c,
        lambda lz, c: c * lz,
        lambda lz, c: torch.mm(lz, c),
        lambda lz, c: torch.cat([lz, c]),
        lambda lz, c: lz.add_(c),
        lambda lz, c: torch.where(lz > 0, lz, c),
        lambda lz, c: F.linear(lz, c),
    ],
    ids=["add", "rmul", "mm", "cat", "add_", "where", "linear"],
)
def test_mixing_lazy_with_cpu_tensor_raises(op):
    lazy = data(3, 3).to("lazy").clone()
    cpu = data(3, 3, seed=1)
    with pytest.raises(RuntimeError) as info:
        op(lazy, cpu)
    message = str(info.value)
    assert "lazy" in message and "cpu" in message, message
    torch.testing.assert_close(lazy.cpu(), data(3, 3))


@pytest.mark.parametrize(
    "op",
    [
        lambda x, s: x + s,
        lambda x, s: s * x,
        lambda x, s: x.add_(s),
        lambda x, s: torch.where(x > 0, x, s),
        lambda x, s: torch.maximum(x, s),
        lambda x, s: x.clamp(min=s),
        lambda x, s: x.clamp_(max=s),
        lambda x, s: x / s,
        lambda x, s: x.lerp(x * 2, s.double() / 4),
        lambda x, s: x.fill_(s),
        lambda x, s: x.index_put_((torch.tensor([1], device=x.device),), s.to(x.dtype)),
        lambda x, s: x.masked_fill(x > 0, s),
        lambda x, s: x.masked_fill_(x < 0, s),
    ],
    ids=["add", "rmul", "add_", "where", "maximum", "clamp", "clamp_", "div", "lerp", "fill_",
         "index_put_", "masked_fill", "masked_fill_"],
)
@pytest.mark.parametrize(
    "scalar", [torch.tensor(2.5), torch.tensor(3), torch.tensor(2.0, dtype=torch.float64)],
    ids=["float", "int", "double"],
)
def test_zero_dim_cpu_tensor_mixes(op, scalar):
    x = data(3, 4)
    expected = op(x.clone(), scalar)
    actual = op(x.to("lazy").clone(), scalar)
    assert actual.device.type == "lazy"
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected)


def test_mixing_lazy_with_meta_tensor_raises():
    with pytest.raises(RuntimeError):
        torch.ones(3, device="lazy") + torch.ones(3, device="meta")


def test_one_element_cpu_tensor_does_not_mix():
    # A 1-element (not 0-dim) CPU tensor is not a scalar: eager CUDA raises, so must lazy.
    with pytest.raises(RuntimeError):
        torch.ones(3, device="lazy") + torch.ones(1)


# ---- TorchScript lazy backend --------------------------------------------------------------


def test_ts_backend_init_refused_after_import(python_subprocess):
    code = textwrap.dedent(
        """
        import torch, lazyfuse
        import torch._lazy.ts_backend as ts_backend
        try:
            ts_backend.init()
        except RuntimeError as err:
            print("REFUSED:", err)
        else:
            raise SystemExit("ts_backend.init() did not raise")
        try:
            torch._C._lazy_ts_backend._init()
        except RuntimeError as err:
            print("C REFUSED")
        x = torch.ones(3, device="lazy") + 1
        torch.testing.assert_close(x.cpu(), torch.full((3,), 2.0))
        print("LAZY OK")
        """
    )
    proc = python_subprocess(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED:" in proc.stdout and "lazyfuse" in proc.stdout, proc.stdout
    assert "TorchScript" in proc.stdout, proc.stdout
    assert "C REFUSED" in proc.stdout and "LAZY OK" in proc.stdout, proc.stdout


def test_ts_backend_init_imported_before_lazyfuse_is_refused(python_subprocess):
    code = textwrap.dedent(
        """
        import torch
        from torch._lazy.ts_backend import init
        import lazyfuse
        try:
            init()
        except RuntimeError as err:
            print("REFUSED:", err)
        """
    )
    proc = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED:" in proc.stdout, proc.stdout


def test_import_lazyfuse_after_ts_backend_init_raises(python_subprocess):
    code = textwrap.dedent(
        """
        import torch
        import torch._lazy.ts_backend
        torch._lazy.ts_backend.init()
        try:
            import lazyfuse
        except RuntimeError as err:
            print("REFUSED:", err)
        """
    )
    proc = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED:" in proc.stdout and "TorchScript" in proc.stdout, proc.stdout


QUANTIZE = {
    "quantize_per_tensor": lambda x: torch.quantize_per_tensor(x, 0.1, 0, torch.qint8),
    "quantize_per_tensor_dynamic": lambda x: torch.quantize_per_tensor_dynamic(
        x, torch.quint8, False),
    "quantize_per_channel": lambda x: torch.quantize_per_channel(
        x, torch.ones(2, device=x.device), torch.zeros(2, dtype=torch.long, device=x.device), 0,
        torch.quint8),
    "empty_affine_quantized": lambda x: torch._empty_affine_quantized(
        [2, 3], scale=0.5, zero_point=1, dtype=torch.quint8, device=x.device),
    "empty_of_a_quantized_dtype": lambda x: torch.empty(3, dtype=torch.qint8, device=x.device),
    "quantize_per_tensor_of_a_list": lambda x: torch.quantize_per_tensor(
        [x, x * 2], torch.tensor([0.1, 0.2], device=x.device),
        torch.tensor([0, 1], device=x.device), torch.qint8)[1],
}


@pytest.mark.parametrize("name", sorted(QUANTIZE))
def test_quantizing_a_lazy_tensor_is_refused_clearly(name):
    # eager CPU quantizes; lazy tensors have no quantized form: an error that says so, at the op
    x = randn(2, 3)
    assert QUANTIZE[name](x).is_quantized
    with pytest.raises(NotImplementedError, match="quantized tensors .* not supported on the lazy"):
        QUANTIZE[name](x.to(LAZY))
    torch.testing.assert_close((x.to(LAZY) * 2).cpu(), x * 2)  # the process goes on
