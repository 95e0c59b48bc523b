#!/usr/bin/env python3
"""The per-function speed sweep of the CPU target: every kernel function of the kernel IR
(lowering/kernel_ir.h, Note [Kernel functions]) as lazyfuse's fused kernel against ATen's op on
the same data.

Each kernel function runs
  alone     f(a) or f(a, b)
  chain3    f(...) * b + c       (three ops in one kernel: what fusion saves shows here)
and a list of pairs that share an input (sin+cos, exp+log, sigmoid*x, ...) runs as
  pair      f(a) <op> g(a)
over float32, bfloat16 and float16 (integer and Bool functions over int32 and bool), with
contiguous, transposed (every input a transposed view) and broadcast (the first input a row
expanded over the rows) inputs, at a memory-bound size (4M elements) and a small one (4K). Both
sides take the views inside each step, so the kernels read the strided inputs themselves.

Eager writes into a preallocated output through `out=` of the last op; lazy records
`out.copy_(...)` and syncs, and its plan writes into a buffer of the CPU buffer pool (Note [Buffer
pool]), memory an earlier step freed, so page faults decide neither side. (Whether the output
went into `out`'s own memory, a donated buffer, is the row's `out_donated`; today it never does.)
With --compile, torch.compile (inductor) of the same function with the same `out=` runs as a
third side. Rounds are interleaved (eager, lazy[, compile], eager, ...) and each ratio is the
other side's median over lazy's (above 1: lazy is faster).

Writes docs/kernel_sweep.json and docs/kernel_sweep.md (unless --no-write).

    python bench/kernel_sweep.py                       # the standard grid (~5 min warm, 2 cores)
    python bench/kernel_sweep.py --full                # every combination (hours)
    python bench/kernel_sweep.py --quick               # float32, contiguous, 4M only
    python bench/kernel_sweep.py --quick --compile     # ... and torch.compile beside them
    python bench/kernel_sweep.py --only sin,cos --dtypes float32 --layouts contiguous
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import time

import torch

import lazyfuse
from bench_timing import cpu_busy, processor, timed

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
SIZES = {"4M": (2048, 2048), "4K": (64, 64)}
FLOAT_DTYPES = ["float32", "bfloat16", "float16"]
LAYOUTS = ["contiguous", "transposed", "broadcast"]

# Input domains: where a function is defined and finite, so both sides do the same work.
REAL = "real"          # randn * 2
POSITIVE = "positive"  # uniform [0.1, 4.1)
UNIT = "unit"          # uniform (-0.9, 0.9)
ABOVE_ONE = "above1"   # uniform [1, 5)
NONZERO = "nonzero"    # uniform [0.5, 1.5) with random sign
INT = "int"            # int32 in [-1000, 1000)
BOOL = "bool"

# name: (arity, ATen op, domain of the first input, domain of the second, result kind)
# result kind: "float" (the input dtype), "bool" or "int".
FUNCTIONS = {
    "neg": (1, torch.neg, REAL, None, "float"),
    "abs": (1, torch.abs, REAL, None, "float"),
    "exp": (1, torch.exp, REAL, None, "float"),
    "exp2": (1, torch.exp2, REAL, None, "float"),
    "expm1": (1, torch.expm1, REAL, None, "float"),
    "log": (1, torch.log, POSITIVE, None, "float"),
    "log2": (1, torch.log2, POSITIVE, None, "float"),
    "log10": (1, torch.log10, POSITIVE, None, "float"),
    "log1p": (1, torch.log1p, POSITIVE, None, "float"),
    "sqrt": (1, torch.sqrt, POSITIVE, None, "float"),
    "rsqrt": (1, torch.rsqrt, POSITIVE, None, "float"),
    "sin": (1, torch.sin, REAL, None, "float"),
    "cos": (1, torch.cos, REAL, None, "float"),
    "tan": (1, torch.tan, UNIT, None, "float"),
    "asin": (1, torch.asin, UNIT, None, "float"),
    "acos": (1, torch.acos, UNIT, None, "float"),
    "atan": (1, torch.atan, REAL, None, "float"),
    "sinh": (1, torch.sinh, REAL, None, "float"),
    "cosh": (1, torch.cosh, REAL, None, "float"),
    "tanh": (1, torch.tanh, REAL, None, "float"),
    "asinh": (1, torch.asinh, REAL, None, "float"),
    "acosh": (1, torch.acosh, ABOVE_ONE, None, "float"),
    "atanh": (1, torch.atanh, UNIT, None, "float"),
    "erf": (1, torch.erf, REAL, None, "float"),
    "erfc": (1, torch.erfc, REAL, None, "float"),
    "sigmoid": (1, torch.sigmoid, REAL, None, "float"),
    "floor": (1, torch.floor, REAL, None, "float"),
    "ceil": (1, torch.ceil, REAL, None, "float"),
    "round": (1, torch.round, REAL, None, "float"),
    "trunc": (1, torch.trunc, REAL, None, "float"),
    "sign": (1, torch.sign, REAL, None, "float"),
    "reciprocal": (1, torch.reciprocal, NONZERO, None, "float"),
    "lgamma": (1, torch.lgamma, POSITIVE, None, "float"),
    "isnan": (1, torch.isnan, REAL, None, "bool"),
    "isinf": (1, torch.isinf, REAL, None, "bool"),
    "add": (2, torch.add, REAL, REAL, "float"),
    "sub": (2, torch.sub, REAL, REAL, "float"),
    "mul": (2, torch.mul, REAL, REAL, "float"),
    "div": (2, torch.div, REAL, NONZERO, "float"),
    "pow": (2, torch.pow, POSITIVE, REAL, "float"),
    "atan2": (2, torch.atan2, REAL, REAL, "float"),
    "fmod": (2, torch.fmod, REAL, NONZERO, "float"),
    "remainder": (2, torch.remainder, REAL, NONZERO, "float"),
    "maximum": (2, torch.maximum, REAL, REAL, "float"),
    "minimum": (2, torch.minimum, REAL, REAL, "float"),
    "copysign": (2, torch.copysign, REAL, REAL, "float"),
    "hypot": (2, torch.hypot, REAL, REAL, "float"),
    "eq": (2, torch.eq, REAL, REAL, "bool"),
    "ne": (2, torch.ne, REAL, REAL, "bool"),
    "lt": (2, torch.lt, REAL, REAL, "bool"),
    "le": (2, torch.le, REAL, REAL, "bool"),
    "gt": (2, torch.gt, REAL, REAL, "bool"),
    "ge": (2, torch.ge, REAL, REAL, "bool"),
    "bitwise_not": (1, torch.bitwise_not, INT, None, "int"),
    "bitwise_and": (2, torch.bitwise_and, INT, INT, "int"),
    "bitwise_or": (2, torch.bitwise_or, INT, INT, "int"),
    "bitwise_xor": (2, torch.bitwise_xor, INT, INT, "int"),
    "logical_not": (1, torch.logical_not, BOOL, None, "bool"),
    "logical_and": (2, torch.logical_and, BOOL, BOOL, "bool"),
    "logical_or": (2, torch.logical_or, BOOL, BOOL, "bool"),
    "logical_xor": (2, torch.logical_xor, BOOL, BOOL, "bool"),
    # A Float stored into a Half or BFloat16 buffer: the kernel functions round_to_half and
    # round_to_bfloat16 (with their loads and stores). ATen's side is the converting copy.
    "round_to_half": (1, None, REAL, None, "half"),
    "round_to_bfloat16": (1, None, REAL, None, "bfloat16"),
}

NO_OUT = {"isnan", "isinf"}  # ATen has no out= variant

# Pairs of functions of one input: (name, f, g, combine, domain).
PAIRS = [
    ("sin+cos", torch.sin, torch.cos, torch.add, REAL),
    ("exp+log", torch.exp, torch.log, torch.add, POSITIVE),
    ("sigmoid*x", torch.sigmoid, None, torch.mul, REAL),
    ("tanh*x", torch.tanh, None, torch.mul, REAL),
    ("exp+expm1", torch.exp, torch.expm1, torch.add, REAL),
    ("sqrt+rsqrt", torch.sqrt, torch.rsqrt, torch.add, POSITIVE),
    ("log+log1p", torch.log, torch.log1p, torch.add, POSITIVE),
    ("erf*x", torch.erf, None, torch.mul, REAL),
    ("floor+ceil", torch.floor, torch.ceil, torch.add, REAL),
    ("sinh+cosh", torch.sinh, torch.cosh, torch.add, REAL),
    ("abs+neg", torch.abs, torch.neg, torch.add, REAL),
    ("exp*sin", torch.exp, torch.sin, torch.mul, REAL),
    ("atan+tanh", torch.atan, torch.tanh, torch.add, REAL),
    ("maximum+minimum", None, None, None, REAL),
]


def make_input(domain, dtype, shape, gen):
    if domain == INT:
        return torch.randint(-1000, 1000, shape, generator=gen, dtype=torch.int32)
    if domain == BOOL:
        return torch.rand(shape, generator=gen) < 0.5
    if domain == REAL:
        t = torch.randn(shape, generator=gen) * 2
    elif domain == POSITIVE:
        t = torch.rand(shape, generator=gen) * 4 + 0.1
    elif domain == UNIT:
        t = torch.rand(shape, generator=gen) * 1.8 - 0.9
    elif domain == ABOVE_ONE:
        t = torch.rand(shape, generator=gen) * 4 + 1
    elif domain == NONZERO:
        t = (torch.rand(shape, generator=gen) + 0.5) * torch.sign(torch.randn(shape, generator=gen))
        t[t == 0] = 1
    else:
        raise ValueError(domain)
    return t.to(getattr(torch, dtype))


def laid_out(t, layout, index):
    """`t` (rows, cols) as the layout wants it: a base tensor and the view of it that each step
    takes (the same logical shape, other strides). The view is taken inside every step, on both
    sides: a lazy view kept from one step to the next is a tensor of its own after the sync (its
    values written out contiguously), so a kernel would read that copy, not the strided input."""
    if layout == "transposed":
        return t.t().contiguous(), lambda base: base.t()
    if layout == "broadcast" and index == 0:
        return t[:1].clone(), lambda base: base.expand(t.shape)
    return t, lambda base: base


def workloads(names, dtypes, layouts, sizes, kinds):
    """The workloads of `names` (and the pairs using any of them) over the grid, as dicts: what
    run_one needs (shape, input domains, out dtype, call(inputs, out)) and the row's keys."""
    for size in sizes:
        shape = SIZES[size]
        for name in names:
            arity, op, dom0, dom1, result = FUNCTIONS[name]
            if result in ("int", "bool") and dom0 in (INT, BOOL):
                fn_dtypes = ["int32" if dom0 == INT else "bool"]
            else:
                fn_dtypes = dtypes
            for dtype in fn_dtypes:
                for layout in layouts:
                    doms = [dom0] + ([dom1] if arity == 2 else [])
                    out_dtype = {"float": dtype, "int": "int32", "bool": "bool",
                                 "half": "float16", "bfloat16": "bfloat16"}[result]
                    if result in ("half", "bfloat16") and dtype != "float32":
                        continue
                    for kind in kinds:
                        if kind == "pair" or (kind == "chain3" and result != "float"):
                            continue
                        yield dict(kind=kind, fn=name, dtype=dtype, layout=layout, size=size,
                                   shape=shape, domains=doms + ([REAL, REAL] if kind == "chain3"
                                                                else []),
                                   out_dtype=out_dtype, call=function_call(name, kind, arity))
        if "pair" in kinds:
            for name, f, g, combine, dom in PAIRS:
                if not set(name.replace("*", "+").split("+")) & set(names + ["x"]) - {"x"}:
                    continue
                for dtype in dtypes:
                    for layout in layouts:
                        yield dict(kind="pair", fn=name, dtype=dtype, layout=layout, size=size,
                                   shape=shape, domains=[dom], out_dtype=dtype,
                                   call=pair_call(name, f, g, combine))


