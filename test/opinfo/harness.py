"""What the OpInfo sweep shares: registering the `lazy` device type with PyTorch's harness, which
dtypes each op runs in, the OpInfo's own tolerances, moving samples to the lazy device and to the
reference device eager runs on, reading the fallback counters, and the per-test records that
become docs/op_coverage.md.

See test_opinfo_lazy.py for what each test checks and README.md for how to run the sweep.
"""

import gc
import os
import re
import runpy
import sys
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

HERE = os.path.dirname(os.path.abspath(__file__))
LAZY_DEVICE_FILE = os.path.join(HERE, "lazy_device_type.py")
_HARNESS = "torch.testing._internal.common_device_type"


# ---- the `lazy` device type -----------------------------------------------------------------


def register_lazy_device():
    """Makes PyTorch's device-type harness know `lazy` through lazyfuse's test base. Call before
    anything imports `torch.testing._internal` (conftest.py does). Idempotent."""
    if _HARNESS not in sys.modules:
        # The harness reads TORCH_TEST_DEVICES once, when it is first imported.
        paths = [p for p in os.environ.get("TORCH_TEST_DEVICES", "").split(":") if p]
        if LAZY_DEVICE_FILE not in paths:
            os.environ["TORCH_TEST_DEVICES"] = ":".join(paths + [LAZY_DEVICE_FILE])
    import torch.testing._internal.common_device_type as cdt

    if not any(getattr(b, "lazyfuse_backend", False) for b in cdt.device_type_test_bases):
        # Imported before we could set the variable: do what it would have done.
        mod = runpy.run_path(LAZY_DEVICE_FILE, init_globals=vars(cdt))
        cdt.device_type_test_bases.append(mod["TEST_CLASS"])
    lazy_bases = [b for b in cdt.device_type_test_bases if b.device_type == "lazy"]
    if len(lazy_bases) != 1 or not getattr(lazy_bases[0], "lazyfuse_backend", False):
        raise RuntimeError(f"expected lazyfuse's test base alone for 'lazy', got {lazy_bases}")
    _disable_builtin_lazy_base(cdt)
    return lazy_bases[0]


def _disable_builtin_lazy_base(cdt):
    """torch's own LazyTestBase (used by `include_lazy=True`) starts the TorchScript lazy backend,
    which takes the Lazy key from lazyfuse for the rest of the process. Make it fail instead."""

    @classmethod
    def refuse(cls):
        raise RuntimeError(
            "torch's built-in LazyTestBase would call torch._lazy.ts_backend.init(); lazyfuse's "
            "tests use test/opinfo/lazy_device_type.py (never pass include_lazy=True)"
        )

    cdt.LazyTestBase.setUpClass = refuse


# ---- dtypes ---------------------------------------------------------------------------------

# The dtypes the sweep runs correctness in, where the op supports them (first = primary).
SWEEP_DTYPES = (
    torch.float32,
    torch.float64,
    torch.int64,
    torch.bool,
    torch.bfloat16,
    torch.float16,
)
_ANY_DTYPE_ORDER = SWEEP_DTYPES + (
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.complex64,
    torch.complex128,
    torch.complex32,
)


def cpu_dtypes(op):
    return set(op.supported_dtypes("cpu"))


def primary_dtype(op):
    """float32, or for an op without it the first dtype it has in a fixed order (e.g. int64 for
    bitwise ops); None for an op with no CPU dtype at all (CUDA-only OpInfos)."""
    supported = cpu_dtypes(op)
    return next((d for d in _ANY_DTYPE_ORDER if d in supported), None)


def correctness_dtypes(op):
    supported = cpu_dtypes(op)
    chosen = [d for d in SWEEP_DTYPES if d in supported]
    if not chosen and primary_dtype(op) is not None:
        chosen = [primary_dtype(op)]
    return chosen


def primary_dtypes(op):
    d = primary_dtype(op)
    return [d] if d is not None else []


def grad_dtypes(op):
    if not op.supports_autograd:
        return []
    return [torch.float64] if torch.float64 in op.supported_backward_dtypes("cpu") else []


def dtype_name(dtype):
    return str(dtype).replace("torch.", "") if dtype is not None else "-"


# ---- what the OpInfo says about comparing results -------------------------------------------

# Upstream tests that compare one device with another or one variant with another: their
# tolerance overrides are the OpInfo's word on how close two correct results may be.
_COMPARISON_TESTS = (
    "test_compare_cpu",
    "test_variant_consistency_eager",
    "test_noncontiguous_samples",
    "test_out",
)


def _hardware_device_type():
    import lazyfuse

    return torch.device(lazyfuse.hardware_device()).type


