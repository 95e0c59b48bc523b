"""Runs a fuzz program eagerly (on the reference device) and on lazy in lockstep, compares
them, and reduces a failing program to the steps it needs."""

import gc
import math
import os
import time
from dataclasses import replace

import torch

import lazyfuse
from fuzz_config import REDUCE
from fuzz_generator import generate
from fuzz_program import live_names, names_in, namespace
from fuzz_tensors import full_geometry
from helpers import REFERENCE

STATS = {"programs": 0, "steps": 0, "raised": 0, "syncs": 0, "failed": 0}


class Mismatch(Exception):
    """Lazy differs from eager at a step: `category` names how (for reducing a program)."""

    def __init__(self, step, category, detail):
        super().__init__(f"step {step}: {category}: {detail}")
        self.step, self.category, self.detail = step, category, detail


def _geometry(t, view, layout=True):
    """What lazy must report as eager does: dtype, shape, contiguity, the strides of the dims of
    more than one element (those of the others come from heuristics and address nothing), and of
    a view its storage offset; of an empty tensor, only dtype and shape."""
    if t.numel() == 0:
        return (t.dtype, tuple(t.shape))
    if not layout:
        return (t.dtype, tuple(t.shape), t.storage_offset() if view else None)
    strides = tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))
    return (t.dtype, tuple(t.shape), strides, t.storage_offset() if view else None,
            t.is_contiguous())


def _tolerances(t):
    # float64 values too may come from float32 ones (x.double()), whose rounding may differ by
    # the kernel's summation order (a matmul reading a transposed view).
    if t.dtype.is_floating_point:
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=0, atol=0)


def compare_tensor(i, what, lazy, eager, values=True, layout=True):
    if not isinstance(lazy, torch.Tensor) or lazy.device.type != "lazy":
        raise Mismatch(i, "not lazy", f"{what} is {type(lazy).__name__} "
                       f"{getattr(lazy, 'device', '')}")
    view = eager._is_view()
    if _geometry(lazy, view, layout) != _geometry(eager, view, layout):
        raise Mismatch(i, "geometry", f"{what}: lazy (dtype, shape, stride, offset, contiguous) "
                       f"{full_geometry(lazy)}, eager {full_geometry(eager)}"
                       f"{'' if view else ' (not a view)'}")
    if not values:
        return
    try:
        actual = lazy.cpu()
    except Exception as err:  # noqa: BLE001
        raise Mismatch(i, "lazy raised at sync",
                       f"{what}.cpu(): {type(err).__name__}: {err}") from None
    compare_values(i, what, actual, eager.cpu())


def compare_values(i, what, actual, expected):
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor) or actual.dtype != expected.dtype or \
                actual.shape != expected.shape:
            raise Mismatch(i, "value", f"{what}: lazy {actual!r}, eager {expected!r}")
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False,
                                       **_tolerances(expected))
        except AssertionError as err:
            raise Mismatch(i, "value", f"{what}: {err}\nlazy:  {actual}\neager: {expected}") \
                from None
        return
    same = type(actual) is type(expected) and (
        actual == expected or (isinstance(expected, float) and (
            math.isclose(actual, expected, rel_tol=1e-5, abs_tol=1e-5) or
            (math.isnan(actual) and math.isnan(expected)))))
    if not same:
        raise Mismatch(i, "value", f"{what}: lazy {actual!r}, eager {expected!r}")


def compare_all(i, lazy_ns, eager_ns, loose):
    names = live_names(eager_ns)
    if live_names(lazy_ns) != names:
        raise Mismatch(i, "names", f"lazy {live_names(lazy_ns)}, eager {names}")
    for name in names:
        compare_tensor(i, name, lazy_ns[name], eager_ns[name], layout=name not in loose)


def _run(code, ns):
    try:
        exec(code, ns)
    except Exception as err:  # noqa: BLE001
        err.__traceback__ = None
        return err
    return None