def standard_grid(names, kinds):
    """The default sweep (~5 min on 2 cores with a warm kernel cache): every function alone and
    in a chain over the three float dtypes, contiguous, 4M; alone over float32 transposed and
    broadcast, 4M, and contiguous 4K; the pairs over the three dtypes, contiguous, 4M."""
    fn_kinds = [k for k in kinds if k != "pair"]
    yield from workloads(names, FLOAT_DTYPES, ["contiguous"], ["4M"], fn_kinds)
    if "alone" in kinds:
        yield from workloads(names, ["float32"], ["transposed", "broadcast"], ["4M"], ["alone"])
        yield from workloads(names, ["float32"], ["contiguous"], ["4K"], ["alone"])
    if "pair" in kinds:
        yield from workloads(names, FLOAT_DTYPES, ["contiguous"], ["4M"], ["pair"])


def function_call(name, kind, arity):
    op = FUNCTIONS[name][1]

    def final(value, out):
        return value if out is None else out.copy_(value)

    if name in ("round_to_half", "round_to_bfloat16"):
        to = torch.float16 if name == "round_to_half" else torch.bfloat16
        return lambda xs, out: xs[0].to(to) if out is None else out.copy_(xs[0])
    if kind == "alone":
        if name in NO_OUT:
            return lambda xs, out: final(op(*xs[:arity]), out)
        return lambda xs, out: op(*xs[:arity], out=out) if out is not None else op(*xs[:arity])
    # chain3: f(...) * b + c, with b and c the last two inputs
    def chain(xs, out):
        v = op(*xs[:arity]) * xs[arity]
        return torch.add(v, xs[arity + 1], out=out) if out is not None else v + xs[arity + 1]
    return chain


