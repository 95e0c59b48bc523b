#!/usr/bin/env python3
"""DistributedDataParallel on the lazy device, launched with torchrun:

    torchrun --nproc-per-node 2 examples/distributed/train_ddp.py

Each rank trains the same small model on its own batches, once on lazy tensors and once on CPU
tensors (gloo), and checks that the two runs agree and that every rank ends with the same
parameters. On lazy, each step's gradient all-reduces are steps of the step's plan: one graph
runs per mark_step().
"""

import gc
import os

import torch
import torch.distributed as dist
from torch import nn

import lazyfuse

STEPS = 5


def train(device, rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                          nn.Linear(64, 4)).to(device)
    # Small buckets, so that one backward all-reduces several of them.
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.005)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    graphs = []
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=data).to(device)
        y = torch.randint(0, 4, (8,), generator=data).to(device)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "lazy":
            before = lazyfuse.metrics()["GraphsExecuted"]
            lazyfuse.mark_step()
            graphs.append(lazyfuse.metrics()["GraphsExecuted"] - before)
    params = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    return params, loss.item(), graphs


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu_params, cpu_loss, _ = train(torch.device("cpu"), rank)
    lazy_params, lazy_loss, graphs = train(torch.device("lazy"), rank)

    # Every rank holds the same parameters after DDP's all-reduces...
    gathered = [torch.empty_like(lazy_params) for _ in range(world)]
    dist.all_gather(gathered, lazy_params)
    assert all(torch.equal(g, lazy_params) for g in gathered), "ranks disagree"
    # ... and they are the CPU run's (fused kernels round within float32's precision).
    torch.testing.assert_close(lazy_params, cpu_params, rtol=1e-5, atol=1e-6)
    # After the first step, a step runs as one graph: no all-reduce forced a sync of its own.
    assert graphs[1:] == [1] * (STEPS - 1), graphs
    print(f"rank {rank}/{world}: lazy loss {lazy_loss:.6f}, CPU loss {cpu_loss:.6f}, "
          f"graphs per step {graphs}: lazy DDP matches CPU DDP")
    # DistributedDataParallel sits in a reference cycle (the CPU run's, here), and its reducer
    # holds the process group: freed only by a later garbage collection, the group outlived
    # destroy_process_group() and gloo aborted at exit ("terminate called without an active
    # exception") in about one run of four. Collect first.
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