def run_program(program, count=True):
    """Runs `program` eagerly (on the reference device) and on lazy in lockstep; raises
    Mismatch where they differ. Returns the number of steps run; `count`: adds them to STATS."""
    eager_ns, lazy_ns = namespace("cpu"), namespace("lazy")
    eager_ns["DEV"] = REFERENCE
    old_fusion = os.environ.get("LAZYFUSE_FUSION")
    os.environ["LAZYFUSE_FUSION"] = program.fusion
    steps = 0
    loose = set()  # names whose strides are not compared (Step.loose_layout)
    try:
        for i, step in enumerate(program.steps):
            steps += 1
            code = compile(step.code, f"<step {i}>", "exec")
            eager_err = _run(code, eager_ns)
            lazy_err = _run(code, lazy_ns)
            if eager_err is not None:
                STATS["raised"] += count
                if lazy_err is None:
                    try:
                        lazyfuse.mark_step()
                        for name in live_names(lazy_ns):
                            lazy_ns[name].cpu()
                    except Exception as err:  # noqa: BLE001
                        lazy_err = err
                        err.__traceback__ = None
                if lazy_err is None:
                    raise Mismatch(i, "lazy did not raise",
                                   f"eager raised {type(eager_err).__name__}: {eager_err}")
                if type(lazy_err) is not type(eager_err):
                    raise Mismatch(i, "exception type",
                                   f"eager raised {type(eager_err).__name__}: {eager_err}; "
                                   f"lazy {type(lazy_err).__name__}: {lazy_err}")
                return steps
            if lazy_err is not None:
                raise Mismatch(i, "lazy raised",
                               f"{type(lazy_err).__name__}: {lazy_err}")
            if step.new:
                # A tensor made from one of loose layout (a view, an elementwise result) may have
                # other strides too.
                if step.loose_layout or names_in(step.code) & loose:
                    loose.add(step.new)
                compare_tensor(i, step.new, lazy_ns[step.new], eager_ns[step.new], values=False,
                               layout=step.new not in loose)
            if step.kind in ("mark_step", "sync", "check"):
                STATS["syncs"] += count
            if step.kind == "check":
                actual, expected = lazy_ns["_v"], eager_ns["_v"]
                if isinstance(expected, torch.Tensor):
                    if actual.device.type != "cpu":
                        raise Mismatch(i, "value", f"{step.expr} is on {actual.device}")
                    compare_values(i, step.expr, actual, expected.cpu())
                else:
                    compare_values(i, step.expr, actual, expected)
            if step.kind == "sync":
                for name in step.names:
                    compare_tensor(i, name, lazy_ns[name], eager_ns[name],
                                   layout=name not in loose)
            if step.full_check:
                compare_all(i, lazy_ns, eager_ns, loose)
        compare_all(len(program.steps), lazy_ns, eager_ns, loose)
        return steps
    finally:
        STATS["steps"] += steps if count else 0
        eager_ns.clear()
        lazy_ns.clear()
        gc.collect()
        try:
            lazyfuse.mark_step()
        except Exception:  # noqa: BLE001 (a failed program's pending values)
            pass
        if old_fusion is None:
            os.environ.pop("LAZYFUSE_FUSION", None)
        else:
            os.environ["LAZYFUSE_FUSION"] = old_fusion


def failure_of(program, count=True):
    try:
        run_program(program, count)
    except Mismatch as m:
        return m
    return None


def reduce_program(program, failure, budget_s=60.0):
    """Drops steps while the program still fails the same way (same category)."""
    deadline = time.monotonic() + budget_s
    steps = list(program.steps)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in reversed(range(len(steps))):
            if i >= len(steps) or time.monotonic() > deadline:
                continue
            trial = replace(program, steps=steps[:i] + steps[i + 1:])
            m = failure_of(trial, count=False)
            if m is not None and m.category == failure.category:
                steps, failure, changed = trial.steps, m, True
    return replace(program, steps=steps), failure


def check_seed(seed):
    """Generates and runs the program of `seed`; returns None, or a report of its failure."""
    program = generate(seed)
    STATS["programs"] += 1
    failure = failure_of(program)
    if failure is None:
        return None
    STATS["failed"] += 1
    report = [f"seed {seed}: {failure}", program.text(failure.step, failure.category)]
    if REDUCE:
        small, small_failure = reduce_program(program, failure)
        report = [f"seed {seed}: {failure}", "reduced:",
                  small.text(small_failure.step, small_failure.category),
                  f"reduced failure: {small_failure}"]
    return "\n".join(report)
