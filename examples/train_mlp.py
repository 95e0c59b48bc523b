#!/usr/bin/env python3
"""Train one small MLP twice, side by side: eagerly on the CPU and on the lazy device.

Both copies start from the same weights and see the same batches, so their losses must agree to
fp32 rounding. The lazy copy records each training step (forward, backward, optimizer) and runs it
at `lazyfuse.mark_step()`: the first steps compile graphs, the rest hit the graph cache.

    python examples/train_mlp.py [--steps 30] [--batch 256]

Exits with status 1 when the losses differ beyond fp32 tolerance.
"""

import argparse
import copy
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import lazyfuse

D_IN, HIDDEN, N_CLASSES = 64, 128, 10


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative loss tolerance")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute loss tolerance")
    return p.parse_args()


def make_batches(steps, batch, seed):
    """Inputs from a fixed seed; labels from a random linear teacher, so the loss can fall."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(D_IN, N_CLASSES, generator=g)
    xs = torch.randn(steps, batch, D_IN, generator=g)
    ys = (xs @ teacher).argmax(dim=-1)
    return list(zip(xs.unbind(0), ys.unbind(0)))


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(D_IN, HIDDEN),
        torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, N_CLASSES),
    )


def make_optimizer(model, args):
    # foreach=False: both devices run the same per-parameter update.
    return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, foreach=False)


def train_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def timed_eager_step(model, optimizer, x, y):
    start = time.perf_counter()
    loss = train_step(model, optimizer, x, y)
    return loss.item(), time.perf_counter() - start


def timed_lazy_step(model, optimizer, x, y):
    start = time.perf_counter()
    loss = train_step(model, optimizer, x, y)
    lazyfuse.mark_step()  # one graph per step: compile on a miss, then run
    lazyfuse.wait()
    elapsed = time.perf_counter() - start
    return loss.item(), elapsed  # materialized by mark_step: .item() only reads it


def max_param_difference(eager_model, lazy_model):
    return max(
        (pe.detach() - pl.detach().cpu()).abs().max().item()
        for pe, pl in zip(eager_model.parameters(), lazy_model.parameters())
    )


def main():
    args = parse_args()
    lazy = torch.device("lazy")
    print(
        f"lazyfuse {lazyfuse.__version__} | torch {torch.__version__} | "
        f"lazy tensors execute on {lazyfuse.hardware_device()}"
    )
    print(
        f"MLP {D_IN}->{HIDDEN}->{N_CLASSES} (GELU), cross-entropy, batch {args.batch}, "
        f"SGD(lr={args.lr}, momentum={args.momentum}), {args.steps} steps\n"
    )

    batches = make_batches(args.steps, args.batch, args.seed)
    eager_model = make_model(args.seed)
    lazy_model = copy.deepcopy(eager_model).to(lazy)
    eager_opt = make_optimizer(eager_model, args)
    lazy_opt = make_optimizer(lazy_model, args)
    lazy_batches = [(x.to(lazy), y.to(lazy)) for x, y in batches]
    lazyfuse.mark_step()  # parameters and batches become device data before the timed steps
    lazyfuse.wait()
    lazyfuse.reset_metrics()

    print(f"{'step':>4}  {'eager loss':>12}  {'lazy loss':>12}  {'|diff|':>9}  "
          f"{'eager ms':>9}  {'lazy ms':>9}")
    eager_losses, lazy_losses, eager_times, lazy_times = [], [], [], []
    for step, ((x, y), (lx, ly)) in enumerate(zip(batches, lazy_batches), start=1):
        eager_loss, eager_s = timed_eager_step(eager_model, eager_opt, x, y)
        lazy_loss, lazy_s = timed_lazy_step(lazy_model, lazy_opt, lx, ly)
        eager_losses.append(eager_loss)
        lazy_losses.append(lazy_loss)
        eager_times.append(eager_s)
        lazy_times.append(lazy_s)
        print(f"{step:>4}  {eager_loss:>12.6f}  {lazy_loss:>12.6f}  "
              f"{abs(eager_loss - lazy_loss):>9.2e}  {eager_s * 1e3:>9.3f}  {lazy_s * 1e3:>9.3f}")

    metrics = lazyfuse.metrics()
    eager_t = torch.tensor(eager_losses, dtype=torch.float64)
    lazy_t = torch.tensor(lazy_losses, dtype=torch.float64)
    max_diff = (eager_t - lazy_t).abs().max().item()
    ok = torch.allclose(lazy_t, eager_t, rtol=args.rtol, atol=args.atol)

    print()
    print(f"max |loss difference|       : {max_diff:.3e} "
          f"(tolerance: {args.atol:g} + {args.rtol:g} * |loss|) -> {'OK' if ok else 'MISMATCH'}")
    print(f"max |parameter difference|  : {max_param_difference(eager_model, lazy_model):.3e}")
    steady = slice(min(args.warmup, args.steps - 1), None)
    eager_ms = statistics.median(eager_times[steady]) * 1e3
    lazy_ms = statistics.median(lazy_times[steady]) * 1e3
    print(f"time per step (median, steps {steady.start + 1}-{args.steps}): "
          f"eager {eager_ms:.3f} ms, lazy {lazy_ms:.3f} ms, lazy/eager {lazy_ms / eager_ms:.2f}x")
    print(f"first lazy step (includes compiles): {lazy_times[0] * 1e3:.1f} ms")
    print(f"graphs compiled (UncachedCompile): {metrics.get('UncachedCompile', 0)}")
    print(f"graph cache hits (CachedCompile) : {metrics.get('CachedCompile', 0)}")
    print()
    print(lazyfuse.metrics_report(metrics))

    if not ok:
        print("\nFAIL: lazy losses differ from eager beyond fp32 tolerance", file=sys.stderr)
        return 1
    print("\nOK: lazy training matches eager CPU training")
    return 0


if __name__ == "__main__":
    sys.exit(main())