def pair_call(name, f, g, combine):
    if name == "maximum+minimum":
        def mm(xs, out):
            a = xs[0]
            b = a * 0.5
            return torch.add(torch.maximum(a, b), torch.minimum(a, b), out=out) \
                if out is not None else torch.maximum(a, b) + torch.minimum(a, b)
        return mm

    def call(xs, out):
        a = xs[0]
        left = f(a)
        right = g(a) if g is not None else a
        return combine(left, right, out=out) if out is not None else combine(left, right)
    return call


def repeats_for(fn, target_ms=20.0):
    """How often a sample repeats fn so that it lasts about target_ms."""
    start = time.perf_counter()
    fn()
    once = max(1e-6, time.perf_counter() - start)
    repeats = max(1, min(200, int(target_ms / 1e3 / once)))
    return repeats


def tolerance(dtype):
    return {"float32": (2e-4, 2e-4), "bfloat16": (2e-2, 1e-1), "float16": (2e-3, 1e-2)}.get(
        dtype, (0, 0))


def run_one(w, rounds, gen, with_compile=False):
    shape = w["shape"]
    dtype = w["dtype"]
    laid = [laid_out(make_input(d, dtype, shape, gen), w["layout"], i)
            for i, d in enumerate(w["domains"])]
    cpu_bases = [base for base, _ in laid]
    lazy_bases = [base.to("lazy") for base in cpu_bases]

    def views(bases):
        return [view(base) for base, (_, view) in zip(bases, laid)]

    cpu = views(cpu_bases)
    out_dtype = getattr(torch, w["out_dtype"])
    eager_out = torch.empty(shape, dtype=out_dtype)
    lazy_out = torch.empty(shape, dtype=out_dtype, device="lazy")
    lazyfuse.mark_step()
    call = w["call"]

    def eager():
        call(views(cpu_bases), eager_out)

    def run_lazy():
        call(views(lazy_bases), lazy_out)
        lazyfuse.mark_step()

    sides = {"eager": eager, "lazy": run_lazy}
    if with_compile:
        torch._dynamo.reset()  # one compiled function per workload, not guards piling up
        compiled = torch.compile(call)
        sides["compile"] = lambda: compiled(views(cpu_bases), eager_out)
    for _ in range(2):  # warm up: record, compile, cache
        for side in sides.values():
            side()
    rtol, atol = tolerance(dtype)
    # A fused kernel keeps Float between ops of 16-bit values (Note [Conversions round]) where
    # eager rounds after each, so a 16-bit chain is checked against the chain in float32.
    wide = [t.float() if t.dtype in (torch.half, torch.bfloat16) else t for t in cpu]
    expected = call(wide if w["kind"] != "alone" else cpu, None)
    got = lazy_out.cpu()
    try:
        torch.testing.assert_close(got, expected.to(got.dtype), rtol=rtol, atol=atol,
                                   equal_nan=True)
        mismatch = ""
    except AssertionError as error:  # reported in the row and the table, not fatal
        mismatch = str(error).splitlines()[2] if len(str(error).splitlines()) > 2 else "differs"
    donated_before = lazyfuse.metrics().get("BuffersDonated", 0)
    reps = {key: repeats_for(side) for key, side in sides.items()}
    times = {key: [] for key in sides}
    for _ in range(rounds):
        for key, side in sides.items():
            times[key].append(timed(side, reps[key]))
    donated = lazyfuse.metrics().get("BuffersDonated", 0) > donated_before
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {k: w[k] for k in ("kind", "fn", "dtype", "layout", "size")}
    row |= {f"{key}_ms": round(ms, 4) for key, ms in med.items()}
    row |= {f"lazy_vs_{key}": round(med[key] / med["lazy"], 3) for key in med if key != "lazy"}
    return row | {"out_donated": donated, "mismatch": mismatch}


