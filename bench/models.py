#!/usr/bin/env python3
"""What users run (docs/benchmarks.md, issue "real models"): training steps, optimizer steps and
decoding, lazyfuse next to eager PyTorch and torch.compile (inductor) in one run, rounds
interleaved, medians of per-round step times.

  mlp_demo     `make demo`'s MLP step (64->128->10, GELU, cross-entropy, SGD-momentum, batch
               256), loss read every step
  gpt_block    one GPT layer (d 256, 4 heads, seq 128, batch 8): LayerNorm, causal attention,
               MLP, residuals; forward, backward and AdamW
  adam_300     Adam over 300 parameter tensors (ResNet-shaped, 13.2M values), each side with
               PyTorch's default for its device (eager on the CPU: the per-tensor loop; lazy:
               foreach), and eager fused=True timed beside it
  sgd_300      SGD with momentum over the same tensors
  adam_300_fused, sgd_300_fused
               the same steps with `fused=True` on every side (lazy: Note [Fused optimizer
               steps]; eager: ATen's fused CPU kernels)
  kv_decode    64 tokens decoded with a preallocated KV cache (index_copy_ at a position tensor,
               attention over the whole cache with a mask), batch 4, d 256, 2 layers; one
               mark_step per token
  cache_update 16 tokens written into a static KV cache the program holds (4 layers of
               [2, 4, 8, 1024, 64], 64 MB: `cache[l].index_copy_(3, pos, kv)` as Hugging Face's
               StaticCache does), with each token's K/V projection; one mark_step per token
  layer_norm   F.layer_norm forward + backward, [4096, 1024] (eager: ATen's native kernels)
  softmax      softmax forward + backward, [4096, 1024]
  resnet       a small ResNet (3 stages of 2 basic blocks, batch 16, 32x32), SGD step

Every side runs the same step function on its own copy of the same data. Lazy steps end with
mark_step + wait (what a training loop pays). Each round times `--steps` steps per side, sides in
rotating order; the reported figure is the median over rounds. Ratios above 1 mean lazyfuse is
faster. Next to the times, the peak memory of eager's and lazyfuse's steps, each side in a process
of its own. Writes bench/results/models.json and models.png (when matplotlib is importable).

    python bench/models.py [--quick] [--only NAME] [--no-compile] [--rounds 7]
"""

import argparse
import copy
import datetime
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse
from bench_timing import cpu_busy, processor, run_header

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"
LAZY = torch.device("lazy")


# ---- models ---------------------------------------------------------------------------------------

class Block(nn.Module):
    """A pre-norm GPT layer written with plain ops (no fast path that only one side takes)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Decoder(nn.Module):
    """Single-token decoding against a preallocated cache [layers, 2, batch, heads, T, dh]."""

    def __init__(self, d, heads, layers):
        super().__init__()
        self.heads = heads
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "proj": nn.Linear(d, d),
            "fc1": nn.Linear(d, 4 * d), "fc2": nn.Linear(4 * d, d)}) for _ in range(layers))

    def forward(self, x, cache, pos, positions):
        b, _, d = x.shape
        dh = d // self.heads
        mask = positions > pos  # [T]: slots not yet written
        for i, blk in enumerate(self.blocks):
            q, k, v = blk["qkv"](blk["ln"](x)).split(d, dim=-1)
            q, k, v = (z.view(b, 1, self.heads, dh).transpose(1, 2) for z in (q, k, v))
            cache[i, 0].index_copy_(2, pos, k)
            cache[i, 1].index_copy_(2, pos, v)
            scores = (q @ cache[i, 0].transpose(-2, -1)) * (1.0 / math.sqrt(dh))
            y = scores.masked_fill(mask, float("-inf")).softmax(-1) @ cache[i, 1]
            x = x + blk["proj"](y.transpose(1, 2).reshape(b, 1, d))
            x = x + blk["fc2"](F.gelu(blk["fc1"](x)))
        return x


def basic_block(cin, cout, stride):
    body = nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
    short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
             if stride != 1 or cin != cout else nn.Identity())

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.short = body, short

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    return Res()


def small_resnet():
    layers = [nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
    for cin, cout, stride in ((32, 32, 1), (32, 32, 1), (32, 64, 2), (64, 64, 1),
                              (64, 128, 2), (128, 128, 1)):
        layers.append(basic_block(cin, cout, stride))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def resnet_shaped_params(count=300):
    """Parameter shapes like a ResNet's: 3x3 and 1x1 convolutions, and BatchNorm vectors."""
    shapes, widths = [], [64, 64, 128, 128, 256, 256]
    while len(shapes) < count:
        for c in widths:
            shapes += [(c, c, 3, 3), (c,), (c,), (c, c // 2, 1, 1), (c // 2,), (c // 2,)]
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) * 0.1 for s in shapes[:count]]


