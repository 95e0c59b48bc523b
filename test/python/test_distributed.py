"""torch.distributed on lazy tensors (Note [Collectives on lazy tensors]): collectives recorded
into the trace and run by the plan on gloo, against the same calls on CPU tensors, in real
processes and process groups; DistributedDataParallel through torchrun."""

import os
import pathlib
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collectives(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import lazyfuse

    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    for device in ("cpu", "lazy"):
        g = torch.Generator().manual_seed(rank)
        base = torch.randn(6, 4, generator=g)
        t = base.to(device)
        before = lazyfuse.metrics()["GraphsExecuted"]
        out = {}
        a = t * 2
        dist.all_reduce(a)
        out["sum"] = a
        m = t.clone()
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        out["max"] = m
        b = t + rank
        dist.broadcast(b, src=1)
        out["broadcast"] = b
        gathered = [torch.empty(6, 2, device=device) for _ in range(world)]
        dist.all_gather(gathered, t[:, 1:3].contiguous())
        out["all_gather"] = torch.stack(gathered)
        into = torch.empty(world * 6, 4, device=device)
        dist.all_gather_into_tensor(into, t)
        out["into_tensor"] = into
        scattered = torch.empty(6 * 4 // world, device=device)
        dist.reduce_scatter_tensor(scattered, t.reshape(-1))
        out["reduce_scatter"] = scattered
        view = t.clone()
        work = dist.all_reduce(view[2:4], async_op=True)  # a view: its base sees the result
        work.wait()
        out["view_base"] = view
        if device == "lazy":
            # Recorded, not run: nothing has synced since the first collective.
            assert lazyfuse.metrics()["GraphsExecuted"] == before
            assert lazyfuse.metrics()["EagerFallback"] == 0
        results[device] = {k: v.cpu() for k, v in out.items()}
    for key, expected in results["cpu"].items():
        torch.testing.assert_close(results["lazy"][key], expected, rtol=0, atol=0, msg=key)
    dist.destroy_process_group()


def test_collectives_match_cpu():
    mp.spawn(collectives, args=(2, free_port()), nprocs=2)


def test_distributed_data_parallel_with_torchrun():
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", env["MASTER_PORT"], str(REPO / "examples/distributed/train_ddp.py")],
        env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("lazy DDP matches CPU DDP") == 2, done.stdout
