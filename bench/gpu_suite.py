#!/usr/bin/env python3
"""W1-W6 of docs/benchmarks.md on a GPU: lazyfuse next to eager CUDA and torch.compile, in one run.

  W1  pointwise chains (10 ops over 3 inputs), 100^2 / 1000^2 / 10000^2, float32 and bfloat16,
      with a plain device copy of the same bytes as the bandwidth reference
  W2  bias + GELU, forward and backward, [8192, 4096]
  W3  bias + dropout(p=0) + residual + LayerNorm, forward and backward, [64, 128, 1024]
  W4  LayerNorm and softmax as composites, [4096, 1024..8192], next to the native kernels
  W5  optimizer step over ResNet-50's ~160 parameter tensors (x2 with their momentum buffers):
      Adam and SGD-momentum, eager foreach vs lazyfuse vs torch.compile'd step
  W6  MLP training step (Linear-GELU-Linear, MSE, Adam), width 4096, batch 32 and 640

Steady state is timed (after warm-up; each sample ends with a device synchronize, host time
included, as a user sees it); the first lazy run's compile time is reported apart. Every row
gives ratios measured in this run. Writes gpu_suite.json (and gpu_suite.png with matplotlib)
to $LAZYFUSE_BENCH_OUT or bench/results/. `--device cpu --quick --no-compile` is a smoke test of
the script itself on a machine without a GPU.

    python bench/gpu_suite.py [--quick] [--device cuda|cpu] [--no-compile] [--only W1,W5]
                              [--markdown docs/gpu.md] [--from-json gpu_suite.json]
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import lazyfuse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fusion_cpu import (  # noqa: E402
    lazy_runner, w1_chain, w3_block, w4_layer_norm_composite, w4_softmax_composite)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, reps, warmup=3):
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def compile_seconds(run):
    lazyfuse.reset_metrics()
    run()
    m = lazyfuse.metrics()
    # Launches on a GPU (kernel batches launch once), else the fused kernels run.
    launched = m.get("CudaLaunches", 0) or m.get("KernelsLaunched", 0)
    return m["CompileTime"]["total_ns"] / 1e9, launched, m.get("FusionFallback", 0)


def bias_gelu(x, bias):
    x = x.detach().requires_grad_(True)
    y = F.gelu(x + bias)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


class Suite:
    def __init__(self, device, quick, use_compile):
        self.device, self.quick, self.use_compile = device, quick, use_compile
        self.reps = 5 if quick else 20
        self.rows = []

    def row(self, workload, eager_fn, lazy_run, compiled_fn=None, native_fn=None, bytes_moved=None):
        dev = self.device
        compile_s, launched, fallbacks = compile_seconds(lazy_run)
        eager = timed(eager_fn, dev, self.reps)
        lazyfuse.reset_metrics()
        lazy = timed(lazy_run, dev, self.reps)
        m = lazyfuse.metrics()
        row = {"workload": workload, "eager_ms": eager * 1e3, "lazy_ms": lazy * 1e3,
               "lazy_vs_eager": eager / lazy, "lazy_compile_s": compile_s,
               "kernels_per_step": launched, "fusion_fallbacks": fallbacks,
               "cuda_graph_replays": m.get("CudaGraphReplays", 0),
               "cuda_graph_mismatches": m.get("CudaGraphMismatches", 0)}
        if compiled_fn is not None:
            try:
                compiled = timed(compiled_fn, dev, self.reps, warmup=3)
                row["compile_ms"] = compiled * 1e3
                row["lazy_vs_torch_compile"] = compiled / lazy
            except Exception as e:  # torch.compile not usable here: say so in the row
                row["torch_compile_error"] = f"{type(e).__name__}: {e}"[:300]
        if native_fn is not None:
            native = timed(native_fn, dev, self.reps)
            row["native_ms"] = native * 1e3
            row["lazy_vs_native"] = native / lazy
        if bytes_moved is not None:
            row["lazy_GBps"] = bytes_moved / lazy / 1e9
        self.rows.append(row)
        extra = "".join(f"  {k} {row[k]:.2f}" for k in ("lazy_vs_torch_compile", "lazy_vs_native")
                        if k in row)
        print(f"{workload:52s} eager {eager*1e3:9.3f} ms  lazy {lazy*1e3:9.3f} ms  "
              f"x{eager/lazy:6.2f}{extra}  kernels {launched}  compile {compile_s:.2f} s  "
              f"replays {row['cuda_graph_replays']}", flush=True)
        return row

    def maybe_compile(self, fn):
        return torch.compile(fn) if self.use_compile else None

    def w1(self):
        sizes = [100, 1000] if self.quick else [100, 1000, 10000]
        for n in sizes:
            for dtype in (torch.float32, torch.bfloat16):
                args = [torch.randn(n, n, device=self.device).to(dtype) for _ in range(3)]
                compiled = self.maybe_compile(w1_chain)
                # 3 inputs read, 1 output written.
                moved = 4 * n * n * args[0].element_size()
                src, dst = args[0], torch.empty_like(args[0])
                copy = timed(lambda: dst.copy_(src), self.device, self.reps)
                row = self.row(f"W1 chain10 {n}x{n} {str(dtype)[6:]}", lambda: w1_chain(*args),
                               lazy_runner(w1_chain, args),
                               (lambda: compiled(*args)) if compiled else None, bytes_moved=moved)
                row["copy_GBps"] = 2 * n * n * args[0].element_size() / copy / 1e9
                row["lazy_pct_of_copy_bandwidth"] = 100 * row["lazy_GBps"] / row["copy_GBps"]

    def w2(self):
        shape = (1024, 4096) if self.quick else (8192, 4096)
        args = [torch.randn(*shape, device=self.device), torch.randn(shape[-1], device=self.device)]
        compiled = self.maybe_compile(bias_gelu)
        self.row(f"W2 bias+GELU fwd+bwd {list(shape)}", lambda: bias_gelu(*args),
                 lazy_runner(bias_gelu, args), (lambda: compiled(*args)) if compiled else None)

    def w3(self):
        b, t, c = (8, 128, 1024) if self.quick else (64, 128, 1024)
        d = self.device
        args = [torch.randn(b, t, c, device=d), torch.randn(b, t, c, device=d),
                torch.randn(c, device=d), torch.randn(c, device=d), torch.randn(c, device=d)]
        compiled = self.maybe_compile(w3_block)
        self.row(f"W3 bias+dropout+residual+LN fwd+bwd [{b},{t},{c}]", lambda: w3_block(*args),
                 lazy_runner(w3_block, args), (lambda: compiled(*args)) if compiled else None)

    def w4(self):
        rows = 1024 if self.quick else 4096
        for cols in ([1024] if self.quick else [1024, 4096, 8192]):
            x = [torch.randn(rows, cols, device=self.device)]
            for name, fn, native in (
                ("layernorm", w4_layer_norm_composite, lambda t: F.layer_norm(t, (t.shape[-1],))),
                ("softmax", w4_softmax_composite, lambda t: t.softmax(-1)),
            ):
                compiled = self.maybe_compile(fn)
                self.row(f"W4 {name} composite [{rows},{cols}]", lambda: fn(*x), lazy_runner(fn, x),
                         (lambda: compiled(*x)) if compiled else None,
                         native_fn=lambda: native(*x), bytes_moved=2 * x[0].numel() * 4)

    def w5(self):
        shapes = resnet50_shapes()
        if self.quick:
            shapes = shapes[:40]
        for name, make in (("Adam", lambda ps, **kw: torch.optim.Adam(ps, lr=1e-3, **kw)),
                           ("SGD-momentum", lambda ps, **kw: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, **kw))):
            eager_params = [torch.randn(s, device=self.device, requires_grad=True) for s in shapes]
            for p in eager_params:
                p.grad = torch.randn_like(p)
            eager_opt = make(eager_params, foreach=True)
            lazy_params = [p.detach().to("lazy").requires_grad_(True) for p in eager_params]
            for p, e in zip(lazy_params, eager_params):
                p.grad = e.grad.to("lazy")
            lazy_opt = make(lazy_params)
            lazyfuse.mark_step()

            def lazy_run():
                lazy_opt.step()
                lazyfuse.mark_step()
                lazyfuse.wait()

            compiled = None
            if self.use_compile:
                compiled_params = [p.detach().clone().requires_grad_(True) for p in eager_params]
                for p, e in zip(compiled_params, eager_params):
                    p.grad = e.grad.clone()
                compiled_opt = make(compiled_params, foreach=True)
                compiled = torch.compile(compiled_opt.step)
            self.row(f"W5 {name} step, {len(shapes)} tensors", eager_opt.step, lazy_run, compiled)

    def w6(self):
        width = 1024 if self.quick else 4096
        for batch in (32, 640):
            torch.manual_seed(0)

            def make_model():
                return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(),
                                           torch.nn.Linear(width, width))

            eager_model = make_model().to(self.device)
            lazy_model = make_model().to("lazy")
            lazy_model.load_state_dict({k: v.to("lazy") for k, v in eager_model.state_dict().items()})
            x = torch.randn(batch, width, device=self.device)
            y = torch.randn(batch, width, device=self.device)
            x_lazy, y_lazy = x.to("lazy"), y.to("lazy")
            eager_opt = torch.optim.Adam(eager_model.parameters(), lr=1e-4)
            lazy_opt = torch.optim.Adam(lazy_model.parameters(), lr=1e-4)

            def step(model, opt, xs, ys):
                opt.zero_grad(set_to_none=True)
                loss = F.mse_loss(model(xs), ys)
                loss.backward()
                opt.step()
                return loss

            def lazy_run():
                step(lazy_model, lazy_opt, x_lazy, y_lazy)
                lazyfuse.mark_step()
                lazyfuse.wait()

            compiled = None
            if self.use_compile:
                compiled_model = make_model().to(self.device)
                compiled_model.load_state_dict(eager_model.state_dict())
                compiled_opt = torch.optim.Adam(compiled_model.parameters(), lr=1e-4)
                compiled_step = torch.compile(lambda: step(compiled_model, compiled_opt, x, y))
                compiled = compiled_step
            self.row(f"W6 MLP train step batch {batch} width {width}",
                     lambda: step(eager_model, eager_opt, x, y), lazy_run, compiled)


def resnet50_shapes():
    """The parameter shapes of torchvision's ResNet-50 (161 tensors), or a stand-in list of the
    same sizes when torchvision is not installed."""
    try:
        import torchvision
        return [tuple(p.shape) for p in torchvision.models.resnet50().parameters()]
    except ImportError:
        shapes = [(64, 3, 7, 7), (64,), (64,)]
        for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
            for _ in range(blocks):
                shapes += [(width, width * 4, 1, 1), (width,), (width,), (width, width, 3, 3),
                           (width,), (width,), (width * 4, width, 1, 1), (width * 4,), (width * 4,)]
        return shapes + [(1000, 2048), (1000,)]


def markdown(result):
    """The run's table as the Markdown of docs/gpu.md."""
    def ms(row, key):
        return f"{row[key]:.3f}" if key in row else "–"

    def ratio(row, key):
        return f"{row[key]:.2f}×" if key in row else "–"

    lines = [
        "# lazyfuse on a GPU: one run of bench/gpu_suite.py", "",
        f"Written by `bench/gpu_suite.py --markdown docs/gpu.md` from the run of {result['date']} "
        f"on {result['gpu']} with torch {result['torch']} (`bench/gpu/run.sh`; what each "
        "workload is: the docstring of bench/gpu_suite.py). Times are medians of one step, host "
        "time included, each sample ending with a device synchronize; the ratios are speed-ups "
        "of lazyfuse (above 1: lazyfuse is faster), every side measured in the same run. The "
        "first lazy step's compile time is apart. The raw figures: docs/gpu.json.", "",
        "| workload | eager ms | lazyfuse ms | torch.compile ms | vs eager | vs torch.compile "
        "| kernels | first compile s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['workload']} | {ms(row, 'eager_ms')} | {ms(row, 'lazy_ms')} | "
                     f"{ms(row, 'compile_ms')} | {ratio(row, 'lazy_vs_eager')} | "
                     f"{ratio(row, 'lazy_vs_torch_compile')} | {row['kernels_per_step']} | "
                     f"{row['lazy_compile_s']:.2f} |")
    for name, error in result.get("errors", {}).items():
        lines += ["", f"{name} failed: `{error.strip().splitlines()[-1]}`"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile columns")
    p.add_argument("--only", default="W1,W2,W3,W4,W5,W6")
    p.add_argument("--markdown", type=pathlib.Path, help="also write the table as Markdown here")
    p.add_argument("--from-json", type=pathlib.Path,
                   help="no run: write --markdown from the gpu_suite.json of an earlier one")
    args = p.parse_args()
    if args.from_json:
        (args.markdown or pathlib.Path("/dev/stdout")).write_text(
            markdown(json.loads(args.from_json.read_text())))
        return
    if args.device != torch.device(lazyfuse.hardware_device()).type:
        sys.exit(f"lazyfuse runs on {lazyfuse.hardware_device()}, not {args.device} "
                 "(set LAZYFUSE_DEVICE)")
    torch.manual_seed(0)
    suite = Suite(args.device, args.quick, not args.no_compile)
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none"
    print(f"lazyfuse {lazyfuse.__version__} on {lazyfuse.hardware_device()} ({gpu}), "
          f"torch {torch.__version__}", flush=True)
    errors = {}
    for name in args.only.split(","):
        try:
            getattr(suite, name.lower())()
        except Exception:
            errors[name] = traceback.format_exc()
            print(f"{name} failed:\n{errors[name]}", flush=True)
    out = pathlib.Path(os.environ.get("LAZYFUSE_BENCH_OUT",
                                      pathlib.Path(__file__).resolve().parent / "results"))
    out.mkdir(parents=True, exist_ok=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "device": args.device, "gpu": gpu,
              "rows": suite.rows, "errors": errors}
    (out / "gpu_suite.json").write_text(json.dumps(result, indent=1))
    if args.markdown:
        args.markdown.write_text(markdown(result))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 0.4 * len(suite.rows) + 1))
        ax.barh([r["workload"] for r in suite.rows], [r["lazy_vs_eager"] for r in suite.rows],
                label="vs eager")
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_xlabel(f"lazyfuse speedup (same run, {gpu})")
        fig.tight_layout()
        fig.savefig(out / "gpu_suite.png")
    except ImportError:
        pass
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
