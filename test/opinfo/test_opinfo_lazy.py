"""PyTorch's OpInfo database swept on the lazy device against eager on the hardware device.

For every OpInfo in `op_db` (instantiated by PyTorch's own harness for the `lazy` device type,
see lazy_device_type.py):

  test_correctness  every sample input, on lazy and eagerly on the reference device (the
                    hardware device: the CPU, or CUDA), compared with assert_close under the
                    OpInfo's tolerances; also the inputs afterwards (ops that mutate). Dtypes:
                    float32, float64, int64, bool, bfloat16, float16 where the op has them (an op
                    with none of them: its first dtype). Random or uninitialized outputs (the
                    OpInfo says "non-deterministic" / "not comparable"): shapes and dtypes only;
                    other random aten ops (randn...): values where they match, else shapes.
  test_inplace      the in-place variant (primary dtype): the mutated tensor and the return value
  test_out          the out= variant (primary dtype): an out of the right shape, and an empty out
                    that the op resizes; the out tensors and the return value
  test_errors       every error_inputs sample raises on lazy the exception eager cpu raises (type
                    and the OpInfo's message pattern), at the op, not at the next sync
  test_grad         ops with autograd: gradients of the first GRAD_SAMPLES samples in float64

The primary dtype is float32, or for an op without float32 its first dtype (harness.py). Each
test records how many samples ran and which ops fell back to eager (lazyfuse's aten::<op>
counters); make_coverage.py turns that into docs/op_coverage.md. Known failures are listed in
expected_failures.py and show as xfail with their reason; nothing is skipped silently.

The CI subset (`--opinfo-subset=ci`, see conftest.py) is documented in README.md.
"""

import contextlib
import os
import re

import harness  # noqa: I001  (imported first: registers the lazy device type)
from harness import (
    RECORDS,
    Record,
    assert_same,
    dtype_name,
    from_reference,
    gives_lazy,
    meta_samples,
    noncomparable_reason,
    op_id,
    opinfo_tolerance,
    recover,
    sample_tensors,
    sample_to_lazy,
    sample_to_reference,
    to_cpu,
)

harness.register_lazy_device()

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.testing._internal import common_device_type  # noqa: E402
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase, slowTest  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import expected_failures  # noqa: E402
import lazyfuse  # noqa: E402

expected_failures.check_table({op_id(op) for op in op_db})

GRAD_SAMPLES = int(os.environ.get("LAZYFUSE_OPINFO_GRAD_SAMPLES", "3"))


class lazy_ops(ops):
    """@ops where each op gets its own dtype list, `dtypes_of(op)` ([None]: no dtype parameter),
    and without the OpInfo decorators that only say which device types upstream runs a test
    on (see _device_type_filters)."""

    def __init__(self, op_list, dtypes_of):
        super().__init__(op_list)
        self.dtypes_of = dtypes_of

    def _parametrize_test(self, test, generic_cls, device_cls):
        for op in self.op_list:
            dtypes = self.dtypes_of(op)
            for test_fn, name, params, decorator_fn in ops([op], dtypes=dtypes)._parametrize_test(
                test, generic_cls, device_cls
            ):
                yield test_fn, name, params, _without_device_type_filters(decorator_fn)


def _device_type_filters():
    """onlyNativeDeviceTypes (aminmax, roll) keeps upstream's tests off backends such as XLA;
    onlyCPU (nonzero_static, sparse.mm.reduce) off CUDA: lazy tensors run the CPU kernels when
    the hardware device is the CPU, so those ops are swept too. slowTest (linalg.pinv.singular)
    is for upstream's gradcheck; these tests of it take a fraction of a second."""
    filters = [common_device_type.onlyNativeDeviceTypes, slowTest]
    if lazyfuse.hardware_device() == "cpu":
        filters.append(common_device_type.onlyCPU)
    return filters


def _without_device_type_filters(decorator_fn):
    filters = _device_type_filters()
    return lambda params: [d for d in decorator_fn(params) if not any(d is f for f in filters)]


_ops_with_dtype = [op for op in op_db if harness.primary_dtype(op) is not None]
_ops_inplace = [op for op in _ops_with_dtype if op.inplace_variant is not None]
_ops_out = [op for op in _ops_with_dtype if op.supports_out]
_ops_errors = [op for op in op_db if op.error_inputs_func is not None]
_ops_grad = [op for op in op_db if harness.grad_dtypes(op)]


