"""Programs whose shapes vary: compiles, cold wall time and warm per-step speed.

Workloads (lazyfuse vs eager vs torch.compile with its default dynamic policy, each side in a
cold process of its own with empty kernel caches):

  mlp_sweep     an MLP (256 -> 1024 -> 256) forward + backward on [8, t, 256], t over 12
                sequence lengths, each once
  gpt_sweep     a GPT block (d 128, 4 heads) forward + backward on [4, t, 128], 12 lengths
  softmax       softmax over [256, w], w over 10 widths
  layer_norm    F.layer_norm over [256, w], 10 widths
  decode_grow   decoding a growing sequence without a KV cache: step n runs the block over
                all n tokens so far (n = 1 .. 24)
  decode_at_t   writing a KV cache at a Python-int position (cache[:, t] = k) and attending
                over it, t = 0 .. 31

Per workload: wall time of the cold sweep per side, fused kernels compiled by lazyfuse (and those
one shape alone compiles), and then, warm, the median time of each shape per side; the warm
lazy/eager ratio at each shape is compared with the ratio of the first shape (a fixed-shape run).
Ratios above 1 mean lazyfuse is faster. Also the generic kernel against the specialized one on
the pointwise, softmax and LayerNorm kernels at one size, interleaved in one process.

    python bench/dynamic_shapes.py [--quick] [--only NAME] [--no-compile] [--device cuda]

With --device cuda, eager and torch.compile run on CUDA and lazyfuse with CUDA as its hardware
device (each timed run ends with a device synchronize); the results file gets a _cuda suffix.

Writes bench/results/dynamic_shapes.json.
"""

import argparse
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"
SIDES = ("eager", "lazy", "compile")


# ---- workloads (run inside a worker process) -------------------------------------------------

def workloads(quick):
    import torch
    import torch.nn.functional as F
    from torch import nn

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from models import Block

    lengths = list(range(64, 64 + 16 * 12, 16))[: 6 if quick else 12]
    widths = [256, 384, 500, 640, 768, 1000, 1024, 1536, 2000, 2048][: 5 if quick else 10]

    def mlp_sweep(dev, wrap):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to(dev)
        fwd = wrap(model)
        xs = {t: torch.randn(8, t, 256).to(dev) for t in lengths}

        def step(t):
            model.zero_grad(set_to_none=True)
            loss = fwd(xs[t]).square().mean()
            loss.backward()
            return [loss] + [p.grad for p in model.parameters()]
        return lengths, step

    def gpt_sweep(dev, wrap):
        torch.manual_seed(0)
        model = Block(128, 4).to(dev)
        fwd = wrap(model)
        xs = {t: torch.randn(4, t, 128).to(dev) for t in lengths}
        masks = {t: torch.ones(t, t, dtype=torch.bool).triu(1).to(dev) for t in lengths}

        def step(t):
            model.zero_grad(set_to_none=True)
            loss = fwd(xs[t], masks[t]).square().mean()
            loss.backward()
            return [loss] + [p.grad for p in model.parameters()]
        return lengths, step

    def rows(fn):
        def make(dev, wrap):
            f = wrap(fn)
            g = torch.Generator().manual_seed(0)
            xs = {w: torch.randn(256, w, generator=g).to(dev).requires_grad_(True) for w in widths}
            ws = {w: torch.randn(w, generator=g).to(dev).requires_grad_(True) for w in widths}

            def step(w):
                out = f(xs[w], ws[w])
                grads = torch.autograd.grad(out.square().sum(), (xs[w], ws[w]))
                return [out, *grads]
            return widths, step
        return make

    def decode_grow(dev, wrap):
        torch.manual_seed(0)
        model = Block(128, 4).to(dev).eval()
        fwd = wrap(model)
        n_tokens = 12 if quick else 24
        tokens = torch.randn(1, n_tokens, 128).to(dev)
        masks = {n: torch.ones(n, n, dtype=torch.bool).triu(1).to(dev)
                 for n in range(1, n_tokens + 1)}

        def step(n):
            with torch.no_grad():
                return [fwd(tokens[:, :n], masks[n])[:, -1]]
        return list(range(1, n_tokens + 1)), step

    def decode_at_t(dev, wrap):
        torch.manual_seed(0)
        steps = 16 if quick else 32
        proj = nn.Linear(128, 256).to(dev)
        cache = torch.zeros(2, 4, steps, 128).to(dev)
        xs = torch.randn(steps, 4, 128).to(dev)

        def body(x, cache, t):
            k, v = proj(x).split(128, dim=-1)
            cache[0, :, t] = k
            cache[1, :, t] = v
            scores = (cache[0] @ x.unsqueeze(-1)).squeeze(-1) / math.sqrt(128)
            return (scores.softmax(-1).unsqueeze(-1) * cache[1]).sum(1)

        f = wrap(body)

        def step(t):
            with torch.no_grad():
                return [f(xs[t], cache, t)]
        return list(range(steps)), step

    return {
        "mlp_sweep": mlp_sweep,
        "gpt_sweep": gpt_sweep,
        "softmax": rows(lambda x, w: (x * w).softmax(-1)),
        "layer_norm": rows(lambda x, w: F.layer_norm(x, (x.shape[-1],), w)),
        "decode_grow": decode_grow,
        "decode_at_t": decode_at_t,
    }