# Why a function stays below eager, where the reason is known. Keys: a kernel function, or
# "memory" for the memory-bound functions whose kernel is at memory speed on both sides.
REASONS = {
    "lgamma": "ATen's own kernel on both sides (no vector lgamma in libmvec, so on the CPU "
              "lazyfuse runs ATen's: Note [Ops left to ATen on a target]); alone, the step's "
              "record-and-sync overhead and noise decide",
    "fmod": "ATen's own kernel on both sides (no exact vector fmod in libmvec, so on the CPU "
            "lazyfuse runs ATen's, which calls SLEEF's: Note [Ops left to ATen on a target]); "
            "alone, the step's record-and-sync overhead and noise decide",
    "remainder": "ATen's own kernel on both sides, as fmod",
    "memory": "memory-bound: one load or two and a store per element, both sides at the speed "
              "of memory or, where the last-level cache holds the step's data (32 MB for a "
              "unary float32 op over 4M elements; the machine line above says which), of the "
              "cache. A kernel that moves more bytes than the last-level cache streams its "
              "stores (Note [Streaming stores]) and passes eager; one that fits meets eager's "
              "`out=`, which writes into memory it wrote the step before, and the step's "
              "record-and-sync overhead (~10-15 µs) decides",
    "16-bit memory": "16-bit, alone: 8 MB in and 8 MB out stay in the L3 between steps, so "
                     "both sides run at cache speed, where the kernel's conversion to float and "
                     "back (rounding on the store) costs more than ATen's kernel on the 16-bit "
                     "values (neg and abs only flip the sign bit), and the step's "
                     "record-and-sync overhead (~10-15 µs) is a larger share",
    "16-bit compute": "16-bit, alone, compute-bound: the data stay in cache and both sides are "
                      "limited by evaluating the function; the fused exp takes about 1.0 ms over "
                      "4M elements in every dtype (0.98 ms float32, 1.04 ms bfloat16, measured "
                      "apart), and so does eager's 16-bit kernel (1.00 ms bfloat16), where its "
                      "float32 one takes 1.8 ms",
    "transposed": "not yet explained: transposed inputs are read in tiles (Note [Tiled "
                  "loops]), which passed eager's strided loop everywhere in the last sweep",
    "libmvec": "float32 alone, evaluation-bound: the fused kernel calls glibc's libmvec "
               "(Note [CPU prelude]) eight lanes at a time, while ATen's kernels run 16 lanes "
               "(AVX-512 SLEEF, whose 16-lane exp beats 8-lane libmvec per element) or MKL's "
               "vector library (log); per element and lane width alike, libmvec is faster than "
               "SLEEF (logf 0.38 against 1.24 ns at 8 lanes, one thread, 2026-12-06), and "
               "16-lane libmvec kernels gave no consistent gain in an A/B of this sweep; with "
               "one function per element that decides, and in a chain the fused kernel is "
               "ahead (chain3 2-3x)",
    "rounding": "float32 alone, compute-bound: ATen's floor, ceil and round take one vector "
                "rounding instruction (vroundps) per vector, the fused kernel about ten integer "
                "and float operations (GCC 12 emits vroundps for floorf & co only under "
                "-fno-trapping-math, which the kernels are not built with: Note [CPU prelude]); "
                "where the input is a broadcast row that decides; in a chain the fused kernel is "
                "ahead (chain3 above 2x)",
    "4K": "4K elements: the whole step (record, sync, run) against one ATen call; the per-step "
          "overhead of ~10 µs decides",
}
LIBMVEC = {"exp", "exp2", "log", "log2", "log10", "atan", "erf", "erfc", "expm1", "log1p",
           "sin", "cos", "tan", "asin", "acos", "sinh", "cosh", "tanh", "asinh", "acosh",
           "atanh", "pow", "atan2", "hypot"}