class TestLazyfuseOpInfo(TestCase):
    # ---- the frame every test runs in -----------------------------------------------------

    def _sweep(self, op, dtype, kind, body):
        name = op_id(op)
        record = Record(op=name, kind=kind, dtype=dtype_name(dtype))
        RECORDS[self._testMethodName] = record
        skip = expected_failures.skip_reason(name, kind, dtype)
        if skip is not None:
            record.notes.append(f"not run: {skip}")
            self.skipTest(f"expected_failures.SKIP: {skip}")
        if kind != "errors" and (noncomparable_reason(op) or harness.random_reason(op)):
            record.notes.append(noncomparable_reason(op) or harness.random_reason(op))
        harness.start_clean()
        lazyfuse.reset_metrics()
        try:
            body(record)
        except Exception as e:  # noqa: BLE001 (a harness-level error is a failure of this test)
            record.fail("-", None, e)
            recover()
        record.fallbacks = harness.fallback_ops()
        record.ops_recorded = harness.counter("OpsRecorded")
        xfail = expected_failures.expected_failure(name, kind, dtype)
        record.expected_failure = xfail
        if record.samples_failed:
            if xfail is not None:
                pytest.xfail(f"{xfail} [{record.summary()}]")
            self.fail(f"{name} {kind} {dtype_name(dtype)}: {record.summary()}")
        if xfail is not None:
            self.fail(
                f"{name} {kind} {dtype_name(dtype)} unexpectedly passed: remove its entry from "
                f"expected_failures.XFAIL ({xfail})"
            )
        if record.samples == 0:
            if record.cpu_rejected and kind != "errors":
                where = harness.reference_device().type
                record.notes.append(f"eager {where} rejects all {record.cpu_rejected} samples")
            why = "; ".join(record.notes) or "the OpInfo has no sample input"
            self.skipTest(f"nothing ran on lazy: {why}")

    # ---- correctness ----------------------------------------------------------------------

    @lazy_ops(_ops_with_dtype, harness.correctness_dtypes)
    def test_correctness(self, device, dtype, op):
        self._sweep(op, dtype, "correctness", lambda record: self._correctness(op, dtype, record))

    def _correctness(self, op, dtype, record):
        compare = _Comparison(op, dtype, self)
        for index, sample, ref, lazy_sample in _lazy_samples(op, dtype, record):
            try:
                expected = op(ref.input, *ref.args, **ref.kwargs)
            except Exception:  # noqa: BLE001 (eager rejects this sample: not a lazy test)
                record.cpu_rejected += 1
                continue
            with _sample_check(record, index, sample):
                actual = op(lazy_sample.input, *lazy_sample.args, **lazy_sample.kwargs)
                lazyfuse.mark_step()
                actual = sample.output_process_fn_grad(to_cpu(actual, gives_lazy(lazy_sample)))
                compare.same(actual, from_reference(sample.output_process_fn_grad(expected)))
                compare.same(
                    to_cpu(sample_tensors(lazy_sample), lazy_inputs=False),
                    from_reference(sample_tensors(ref)),
                    "inputs after the op",
                )

    # ---- in-place and out= ----------------------------------------------------------------

    @lazy_ops(_ops_inplace, harness.primary_dtypes)
    def test_inplace(self, device, dtype, op):
        self._sweep(op, dtype, "inplace", lambda record: self._inplace(op, dtype, record))

    def _inplace(self, op, dtype, record):
        compare = _Comparison(op, dtype, self)
        inplace = op.inplace_variant
        # In-place needs a tensor self that has the result's shape.
        keep = lambda s: isinstance(s.input, torch.Tensor) and not s.broadcasts_input  # noqa: E731
        for index, sample, ref, lazy_sample in _lazy_samples(op, dtype, record, keep=keep):
            try:
                expected = inplace(ref.input, *ref.args, **ref.kwargs)
            except Exception:  # noqa: BLE001 (e.g. a result dtype that cannot be cast back)
                record.cpu_rejected += 1
                continue
            with _sample_check(record, index, sample):
                actual = inplace(lazy_sample.input, *lazy_sample.args, **lazy_sample.kwargs)
                if (expected is ref.input) and (actual is not lazy_sample.input):
                    raise AssertionError("the in-place variant did not return its input")
                lazyfuse.mark_step()
                compare.same(
                    to_cpu(lazy_sample.input, False), from_reference(ref.input), "mutated input"
                )
                compare.same(to_cpu(actual), from_reference(expected), "return value")

    @lazy_ops(_ops_out, harness.primary_dtypes)
    def test_out(self, device, dtype, op):
        self._sweep(op, dtype, "out", lambda record: self._out(op, dtype, record))

    def _out(self, op, dtype, record):
        compare = _Comparison(op, dtype, self)
        for index, sample, ref, lazy_sample in _lazy_samples(op, dtype, record):
            try:
                expected = op(ref.input, *ref.args, **ref.kwargs)
                cpu_outs = {}
                for resize in (False, True):
                    out = _out_like(expected, harness.reference_device(), resize)
                    returned = op(ref.input, *ref.args, **ref.kwargs, out=out)
                    cpu_outs[resize] = (out, _returns_out(returned, out))
            except Exception:  # noqa: BLE001 (this sample has no out= form in eager)
                record.cpu_rejected += 1
                continue
            for resize, (cpu_out, cpu_returns_out) in cpu_outs.items():
                with _sample_check(record, index, sample):
                    out = _out_like(expected, "lazy", resize)
                    returned = op(lazy_sample.input, *lazy_sample.args, **lazy_sample.kwargs, out=out)
                    if _returns_out(returned, out) != cpu_returns_out:
                        raise AssertionError(f"out= returned {type(returned).__name__}, unlike eager")
                    lazyfuse.mark_step()
                    what = "out= resized from empty" if resize else "out="
                    compare.same(to_cpu(_as_tuple(out)), from_reference(_as_tuple(cpu_out)), what)

    # ---- errors -----------------------------------------------------------------------------

    @lazy_ops(_ops_errors, lambda op: [None])
    def test_errors(self, device, op):
        self._sweep(op, None, "errors", lambda record: self._errors(op, record))

    def _errors(self, op, record):
        # Against eager CPU on every hardware device: the OpInfo states the errors of the inputs
        # it builds for a device, here the CPU (lazy raises at the op, before anything runs).
        errors = list(op.error_inputs("cpu"))
        metas = meta_samples(lambda device: op.error_inputs(device), len(errors))
        for index, (error, meta_error) in enumerate(zip(errors, metas)):
            sample, error_type, pattern = error.sample_input, error.error_type, error.error_regex
            meta = meta_error.sample_input if meta_error is not None else None
            lazy_sample = _lazy_copy(sample, meta, record, index)
            if lazy_sample is None:
                continue
            if _raises(op, sample, error_type, pattern) is not None:
                record.cpu_rejected += 1  # eager cpu does not raise what the OpInfo says
                continue
            with _sample_check(record, index, sample):
                self._lazy_raises(op, lazy_sample, error_type, pattern)
            recover()  # a lazy op that raised may leave a pending trace behind even when it passed
        if record.cpu_rejected:
            record.notes.append(f"{record.cpu_rejected} error inputs do not raise as stated on cpu")
        elif record.samples == 0:
            record.notes.append("the OpInfo has no error inputs for cpu")

    def _lazy_raises(self, op, lazy_sample, error_type, pattern):
        try:
            out = op(lazy_sample.input, *lazy_sample.args, **lazy_sample.kwargs)
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, error_type):
                raise AssertionError(f"raised {type(e).__name__} ({e}) instead of {error_type.__name__}")
            if not re.search(pattern, str(e)):
                raise AssertionError(f"message {str(e)!r} does not match {pattern!r}")
            return
        try:
            lazyfuse.mark_step()
            to_cpu(out)
        except Exception as e:  # noqa: BLE001
            raise AssertionError(
                f"raised only at the sync, not at the op: {type(e).__name__}: {e}"
            ) from None
        raise AssertionError(f"did not raise {error_type.__name__} matching {pattern!r}")

    # ---- gradients --------------------------------------------------------------------------

    @lazy_ops(_ops_grad, harness.grad_dtypes)
    def test_grad(self, device, dtype, op):
        self._sweep(op, dtype, "grad", lambda record: self._grad(op, dtype, record))

    def _grad(self, op, dtype, record):
        compare = _Comparison(op, dtype, self)
        taken = 0
        for index, sample, ref, lazy_sample in _lazy_samples(op, dtype, record, requires_grad=True):
            try:
                expected = _grads(op, ref, seed=index)
            except Exception:  # noqa: BLE001 (eager has no gradient for this sample)
                record.cpu_rejected += 1
                continue
            if expected is None:
                continue  # no differentiable output
            taken += 1
            with _sample_check(record, index, sample):
                actual = _grads(op, lazy_sample, seed=index)
                lazyfuse.mark_step()
                compare.same(to_cpu(actual), from_reference(expected), "gradients")
            if taken == GRAD_SAMPLES:
                break


