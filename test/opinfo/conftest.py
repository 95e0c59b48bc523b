"""pytest setup for the OpInfo sweep: the lazy device type, the CI subset, the results file that
make_coverage.py reads, and a per-test time limit.

Options and variables:
  --opinfo-subset=full|ci         which tests run (default full; ci: the smaller fixed subset of
                                  ci_selected below, for when the full sweep no longer fits CI)
  LAZYFUSE_OPINFO_RESULTS=<file>  append one JSON line per test (what it ran, its outcome)
  LAZYFUSE_OPINFO_RESUME=1        deselect the tests that file already has (after a crash)
  LAZYFUSE_OPINFO_TEST_TIMEOUT=s  a test running longer kills the process with a traceback
                                  (default 900); make_coverage.py records it and goes on
"""

import faulthandler
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The harness's "Caused by sample input at index N" names the sample its own iterator saw last,
# not the one a lazy test failed on; each failure message here names its sample itself.
os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")

import harness  # noqa: E402

# Before any test module imports torch.testing._internal (the harness reads TORCH_TEST_DEVICES
# at its import).
harness.register_lazy_device()

KINDS = ("correctness", "inplace", "out", "errors", "grad")


def pytest_addoption(parser):
    parser.addoption(
        "--opinfo-subset",
        choices=("full", "ci"),
        default="full",
        help="full: every OpInfo test; ci: a fixed smaller subset (test/opinfo/README.md)",
    )


def test_params(item):
    """(op, kind, dtype) of an instantiated OpInfo test, from the harness's parameters."""
    func = getattr(item, "obj", None)
    defaults = getattr(getattr(func, "__func__", func), "__defaults__", None) or ()
    params = defaults[0] if defaults and isinstance(defaults[0], dict) else {}
    op = params.get("op")
    kind = next((k for k in KINDS if item.name.startswith(f"test_{k}_")), None)
    return op, kind, params.get("dtype")


def ci_selected(op, kind, dtype):
    """The smaller subset: every OpInfo's correctness in its primary dtype (float32, or its first
    dtype when it has no float32), its in-place and out= variants, its error inputs, and its
    gradients (float64, first samples). Left out: correctness in the other dtypes."""
    if kind == "correctness":
        return dtype == harness.primary_dtype(op)
    return True


def _done_nodeids(path):
    done = set()
    if not path or not os.path.exists(path):
        return done
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            if "outcome" in entry:
                done.add(entry["nodeid"])
    return done


_PARAMS = {}


def pytest_collection_modifyitems(config, items):
    subset = config.getoption("--opinfo-subset")
    results = os.environ.get("LAZYFUSE_OPINFO_RESULTS")
    done = _done_nodeids(results) if os.environ.get("LAZYFUSE_OPINFO_RESUME") == "1" else set()
    keep, drop = [], []
    for item in items:
        op, kind, dtype = test_params(item)
        if op is not None:
            _PARAMS[item.nodeid] = (harness.op_id(op), kind, harness.dtype_name(dtype))
        selected = op is None or subset == "full" or ci_selected(op, kind, dtype)
        (keep if selected and item.nodeid not in done else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _write(entry):
    path = os.environ.get("LAZYFUSE_OPINFO_RESULTS")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    op, kind, dtype = _PARAMS.get(item.nodeid, (None, None, None))
    _write({"started": item.nodeid, "op": op, "kind": kind, "dtype": dtype})
    timeout = float(os.environ.get("LAZYFUSE_OPINFO_TEST_TIMEOUT", "900"))
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _reason(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2].removeprefix("Skipped: ")
    if hasattr(report, "wasxfail"):
        return report.wasxfail.removeprefix("reason: ")
    text = report.longreprtext.strip().splitlines()
    errors = [line for line in text if line.startswith("E ")]
    return " ".join((errors or text[-1:])[:3])[:600]


def pytest_runtest_logreport(report):
    final = report.when == "call" or (report.when == "setup" and not report.passed)
    if not final:
        return
    if hasattr(report, "wasxfail"):
        outcome = "xfailed"
    else:
        outcome = report.outcome
    op, kind, dtype = _PARAMS.get(report.nodeid, (None, None, None))
    test_name = report.nodeid.rsplit("::", 1)[-1]
    record = harness.RECORDS.pop(test_name, None)
    entry = {
        "nodeid": report.nodeid,
        "op": op,
        "kind": kind,
        "dtype": dtype,
        "outcome": outcome,
        "reason": "" if outcome == "passed" else _reason(report),
        "duration": round(report.duration, 3),
    }
    if record is not None:
        entry.update(record.as_dict())
    _write(entry)
