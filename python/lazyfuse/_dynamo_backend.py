"""`torch.compile(fn, backend="lazyfuse")`: graphs that dynamo captures, compiled by lazyfuse.

Dynamo captures the graph and guards it; AOTAutograd splits it into a forward and a backward graph
of ATen ops, functional (it applies input mutations itself, after the call); each of those runs
here on lazy tensors, so lazyfuse records it, fuses it and caches its kernels and plan under the
graph's structure and shapes, as for any lazy program. Inputs and outputs are tensors of the
device the program uses: an input on lazyfuse's hardware device enters without a copy and a
result leaves without one (Note [Sharing memory with the hardware device]); an input elsewhere is
copied to the hardware device and its results back. The package declares this backend under the
`torch_dynamo_backends` entry point, so `backend="lazyfuse"` needs no import.
"""

import torch

_LAZY = torch.device("lazy")


def _hardware():
    return torch.device(torch.ops.lazyfuse.hardware_device())


def _same_device(a, b):
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _device_for_lazy(value, devices):
    if isinstance(value, (torch.device, str)):
        device = torch.device(value)
        if any(_same_device(device, d) for d in devices):
            return _LAZY
    return value


def _retarget_devices(gm, devices):
    """Factories and transfers in the graph that name one of the program's `devices` (the graph
    was traced on them) name the lazy device instead, so that their results join the trace."""
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or "device" not in node.kwargs:
            continue
        device = _device_for_lazy(node.kwargs["device"], devices)
        if device is not node.kwargs["device"]:
            node.update_kwarg("device", device)
            changed = True
    if changed:
        gm.recompile()


def _share_constants(gm):
    """Tensor constants the graph reads (get_attr) become lazy tensors over the same memory."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        owner_path, _, name = node.target.rpartition(".")
        owner = gm.get_submodule(owner_path) if owner_path else gm
        value = getattr(owner, name)
        if isinstance(value, torch.Tensor) and value.device.type != "lazy":
            lazy = torch.ops.lazyfuse.share_into_lazy(value)
            if isinstance(value, torch.nn.Parameter):
                lazy = torch.nn.Parameter(lazy, requires_grad=value.requires_grad)
            setattr(owner, name, lazy)


def _tensor_devices(values):
    return [v.device for v in values if isinstance(v, torch.Tensor)]


def _compile_graph(gm, example_inputs):
    """An AOTAutograd compiler: `gm` runs on lazy tensors, its results are synced together."""
    from functorch.compile import make_boxed_func

    devices = {d for d in _tensor_devices(example_inputs) if d.type != "lazy"} or {_hardware()}
    _retarget_devices(gm, devices)
    _share_constants(gm)
    output_device = next(iter(devices)) if len(devices) == 1 else _hardware()

    def run(*args):
        lazy_args = [torch.ops.lazyfuse.share_into_lazy(a) if isinstance(a, torch.Tensor) else a
                     for a in args]
        outputs = gm(*lazy_args)
        flat, spec = torch.utils._pytree.tree_flatten(outputs)
        lazy = [o for o in flat if isinstance(o, torch.Tensor) and o.device.type == "lazy"]
        torch.ops.lazyfuse.sync(lazy)

        def out(o):
            if not isinstance(o, torch.Tensor) or o.device.type != "lazy":
                return o
            shared = torch.ops.lazyfuse.share_out_of_lazy(o)
            return shared if _same_device(shared.device, output_device) else shared.to(
                output_device)

        return torch.utils._pytree.tree_unflatten([out(o) for o in flat], spec)

    return make_boxed_func(run)


def lazyfuse_backend(gm, example_inputs, **kwargs):
    """The dynamo backend: AOTAutograd with lazyfuse compiling its forward and backward graphs."""
    from torch._dynamo.backends.common import aot_autograd

    if kwargs:
        raise TypeError(f"backend 'lazyfuse' takes no options, got {sorted(kwargs)}")
    return aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph)(gm, example_inputs)