def opinfo_tolerance(op, dtype, test_case=None):
    """(atol, rtol) from the OpInfo's tolerance overrides for `dtype`, or None when it has none.

    Sources: overrides on every test of the op (the harness applied them to `test_case`), and
    the ones on upstream's comparison tests for the CPU and for the device lazy tensors really
    run on. Never below assert_close's defaults for the dtype."""
    from torch.testing._comparison import default_tolerances
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    atol, rtol = 0.0, 0.0
    if test_case is not None:
        atol, rtol = float(test_case.precision or 0), float(test_case.rel_tol or 0)
    device_types = (None, "cpu", _hardware_device_type())
    for info in op.decorators:
        if not isinstance(info, DecorateInfo):
            continue  # already applied to test_case by the harness
        if info.cls_name not in (None, "TestCommon") or info.test_name not in (None,) + _COMPARISON_TESTS:
            continue
        if info.device_type not in device_types or (info.dtypes is not None and dtype not in info.dtypes):
            continue
        if info.active_if is False:
            continue
        for dec in info.decorators:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                atol, rtol = max(atol, dec.d[dtype].atol), max(rtol, dec.d[dtype].rtol)
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                atol = max(atol, dec.d[dtype])
    if atol == 0 and rtol == 0:
        return None
    default_rtol, default_atol = default_tolerances(dtype)
    return max(atol, default_atol), max(rtol, default_rtol)


_NONCOMPARABLE = re.compile(r"non-deterministic|nondeterministic|not comparable", re.I)


def _skip_reason(decorator):
    import inspect

    try:
        return inspect.getclosurevars(decorator).nonlocals.get("reason")
    except (TypeError, ValueError):
        return None


def noncomparable_reason(op):
    """Why the op's values cannot be compared between two runs (random or uninitialized output),
    as the OpInfo itself says in its skips of upstream tests; None when they can."""
    from torch.testing._internal.opinfo.core import DecorateInfo

    for info in op.decorators:
        if not isinstance(info, DecorateInfo):
            continue
        for dec in info.decorators:
            reason = _skip_reason(dec)
            if isinstance(reason, str) and _NONCOMPARABLE.search(reason):
                return f"values not compared (OpInfo: {reason}); shapes and dtypes are"
    return None


def random_reason(op):
    """Why values may differ for an op the OpInfo does not call non-deterministic but whose aten
    op draws random numbers (randn, randint, normal.number_mean, alpha_dropout): they match eager
    only while lazy tensors draw from the same generator (the hardware device's, which eager on
    the reference device uses too) in the same order. None otherwise."""
    name = op.name.removeprefix("nn.functional.")
    if "." in name or not hasattr(torch.ops.aten, name):
        return None
    packet = getattr(torch.ops.aten, name)
    for overload in packet.overloads():
        if torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags:
            return f"random op (aten::{name} is nondeterministic_seeded): values compared only where they match"
    return None


# ---- moving samples -------------------------------------------------------------------------

LAZY = torch.device("lazy")


def reference_device():
    """Where eager computes the values lazy results are compared with: the hardware device, so
    that lazy tensors running on CUDA meet eager CUDA's kernels and its random generator."""
    import lazyfuse

    return torch.device(lazyfuse.hardware_device())


def _is_device(value, device_type):
    if isinstance(value, torch.device):
        return value.type == device_type
    return isinstance(value, str) and value == device_type


class _ToDevice:
    """Moves one CPU sample to `device` (lazy, or CUDA as the reference device) the way the
    OpInfo would have built it for a device that is not the CPU, guided by the same sample built
    for `meta`:

      * a tensor becomes a copy on `device` (a leaf that requires grad stays one), unless the
        meta sample has it on the CPU next to meta tensors: the OpInfo puts it there on purpose
        (tensor_split's indices). A meta sample with nothing on meta was built ignoring the
        device (many error inputs): it gives no guidance;
      * the same tensor twice stays one tensor twice (error inputs use out= aliasing);
      * a device argument ("cpu" here, "meta" there) becomes `device`; a sample without one
        stays without one (`torch.linspace(1, 3, 1)` is a CPU op on any device).

    Without a meta sample (building it failed) every tensor and every "cpu" device moves."""

    def __init__(self, device):
        self.device = device
        self.memo = {}

    def tensor(self, t):
        if t.device.type != "cpu":
            return t  # e.g. a meta tensor an error input builds on purpose
        key = id(t)
        if key not in self.memo:
            moved = self._view(t) if _is_view_of_whole_base(t) else t.detach().to(self.device)
            if t.requires_grad:
                moved.requires_grad_(True)
            self.memo[key] = (t, moved)  # holding t keeps its id unique while we map
        return self.memo[key][1]

    def _view(self, t):
        """A view keeps being a view of its base: as_strided over its storage reaches outside
        the view (as_strided.partial_views), and views of one base alias each other."""
        base = self.tensor(t._base)
        return base.detach().as_strided(t.size(), t.stride(), t.storage_offset())

    def __call__(self, value, meta=None):
        if isinstance(value, torch.Tensor):
            if isinstance(meta, torch.Tensor) and meta.device.type == "cpu":
                return value
            return self.tensor(value)
        if _is_device(value, "cpu"):
            if meta is not None and not _is_device(meta, "meta"):
                return value
            return self.device if isinstance(value, torch.device) else str(self.device)
        if isinstance(value, torch.Size):
            return value
        if isinstance(value, (list, tuple)):
            pair = meta if type(meta) is type(value) and len(meta) == len(value) else [None] * len(value)
            items = [self(v, m) for v, m in zip(value, pair)]
            if hasattr(value, "_fields"):
                return type(value)(*items)
            return type(value)(items)
        if isinstance(value, dict):
            pair = meta if isinstance(meta, dict) else {}
            return {k: self(v, pair.get(k)) for k, v in value.items()}
        return value