MEMORY_BOUND = {"neg", "abs", "add", "sub", "mul", "div", "maximum", "minimum", "copysign",
                "reciprocal", "sign", "rsqrt", "sqrt", "sigmoid", "eq", "ne", "lt", "le", "gt",
                "ge", "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_not",
                "logical_and", "logical_or", "logical_xor", "round_to_half",
                "round_to_bfloat16", "floor", "ceil", "round", "trunc", "isnan", "isinf"}

ROUNDING = {"floor", "ceil", "round"}


def reason_for(row):
    if row["size"] == "4K":
        return REASONS["4K"]
    if row["layout"] == "transposed":
        return REASONS["transposed"]
    if row["fn"] in REASONS:
        return REASONS[row["fn"]]
    sixteen = row["dtype"] in ("bfloat16", "float16") and row["kind"] == "alone"
    if sixteen and row["fn"] in MEMORY_BOUND:
        return REASONS["16-bit memory"]
    if sixteen and row["fn"] in ("exp", "exp2", "erf"):
        return REASONS["16-bit compute"]
    if row["dtype"] == "float32" and row["kind"] == "alone" and row["fn"] in LIBMVEC:
        return REASONS["libmvec"]
    if row["dtype"] == "float32" and row["kind"] == "alone" and row["fn"] in ROUNDING:
        return REASONS["rounding"]
    if row["fn"] in MEMORY_BOUND and row["kind"] == "alone":
        return REASONS["memory"]
    return "not yet explained"