# ---- workloads: each returns {side: step function} on its own copies --------------------------

ONLY_SIDE = None  # set by --memory-of: build that side alone


def devices(compile_ok):
    """(side, device) of the sides a workload runs: eager, lazy, and torch.compile on the CPU."""
    for side, dev in (("eager", torch.device("cpu")), ("lazy", LAZY),
                      ("compile", torch.device("cpu"))):
        if (side != "compile" or compile_ok) and ONLY_SIDE in (None, side):
            yield side, dev


def train_sides(make_model, make_opt, batch, loss_fn, compile_ok, read_loss=False):
    """Eager, lazy and compiled copies of one model, optimizer and batch: one step each."""
    torch.manual_seed(0)
    base = make_model()
    sides = {}
    for side, dev in devices(compile_ok):
        model = copy.deepcopy(base).to(dev)
        opt = make_opt(model.parameters())
        inputs = [t.to(dev) for t in batch]
        forward = torch.compile(model) if side == "compile" else model
        opt_step = torch.compile(opt.step) if side == "compile" else opt.step

        def step(model=model, forward=forward, opt=opt, opt_step=opt_step, inputs=inputs,
                 lazy=side == "lazy"):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(forward, *inputs)
            loss.backward()
            opt_step()
            if lazy:
                lazyfuse.mark_step()
                lazyfuse.wait()
            return loss.item() if read_loss else None

        sides[side] = step
    return sides


def mlp_demo_batch():
    """`make demo`'s batch: 256 rows of 64 features and their 10-class labels."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 64, generator=g), torch.randint(0, 10, (256,), generator=g)


def mlp_demo_model():
    """`make demo`'s model, its parameters drawn from the global generator."""
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))


def w_mlp_demo(quick, compile_ok):
    x, y = mlp_demo_batch()
    return train_sides(
        mlp_demo_model,
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
        (x, y), lambda m, x, y: F.cross_entropy(m(x), y), compile_ok, read_loss=True)


def w_mlp_no_sync(quick, compile_ok):
    """mlp_demo's model trained for 200 steps with no mark_step and no read but the last loss
    (one step of this workload is those 200): the lazy side's trace is cut at its repeated step
    (Note [Automatic step boundaries]). Without the cuts its first run compiles one graph of
    all 200 steps (lazy first s)."""
    x, y = mlp_demo_batch()
    torch.manual_seed(0)
    base = mlp_demo_model()
    sides = {}
    for side, dev in devices(compile_ok):
        model = copy.deepcopy(base).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
        forward = torch.compile(model) if side == "compile" else model
        opt_step = torch.compile(opt.step) if side == "compile" else opt.step
        inputs = (x.to(dev), y.to(dev))

        def steps(forward=forward, opt=opt, opt_step=opt_step, inputs=inputs):
            for _ in range(200):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(forward(inputs[0]), inputs[1])
                loss.backward()
                opt_step()
            return loss.item()

        sides[side] = steps
    return sides


def w_gpt_block(quick, compile_ok):
    b, t, d = (4, 64, 128) if quick else (8, 128, 256)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, t, d, generator=g)
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    return train_sides(lambda: Block(d, 4), lambda p: torch.optim.AdamW(p, lr=1e-4),
                       (x, mask), lambda m, x, mask: m(x, mask).square().mean(), compile_ok)


def optimizer_sides(make_opt, compile_ok, extra=None):
    params = resnet_shaped_params()
    sides = {}
    variants = [(side, dev, {}) for side, dev in devices(compile_ok)]
    if extra and ONLY_SIDE is None:
        variants.append((extra[0], "cpu", extra[1]))
    for side, dev, kwargs in variants:
        ps = [p.detach().clone().to(dev).requires_grad_(True) for p in params]
        for p in ps:
            p.grad = torch.full_like(p, 1e-3)
        opt = make_opt(ps, **kwargs)
        step = torch.compile(opt.step) if side == "compile" else opt.step

        def run(step=step, lazy=side == "lazy"):
            step()
            if lazy:
                lazyfuse.mark_step()
                lazyfuse.wait()

        sides[side] = run
    return sides


