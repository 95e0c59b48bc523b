#!/usr/bin/env python3
"""Pointwise chains with transcendentals on the CPU: lazyfuse's fused kernel next to eager
PyTorch and torch.compile (inductor), in one run, rounds interleaved, medians.

  sin_cos     a.sin() * 0.5 + a.cos()            (sin and cos of one value: rotary embeddings)
  chain10     x = a*b + c; x = x.sin()*0.5 + x.cos(); x = tanh(x)*b - a/(c.abs()+1);
              x.exp().clamp(max=10)               (10 ops, 3 inputs)
  sin_cos_2   (a*b+c).sin()*0.5 + (a*b+c).cos()   (the same with two recomputed inputs)

4M float32 elements each. Every side produces a new output per call (lazy: record + mark_step
+ run; the graph and kernel are cached after the warm-up). Prints a table of ms per call and
lazy/eager, lazy/compile ratios (above 1: lazy is faster) and writes
bench/results/transcendental_chains.json.

    python bench/transcendental_chains.py [--rounds 7] [--no-compile]
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import time

import torch

import lazyfuse
from bench_timing import cpu_busy, processor, timed

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"
N = 4 * 1024 * 1024


def sin_cos(a, b, c):
    return a.sin() * 0.5 + a.cos()


def chain10(a, b, c):
    x = a * b + c
    x = x.sin() * 0.5 + x.cos()
    x = torch.tanh(x) * b - a / (c.abs() + 1)
    return x.exp().clamp(max=10)


def sin_cos_2(a, b, c):
    return (a * b + c).sin() * 0.5 + (a * b + c).cos()


WORKLOADS = {"sin_cos": sin_cos, "chain10": chain10, "sin_cos_2": sin_cos_2}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("LAZYFUSE_FUSION", "always")

    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(N, generator=gen) for _ in range(3)]
    lazy = [t.to("lazy") for t in cpu]
    lazyfuse.mark_step()
    busy_before = cpu_busy()

    rows = []
    for name, fn in WORKLOADS.items():
        def run_lazy():
            out = fn(*lazy)
            lazyfuse.mark_step()
            return out

        sides = {"eager": lambda: fn(*cpu), "lazy": run_lazy}
        if not args.no_compile:
            compiled = torch.compile(fn)
            sides["compile"] = lambda: compiled(*cpu)
        for side in sides.values():  # warm up: compile, cache
            side()
            side()
        torch.testing.assert_close(run_lazy().cpu(), fn(*cpu), rtol=1e-4, atol=1e-4)
        times = {k: [] for k in sides}
        for _ in range(args.rounds):
            for key, side in sides.items():
                times[key].append(timed(side, args.repeats))
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"workload": name, "ms": med,
               "lazy_vs_eager": med["eager"] / med["lazy"]}
        if "compile" in med:
            row["lazy_vs_compile"] = med["compile"] / med["lazy"]
        rows.append(row)
        extra = f"  lazy/compile {row['lazy_vs_compile']:.2f}x" if "compile" in med else ""
        print(f"{name:10s} eager {med['eager']:8.2f} ms  lazy {med['lazy']:8.2f} ms"
              + (f"  compile {med['compile']:8.2f} ms" if "compile" in med else "")
              + f"  lazy/eager {row['lazy_vs_eager']:.2f}x{extra}", flush=True)

    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": processor(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_busy_before": round(busy_before, 3),
        "cpu_busy_after": round(cpu_busy(), 3),
        "elements": N,
        "rows": rows,
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "transcendental_chains.json").write_text(json.dumps(result, indent=2))
    print(f"CPU used by others: {busy_before:.0%} before, {result['cpu_busy_after']:.0%} after")


if __name__ == "__main__":
    main()