def ratio_cell(row):
    """lazy/eager, and lazy/compile after a slash when the sweep ran torch.compile too."""
    if "lazy_vs_compile" in row:
        return f"{row['lazy_vs_eager']:.2f} / {row['lazy_vs_compile']:.2f}"
    return f"{row['lazy_vs_eager']:.2f}"


def write_markdown(result, path):
    rows = result["rows"]
    with_compile = any("lazy_vs_compile" in r for r in rows)
    lines = [
        "# The per-function speed sweep (CPU)",
        "",
        "Written by `bench/kernel_sweep.py`; the figures are lazy / eager (above 1: lazyfuse's",
        "fused kernel is faster than ATen's op on the same data, output preallocated on both",
        "sides), medians of interleaved rounds. Raw numbers in "
        f"`{path.with_suffix('.json').name}`.",
        "Each cell is lazy/eager" + (", then lazy/torch.compile (inductor, the same function "
                                     "and `out=`)." if with_compile else "."),
        "",
        f"Machine: {result['machine']}, {result['cores']} cores, torch threads "
        f"{result['torch_threads']}; CPU busy before/after: {result['cpu_busy_before']:.0%} / "
        f"{result['cpu_busy_after']:.0%}; {result['date']}.",
        "",
    ]
    for size in SIZES:
        for kind in ("alone", "chain3", "pair"):
            sel = [r for r in rows if r["size"] == size and r["kind"] == kind]
            if not sel:
                continue
            columns = sorted({(r["dtype"], r["layout"]) for r in sel},
                             key=lambda c: (FLOAT_DTYPES.index(c[0]) if c[0] in FLOAT_DTYPES
                                            else 9, LAYOUTS.index(c[1])))
            lines += [f"## {kind}, {size} elements", ""]
            lines.append("| function | " + " | ".join(f"{d} {l[:5]}" for d, l in columns) + " |")
            lines.append("|---|" + "---|" * len(columns))
            for fn in dict.fromkeys(r["fn"] for r in sel):
                cells = []
                for d, l in columns:
                    hit = [r for r in sel if r["fn"] == fn and r["dtype"] == d
                           and r["layout"] == l]
                    if not hit and fn in FUNCTIONS and FUNCTIONS[fn][2] in (INT, BOOL):
                        hit = [r for r in sel if r["fn"] == fn and r["layout"] == l]
                    cells.append(ratio_cell(hit[0]) if hit else "")
                lines.append(f"| {fn} | " + " | ".join(cells) + " |")
            lines.append("")
    differ = [r for r in rows if r.get("mismatch")]
    if differ:
        lines += ["## Values outside the sweep's tolerance", "",
                  "The sweep compares each lazy result with eager's before timing it; these "
                  "were outside its tolerance (float32 rtol 2e-4; 16-bit chains against the "
                  "chain in float32, Note [Conversions round]):", ""]
        lines += [f"- {r['fn']} ({r['kind']}, {r['dtype']}, {r['layout']}, {r['size']}): "
                  f"{r['mismatch']}" for r in differ]
        lines.append("")
    slow = [r for r in rows if r["lazy_vs_eager"] < 1.0]
    lines += ["## Below 1.0x eager, and why", ""]
    if not slow:
        lines.append("None.")
    by_reason = {}
    for r in slow:
        by_reason.setdefault(reason_for(r), []).append(r)
    for reason, rs in by_reason.items():
        cases = ", ".join(f"{r['fn']} ({r['kind']}, {r['dtype']}, {r['layout']}, {r['size']}: "
                          f"{r['lazy_vs_eager']:.2f})" for r in rs)
        lines += [f"- **{reason}**: {cases}", ""]
    path.write_text("\n".join(lines))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="float32, contiguous, 4M")
    parser.add_argument("--full", action="store_true",
                        help="every dtype x layout x size for every kind (hours on 2 cores)")
    parser.add_argument("--only", default="", help="comma-separated kernel functions")
    parser.add_argument("--dtypes", help=f"comma-separated, of {','.join(FLOAT_DTYPES)}")
    parser.add_argument("--layouts", help=f"comma-separated, of {','.join(LAYOUTS)}")
    parser.add_argument("--sizes", help=f"comma-separated, of {','.join(SIZES)}")
    parser.add_argument("--kinds", default="alone,chain3,pair")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile (inductor) as a third side, beside eager and lazy")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--json", default=str(DOCS / "kernel_sweep.json"))
    parser.add_argument("--markdown-only", action="store_true",
                        help="only write the table of --json's results again (after a change "
                             "of the reasons)")
    args = parser.parse_args()
    if args.markdown_only:
        path = pathlib.Path(args.json)
        write_markdown(json.loads(path.read_text()), path.with_suffix(".md"))
        return 0
    os.environ.setdefault("LAZYFUSE_FUSION", "always")
    names = args.only.split(",") if args.only else list(FUNCTIONS)
    kinds = args.kinds.split(",")
    if args.quick:
        grid = workloads(names, ["float32"], ["contiguous"], ["4M"], kinds)
    elif args.full or args.only or args.dtypes or args.layouts or args.sizes:
        def chosen(value, default):
            return value.split(",") if value else default
        grid = workloads(names, chosen(args.dtypes, FLOAT_DTYPES), chosen(args.layouts, LAYOUTS),
                         chosen(args.sizes, list(SIZES)), kinds)
    else:
        grid = standard_grid(names, kinds)
    gen = torch.Generator().manual_seed(0)
    busy_before = cpu_busy()
    rows = []
    for w in grid:
        row = run_one(w, args.rounds, gen, args.compile)
        rows.append(row)
        flag = "  <1" if row["lazy_vs_eager"] < 1 else ""
        extra = (f"  compile {row['compile_ms']:9.4f} ms  lazy/compile "
                 f"{row['lazy_vs_compile']:6.2f}x" if args.compile else "")
        print(f"{row['kind']:6s} {row['fn']:18s} {row['dtype']:8s} {row['layout']:10s} "
              f"{row['size']:3s} eager {row['eager_ms']:9.4f} ms  lazy {row['lazy_ms']:9.4f} ms"
              f"  lazy/eager {row['lazy_vs_eager']:6.2f}x{flag}{extra}", flush=True)
    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": processor(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_busy_before": round(busy_before, 3),
        "cpu_busy_after": round(cpu_busy(), 3),
        "rows": rows,
    }
    if not args.no_write:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
        write_markdown(result, pathlib.Path(args.json).with_suffix(".md"))
    slow = [r for r in rows if r["size"] == "4M" and r["lazy_vs_eager"] < 1]
    print(f"{len(rows)} measurements, {len(slow)} below 1.0x eager at 4M; CPU busy before "
          f"{busy_before:.0%}, after {result['cpu_busy_after']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
