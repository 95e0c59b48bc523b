#!/usr/bin/env python3
"""W0 of docs/benchmarks.md: host cost per recorded op, lazyfuse next to eager, in one run.

For chains of 10/100/1000 tiny ops (alternating `x + 1.0` and `x * 0.5`) on 1-element and
1000-element tensors, measures in steady state (graph cache hot):

  eager          µs per op, eager PyTorch on the CPU (and on the GPU when lazy runs there)
  lazy record    µs per op to record the chain, no sync
  lazy + sync    µs per op to record the chain and run it (`mark_step` + `wait`)

and the ratio lazy / eager, where eager runs on the device lazy tensors execute on. The first
(cold) run of each chain, which compiles, is reported separately. Last, the host memory a
recorded but not yet synced node holds: the heap malloc has handed out, grown over 6,000 such
nodes (steady state: the meta cache already holds the op), per node. Writes
bench/results/trace_overhead.json and, when matplotlib is importable, trace_overhead.png.

    python bench/trace_overhead.py [--quick]
"""

import argparse
import datetime
import gc
import json
import os
import pathlib
import platform
import statistics
import sys
import time

import torch

import lazyfuse

SIZES = (1, 1000)
CHAINS = (10, 100, 1000)
RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    p.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR, help="results folder")
    return p.parse_args()


def chain(x, n):
    for i in range(n):
        x = x + 1.0 if i % 2 == 0 else x * 0.5
    return x