def worker(name, side, quick, rounds, device):
    """Runs one workload on one side in this (cold) process; prints a JSON line."""
    import torch
    import lazyfuse

    if side == "lazy" and lazyfuse.hardware_device().split(":")[0] != device:
        raise RuntimeError(f"lazyfuse runs on {lazyfuse.hardware_device()}, not {device}")
    dev = torch.device("lazy" if side == "lazy" else device)
    wrap = torch.compile if side == "compile" else (lambda f: f)
    shapes, step = workloads(quick)[name](dev, wrap)

    def run(shape):
        outs = step(shape)
        if side == "lazy":
            lazyfuse.sync(*[o for o in outs if o is not None])
            lazyfuse.wait()
        elif device == "cuda":
            torch.cuda.synchronize()

    def built():
        m = lazyfuse.metrics()
        return m["KernelsCompiled"] + m["KernelDiskCacheHits"]

    lazyfuse.reset_metrics()
    compiled_first = None
    first_runs = {}  # shape -> seconds of its first run, when it built no kernel
    start = time.perf_counter()
    for i, shape in enumerate(shapes):
        before = built()
        t = time.perf_counter()
        run(shape)
        if built() == before:
            first_runs[str(shape)] = time.perf_counter() - t
        if i == 0 and side == "lazy":
            compiled_first = built()
    cold = time.perf_counter() - start
    m = lazyfuse.metrics()
    warm = {}
    for shape in shapes:
        run(shape)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            run(shape)
            times.append(time.perf_counter() - t)
        warm[str(shape)] = statistics.median(times)
    print(json.dumps({
        "cold_s": cold, "warm_s": warm,
        "kernels_compiled": m["KernelsCompiled"] + m["KernelDiskCacheHits"] if side == "lazy"
        else None,
        "kernels_first_shape": compiled_first,
        "first_runs_s": first_runs if side == "lazy" else None,
        "generalized": m["KernelsGeneralized"] if side == "lazy" else None,
        "dynamic_hits": m["DynamicKernelHits"] if side == "lazy" else None,
    }))


def kernel_worker(quick, rounds):
    """The fused pointwise, softmax and LayerNorm kernels at one size, generic against
    specialized, interleaved in one process: each function runs at width 1152 and then 1024
    (which compiles its generic kernel), and then, under LAZYFUSE_DYNAMIC=static, at width 1024
    with one row less (a new graph with a specialized kernel)."""
    import torch
    import torch.nn.functional as F
    import lazyfuse

    fns = {
        "pointwise": lambda x, w: (x * w + 1.5).sigmoid() * x,
        "softmax": lambda x, w: (x * w).softmax(-1),
        "layer_norm": lambda x, w: F.layer_norm(x, (x.shape[-1],), w),
    }
    rows, width = (1024 if quick else 4096), 1024
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, width, generator=g).to("lazy")
    w = torch.randn(width, generator=g).to("lazy")
    x1 = torch.randn(rows - 1, width, generator=g).to("lazy")  # another graph, same width
    x0 = torch.randn(rows, 1152, generator=g).to("lazy")
    w0 = torch.randn(1152, generator=g).to("lazy")
    inputs = {"generic": (x, w), "specialized": (x1, w)}
    for fn in fns.values():
        os.environ["LAZYFUSE_DYNAMIC"] = "auto"
        lazyfuse.sync(fn(x0, w0))
        lazyfuse.reset_metrics()
        lazyfuse.sync(fn(x, w))
        assert lazyfuse.metrics()["KernelsGeneralized"] > 0
        os.environ["LAZYFUSE_DYNAMIC"] = "static"
        lazyfuse.reset_metrics()
        lazyfuse.sync(fn(x1, w))
        assert lazyfuse.metrics()["KernelsCompiled"] > 0

    def timed(fn, side):
        t = time.perf_counter()
        lazyfuse.sync(fn(*inputs[side]))
        lazyfuse.wait()
        return time.perf_counter() - t

    out = {}
    for name, fn in fns.items():
        times = {"specialized": [], "generic": []}
        for _ in range(rounds * 6):
            for side in times:
                times[side].append(timed(fn, side))
        out[name] = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps(out))


