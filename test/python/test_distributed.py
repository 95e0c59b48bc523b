"""torch.distributed on lazy tensors (Note [Collectives on lazy tensors]): collectives recorded
into the trace and run by the plan on gloo, against the same calls on CPU tensors, in real
processes and process groups; DistributedDataParallel through torchrun."""

import os
import pathlib
import socket
import subprocess
import sys
import time

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


def spawn(fn, timeout=240):
    """`fn(rank, world, port)` in 2 processes; fails (never hangs) past `timeout` seconds."""
    ctx = mp.spawn(fn, args=(2, free_port()), nprocs=2, join=False)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            raise AssertionError(f"{fn.__name__} hung for {timeout} s")


def test_collectives_match_cpu():
    spawn(collectives)


def scenarios(rank, world, port):
    """Programs whose ranks sync differently, autograd through a collective, functional
    collectives, a point-to-point call after recorded collectives, and DDP with other unused
    parameters on each rank: each against the same program on CPU tensors."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import lazyfuse
    import torch.distributed._functional_collectives as fc
    from torch import nn

    dist.init_process_group("gloo", rank=rank, world_size=world)

    def run(device):
        out = {}
        g = torch.Generator().manual_seed(rank)
        # Rank 0 alone reads a value of the second all_reduce before the first one's.
        a = (torch.arange(4.0) * 10 ** (rank + 1)).to(device)
        b = (torch.arange(4.0) + 100 * rank).to(device)
        dist.all_reduce(a)
        dist.all_reduce(b)
        if rank == 0:
            out["read_on_rank0"] = (b + 0).cpu()
        unused = torch.ones(3, device=device) * (rank + 1)
        dist.all_reduce(unused)  # nobody reads it
        del unused
        # Autograd through a collective, as eager: all_reduce has no derivative.
        p = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device, requires_grad=True)
        q = p * 2
        dist.all_reduce(q)
        (q * q).sum().backward()
        out["grad"] = p.grad
        # Functional collectives (DTensor's).
        t = torch.randn(4, 6, generator=g).to(device)
        out["fc_all_reduce"] = fc.wait_tensor(fc.all_reduce(t, "sum", dist.group.WORLD))
        out["fc_all_gather"] = fc.wait_tensor(fc.all_gather_tensor(t, 0, dist.group.WORLD))
        out["fc_reduce_scatter"] = fc.wait_tensor(
            fc.reduce_scatter_tensor(t, "max", 0, dist.group.WORLD))
        # A point-to-point call after recorded collectives.
        c = torch.full((3,), float(rank + 1), device=device)
        dist.all_reduce(c)
        if rank == 0:
            dist.send(c, 1)
        else:
            got = torch.empty(3, device=device)
            dist.recv(got, 0)
            out["recv"] = got
        # DDP whose ranks leave different parameters unused.
        torch.manual_seed(0)
        model = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]).to(device)

        class Pick(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = model

            def forward(self, x):
                return self.layers[rank](x)

        ddp = nn.parallel.DistributedDataParallel(Pick(), find_unused_parameters=True)
        ddp(torch.ones(2, 4, device=device)).sum().backward()
        out["ddp_grads"] = torch.cat([p.grad.reshape(-1) if p.grad is not None else
                                      torch.zeros(p.numel(), device=device)
                                      for p in model.parameters()])
        if device == "lazy":
            lazyfuse.mark_step()
        out["a"], out["b"] = a, b
        return {k: v.detach().cpu() for k, v in out.items()}

    cpu, lazy = run("cpu"), run("lazy")
    for key, expected in cpu.items():
        torch.testing.assert_close(lazy[key], expected, rtol=0, atol=0, msg=key)
    dist.destroy_process_group()


def test_ranks_that_sync_differently_and_other_collectives():
    spawn(scenarios)


def torchrun_example(name, says):
    """examples/distributed/<name> under torchrun with 2 processes; each must print `says`."""
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", env["MASTER_PORT"], str(REPO / "examples/distributed" / name)],
        env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(says) == 2, done.stdout


def test_distributed_data_parallel_with_torchrun():
    torchrun_example("train_ddp.py", "lazy DDP matches CPU DDP")


def test_fully_shard_with_torchrun():
    """FSDP2 on lazy trains like FSDP2 on the CPU, one graph a step (examples/distributed)."""
    torchrun_example("train_fsdp.py", "lazy FSDP2 matches CPU FSDP2")


def fsdp_copy_ops(rank, world, port):
    """FSDP2's own copy ops on lazy tensors (Note [FSDP2's copy ops on lazy tensors]) against
    the CPU, with views as FSDP2 passes them."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import lazyfuse  # noqa: F401
    import torch.distributed.fsdp._fully_shard._fsdp_collectives  # noqa: F401 (defines the ops)

    results = {}
    for device in ("cpu", "lazy"):
        g = torch.Generator().manual_seed(rank)
        inputs = [torch.randn(6, generator=g).to(device), torch.randn(3, generator=g).to(device)]
        output = torch.zeros(world * 9, device=device)
        slice_, whole = torch.ops.fsdp.all_gather_copy_in(inputs, output, [6, 3], 9, rank)
        slice_.mul_(2)  # a view of `whole`: the write shows there
        outs = [torch.empty(2, 3, device=device), torch.empty(2, 2, device=device)]
        source = torch.arange(10.0).to(device) + rank
        torch.ops.fsdp.split_with_sizes_copy(source, [6, 4], dim=0, out=[o.view(-1) for o in outs])
        cat = torch.empty(2 * world, 4, device=device)
        grads = [torch.randn(4, 3, generator=g).to(device), torch.randn(4, generator=g).to(device)]
        torch.ops.fsdp.chunk_cat(grads, 0, 2 * world, out=cat)
        results[device] = [t.cpu() for t in (slice_, whole, output, *outs, cat)]
    for got, want in zip(results["lazy"], results["cpu"]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_fsdp_copy_ops_match_cpu():
    spawn(fsdp_copy_ops)
