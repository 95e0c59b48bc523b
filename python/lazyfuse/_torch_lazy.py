"""`torch._lazy`, PyTorch's lazy tensor API, on lazyfuse.

Note [torch._lazy on lazyfuse] (the C++ half is in backend/torch_lazy_core.cpp)
liblazyfuse.so registers a backend and a graph executor with torch's lazy tensor core when it
loads, so the parts of `torch._lazy` that only need those work as shipped:
`torch._lazy.mark_step()` (it syncs every live lazy tensor, then runs the step closures),
`add_step_closure` / `run_step_closures`, and `torch._lazy.metrics` (lazyfuse's counters and
timers live in torch's metrics arena).

The functions that take tensors (`sync_multi`, `get_tensor_id`, `torch._lazy.debug.dump_ir` and
`render_ir_graph`, and through `sync_multi` also `to_cpu` and `save`) reach into torch's own
LazyTensor, which a lazyfuse tensor is not: torch would skip it, or dereference a null pointer.
`wait_device_ops` waits on torch's device locks, which lazyfuse's device work does not take. These
functions are routed here. Each does for lazy tensors what upstream's lazy backend does, and
for anything else what upstream does where that is defined (`sync_multi` skips tensors that are
not lazy) or a clear error where upstream would crash. Nothing here is reachable from a program
that does not call `torch._lazy`.
"""

import torch


def _is_lazy(value):
    return isinstance(value, torch.Tensor) and value.device.type == "lazy"


def _check_tensor_list(tensors, what):
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{what} expects a list of tensors, got {type(tensors).__name__}")
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what} expects a list of tensors, got a {type(t).__name__} in it")
    return list(tensors)


def _check_all_lazy(tensors, what):
    for t in tensors:
        if not _is_lazy(t):
            raise RuntimeError(f"{what} expects lazy tensors, got a {t.device} tensor")
    return tensors


def sync_multi(tensors, devices):
    """Materializes the lazy tensors among `tensors` with one graph run; tensors that are not
    lazy are skipped, as upstream's lazy backend skips them. `devices` is accepted and unused:
    lazyfuse has one device."""
    lazy = [t for t in _check_tensor_list(tensors, "sync_multi") if _is_lazy(t)]
    if lazy:
        torch.ops.lazyfuse.sync(lazy)


def get_tensor_id(tensor):
    """A number that identifies the value behind a lazy tensor; no other value of this process
    has had it."""
    if not _is_lazy(tensor):
        device = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise RuntimeError(f"get_tensor_id expects a lazy tensor, got {device}")
    return torch.ops.lazyfuse.tensor_id(tensor)


def wait_device_ops(devices=None):
    """Waits until the work already sent to the hardware device has finished (all of it:
    lazyfuse has one device, whatever `devices` lists)."""
    torch.ops.lazyfuse.wait()


def render_ir_graph(tensors):
    """The pending IR behind `tensors` as a Graphviz dot graph."""
    tensors = _check_all_lazy(_check_tensor_list(tensors, "render_ir_graph"), "render_ir_graph")
    return torch.ops.lazyfuse.dump_ir(tensors, "dot")


def dump_ir(tensors, ir_format):
    """The pending IR behind `tensors`: "text" for the IR, "backend" for what the backend makes
    of it (lazyfuse's plan: its fused kernels and extern calls)."""
    if ir_format not in ("text", "backend"):
        raise RuntimeError(f"Unrecognized IR format: {ir_format}")
    tensors = _check_all_lazy(_check_tensor_list(tensors, "dump_ir"), "dump_ir")
    return torch.ops.lazyfuse.dump_ir(tensors, "text" if ir_format == "text" else "plan")


# (module, attribute, replacement). torch._lazy.to_cpu and save call sync_multi through their
# module's globals, so they follow.
_ROUTES = (
    ("torch._lazy", "sync_multi", sync_multi),
    ("torch._lazy", "get_tensor_id", get_tensor_id),
    ("torch._lazy", "wait_device_ops", wait_device_ops),
    ("torch._lazy.debug", "render_ir_graph", render_ir_graph),
    ("torch._lazy.debug", "dump_ir", dump_ir),
)


def install():
    """Routes the functions above; idempotent."""
    import importlib

    for module_name, name, replacement in _ROUTES:
        module = importlib.import_module(module_name)
        if getattr(module, name) is not replacement:
            setattr(module, name, replacement)
