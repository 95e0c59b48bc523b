"""Runs the OpInfo sweep and writes docs/op_coverage.md.

    .venv/bin/python test/opinfo/make_coverage.py                 # full sweep, then the report
    .venv/bin/python test/opinfo/make_coverage.py --subset ci     # the CI subset
    .venv/bin/python test/opinfo/make_coverage.py --report-only   # report from the last results

pytest runs in a child process and appends one JSON line per test to the results file
(conftest.py). A test that kills the process (crash, or LAZYFUSE_OPINFO_TEST_TIMEOUT) is
recorded as crashed and the sweep resumes after it, so the report is always complete; such a
test belongs in expected_failures.SKIP. Exit status: 0 when no test failed unexpectedly.
"""

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAX_CRASHES = 50


def run_sweep(results, subset, pytest_args):
    if os.path.exists(results):
        os.remove(results)
    os.makedirs(os.path.dirname(results), exist_ok=True)
    env = dict(os.environ, LAZYFUSE_OPINFO_RESULTS=results)
    command = [sys.executable, "-m", "pytest", os.path.join(HERE), "-q", "-p", "no:cacheprovider",
               f"--opinfo-subset={subset}", *pytest_args]
    started = time.monotonic()
    for attempt in range(MAX_CRASHES + 1):
        rc = subprocess.call(command, cwd=ROOT, env=env)
        crashed = unfinished(results)
        if crashed is None:
            wall = time.monotonic() - started
            with open(results, "a") as f:
                f.write(json.dumps({"sweep_wall_s": round(wall, 1), "subset": subset}) + "\n")
            return rc, wall
        print(f"make_coverage: {crashed['started']} killed the process (exit {rc}); resuming", file=sys.stderr)
        record_crash(results, crashed, rc)
        env["LAZYFUSE_OPINFO_RESUME"] = "1"
    raise SystemExit(f"make_coverage: more than {MAX_CRASHES} crashes, giving up")


def read(results):
    with open(results) as f:
        return [json.loads(line) for line in f if line.strip()]


def unfinished(results):
    """The last test that started and has no outcome (the one the process died in), or None."""
    if not os.path.exists(results):
        return None
    started, done = None, set()
    for entry in read(results):
        if "started" in entry:
            started = entry
        elif "nodeid" in entry:
            done.add(entry["nodeid"])
    if started is None or started["started"] in done:
        return None
    return started


def record_crash(results, started, rc):
    how = "timed out" if rc == 1 else f"exit status {rc}"
    entry = {
        "nodeid": started["started"],
        "op": started.get("op"),
        "kind": started.get("kind"),
        "dtype": started.get("dtype"),
        "outcome": "crashed",
        "reason": f"the process died running this test ({how}); add it to expected_failures.SKIP",
        "duration": 0,
    }
    with open(results, "a") as f:
        f.write(json.dumps(entry) + "\n")


# ---- the report ---------------------------------------------------------------------------------

KINDS = ("correctness", "inplace", "out", "errors", "grad")
SHORT = {"float32": "f32", "float64": "f64", "int64": "i64", "bool": "b8", "bfloat16": "bf16", "float16": "f16"}


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def op_status(tests):
    outcomes = {t["outcome"] for t in tests}
    for outcome, status in (("crashed", "CRASHED"), ("failed", "FAILED"), ("xfailed", "known failure")):
        if outcome in outcomes:
            return status
    if "passed" in outcomes:
        return "passed"
    return "skipped"


def op_dispatch(tests):
    fallbacks = collections.Counter()
    for t in tests:
        if t["kind"] == "correctness":
            fallbacks.update(t.get("fallbacks") or {})
    if not fallbacks:
        ran = any(t.get("samples") for t in tests if t["kind"] == "correctness")
        return "lazy" if ran else "-"
    return "fallback: " + ", ".join(f"{k.removeprefix('aten::')}×{v}" for k, v in sorted(fallbacks.items()))


def kind_cell(tests, kind):
    """One test kind of one op: ✓ passed, ✗ failed, xf known failure, s skipped, per dtype."""
    marks = {"passed": "✓", "failed": "✗", "xfailed": "xf", "skipped": "s", "crashed": "☠"}
    chosen = [t for t in tests if t["kind"] == kind]
    if not chosen:
        return ""
    if kind == "errors":
        return marks[chosen[0]["outcome"]]
    return " ".join(f"{SHORT.get(t['dtype'], t['dtype'])}{marks[t['outcome']]}" for t in chosen)