def _is_view_of_whole_base(t):
    """A view with its base's dtype (not `.real` of a complex tensor) whose base is a plain
    contiguous tensor that spans its whole storage."""
    base = t._base
    return (
        base is not None
        and base.dtype == t.dtype
        and not (t.is_conj() or t.is_neg() or base.is_conj() or base.is_neg())
        and base._base is None
        and base.is_contiguous()
        and base.storage_offset() == 0
        and base.numel() * base.element_size() == base.untyped_storage().nbytes()
    )


def sample_to_lazy(sample, meta_sample=None):
    """The CPU SampleInput `sample` on the lazy device (see _ToDevice); `meta_sample` is the same
    sample built for `meta`, or None."""
    return _sample_to(LAZY, sample, meta_sample)


def sample_to_reference(sample, meta_sample=None):
    """The CPU SampleInput `sample` on the reference device, moved as sample_to_lazy moves it;
    `sample` itself when that is the CPU."""
    device = reference_device()
    return sample if device.type == "cpu" else _sample_to(device, sample, meta_sample)


def from_reference(value):
    """Eager results (any pytree) on the reference device brought to the CPU, to compare with
    lazy results; `value` itself when the reference device is the CPU."""
    return value if reference_device().type == "cpu" else to_cpu(value, lazy_inputs=False)


def _sample_to(device, sample, meta_sample):
    from torch.testing._internal.opinfo.core import SampleInput

    if meta_sample is not None and not _mentions(meta_sample, "meta"):
        meta_sample = None  # built without using the device at all: says nothing on purpose
    move = _ToDevice(device)
    meta = meta_sample if meta_sample is not None else SampleInput(None)
    return SampleInput(
        move(sample.input, meta.input if meta_sample is not None else None),
        args=move(sample.args, meta.args if meta_sample is not None else None),
        kwargs=move(sample.kwargs, meta.kwargs if meta_sample is not None else None),
        output_process_fn_grad=sample.output_process_fn_grad,
        broadcasts_input=sample.broadcasts_input,
        name=sample.name,
    )


def meta_samples(make, count):
    """`make("meta")` as a list when it builds `count` samples, else Nones (no guidance)."""
    try:
        built = list(make("meta"))
    except Exception:  # noqa: BLE001 (many sample functions need real values)
        built = []
    return built if len(built) == count else [None] * count


def _mentions(value, device_type):
    """Whether anything in `value` (a pytree or a SampleInput) is a tensor on `device_type` or
    names that device."""
    if hasattr(value, "kwargs") and hasattr(value, "args"):
        value = (value.input, value.args, value.kwargs)
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and leaf.device.type == device_type:
            return True
        if _is_device(leaf, device_type):
            return True
    return False


def has_lazy(value):
    """Whether anything in `value` is a lazy tensor or names the lazy device."""
    return _mentions(value, "lazy")


def gives_lazy(sample):
    """Whether a sample's results must be lazy: it has lazy tensors and names no other device
    (zeros_like(x, device="cpu") makes a CPU tensor, x.to("cuda:0") a CUDA one)."""
    named = [leaf for leaf in pytree.tree_leaves((sample.args, sample.kwargs))
             if isinstance(leaf, torch.device) or (isinstance(leaf, str) and leaf in ("cpu", "cuda"))]
    return has_lazy(sample) and all(_is_device(d, "lazy") for d in named)


def to_cpu(value, lazy_inputs=True):
    """Every tensor in `value` (any pytree) brought to the CPU. With lazy inputs, a tensor that is
    not lazy is an error: lazy inputs must give lazy outputs."""

    def move(t):
        if lazy_inputs and t.device.type != "lazy":
            raise AssertionError(f"op returned a tensor on {t.device}, expected one on lazy")
        return t.detach().cpu()

    return pytree.tree_map_only(torch.Tensor, move, value)


