"""What the OpInfo sweep knows fails on the lazy device, and why. Tests consult this table:

  * XFAIL: the test runs; if it fails it is reported as xfailed with the reason; if it passes it
    FAILS ("unexpectedly passed"), so an entry is removed in the commit that fixes the bug.
  * SKIP: the test does not run at all, because running it crashes or hangs the process. Keep
    this list short; every entry is a bug.

Keys are (op, kind, dtype): `op` as harness.op_id spells it (`name` or `name.variant`), `kind`
one of correctness / inplace / out / errors / grad, `dtype` a torch.dtype or None for every
dtype the test runs in. One reason per root cause, so docs/op_coverage.md groups them.
"""

import torch

KINDS = ("correctness", "inplace", "out", "errors", "grad")

# ---- reasons, one per root cause --------------------------------------------------------------

SPARSE = "design: lazy tensors are strided only; a sparse tensor cannot move to lazy or be made there"
ERROR_VALUE_DEPENDENT = (
    "design: the check depends on tensor values (an index out of bounds), which a lazy op does "
    "not read; it raises at the sync"
)
XFAIL = {
    # correctness / grad / out: wrong or failing results
    ("sparse.mm.reduce", "correctness", None): SPARSE,
    ("sparse.mm.reduce", "grad", None): SPARSE,
    ("sparse.sampled_addmm", "correctness", None): SPARSE,
    ("sparse.sampled_addmm", "grad", None): SPARSE,
    ("sparse.sampled_addmm", "out", None): SPARSE,
    ("to_sparse", "correctness", None): SPARSE,
    # errors
    ("scatter", "errors", None): ERROR_VALUE_DEPENDENT,
    ("scatter_add", "errors", None): ERROR_VALUE_DEPENDENT,
    ("gather", "errors", None): ERROR_VALUE_DEPENDENT,
}

SKIP = {}

# ---- on a CUDA hardware device (bench/gpu/run.sh), in addition -------------------------------

DEVICE_ASSERT = (
    "on CUDA an out-of-range index or an invalid probability is a device-side assert (in eager "
    "too), after which no CUDA call of the process succeeds: the sample's sync would end the sweep"
)
NO_CUDA_KERNEL = "eager CUDA has no kernel for it (aten::_histogramdd_bin_edges): lazy raises that"
XFAIL_ON_CUDA = {
    ("histogramdd", "errors", None): NO_CUDA_KERNEL,
}
SKIP_ON_CUDA = {
    ("scatter", "errors", None): DEVICE_ASSERT,
    ("scatter_add", "errors", None): DEVICE_ASSERT,
    ("gather", "errors", None): DEVICE_ASSERT,
    ("multinomial", "errors", None): DEVICE_ASSERT,
}


def _on_cuda():
    import lazyfuse

    return lazyfuse.hardware_device() == "cuda"


def _find(table, op, kind, dtype):
    return table.get((op, kind, dtype), table.get((op, kind, None)))


def expected_failure(op, kind, dtype):
    found = _find(XFAIL, op, kind, dtype)
    return found if found or not _on_cuda() else _find(XFAIL_ON_CUDA, op, kind, dtype)


def skip_reason(op, kind, dtype):
    found = _find(SKIP, op, kind, dtype)
    return found if found or not _on_cuda() else _find(SKIP_ON_CUDA, op, kind, dtype)


def check_table(known_ops):
    """Every key names an OpInfo of op_db and a known kind; run by test_opinfo_lazy.py."""
    for table in (XFAIL, SKIP, XFAIL_ON_CUDA, SKIP_ON_CUDA):
        for op, kind, _dtype in table:
            if kind not in KINDS:
                raise ValueError(f"expected_failures: unknown kind {kind!r} for {op}")
            if op not in known_ops:
                raise ValueError(f"expected_failures: no OpInfo named {op!r}")