def w_adam_300(quick, compile_ok):
    return optimizer_sides(lambda p, **kw: torch.optim.Adam(p, lr=1e-3, **kw), compile_ok,
                           ("eager fused", {"fused": True}))


def w_sgd_300(quick, compile_ok):
    return optimizer_sides(lambda p, **kw: torch.optim.SGD(p, lr=1e-3, momentum=0.9, **kw),
                           compile_ok, ("eager fused", {"fused": True}))


def w_adam_300_fused(quick, compile_ok):
    """adam_300 with `fused=True` on every side (eager: ATen's fused CPU kernel)."""
    return optimizer_sides(lambda p, **kw: torch.optim.Adam(p, lr=1e-3, fused=True, **kw),
                           compile_ok)


def w_sgd_300_fused(quick, compile_ok):
    """sgd_300 with `fused=True` on every side."""
    return optimizer_sides(
        lambda p, **kw: torch.optim.SGD(p, lr=1e-3, momentum=0.9, fused=True, **kw), compile_ok)


def token_loop(token, x_start, tokens, lazy):
    """A decoding side: `x = token(x, t)` for each token t without autograd, a mark_step per
    token on lazy."""

    def decode():
        with torch.no_grad():
            x = x_start
            for t in range(tokens):
                x = token(x, t)
                if lazy:
                    lazyfuse.mark_step()
            if lazy:
                lazyfuse.wait()
        return x

    return decode


def w_kv_decode(quick, compile_ok):
    b, d, heads, layers, tokens = 4, 256, 4, 2, (16 if quick else 64)
    torch.manual_seed(0)
    base = Decoder(d, heads, layers).eval()
    x0 = torch.randn(b, 1, d)
    sides = {}
    for side, dev in devices(compile_ok):
        model = copy.deepcopy(base).to(dev)
        forward = torch.compile(model) if side == "compile" else model
        cache = torch.zeros(layers, 2, b, heads, tokens, d // heads, device=dev)
        positions = torch.arange(tokens, device=dev)
        pos = [torch.tensor([t], device=dev) for t in range(tokens)]
        x_start = x0.to(dev)

        sides[side] = token_loop(
            lambda x, t, forward=forward, cache=cache, pos=pos, positions=positions:
                forward(x, cache, pos[t], positions),
            x_start, tokens, side == "lazy")
    return sides


def w_cache_update(quick, compile_ok):
    b, heads, dh, layers, positions, tokens = 4, 8, 64, 4, (256 if quick else 1024), 16
    d = heads * dh
    torch.manual_seed(0)
    proj = torch.randn(layers, d, 2 * d) * d ** -0.5
    x0 = torch.randn(b, d)

    def write(x, caches, w, pos):
        for layer, cache in enumerate(caches):
            kv = (x @ w[layer]).view(b, 2, heads, 1, dh).transpose(0, 1)
            cache.index_copy_(3, pos, kv)
            x = x + kv[0, :, :, 0].reshape(b, d)
        return x

    sides = {}
    for side, dev in devices(compile_ok):
        caches = [torch.zeros(2, b, heads, positions, dh, device=dev) for _ in range(layers)]
        w, x_start = proj.to(dev), x0.to(dev)
        pos = [torch.tensor([t], device=dev) for t in range(tokens)]
        step = torch.compile(write) if side == "compile" else write

        sides[side] = token_loop(
            lambda x, t, step=step, caches=caches, w=w, pos=pos: step(x, caches, w, pos[t]),
            x_start, tokens, side == "lazy")
    return sides


def norm_sides(fn, shape, compile_ok):
    g = torch.Generator().manual_seed(0)
    x, grad = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    w, bias = torch.randn(shape[-1], generator=g), torch.randn(shape[-1], generator=g)
    sides = {}
    for side, dev in devices(compile_ok):
        xs = x.to(dev).requires_grad_(True)
        ws, bs = w.to(dev).requires_grad_(True), bias.to(dev).requires_grad_(True)
        gs = grad.to(dev)
        f = torch.compile(fn) if side == "compile" else fn

        def run(f=f, xs=xs, ws=ws, bs=bs, gs=gs, lazy=side == "lazy"):
            out = f(xs, ws, bs)
            grads = torch.autograd.grad(out, (xs, ws, bs), gs)
            if lazy:
                lazyfuse.sync(out, *grads)
                lazyfuse.wait()
            return grads

        sides[side] = run
    return sides


def w_layer_norm(quick, compile_ok):
    shape = (1024, 1024) if quick else (4096, 1024)
    return norm_sides(lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), shape, compile_ok)