def sample_tensors(sample):
    """The tensors of a sample (input, args, kwargs) in a fixed order."""
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)}:{dtype_name(value.dtype)}@{value.device.type}"
    if isinstance(value, torch.Size):
        return f"Size{list(value)}"
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    return repr(value)


def describe_sample(sample):
    parts = [_describe(sample.input)] + [_describe(a) for a in sample.args]
    parts += [f"{k}={_describe(v)}" for k, v in sample.kwargs.items()]
    text = f"({', '.join(parts)})"
    return text if len(text) <= 300 else text[:297] + "..."


# ---- comparing ------------------------------------------------------------------------------


def assert_same(actual, expected, tolerance, noncomparable=None, what="output", random=None):
    """assert_close with the OpInfo's tolerance (or assert_close's defaults); for a non-comparable
    op only the structure, shapes and dtypes; for a `random` op (random_reason) values first,
    and only shapes and dtypes when the values differ."""
    if random is not None and noncomparable is None:
        try:
            assert_same(actual, expected, tolerance, None, what)
        except AssertionError:
            assert_same(actual, expected, tolerance, random, what)
        return
    if noncomparable is None:
        kwargs = {"equal_nan": True, "msg": lambda m: f"{what}: {m}"}
        if tolerance is not None:
            kwargs.update(atol=tolerance[0], rtol=tolerance[1])
        torch.testing.assert_close(actual, expected, **kwargs)
        return
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    where = reference_device().type
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{what}: {len(a_leaves)} values vs {len(e_leaves)} on {where}")
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{what}: {type(a).__name__} instead of a tensor")
            if a.shape != e.shape or a.dtype != e.dtype:
                raise AssertionError(
                    f"{what}: {list(a.shape)}:{a.dtype} vs {where} {list(e.shape)}:{e.dtype}"
                )


# ---- lazyfuse counters ----------------------------------------------------------------------


def fallback_ops():
    """The ops that ran eagerly since the last reset_metrics (their aten::<op> counters)."""
    import lazyfuse

    return {k: v for k, v in lazyfuse.metrics().items() if k.startswith("aten::") and isinstance(v, int) and v > 0}


def counter(name):
    import lazyfuse

    value = lazyfuse.metrics().get(name, 0)
    return value if isinstance(value, int) else 0


def recover():
    """After a failed sample: run what is pending so the next sample starts clean. A failed lazy
    tensor stays pending while it lives, and one caught in a reference cycle (an exception's
    traceback) lives until the garbage collector runs; so collect, then try again."""
    import lazyfuse

    try:
        lazyfuse.mark_step()
    except Exception:  # noqa: BLE001 (the failure was already recorded)
        gc.collect()
        try:
            lazyfuse.mark_step()
        except Exception:  # noqa: BLE001 (still live: start_clean() reports it)
            pass


def start_clean():
    """Syncs what earlier tests left pending; raises if that cannot be done."""
    import lazyfuse

    try:
        lazyfuse.mark_step()
    except Exception:  # noqa: BLE001
        gc.collect()
        lazyfuse.mark_step()


# ---- what a test records ---------------------------------------------------------------------


@dataclass
class Record:
    """What one test did; conftest.py attaches it to the test's report."""

    op: str
    kind: str
    dtype: str
    samples: int = 0  # samples run on lazy
    samples_failed: int = 0
    cpu_rejected: int = 0  # samples eager CPU itself raised on (not run on lazy)
    failures: list = field(default_factory=list)  # (sample index, sample text, error text)
    fallbacks: dict = field(default_factory=dict)  # aten::<op> -> count
    ops_recorded: int = 0
    notes: list = field(default_factory=list)
    expected_failure: str = None  # the expected_failures.XFAIL reason, when there is one

    def fail(self, index, sample, error):
        self.samples_failed += 1
        if len(self.failures) < 3:
            text = f"{type(error).__name__}: {error}"
            self.failures.append((index, describe_sample(sample) if sample is not None else "", _short(text)))

    def summary(self):
        first = self.failures[0] if self.failures else None
        head = f"{self.samples_failed} of {self.samples} samples failed"
        if first is not None and first[0] == "-":
            head = "failed outside the samples"
        if first is None:
            return head
        return f"{head}; first: sample {first[0]} {first[1]}: {first[2]}"

    def as_dict(self):
        return {
            "op": self.op,
            "kind": self.kind,
            "dtype": self.dtype,
            "samples": self.samples,
            "samples_failed": self.samples_failed,
            "cpu_rejected": self.cpu_rejected,
            "failures": self.failures,
            "fallbacks": self.fallbacks,
            "ops_recorded": self.ops_recorded,
            "notes": self.notes,
            "expected_failure": self.expected_failure,
        }


def _short(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Test method name -> Record, filled by the tests, read by conftest.py's report hook.
RECORDS = {}


def op_id(op):
    """An OpInfo's name as the report and the expected-failure table spell it."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
