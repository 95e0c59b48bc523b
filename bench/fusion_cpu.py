#!/usr/bin/env python3
"""W1, W3 and W4 of docs/benchmarks.md on the CPU: lazyfuse's fused kernels next to eager PyTorch
on the CPU, in one run, with a plain copy of the same bytes as the bandwidth reference.

  W1  pointwise chains (10 ops over 2-3 inputs: add/mul/sub/div/exp/tanh), float32 and bfloat16
  W3  bias + dropout(p=0, so both sides compute the same) + residual + LayerNorm, fwd + bwd
  W4  LayerNorm and softmax written as composites (mean/var/rsqrt; max/exp/sum/div), next to
      the eager composite and the native ATen kernel

Steady state is timed (graph cache and kernels hot); compile time is reported separately, cold
(empty disk cache) and warm (a second process reading the disk cache). Writes
bench/results/fusion_cpu.json and, when matplotlib is importable, fusion_cpu.png.

    python bench/fusion_cpu.py [--quick]
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import lazyfuse
from bench_timing import processor

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"


def w1_chain(a, b, c):
    x = a + b
    x = x * c
    x = x - a
    x = x.exp()
    x = x / (b * b + 1)
    x = x.tanh()
    x = x * 0.5 + c
    return x.tanh() - a


def w3_block(x, residual, bias, weight, ln_bias):
    x = x.detach().requires_grad_(True)
    y = F.dropout(x + bias, p=0.0, training=True) + residual
    out = F.layer_norm(y, (y.shape[-1],), weight, ln_bias)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return out.detach(), grad


def w4_layer_norm_composite(x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5)


def w4_softmax_composite(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def workloads(quick):
    sizes = [100, 1000, 2048] if quick else [100, 1000, 2048, 4096]
    for n in sizes:
        for dtype in (torch.float32, torch.bfloat16):
            args = [torch.randn(n, n).to(dtype) for _ in range(3)]
            yield f"W1 chain10 {n}x{n} {str(dtype)[6:]}", w1_chain, args, None, 4 * n * n
    b, t, c = (16, 128, 1024) if quick else (64, 128, 1024)
    args = [torch.randn(b, t, c), torch.randn(b, t, c), torch.randn(c), torch.randn(c), torch.randn(c)]
    yield f"W3 bias+dropout+residual+LN fwd+bwd [{b},{t},{c}]", w3_block, args, None, 4 * b * t * c
    rows = 1024 if quick else 4096
    for cols in ([1024, 4096] if quick else [1024, 4096, 8192]):
        x = [torch.randn(rows, cols)]
        native_ln = lambda t: F.layer_norm(t, (t.shape[-1],))  # noqa: E731
        yield f"W4 layernorm composite [{rows},{cols}]", w4_layer_norm_composite, x, native_ln, 2 * rows * cols
        yield f"W4 softmax composite [{rows},{cols}]", w4_softmax_composite, x, lambda t: t.softmax(-1), 2 * rows * cols


def timed(fn, reps, warmup=2, samples_out=None):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    if samples_out is not None:
        samples_out.extend(samples)
    return statistics.median(samples)


def lazy_runner(fn, args):
    lazy_args = [a.to("lazy") for a in args]
    lazyfuse.mark_step()

    def run():
        out = fn(*lazy_args)
        lazyfuse.mark_step()
        lazyfuse.wait()
        return out

    return run


def first_compile_seconds(fn, args):
    lazyfuse.reset_metrics()
    lazy_runner(fn, args)()
    return lazyfuse.metrics()["CompileTime"]["total_ns"] / 1e9


def measure(quick, only=None, reps=None):
    reps = reps or (3 if quick else 7)
    rows = []
    for name, fn, args, native, elem_bytes_hint in workloads(quick):
        if only and not any(o in name for o in only):
            continue
        compile_s = first_compile_seconds(fn, args)
        eager_samples, lazy_samples, native_samples = [], [], []
        eager = timed(lambda: fn(*args), reps, samples_out=eager_samples)
        lazy = timed(lazy_runner(fn, args), reps, samples_out=lazy_samples)
        src = args[0]
        copy = timed(lambda: src.clone(), reps)
        # The minimum says what a step costs when nothing else takes the cores; on a loaded
        # machine it is the steadier of the two figures.
        row = {"workload": name, "eager_ms": eager * 1e3, "lazy_ms": lazy * 1e3,
               "speedup_vs_eager": eager / lazy, "copy_ms": copy * 1e3,
               "eager_min_ms": min(eager_samples) * 1e3, "lazy_min_ms": min(lazy_samples) * 1e3,
               "compile_cold_s": compile_s}
        if native is not None:
            native_s = timed(lambda: native(*args), reps, samples_out=native_samples)
            row["native_ms"] = native_s * 1e3
            row["speedup_vs_native"] = native_s / lazy
            row["native_min_ms"] = min(native_samples) * 1e3
        rows.append(row)
        lazy_min = row["lazy_min_ms"]
        print(f"{name:48s} eager {eager*1e3:9.3f} ms  lazy {lazy*1e3:9.3f} ms  "
              f"x{eager/lazy:6.2f}" + (f"  native x{row['speedup_vs_native']:5.2f}" if native else "")
              + f"  copy {copy*1e3:8.3f} ms  compile {compile_s:5.2f} s", flush=True)
        print(f"{'':48s} minima: eager {row['eager_min_ms']:9.3f} ms  lazy {lazy_min:9.3f} ms  "
              f"x{row['eager_min_ms']/lazy_min:6.2f}"
              + (f"  native x{row['native_min_ms']/lazy_min:5.2f}" if native else ""), flush=True)
    return rows


def warm_compile_times(quick, only=None):
    """Compile time of each workload's first run in this process: with the disk cache filled by
    the parent, this is the warm figure."""
    return {name: first_compile_seconds(fn, args) for name, fn, args, _, _ in workloads(quick)
            if not only or any(o in name for o in only)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", action="append", metavar="TEXT",
                   help="run only the workloads whose name holds TEXT (repeatable)")
    p.add_argument("--reps", type=int, help="timed steps per figure (default 7, 3 with --quick)")
    p.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR)
    args = p.parse_args()
    torch.manual_seed(0)
    if args.warm_only:
        print(json.dumps(warm_compile_times(args.quick, args.only)))
        return
    os.environ.setdefault("LAZYFUSE_FUSION", "always")
    # Other work on the machine moves eager's times far more than the fused kernels' (its
    # threads wait for each other): the load average says how far to trust a ratio.
    load_before = os.getloadavg()[0]
    print(f"lazyfuse {lazyfuse.__version__} on {lazyfuse.hardware_device()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cpus, "
          f"{processor()}, load average {load_before:.1f}")
    rows = measure(args.quick, args.only, args.reps)
    load_after = os.getloadavg()[0]
    print(f"load average {load_after:.1f} after the run")
    cmd = [sys.executable, __file__, "--warm-only"] + (["--quick"] if args.quick else [])
    for text in args.only or []:
        cmd += ["--only", text]
    warm = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                     env=dict(os.environ)).stdout.strip().splitlines()[-1])
    for row in rows:
        row["compile_warm_s"] = warm.get(row["workload"])
        print(f"{row['workload']:48s} compile cold {row['compile_cold_s']:.2f} s, warm (disk cache) "
              f"{row['compile_warm_s']:.3f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpus": os.cpu_count(), "load_average": [load_before, load_after], "rows": rows}
    (args.out / "fusion_cpu.json").write_text(json.dumps(result, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 0.4 * len(rows) + 1))
        ax.barh([r["workload"] for r in rows], [r["speedup_vs_eager"] for r in rows])
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel("lazyfuse speedup over eager CPU (same run)")
        fig.tight_layout()
        fig.savefig(args.out / "fusion_cpu.png")
    except ImportError:
        pass


if __name__ == "__main__":
    if "--warm-only" not in sys.argv and "LAZYFUSE_CACHE_DIR" not in os.environ:
        os.environ["LAZYFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazyfuse-bench-cache-")
    main()
