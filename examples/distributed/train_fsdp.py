#!/usr/bin/env python3
"""FSDP2 (`fully_shard`) on the lazy device, launched with torchrun:

    torchrun --nproc-per-node 2 examples/distributed/train_fsdp.py

Each rank holds a shard of every parameter. The model is trained on each rank's own batches,
once on lazy tensors and once on CPU tensors (gloo), and the script checks that the two runs
agree. On lazy, FSDP2's all-gathers of parameters, its copies in and out of the all-gather
buffers and its reduce-scatters of gradients are recorded into each step's trace: one graph
runs per mark_step(). The device mesh names the lazy device, so that FSDP2 keeps the
parameters there.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import lazyfuse

STEPS = 5


def train(device, rank, world):
    mesh = init_device_mesh(device.type, (world,))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                          nn.Linear(64, 4)).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)
    losses, graphs = [], []
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=data).to(device)
        y = torch.randint(0, 4, (8,), generator=data).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "lazy":
            before = lazyfuse.metrics()["GraphsExecuted"]
            lazyfuse.mark_step()
            graphs.append(lazyfuse.metrics()["GraphsExecuted"] - before)
        losses.append(loss.item())
    # full_tensor() all-gathers each sharded parameter: every rank gets the whole model.
    params = torch.cat([p.full_tensor().detach().reshape(-1).cpu() for p in model.parameters()])
    return params, torch.tensor(losses), graphs


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu_params, cpu_losses, _ = train(torch.device("cpu"), rank, world)
    lazy_params, lazy_losses, graphs = train(torch.device("lazy"), rank, world)
    # Fused kernels round within float32's precision, as in the DDP example.
    torch.testing.assert_close(lazy_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lazy_params, cpu_params, rtol=1e-5, atol=1e-6)
    # After the first step, a step runs as one graph: no collective forced a sync of its own.
    assert graphs[1:] == [1] * (STEPS - 1), graphs
    print(f"rank {rank}/{world}: lazy losses {lazy_losses.tolist()}, graphs per step {graphs}: "
          "lazy FSDP2 matches CPU FSDP2")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
