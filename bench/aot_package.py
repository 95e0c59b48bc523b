#!/usr/bin/env python3
"""Ahead-of-time packages (lazyfuse.aot_compile / aot_load) next to eager PyTorch, torch.compile
(inductor) and the same model on lazy tensors, in one process, for inference on CPU tensors.

Workloads: examples/aot/export_model.py's classifier ([32, 64] -> 10), `make demo`'s MLP on its
[256, 64] batch, an MLP 512 -> 2048 -> 512 on [64, 512], and bench/models.py's GPT block (d 256,
4 heads) on [8, 128, 256]. Each side is built and warmed up first; rounds then run the sides
interleaved, and the figures are medians over rounds of the time per call (the lazy side records
the forward and syncs its output each call; the package side builds its graph from the package
and runs the cached plan). Speedups are the other side's time over the package's: above 1, the
package is faster. Also the cold start of the classifier: a fresh process that loads the package
and runs it once, with no C++ compiler and an empty kernel cache, against eager's fresh process.
Writes bench/results/aot_package.json.

    python bench/aot_package.py [--rounds N]
"""

import argparse
import copy
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
from torch import nn

import lazyfuse
import models
from bench_timing import cpu_busy, interleaved_medians, run_header

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SIDES = ("eager", "inductor", "lazy", "package")
sys.path.insert(0, str(ROOT / "examples" / "aot"))
from export_model import Classifier  # noqa: E402


def workloads():
    torch.manual_seed(0)
    x, _ = models.mlp_demo_batch()
    mask = torch.ones(128, 128, dtype=torch.bool).triu(1)
    return {
        "classifier [32, 64]": (Classifier(), (torch.randn(32, 64),), 200),
        "mlp_demo forward [256, 64]": (models.mlp_demo_model(), (x,), 200),
        "mlp 512-2048-512 [64, 512]": (
            nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)),
            (torch.randn(64, 512),), 50),
        "gpt block forward [8, 128, 256]": (models.Block(256, 4), (torch.randn(8, 128, 256),
                                                                   mask), 10),
    }


def sides_of(model, args, folder):
    model = model.eval()
    package = lazyfuse.aot_load(lazyfuse.aot_compile(
        torch.export.export(model, args), folder / "model.lfpkg"))
    inductor = torch.compile(model)
    lazy_model = copy.deepcopy(model).to("lazy")
    lazy_args = [a.to("lazy") for a in args]

    def lazy():
        out = lazy_model(*lazy_args)
        lazyfuse.sync(out)
        return out

    return {"eager": lambda: model(*args), "inductor": lambda: inductor(*args), "lazy": lazy,
            "package": lambda: package(*args)}


COLD = """
import sys, time
start = time.perf_counter()
import torch
x = torch.load(sys.argv[2])
if sys.argv[1] == "eager":
    sys.path.insert(0, sys.argv[4])
    from export_model import Classifier
    torch.manual_seed(0)
    model = Classifier().eval()
    model.load_state_dict(torch.load(sys.argv[3]))
    with torch.no_grad():
        model(x)
else:
    import lazyfuse
    lazyfuse.aot_load(sys.argv[3])(x)
print(time.perf_counter() - start)
"""


def cold_start(folder):
    """Seconds from process start to the first output, eager and from the package."""
    model = Classifier().eval()
    x = torch.randn(32, 64)
    torch.save(x, folder / "x.pt")
    torch.save(model.state_dict(), folder / "state.pt")
    lazyfuse.aot_compile(torch.export.export(model, (x,)), folder / "cold.lfpkg")
    env = dict(os.environ, PATH="/nonexistent", LAZYFUSE_CACHE_DIR=str(folder / "cache"))
    env.pop("CXX", None)
    env.pop("LAZYFUSE_CXX", None)
    times = {"eager": [], "package": []}
    for _ in range(3):
        for side, model_file in (("eager", "state.pt"), ("package", "cold.lfpkg")):
            done = subprocess.run([sys.executable, "-c", COLD, side, str(folder / "x.pt"),
                                   str(folder / model_file), str(ROOT / "examples" / "aot")],
                                  env=env, capture_output=True, text=True, check=True)
            times[side].append(float(done.stdout.split()[-1]))
    return {side: statistics.median(v) for side, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = p.parse_args()
    busy_before = cpu_busy()
    print(run_header(busy_before))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        folder = pathlib.Path(tmp)
        for name, (model, inputs, calls) in workloads().items():
            med = interleaved_medians(sides_of(model, inputs, folder), calls, args.rounds)
            rows[name] = {"ms": med, **{f"package_vs_{s}": med[s] / med["package"]
                                        for s in SIDES if s != "package"}}
        cold = cold_start(folder)
    busy_after = cpu_busy()
    print("\n| workload | eager ms | inductor ms | lazy ms | package ms | package vs eager | "
          "vs inductor | vs lazy |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        m = r["ms"]
        print(f"| {name} | {m['eager']:.3f} | {m['inductor']:.3f} | {m['lazy']:.3f} | "
              f"{m['package']:.3f} | {r['package_vs_eager']:.2f}x | "
              f"{r['package_vs_inductor']:.2f}x | {r['package_vs_lazy']:.2f}x |")
    print(f"\ncold start of the classifier (fresh process to first output, no compiler, empty "
          f"kernel cache): eager {cold['eager']:.2f} s, package {cold['package']:.2f} s")
    print(f"CPU busy before/after: {busy_before:.0%} / {busy_after:.0%}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "aot_package.json").write_text(json.dumps({
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "rounds": args.rounds, "busy_before": busy_before, "busy_after": busy_after,
        "workloads": rows, "cold_start_s": cold}, indent=2) + "\n")


if __name__ == "__main__":
    main()
