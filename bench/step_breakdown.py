#!/usr/bin/env python3
"""Where a step's time goes, lazyfuse next to eager PyTorch in one run: the host-bound workloads
of bench/models.py taken apart phase by phase.

  mlp_demo   `make demo`'s MLP step, timed per phase: zero_grad, forward, loss, backward,
             optimizer step, mark_step (lazy: graph lookup and the plan run),
             loss.item()
  kv_decode  one token of bench/models.py's KV-cache decoder: recording, then mark_step
  kv_lines   the same token statement by statement (the lines of models.Decoder.forward,
             grouped, each summed over both layers), then mark_step
  adam_300   Adam over 300 ResNet-shaped tensors: opt.step() (lazy: recording), then mark_step

For each, the lazy side's ops recorded and graph nodes per step, and the time of its plans by kind
of step (extern calls by op, fused kernels, views; averaged over all steps), so that recording,
graph overhead and kernel time can be told apart. Phases are timed around each call
(perf_counter), medians over --steps steps after warm-up; sides alternate in blocks of 20 steps.
Writes bench/results/step_breakdown.json.

    python bench/step_breakdown.py [--steps 400] [--only mlp_demo]
"""

import argparse
import collections
import copy
import datetime
import json
import math
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import lazyfuse
import models
from bench_timing import cpu_busy, run_header

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"
LAZY = torch.device("lazy")
BLOCK = 20  # steps of one side before the other side runs


def plan_by_kind():
    """The last plan's milliseconds summed by kind of step: 'extern <op>', 'kernels', 'views'."""
    kinds = collections.Counter()
    for label, ms in lazyfuse.last_plan_profile():
        if label.startswith("lazyfuse::extern "):
            kinds[label.split()[1]] += ms
        elif label.startswith("lazyfuse::view"):
            kinds["views"] += ms
        else:
            kinds["kernels"] += ms
    return kinds


def timed_phases(phases):
    """Runs the (name, fn) phases in order, returns {name: microseconds} (a name that comes
    more than once, the sum)."""
    out = {}
    for name, fn in phases:
        start = time.perf_counter()
        fn()
        out[name] = out.get(name, 0.0) + (time.perf_counter() - start) * 1e6
    return out


class Side:
    """One side's step split into phases, and the samples taken of it."""

    def __init__(self, lazy, make_phases):
        self.lazy = lazy
        self.make_phases = make_phases
        self.samples = collections.defaultdict(list)
        self.plan = collections.Counter()  # microseconds summed over the recorded steps
        self.recorded = 0

    def run(self, record):
        times = timed_phases(self.make_phases())
        if not record:
            return
        self.recorded += 1
        for name, us in times.items():
            self.samples[name].append(us)
        if self.lazy:
            for kind, ms in plan_by_kind().items():
                self.plan[kind] += ms * 1e3


def mlp_demo_sides():
    x, y = models.mlp_demo_batch()
    torch.manual_seed(0)
    base = models.mlp_demo_model()
    sides = {}
    for side, dev in (("eager", torch.device("cpu")), ("lazy", LAZY)):
        model = copy.deepcopy(base).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
        xs, ys = x.to(dev), y.to(dev)
        state = {}

        def phases(model=model, opt=opt, xs=xs, ys=ys, state=state, lazy=side == "lazy"):
            def forward():
                state["out"] = model(xs)

            def loss():
                state["loss"] = F.cross_entropy(state["out"], ys)

            return [("zero_grad", lambda: opt.zero_grad(set_to_none=True)),
                    ("forward", forward), ("loss", loss),
                    ("backward", lambda: state["loss"].backward()),
                    ("optimizer", opt.step),
                    ("mark_step", lazyfuse.mark_step if lazy else lambda: None),
                    ("item", lambda: state["loss"].item())]

        sides[side] = Side(side == "lazy", phases)
    return sides