def why(tests):
    """The op's reasons, each once, with the tests it applies to: "correctness f32 f64: ..."."""
    labels = collections.defaultdict(list)
    for t in tests:
        if t["outcome"] == "passed":
            continue
        reason = t.get("expected_failure") if t["outcome"] == "xfailed" else t["reason"]
        label = t["kind"] if t["kind"] == "errors" else f"{t['kind']} {SHORT.get(t['dtype'], t['dtype'])}"
        labels[reason or t["reason"]].append(label)
    notes = sorted({n for t in tests for n in t.get("notes", []) if n.startswith(("values ", "random "))})
    return [f"{', '.join(ls)}: {r}" for r, ls in labels.items()] + notes


def untested_opinfos(tested):
    """OpInfos of op_db the sweep made no test for, and why."""
    sys.path.insert(0, HERE)
    import harness

    harness.register_lazy_device()
    from torch.testing._internal.common_methods_invocations import op_db

    def why(op):
        if harness.primary_dtype(op) is None:
            return "the OpInfo has no CPU dtype (CUDA-only), so no sample to compare with eager CPU"
        return "no test of it ran (deselected)"

    return {harness.op_id(op): why(op) for op in op_db if harness.op_id(op) not in tested}


DATABASE_KINDS = (("module_forward", "nn modules: forward (float32)"),
                  ("module_backward", "nn modules: gradients (float64)"),
                  ("optimizer_steps", "optimizers: three steps (float32)"))


def databases_section(entries):
    """The ModuleInfo and OptimizerInfo sweep (test_modules_lazy.py): counts per test kind, and
    every test that did not pass."""
    tests = [e for e in entries if "outcome" in e and "test_modules_lazy.py" in e.get("nodeid", "")]
    lines = ["## PyTorch's module and optimizer databases", "",
             "`module_db` and `optim_db` (torch.testing._internal) on `lazy` against eager CPU, by "
             "test_modules_lazy.py: see test/opinfo/README.md.", ""]
    lines += ["PyTorch's own view tests (test_view_ops.py) are not in the wheel: they are run by hand, "
              "and test/opinfo/README.md gives the last count.", ""]
    if not tests:
        return lines + ["not run in this sweep", ""]
    lines += ["| test | passed | xfailed | failed | skipped |", "|---|---|---|---|---|"]
    for kind, title in DATABASE_KINDS:
        outcomes = collections.Counter(t["outcome"] for t in tests
                                       if t["nodeid"].rsplit("::", 1)[-1].startswith(f"test_{kind}_"))
        lines.append(f"| {title} | {outcomes['passed']} | {outcomes['xfailed']} | "
                     f"{outcomes['failed'] + outcomes['crashed']} | {outcomes['skipped']} |")
    lines.append("")
    for t in tests:
        if t["outcome"] != "passed":
            name = t["nodeid"].rsplit("::", 1)[-1]
            lines.append(f"- `{name}` {t['outcome']}: {_cell(t['reason'][:300])}")
    return lines + [""]