def repetitions(n_ops, quick):
    """Enough repetitions that every configuration records about the same number of ops."""
    budget = 2_000 if quick else 20_000
    return max(3 if quick else 7, budget // n_ops)


def median_ns(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    samples = []
    gc.disable()
    try:
        for _ in range(reps):
            samples.append(fn())
    finally:
        gc.enable()
    return statistics.median(samples)


def eager_runner(device, size, n):
    base = torch.ones(size, device=device)
    is_cuda = base.is_cuda

    def run():
        if is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        chain(base, n)
        if is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter_ns() - start

    return run


def lazy_runners(size, n):
    base = torch.ones(size, device="lazy")
    lazyfuse.mark_step()  # base is device data; every run records the same graph on top of it
    lazyfuse.wait()

    def record_only():
        start = time.perf_counter_ns()
        y = chain(base, n)
        elapsed = time.perf_counter_ns() - start
        lazyfuse.mark_step()  # untimed: keeps the trace short and the cache state identical
        lazyfuse.wait()
        del y
        return elapsed

    def record_and_sync():
        start = time.perf_counter_ns()
        y = chain(base, n)
        lazyfuse.mark_step()
        lazyfuse.wait()
        elapsed = time.perf_counter_ns() - start
        del y
        return elapsed

    return record_only, record_and_sync


def compile_ns():
    return lazyfuse.metrics().get("CompileTime", {}).get("total_ns", 0)


def measure(size, n, eager_devices, quick):
    reps = repetitions(n, quick)
    warmup = max(2, reps // 10)
    row = {"size": size, "ops": n, "reps": reps}
    for device in eager_devices:
        row[f"eager_{device}_us_per_op"] = median_ns(eager_runner(device, size, n), reps, warmup) / n / 1e3

    record_only, record_and_sync = lazy_runners(size, n)
    compile_before = compile_ns()
    row["lazy_cold_ms"] = record_and_sync() / 1e6  # first run of this graph: includes compiling
    row["lazy_compile_ms"] = (compile_ns() - compile_before) / 1e6
    row["lazy_record_us_per_op"] = median_ns(record_only, reps, warmup) / n / 1e3
    row["lazy_record_sync_us_per_op"] = median_ns(record_and_sync, reps, warmup) / n / 1e3
    return row


def print_table(rows, eager_devices, reference):
    header = ["size", "ops"] + [f"eager {d} us/op" for d in eager_devices] + [
        "lazy record us/op", "lazy+sync us/op", "record/eager", "+sync/eager", "cold ms"]
    table = []
    for r in rows:
        table.append(
            [str(r["size"]), str(r["ops"])]
            + [f"{r[f'eager_{d}_us_per_op']:.2f}" for d in eager_devices]
            + [f"{r['lazy_record_us_per_op']:.2f}", f"{r['lazy_record_sync_us_per_op']:.2f}",
               f"{r['ratio_record']:.2f}x", f"{r['ratio_record_sync']:.2f}x",
               f"{r['lazy_cold_ms']:.1f}"]
        )
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for t in table:
        print("  ".join(c.rjust(w) for c, w in zip(t, widths)))
    print(f"\nratios are lazy / eager on {reference} (where lazy tensors execute); "
          "< 1x means recording costs less than running eagerly")


def write_chart(rows, eager_devices, reference, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter
    except ImportError:
        print("note: matplotlib is not installed, so no chart was written (pip install matplotlib)")
        return None
    fig, axes = plt.subplots(1, len(SIZES), figsize=(5 * len(SIZES), 4), sharey=True)
    for ax, size in zip(axes, SIZES):
        rs = [r for r in rows if r["size"] == size]
        ops = [r["ops"] for r in rs]
        for d in eager_devices:
            ax.plot(ops, [r[f"eager_{d}_us_per_op"] for r in rs], "o-", label=f"eager {d}")
        ax.plot(ops, [r["lazy_record_us_per_op"] for r in rs], "s-", label="lazy record")
        ax.plot(ops, [r["lazy_record_sync_us_per_op"] for r in rs], "^-", label="lazy record + sync")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.set_xlabel("ops in the chain")
        ax.set_title(f"{size}-element tensors")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("host µs per op")
    axes[0].legend()
    fig.suptitle(f"W0 trace overhead (lazy executes on {reference})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def environment():
    return {
        "benchmark": "W0 trace_overhead",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "lazyfuse": lazyfuse.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hardware_device": lazyfuse.hardware_device(),
    }


def heap_in_use():
    """Bytes malloc has handed out and not taken back (glibc's mallinfo2), or None."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def pending_node_kib(size, nodes=6000):
    """KiB of heap per recorded, unsynced node (`x * 1.0001 + 0.5` chains), or None."""
    if heap_in_use() is None:
        return None
    x = torch.randn(size).to("lazy")
    for _ in range(200):  # the ops' meta-cache entries and the allocator's first blocks
        x = x * 1.0001 + 0.5
    lazyfuse.mark_step()
    gc.collect()
    before = heap_in_use()
    for _ in range(nodes // 2):
        x = x * 1.0001 + 0.5
    grown = heap_in_use() - before
    lazyfuse.mark_step()
    return grown / nodes / 1024


def main():
    args = parse_args()
    hardware = lazyfuse.hardware_device()
    reference = "cuda" if hardware.startswith("cuda") else "cpu"
    eager_devices = ["cpu"] + (["cuda"] if reference == "cuda" else [])
    print(f"W0 trace overhead | lazyfuse {lazyfuse.__version__} | torch {torch.__version__} | "
          f"lazy executes on {hardware}\n")

    rows = []
    for size in SIZES:
        for n in CHAINS:
            row = measure(size, n, eager_devices, args.quick)
            eager = row[f"eager_{reference}_us_per_op"]
            row["ratio_record"] = row["lazy_record_us_per_op"] / eager
            row["ratio_record_sync"] = row["lazy_record_sync_us_per_op"] / eager
            rows.append(row)
            print(f"  measured size={size} ops={n}", file=sys.stderr)
    print()
    print_table(rows, eager_devices, reference)
    pending = {str(size): pending_node_kib(size) for size in SIZES}
    pending = {s: None if kib is None else round(kib, 2) for s, kib in pending.items()}
    print("\nhost memory per recorded, unsynced node (KiB): "
          + ", ".join(f"size {s}: {kib}" for s, kib in pending.items()))

    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / "trace_overhead.json"
    result = {"environment": environment(), "reference_device": reference, "rows": rows,
              "pending_node_kib": pending}
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {json_path}")
    chart = write_chart(rows, eager_devices, reference, args.out / "trace_overhead.png")
    if chart is not None:
        print(f"wrote {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