def decoder_sides(token_phases):
    """Eager and lazy sides of bench/models.py's KV-cache decoder, one token a step:
    `token_phases(model, cache, positions, pos, x, state, lazy)` gives the step's phases for the
    token at position tensor `pos` with input `x`; they leave the token's output in
    state["x"]. Token 0 takes the first input again, as a new sequence."""
    b, d, heads, layers, tokens = 4, 256, 4, 2, 64
    torch.manual_seed(0)
    base = models.Decoder(d, heads, layers).eval()
    x0 = torch.randn(b, 1, d)
    sides = {}
    for side, dev in (("eager", torch.device("cpu")), ("lazy", LAZY)):
        model = copy.deepcopy(base).to(dev)
        cache = torch.zeros(layers, 2, b, heads, tokens, d // heads, device=dev)
        positions = torch.arange(tokens, device=dev)
        pos = [torch.tensor([t], device=dev) for t in range(tokens)]
        state = {"x": x0.to(dev), "t": 0}

        def phases(model=model, cache=cache, positions=positions, pos=pos, state=state,
                   lazy=side == "lazy", x_start=x0.to(dev)):
            t = state["t"]
            state["t"] = (t + 1) % tokens
            x = state["x"] if t else x_start
            return token_phases(model, cache, positions, pos[t], x, state, lazy)

        sides[side] = Side(side == "lazy", phases)
    return sides


def kv_decode_sides():
    def token_phases(model, cache, positions, pos, x, state, lazy):
        def token():
            with torch.no_grad():
                state["x"] = model(x, cache, pos, positions)

        return [("token", token), ("mark_step", lazyfuse.mark_step if lazy else lambda: None)]

    return decoder_sides(token_phases)


def decoder_line_phases(model, x, cache, pos, positions, state):
    """models.Decoder.forward for one token, statement by statement: (name, fn) phases that
    leave the result in state["x"], each line group named the same in every layer."""
    b, _, d = x.shape
    heads = model.heads
    dh = d // heads
    s = {"x": x}

    def mask():
        s["mask"] = positions > pos

    def layer(i, blk):
        def ln_qkv():
            s["h"] = blk["qkv"](blk["ln"](s["x"]))

        def split_views():
            q, k, v = s["h"].split(d, dim=-1)
            s["q"], s["k"], s["v"] = (z.view(b, 1, heads, dh).transpose(1, 2) for z in (q, k, v))

        def cache_writes():
            cache[i, 0].index_copy_(2, pos, s["k"])
            cache[i, 1].index_copy_(2, pos, s["v"])

        def scores():
            s["scores"] = s["q"] @ cache[i, 0].transpose(-2, -1)

        def softmax():
            scaled = s["scores"] * (1.0 / math.sqrt(dh))
            s["p"] = scaled.masked_fill(s["mask"], float("-inf")).softmax(-1)

        def values():
            s["y"] = (s["p"] @ cache[i, 1]).transpose(1, 2).reshape(b, 1, d)

        def proj_mlp():
            xi = s["x"] + blk["proj"](s["y"])
            s["x"] = xi + blk["fc2"](F.gelu(blk["fc1"](xi)))

        return [("ln+qkv", ln_qkv), ("split+views", split_views),
                ("cache writes", cache_writes), ("q@k^T", scores), ("softmax", softmax),
                ("p@v+reshape", values), ("proj+mlp", proj_mlp)]

    phases = [("mask", mask)]
    for i, blk in enumerate(model.blocks):
        phases += layer(i, blk)

    def result():  # the intermediates die here, as the decoder's locals do
        state["x"] = s.pop("x")
        s.clear()

    phases.append(("result", result))
    return phases


def kv_lines_sides():
    def token_phases(model, cache, positions, pos, x, state, lazy):
        grad_off = torch.no_grad()
        return ([("no_grad", grad_off.__enter__)]
                + decoder_line_phases(model, x, cache, pos, positions, state)
                + [("no_grad", lambda: grad_off.__exit__(None, None, None)),
                   ("mark_step", lazyfuse.mark_step if lazy else lambda: None)])

    return decoder_sides(token_phases)


def adam_300_sides():
    params = models.resnet_shaped_params()
    sides = {}
    for side, dev in (("eager", torch.device("cpu")), ("lazy", LAZY)):
        ps = [p.detach().clone().to(dev).requires_grad_(True) for p in params]
        for p in ps:
            p.grad = torch.full_like(p, 1e-3)
        opt = torch.optim.Adam(ps, lr=1e-3)

        def phases(opt=opt, lazy=side == "lazy"):
            return [("optimizer", opt.step),
                    ("mark_step", (lambda: (lazyfuse.mark_step(), lazyfuse.wait())) if lazy
                     else lambda: None)]

        sides[side] = Side(side == "lazy", phases)
    return sides


WORKLOADS = {"mlp_demo": mlp_demo_sides, "kv_decode": kv_decode_sides,
             "kv_lines": kv_lines_sides, "adam_300": adam_300_sides}


def measure(name, steps):
    sides = WORKLOADS[name]()
    for side in sides.values():  # warm-up: compiles, caches, allocator
        for _ in range(BLOCK):
            side.run(record=False)
    lazyfuse.reset_metrics()
    done = 0
    while done < steps:
        for side in sides.values():
            for _ in range(BLOCK):
                side.run(record=True)
        done += BLOCK
    counters = lazyfuse.metrics()
    row = {"workload": name, "steps": done,
           "ops_recorded_per_step": counters["OpsRecorded"] / done,
           "graph_nodes_per_step": counters["GraphNodes"] / max(1, counters["GraphsExecuted"]),
           "kernels_per_step": counters["KernelsLaunched"] / done}
    for side_name, side in sides.items():
        row[side_name] = {phase: statistics.median(v) for phase, v in side.samples.items()}
        row[side_name]["total"] = sum(row[side_name].values())
    lazy = sides["lazy"]
    row["lazy_plan"] = {k: us / lazy.recorded for k, us in lazy.plan.items()}
    return row


def print_row(row):
    print(f"\n{row['workload']}: medians of {row['steps']} steps a side, microseconds; lazy "
          f"records {row['ops_recorded_per_step']:.0f} ops a step, its graphs hold "
          f"{row['graph_nodes_per_step']:.0f} nodes, {row['kernels_per_step']:.0f} kernels a step")
    print(f"  {'phase':12s} {'eager':>9s} {'lazy':>9s}")
    for phase in row["lazy"]:
        print(f"  {phase:12s} {row['eager'].get(phase, 0.0):9.1f} {row['lazy'][phase]:9.1f}")
    print("  lazy's plan by kind of step (microseconds a step, averaged over all steps):")
    for kind, us in sorted(row["lazy_plan"].items(), key=lambda kv: -kv[1]):
        print(f"    {kind:28s} {us:9.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400, help="recorded steps per side")
    p.add_argument("--only", action="append", choices=sorted(WORKLOADS), metavar="NAME")
    p.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR)
    args = p.parse_args()
    busy_before = cpu_busy()
    print(run_header(busy_before))
    rows = []
    for name in args.only or WORKLOADS:
        steps = args.steps if name != "adam_300" else max(BLOCK, args.steps // 10)
        rows.append(measure(name, steps))
        print_row(rows[-1])
    busy_after = cpu_busy()
    print(f"\nCPU busy after the run {busy_after:.0%}")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpu_busy": [busy_before, busy_after], "rows": rows}
    (args.out / "step_breakdown.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