class _Comparison:
    """How one op's lazy results are compared with eager's: under the OpInfo's tolerance, or by
    shapes and dtypes only where its values are not comparable or random (harness.assert_same)."""

    def __init__(self, op, dtype, test):
        self.tolerance = opinfo_tolerance(op, dtype, test)
        self.noncomparable = noncomparable_reason(op)
        self.random = harness.random_reason(op)

    def same(self, actual, expected, what="output"):
        assert_same(actual, expected, self.tolerance, self.noncomparable, what, self.random)


@contextlib.contextmanager
def _sample_check(record, index, sample):
    """Counts one sample as run on lazy; a failure inside is recorded, not raised, and the trace
    is synced so the next sample starts clean."""
    record.samples += 1
    try:
        yield
    except Exception as e:  # noqa: BLE001
        record.fail(index, sample, e)
        recover()


def _samples(op, dtype, requires_grad=False):
    """(index, cpu sample, meta twin or None) for the op's sample inputs."""
    make = lambda device: op.sample_inputs(device, dtype, requires_grad=requires_grad)  # noqa: E731
    cpu = list(make("cpu"))
    return list(zip(range(len(cpu)), cpu, meta_samples(make, len(cpu))))


def _lazy_samples(op, dtype, record, requires_grad=False, keep=None):
    """(index, cpu sample, its copy on the reference device, lazy copy) for the op's samples
    that `keep` accepts (all by default) and that can be moved to lazy; one that cannot counts as
    a failed sample. On the CPU the reference copy is the cpu sample itself."""
    for index, sample, meta in _samples(op, dtype, requires_grad):
        if keep is not None and not keep(sample):
            continue
        lazy_sample = _lazy_copy(sample, meta, record, index)
        if lazy_sample is not None:
            yield index, sample, sample_to_reference(sample, meta), lazy_sample