def render(entries, subset, command, wall):
    import torch

    import lazyfuse

    tests = [e for e in entries if "outcome" in e and e.get("op")]
    by_op = collections.defaultdict(list)
    for t in tests:
        by_op[t["op"]].append(t)
    untested = untested_opinfos(set(by_op)) if subset == "full" else {}
    order = {k: i for i, k in enumerate(KINDS)}
    dtype_order = {d: i for i, d in enumerate(SHORT)}
    for op_tests in by_op.values():
        op_tests.sort(key=lambda t: (order.get(t["kind"], 9), dtype_order.get(t["dtype"], 9)))

    status = {op: op_status(ts) for op, ts in by_op.items()}
    test_outcomes = collections.Counter(t["outcome"] for t in tests)
    op_outcomes = collections.Counter(status.values())
    samples = sum(t.get("samples", 0) for t in tests)
    samples_failed = sum(t.get("samples_failed", 0) for t in tests)
    fallback_ops = sorted(op for op, ts in by_op.items() if op_dispatch(ts).startswith("fallback"))
    fallback_runs = sum(sum((t.get("fallbacks") or {}).values()) for t in tests)
    primary = {}
    for op, ts in by_op.items():
        corr = [t for t in ts if t["kind"] == "correctness"]
        if corr:
            primary[op] = corr[0]  # sorted: float32 first, else the op's first dtype

    f32_pass = sum(1 for t in primary.values() if t["dtype"] == "float32" and t["outcome"] == "passed")
    f32_total = sum(1 for t in primary.values() if t["dtype"] == "float32")

    lines = [
        "# OpInfo coverage of the lazy device",
        "",
        "Generated by `make opinfo` (test/opinfo/make_coverage.py); do not edit by hand. Every OpInfo",
        "in PyTorch's `op_db` run on `lazy` against eager CPU: see test/opinfo/README.md for what each",
        "test checks, and test/opinfo/expected_failures.py for the known failures and their reasons.",
        "",
        f"- made: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, lazyfuse {lazyfuse.__version__}, lazy tensors run on "
        f"`{lazyfuse.hardware_device()}`",
        f"- subset: `{subset}`; command: `{command}`; wall time {wall / 60:.1f} min" if wall else f"- subset: `{subset}`",
        "",
        "## Totals",
        "",
        "| | count |",
        "|---|---|",
        f"| OpInfos in op_db | {len(by_op) + len(untested)} |",
        f"| OpInfos with no test on lazy (no CPU dtype; listed last) | {len(untested)} |",
        f"| OpInfos passing (every test that ran passed) | {op_outcomes['passed']} |",
        f"| OpInfos with known failures (xfail, reason below) | {op_outcomes['known failure']} |",
        f"| OpInfos failing unexpectedly | {op_outcomes['FAILED']} |",
        f"| OpInfos crashing the process | {op_outcomes['CRASHED']} |",
        f"| OpInfos skipped entirely (reason in the table) | {op_outcomes['skipped']} |",
        f"| float32 correctness passing | {f32_pass} of {f32_total} OpInfos with float32 |",
        f"| tests: passed / xfailed / failed / skipped / crashed | {test_outcomes['passed']} / "
        f"{test_outcomes['xfailed']} / {test_outcomes['failed']} / {test_outcomes['skipped']} / "
        f"{test_outcomes['crashed']} |",
        f"| samples run on lazy (failed) | {samples} ({samples_failed}) |",
        f"| OpInfos with an eager fallback in correctness | {len(fallback_ops)} |",
        f"| eager fallback calls, all tests | {fallback_runs} |",
        "",
    ]
    lines += databases_section(entries)
    lines += [
        "## Per OpInfo",
        "",
        "Marks: ✓ passed, xf known failure, ✗ unexpected failure, s skipped, ☠ crashed; dtypes "
        "f32 f64 i64 b8 (bool) bf16 f16. *dispatch*: `lazy` when correctness ran no op eagerly, else "
        "the `aten::<op>` fallback counters it raised.",
        "",
        "| OpInfo | status | correctness | inplace | out | errors | grad | dispatch | reasons |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for op in sorted(by_op):
        ts = by_op[op]
        text = "; ".join(why(ts))
        lines.append(
            f"| `{_cell(op)}` | {status[op]} | "
            + " | ".join(kind_cell(ts, k) for k in KINDS)
            + f" | {_cell(op_dispatch(ts))} | {_cell(text[:700])} |"
        )

    for op, why_not in sorted(untested.items()):
        lines.append(f"| `{_cell(op)}` | not run | | | | | | - | {_cell(why_not)} |")

    lines += ["", "## Known failures (expected_failures.py), by reason", ""]
    by_reason = collections.defaultdict(list)
    for t in tests:
        if t["outcome"] == "xfailed":
            by_reason[t.get("expected_failure") or t["reason"]].append(t)
    for reason, ts in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        names = ", ".join(
            f"`{t['op']}` {t['kind']}" + ("" if t["kind"] == "errors" else f" {SHORT.get(t['dtype'], t['dtype'])}")
            for t in ts
        )
        lines += [f"- {_cell(reason)} ({len(ts)} tests): {names}", ""]
    if not by_reason:
        lines.append("none")
    lines += ["", "## Unexpected failures and crashes", ""]
    bad = [t for t in tests if t["outcome"] in ("failed", "crashed")]
    lines += [f"- `{t['op']}` {t['kind']} {t['dtype']}: {_cell(t['reason'][:500])}" for t in bad] or ["none"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subset", choices=("full", "ci"), default="full")
    parser.add_argument("--results", default=os.path.join(ROOT, "build", "opinfo", "results.jsonl"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "op_coverage.md"))
    parser.add_argument("--report-only", action="store_true", help="only render the last results")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()

    rc, wall = 0, None
    if not args.report_only:
        rc, wall = run_sweep(args.results, args.subset, args.pytest_args)
    entries = read(args.results)
    if wall is None:  # --report-only: what the sweep that wrote the results recorded
        sweeps = [e for e in entries if "sweep_wall_s" in e]
        if sweeps:
            wall, args.subset = sweeps[-1]["sweep_wall_s"], sweeps[-1]["subset"]
    command = "make opinfo" if args.subset == "full" else "test/opinfo/make_coverage.py --subset ci"
    with open(args.out, "w") as f:
        f.write(render(entries, args.subset, command, wall))
    print(f"make_coverage: wrote {os.path.relpath(args.out, ROOT)}")
    failed = [e for e in entries if e.get("outcome") in ("failed", "crashed")]
    if rc not in (0, 1) or failed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
