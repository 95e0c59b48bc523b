#!/usr/bin/env python3
"""torch.compile(backend="lazyfuse") next to eager PyTorch and torch.compile's default backend
(inductor), in one process, on CPU tensors.

Workloads: a 10-op pointwise chain over [2048, 2048] (inference), LayerNorm forward + backward
over [2048, 1024], and `make demo`'s MLP training step (forward, backward, SGD; the model is
compiled, the optimizer step runs eagerly on every side). Each side is compiled and warmed up
first; then rounds run the sides interleaved, and the figures are medians over rounds of the time
per call. Speedups are eager's (or inductor's) time over lazyfuse's: above 1, lazyfuse is faster.
Writes bench/results/compile_backend.json.

    python bench/compile_backend.py [--rounds N]
"""

import argparse
import copy
import datetime
import json
import pathlib

import torch
import torch.nn.functional as F

import lazyfuse  # noqa: F401 (the backend is found through its entry point; this loads the ops)
import models
from bench_timing import cpu_busy, interleaved_medians, run_header

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
SIDES = ("eager", "inductor", "lazyfuse")


def compiled(fn, side):
    if side == "eager":
        return fn
    return torch.compile(fn, backend="inductor" if side == "inductor" else "lazyfuse")


def pointwise():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(2048, 2048, generator=g) for _ in range(3))

    def chain(a, b, c):
        x = a * b + c
        x = x.sin() * 0.5 + x.cos()
        x = torch.tanh(x) * b - a / (c.abs() + 1)
        return x.exp().clamp(max=10)

    return {side: (lambda f=compiled(chain, side): f(a, b, c)) for side in SIDES}


def layer_norm():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 1024, generator=g, requires_grad=True)
    w = torch.randn(1024, generator=g, requires_grad=True)
    bias = torch.randn(1024, generator=g, requires_grad=True)
    grad = torch.randn(2048, 1024, generator=g)

    def fwd(x, w, bias):
        return F.layer_norm(x, (1024,), w, bias)

    def step(f):
        x.grad = w.grad = bias.grad = None
        f(x, w, bias).backward(grad)

    return {side: (lambda f=compiled(fwd, side): step(f)) for side in SIDES}


def mlp_step():
    x, y = models.mlp_demo_batch()
    torch.manual_seed(0)
    base = models.mlp_demo_model()
    sides = {}
    for side in SIDES:
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        forward = compiled(model, side)

        def step(forward=forward, opt=opt):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(forward(x), y).backward()
            opt.step()

        sides[side] = step
    return sides


WORKLOADS = {"pointwise_chain": (pointwise, 5), "layer_norm_fwd_bwd": (layer_norm, 5),
             "mlp_demo_step": (mlp_step, 50)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = p.parse_args()
    busy_before = cpu_busy()
    print(run_header(busy_before))
    rows = {}
    for name, (make, calls) in WORKLOADS.items():
        med = interleaved_medians(make(), calls, args.rounds)
        rows[name] = {"ms": med, "vs_eager": med["eager"] / med["lazyfuse"],
                      "vs_inductor": med["inductor"] / med["lazyfuse"]}
    busy_after = cpu_busy()
    print("\n| workload | eager ms | inductor ms | lazyfuse ms | lazyfuse vs eager | "
          "lazyfuse vs inductor |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        m = r["ms"]
        print(f"| {name} | {m['eager']:.3f} | {m['inductor']:.3f} | {m['lazyfuse']:.3f} | "
              f"{r['vs_eager']:.2f}x | {r['vs_inductor']:.2f}x |")
    print(f"\nCPU busy before/after: {busy_before:.0%} / {busy_after:.0%}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_backend.json").write_text(json.dumps({
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "rounds": args.rounds, "busy_before": busy_before, "busy_after": busy_after,
        "workloads": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