def w_softmax(quick, compile_ok):
    shape = (1024, 1024) if quick else (4096, 1024)
    return norm_sides(lambda x, w, b: (x * w + b).softmax(-1), shape, compile_ok)


def w_resnet(quick, compile_ok):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
    return train_sides(small_resnet, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                       (x, y), lambda m, x, y: F.cross_entropy(m(x), y), compile_ok)


WORKLOADS = {"mlp_demo": w_mlp_demo, "mlp_no_sync": w_mlp_no_sync, "gpt_block": w_gpt_block,
             "adam_300": w_adam_300, "sgd_300": w_sgd_300, "adam_300_fused": w_adam_300_fused,
             "sgd_300_fused": w_sgd_300_fused, "kv_decode": w_kv_decode,
             "cache_update": w_cache_update, "layer_norm": w_layer_norm, "softmax": w_softmax,
             "resnet": w_resnet}


# ---- measurement ----------------------------------------------------------------------------------

def measure(sides, rounds, steps, warmup):
    first = {}
    for name, fn in sides.items():
        start = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - start
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(steps):
                sides[name]()
            samples[name].append((time.perf_counter() - start) * 1e3 / steps)
    return {name: statistics.median(s) for name, s in samples.items()}, first


def markdown(result):
    """docs/models.md: the run's table, ratios above 1 where lazyfuse is faster."""
    lines = [
        "# What users run: lazyfuse against eager and torch.compile",
        "",
        "Written by `bench/models.py --markdown docs/models.md` (what each workload is: the",
        "script's docstring). One run, " + result["date"] + ", torch " + result["torch"] + ", "
        + str(result["threads"]) + " threads on " + result["cpu"] + "; CPU busy beside the run: "
        + " / ".join(f"{b:.0%}" for b in result["cpu_busy"]) + " (before / after).",
        "Each figure is the median over rounds of the time per step, sides interleaved; a ratio",
        "is the other side's time over lazyfuse's (above 1: lazyfuse is faster).",
        "",
        "Lazy first s: the first step of lazyfuse's side, compiles included (in seconds).",
        "",
        "Peak memory: the most resident memory six steps of a side held above what its process",
        "held once the workload was set up (each side in a process of its own; MiB). lazyfuse's",
        "figure includes what its first steps load once: compiled kernels, and the modules",
        "PyTorch's Python meta kernels import when a lazy op first needs its output's shape",
        "(layer_norm's imports torch._dynamo, and with it triton: about 50 MB).",
        "",
        "| workload | eager ms | lazy ms | torch.compile ms | lazy vs eager | lazy vs compile "
        "| lazy vs eager `fused=True` | peak MiB eager | peak MiB lazy | lazy first s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(row, key, fmt):
        return fmt.format(row[key]) if key in row else "–"

    for row in result["rows"]:
        flag = " (below eager)" if row["lazy_vs_eager"] < 1 else ""
        lines.append(
            f"| {row['workload']} | {row['eager_ms']:.3f} | {row['lazy_ms']:.3f} | "
            f"{cell(row, 'compile_ms', '{:.3f}')} | {row['lazy_vs_eager']:.2f}×{flag} | "
            f"{cell(row, 'lazy_vs_compile', '{:.2f}×')} | "
            f"{cell(row, 'lazy_vs_eager_fused', '{:.2f}×')} | "
            f"{cell(row, 'eager_peak_mib', '{:.0f}')} | {cell(row, 'lazy_peak_mib', '{:.0f}')} | "
            f"{row['lazy_first_s']:.2f} |")
    return "\n".join(lines) + "\n"


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_of(name, side, quick):
    """Run in a child process: the peak resident memory of six steps of `side` of workload
    `name` above what the process held once the workload was set up (MiB): optimizer state,
    activations, gradients, temporaries, what the allocator (or lazyfuse's buffer pool) keeps
    between steps, and for lazyfuse the compiled kernels."""
    global ONLY_SIDE
    ONLY_SIDE = side
    fn = WORKLOADS[name](quick, False)[side]
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from the current resident size
    before = status_kib("VmRSS")
    for _ in range(6):
        fn()
    print((status_kib("VmHWM") - before) / 1024)


def peak_memory_mib(name, quick):
    """{side: MiB} for eager and lazy, each measured in a process of its own."""
    result = {}
    for side in ("eager", "lazy"):
        cmd = [sys.executable, __file__, "--memory-of", name, side] + (["--quick"] if quick else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        result[side] = float(out.strip().splitlines()[-1])
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    p.add_argument("--only", action="append", choices=sorted(WORKLOADS), metavar="NAME")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--rounds", type=int)
    p.add_argument("--steps", type=int, default=3, help="steps per side per round")
    p.add_argument("--out", type=pathlib.Path, default=RESULTS_DIR)
    p.add_argument("--markdown", type=pathlib.Path,
                   help="also write the table as Markdown here (docs/models.md)")
    p.add_argument("--no-memory", action="store_true", help="leave the peak memory out")
    p.add_argument("--memory-of", nargs=2, metavar=("NAME", "SIDE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.memory_of:
        return memory_of(*args.memory_of, args.quick)
    rounds = args.rounds or (3 if args.quick else 7)
    busy_before = cpu_busy()
    print(run_header(busy_before))
    rows = []
    for name in args.only or WORKLOADS:
        sides = WORKLOADS[name](args.quick, not args.no_compile)
        medians, first = measure(sides, rounds, args.steps, warmup=2)
        row = {"workload": name, **{f"{k}_ms": v for k, v in medians.items()},
               "lazy_first_s": first["lazy"],
               "lazy_vs_eager": medians["eager"] / medians["lazy"]}
        if "compile" in medians:
            row["lazy_vs_compile"] = medians["compile"] / medians["lazy"]
            row["compile_first_s"] = first["compile"]
        if "eager fused" in medians:
            row["lazy_vs_eager_fused"] = medians["eager fused"] / medians["lazy"]
        if not args.no_memory:
            memory = peak_memory_mib(name, args.quick)
            row["eager_peak_mib"], row["lazy_peak_mib"] = memory["eager"], memory["lazy"]
        rows.append(row)
        flag = "  BELOW EAGER" if row["lazy_vs_eager"] < 1.0 else ""
        print(f"{name:11s} eager {medians['eager']:9.3f} ms  lazy {medians['lazy']:9.3f} ms  "
              + (f"compile {medians['compile']:9.3f} ms  " if "compile" in medians else "")
              + f"lazy/eager x{row['lazy_vs_eager']:5.2f}"
              + (f"  lazy/compile x{row['lazy_vs_compile']:5.2f}" if "compile" in medians else "")
              + (f"  lazy/fused x{row['lazy_vs_eager_fused']:5.2f}" if "eager fused" in medians
                 else "")
              + (f"  peak MiB eager {row['eager_peak_mib']:.0f} lazy {row['lazy_peak_mib']:.0f}"
                 if "lazy_peak_mib" in row else "") + flag, flush=True)
    busy_after = cpu_busy()
    print(f"CPU busy after the run {busy_after:.0%}")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpu": processor(), "quick": args.quick,
              "cpu_busy": [busy_before, busy_after], "rows": rows}
    (args.out / "models.json").write_text(json.dumps(result, indent=1))
    if args.markdown:
        args.markdown.write_text(markdown(result))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.5))
    ys = range(len(rows))
    ax.barh([y + 0.2 for y in ys], [r["lazy_vs_eager"] for r in rows], 0.4, label="vs eager")
    ax.barh([y - 0.2 for y in ys], [r.get("lazy_vs_compile", 0) for r in rows], 0.4,
            label="vs torch.compile")
    ax.set_yticks(list(ys), [r["workload"] for r in rows])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("lazyfuse speedup (same run; above 1: lazyfuse is faster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "models.png")


if __name__ == "__main__":
    main()