# ---- parent --------------------------------------------------------------------------------------

def spawn(args, env_extra):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, LAZYFUSE_CACHE_DIR=cache + "/lazyfuse",
                   TORCHINDUCTOR_CACHE_DIR=cache + "/inductor", **env_extra)
        proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True,
                              text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", nargs=2)
    parser.add_argument("--kernel-worker", action="store_true")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.quick, args.rounds, args.device)
        return
    if args.kernel_worker:
        kernel_worker(args.quick, args.rounds)
        return
    from bench_timing import cpu_busy

    flags = ["--quick"] if args.quick else []
    flags += ["--rounds", str(args.rounds), "--device", args.device]
    names = [args.only] if args.only else list(workloads_names())
    sides = [s for s in SIDES if not (s == "compile" and args.no_compile)]
    results = {}
    print(f"{'workload':<12} {'side':<8} {'cold s':>8} {'kernels':>8} {'1 shape':>8} "
          f"{'warm lazy/eager per shape (x fixed-shape ratio)':<40}")
    for name in names:
        busy_before = cpu_busy()
        r = {side: spawn(["--worker", name, side] + flags, {}) for side in sides}
        r["cpu_busy"] = [busy_before, cpu_busy()]
        results[name] = r
        shapes = list(r["eager"]["warm_s"])
        ratios = [r["eager"]["warm_s"][s] / r["lazy"]["warm_s"][s] for s in shapes]
        r["warm_ratio_vs_eager"] = dict(zip(shapes, ratios))
        r["min_ratio_vs_fixed"] = min(ratios) / ratios[0]
        # A new size whose kernels were all compiled before, against a run of a size seen.
        firsts = r["lazy"]["first_runs_s"]
        new_vs_same = [firsts[s] / r["lazy"]["warm_s"][s] for s in firsts]
        r["new_size_hit_vs_same"] = statistics.median(new_vs_same) if new_vs_same else None
        for side in sides:
            x = r[side]
            kern = "" if x["kernels_compiled"] is None else str(x["kernels_compiled"])
            first = "" if x["kernels_first_shape"] is None else str(x["kernels_first_shape"])
            print(f"{name:<12} {side:<8} {x['cold_s']:>8.2f} {kern:>8} {first:>8}")
        cold = {s: r[s]["cold_s"] for s in sides}
        print(f"{'':<12} cold lazy/eager {cold['eager'] / cold['lazy']:.2f}"
              + (f", lazy/compile {cold['compile'] / cold['lazy']:.2f}" if "compile" in cold
                 else "")
              + f"; warm per shape lazy/eager min {min(ratios):.2f} max {max(ratios):.2f}, "
              f"worst/first-shape {r['min_ratio_vs_fixed']:.2f}"
              + (f"; new-size hit / same-size hit {r['new_size_hit_vs_same']:.2f}"
                 if r["new_size_hit_vs_same"] else ""))
    if not args.only and args.device == "cpu":
        k = spawn(["--kernel-worker"] + flags, {"LAZYFUSE_FUSION": "always"})
        results["generic_vs_specialized"] = {
            name: t["specialized"] / t["generic"] for name, t in k.items()}
        print("generic kernel speed / specialized:",
              ", ".join(f"{k} {v:.2f}" for k, v in results["generic_vs_specialized"].items()))
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / ("dynamic_shapes.json" if args.device == "cpu"
                         else f"dynamic_shapes_{args.device}.json")
    out.write_text(json.dumps(results, indent=1))
    print("wrote", out)


def workloads_names():
    return ("mlp_sweep", "gpt_sweep", "softmax", "layer_norm", "decode_grow", "decode_at_t")


if __name__ == "__main__":
    main()