def _lazy_copy(sample, meta, record, index):
    """The sample on the lazy device; None (and a failed sample) when it cannot be moved there."""
    try:
        return sample_to_lazy(sample, meta)
    except Exception as e:  # noqa: BLE001
        record.samples += 1
        record.fail(index, sample, AssertionError(f"moving the sample to lazy: {type(e).__name__}: {e}"))
        recover()
        return None


def _out_like(expected, device, resize):
    """out= argument for a result like `expected`: same shapes, or empty ones the op resizes.
    Those of the same shapes hold zeros, not uninitialized memory: an out= variant that does not
    write its out (eager's fft.ihfftn with one transformed dim) must leave lazy's as it leaves
    eager's, and the comparison must not read garbage."""

    def make(t):
        if resize:
            return torch.empty(0, dtype=t.dtype, device=device)
        return torch.zeros_like(t, device=device)

    if isinstance(expected, torch.Tensor):
        return make(expected)
    return tuple(make(t) for t in expected)


def _as_tuple(value):
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def _returns_out(returned, out):
    """How an out= call answered: "out" (its out tensors, as eager does for most ops), "none", or
    "other"; the lazy call must answer as eager did."""
    if returned is None:
        return "none"
    returned, out = _as_tuple(returned), _as_tuple(out)
    same = len(returned) == len(out) and all(r is o for r, o in zip(returned, out))
    return "out" if same else "other"


def _raises(op, sample, error_type, pattern):
    """None when op(sample) raises error_type matching pattern, else what happened instead."""
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception as e:  # noqa: BLE001
        if isinstance(e, error_type) and re.search(pattern, str(e)):
            return None
        return f"{type(e).__name__}: {e}"
    return "no error"


def _grads(op, sample, seed):
    """Gradients of op(sample) w.r.t. the sample's tensors that require grad, for fixed random
    output gradients; None when no output is differentiable."""
    inputs = [t for t in sample_tensors(sample) if t.requires_grad]
    out = op.gradcheck_wrapper(op.get_op(), sample.input, *sample.args, **sample.kwargs)
    out = sample.output_process_fn_grad(out)
    outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not inputs or not outputs:
        return None
    generator = torch.Generator().manual_seed(seed)
    grad_outputs = [
        torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device) for t in outputs
    ]
    return torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)


instantiate_device_type_tests(TestLazyfuseOpInfo, globals(), only_for="lazy")
