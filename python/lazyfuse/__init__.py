"""lazyfuse: a lazy tensor backend for PyTorch.

Tensors on `torch.device("lazy")` record ops into an IR instead of computing them; a sync
(`.cpu()`, `.item()`, `print`, `lazyfuse.mark_step()`) compiles the recorded graph into fused
kernels, caches it, and runs it on the hardware device (`lazyfuse.hardware_device()`).

    import torch, lazyfuse
    x = torch.ones(3, device="lazy") + 1
    lazyfuse.mark_step()
    print(x.cpu())

The work is done by liblazyfuse.so; this package loads it and wraps its `torch.ops.lazyfuse`
operators.
"""

import functools
import os

import torch

from . import _library
from ._aot import AotModel, aot_compile, aot_load
from . import _torch_lazy
from . import _unsupported
from . import device as _device_module
from ._library import library_path
from ._metrics import last_plan_profile, metrics, metrics_report, reset_metrics
from ._version import __version__

__all__ = [
    "__version__",
    "AotModel",
    "add_step_closure",
    "aot_compile",
    "aot_load",
    "buffer_pool_stats",
    "config",
    "dump_ir",
    "empty_cache",
    "hardware_device",
    "last_plan_profile",
    "library_path",
    "manual_seed",
    "mark_dynamic",
    "mark_step",
    "metrics",
    "metrics_report",
    "reset_metrics",
    "sync",
    "wait",
]


def mark_step():
    """Syncs every live lazy tensor (compiles and runs what is pending) and starts a new trace,
    then runs the step closures added since the last step. Call it once per training step.
    The same as `torch._lazy.mark_step()`."""
    torch.ops.lazyfuse.mark_step()
    torch._lazy.run_step_closures()


def mark_dynamic(tensor, dim):
    """Marks dimension `dim` of the lazy tensor `tensor` as one whose size varies: the graphs that
    read its current value compile shape-generic kernels from their first compile, so the next
    sizes compile nothing (as `torch._dynamo.mark_dynamic` does for torch.compile). Without it a
    kernel becomes generic the second time its graph comes back with other sizes. Every
    constant of those kernels but 0 and 1 becomes a run-time argument, as with
    LAZYFUSE_DYNAMIC=dynamic (which, like LAZYFUSE_DYNAMIC=static, overrides the mark)."""
    torch.ops.lazyfuse.mark_dynamic(tensor, dim)


def add_step_closure(closure, args=(), run_async=False):
    """Runs `closure(*args)` at the end of the current step, after `mark_step()` has computed
    every live tensor: reading a tensor in it (`loss.item()` for a log line) costs no sync of
    its own. Closures run in the order they were added; with `run_async=True` on a background
    thread. The same as `torch._lazy.add_step_closure`."""
    torch._lazy.add_step_closure(closure, args, run_async)


def wait():
    """Waits until the work already sent to the hardware device has finished."""
    torch.ops.lazyfuse.wait()


def _tensor_list(tensors, what):
    flat = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            flat.extend(_tensor_list(t, what))
        elif isinstance(t, torch.Tensor):
            flat.append(t)
        else:
            raise TypeError(f"{what} expects tensors, got {type(t).__name__}")
    return flat


def sync(*tensors):
    """Materializes the given lazy tensors (and what they depend on), nothing else.
    Accepts tensors, or lists/tuples of them."""
    torch.ops.lazyfuse.sync(_tensor_list(tensors, "lazyfuse.sync"))


def dump_ir(tensors, format="text"):
    """The pending IR that computes `tensors` (a tensor or a list of them), as text or as a
    Graphviz dot graph, or the plan lowering makes of it ("plan": which ops each fused kernel
    runs, and the extern calls between them). Runs and compiles nothing."""
    if format not in ("text", "dot", "plan"):
        raise ValueError(f"dump_ir format must be 'text', 'dot' or 'plan', got {format!r}")
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    return torch.ops.lazyfuse.dump_ir(_tensor_list(tensors, "lazyfuse.dump_ir"), format)


def empty_cache():
    """Frees the memory the CPU buffer pool keeps for reuse (large plan buffers that later steps
    would take again; see docs/design.md, Note [Buffer pool]). Tensors in use keep theirs."""
    torch.ops.lazyfuse.empty_cache()


def buffer_pool_stats():
    """The CPU buffer pool: bytes of freed memory it keeps (`cached_bytes`), the most it keeps
    (`limit_bytes`, LAZYFUSE_BUFFER_POOL_MB), and how many buffers reused memory (`hits`) or took
    fresh memory (`misses`) since the process started."""
    cached, limit, hits, misses = torch.ops.lazyfuse.buffer_pool_stats()
    return {"cached_bytes": cached, "limit_bytes": limit, "hits": hits, "misses": misses}


# The one setting the package reads itself, before the library is loaded (python/lazyfuse/_library.py).
_PACKAGE_SETTINGS = [
    ("LAZYFUSE_LIBRARY", "a path to liblazyfuse.so (must exist)", "unset", "once",
     "the library to load when the package has no copy of its own"),
]


def config():
    """Every environment variable lazyfuse reads, as the README's configuration table lists
    them: a dict from the variable's name to a dict with its current `value` in the environment
    (None when unset or empty; a setting read "once" keeps the value it had when first read), the `values` it accepts, its `default`, when it is `read` ("once", "each graph",
    "each run", "each use") and its `effect`. See Note [Configuration]."""
    names, values, defaults, read_at, effects, current = torch.ops.lazyfuse.config()
    rows = list(zip(names, values, defaults, read_at, effects, current))
    rows += [(*row, os.environ.get(row[0], "")) for row in _PACKAGE_SETTINGS]
    return {
        name: {"value": now or None, "values": accepted, "default": default, "read": read,
               "effect": effect}
        for name, accepted, default, read, effect, now in rows
    }


def hardware_device():
    """Where lazy tensors really execute: "cpu" or "cuda:0" (set with LAZYFUSE_DEVICE)."""
    return torch.ops.lazyfuse.hardware_device()


def manual_seed(seed):
    """Seeds the hardware device's generator, which random lazy ops draw from."""
    torch.ops.lazyfuse.manual_seed(int(seed))


def _register_device_module():
    # torch 2.11 has no torch.lazy; if a later torch grows one, leave it alone.
    if hasattr(torch, "lazy"):
        return
    try:
        torch._register_device_module("lazy", _device_module)
    except RuntimeError:
        pass


def _patch_tensor_numpy():
    """`Tensor.numpy()` on a lazy tensor returns `self.cpu().numpy()`, as a user expects of a
    device that is not the CPU only in name. Every other tensor goes to the original method."""
    original = torch.Tensor.numpy
    if getattr(original, "_lazyfuse_patched", False):
        return

    @functools.wraps(original)
    def numpy(self, *args, **kwargs):
        if self.device.type == "lazy":
            force = kwargs.get("force", args[0] if args else False)
            # the copy below is resolved: eager's refusal of a tensor with a math bit, by hand
            if not force and not self.requires_grad and self.is_conj():
                raise RuntimeError("Can't call numpy() on Tensor that has conjugate bit set. "
                                   "Use tensor.resolve_conj().numpy() instead.")
            if not force and not self.requires_grad and self.is_neg():
                raise RuntimeError("Can't call numpy() on Tensor that has negative bit set. "
                                   "Use tensor.resolve_neg().numpy() instead.")
            return self.cpu().numpy(*args, **kwargs)
        return original(self, *args, **kwargs)

    numpy._lazyfuse_patched = True
    torch.Tensor.numpy = numpy


def _patch_tensor_serialization():
    """`torch.save` (and pickle) of a lazy tensor stores a CPU copy that `torch.load` moves back
    to the tensor's device, or to `map_location`: what eager does for a device tensor. Torch does
    this for "xla" (its storage holds no bytes either) by device name only, so lazy tensors would
    reach the storage path and fail. Every other tensor goes to the original method."""
    original = torch.Tensor._reduce_ex_internal
    if getattr(original, "_lazyfuse_patched", False):
        return

    @functools.wraps(original)
    def _reduce_ex_internal(self, proto):
        if self.device.type != "lazy":
            return original(self, proto)
        if torch.serialization._serialization_tls.skip_data:
            raise RuntimeError("cannot serialize lazy tensors under the skip_data context manager")
        # The rebuild function is on torch.load's weights_only allowlist, and it honours
        # map_location; detach: the loaded tensor is a leaf, as an eagerly loaded one is.
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (self.detach().cpu(), self.dtype, str(self.device), self.requires_grad),
        )

    _reduce_ex_internal._lazyfuse_patched = True
    torch.Tensor._reduce_ex_internal = _reduce_ex_internal


def _patch_storage_resize():
    """`untyped_storage().resize_(n)` of a lazy tensor. A lazy storage holds no memory of its own
    (the plan's buffers do), and torch's method refuses any device it does not know. FSDP2 frees
    an unsharded parameter after its forward with `resize_(0)` and sizes it again before it
    copies the all-gathered values in: on lazy, resizing to 0 keeps the values and the size (a
    later sync computes only what the program still reads), and resizing to the size the storage
    has does nothing; another size is refused. Every other storage goes to the original method."""
    original = torch.UntypedStorage.resize_
    if getattr(original, "_lazyfuse_patched", False):
        return

    @functools.wraps(original)
    def resize_(self, size):
        if self.device.type != "lazy":
            return original(self, size)
        if size != 0 and size != self.nbytes():
            raise NotImplementedError(
                f"resize_ of a lazy storage of {self.nbytes()} bytes to {size}: lazy storages "
                "cannot grow or shrink (resize_(0), which frees memory, is accepted)")
        return self

    resize_._lazyfuse_patched = True
    torch.UntypedStorage.resize_ = resize_


def _patch_module_apply():
    """`module.to("lazy")` keeps parameters that are one object in several places (tied weights:
    a language model's head and embedding) one object. Eager keeps them by swapping each
    parameter's data in place (`param.data = applied`), which needs the two tensors to share a
    TensorImpl type; a lazy tensor's is not a CPU or CUDA tensor's, so `Module._apply` makes a new
    Parameter in every place instead, and the tie was lost: the two copies trained apart. After
    `_apply`, each place of a parameter that was shared gets the Parameter its first place got,
    when the parameter was or now is lazy (`.cpu()` back loses the tie the same way); and a lazy
    module's uninitialized parameters stay uninitialized (_keep_uninitialized). Every other
    conversion is left as `_apply` made it."""
    original = torch.nn.Module._apply
    if getattr(original, "_lazyfuse_patched", False):
        return

    @functools.wraps(original)
    def _apply(self, fn, recurse=True):
        places = {}
        for module in self.modules() if recurse else (self,):
            for name, param in module._parameters.items():
                if param is not None:
                    places.setdefault(id(param), (param, []))[1].append((module, name))
        uninitialized = {id(p) for p, _ in places.values() if _is_uninitialized(p)}
        result = original(self, fn, recurse)
        for param, shared in places.values():
            if id(param) in uninitialized:
                _keep_uninitialized(param, shared)
            if len(shared) < 2:
                continue
            first = shared[0][0]._parameters[shared[0][1]]
            if first is None or "lazy" not in (param.device.type, first.device.type):
                continue
            for module, name in shared[1:]:
                module._parameters[name] = first
        return result

    _apply._lazyfuse_patched = True
    torch.nn.Module._apply = _apply


def _is_uninitialized(param):
    return isinstance(param, torch.nn.parameter.UninitializedParameter)


def _keep_uninitialized(param, places):
    """A lazy module's UninitializedParameter moved to or from lazy: `_apply` wraps what
    `param.to(...)` gives in a new Parameter (no shallow copy between lazy and other tensors), and
    that Parameter holds no data (shape [0]), so the module's first call failed instead of
    materializing it. Each place gets an UninitializedParameter on the new device instead."""
    replacement = None
    for module, name in places:
        moved = module._parameters.get(name)
        if moved is None or _is_uninitialized(moved) or "lazy" not in (param.device.type, moved.device.type):
            continue
        if replacement is None:  # one for all places: a tie stays a tie
            replacement = torch.nn.parameter.UninitializedParameter(
                requires_grad=moved.requires_grad, device=moved.device, dtype=moved.dtype)
        module._parameters[name] = replacement


def _lazy_storage_tag(storage):
    return None  # lazy tensors are saved as CPU copies (_patch_tensor_serialization)


def _lazy_storage_deserialize(storage, location):
    """`torch.load(..., map_location="lazy")` restores every storage at "lazy". A storage holds
    CPU bytes; lazy tensors saved by lazyfuse are rebuilt from theirs on the lazy device, and
    other tensors stay on the CPU (`load_state_dict` copies them into lazy parameters and
    optimizer state)."""
    if location.startswith("lazy"):
        return storage
    return None


def _register_serialization():
    if getattr(torch.serialization, "_lazyfuse_registered", False):
        return
    torch.serialization.register_package(40, _lazy_storage_tag, _lazy_storage_deserialize)
    torch.serialization._lazyfuse_registered = True


# Note [Optimizers default to foreach on lazy]
# torch.optim picks its multi-tensor (`foreach`) implementation by default only on the device
# types `torch.utils._foreach_utils._get_foreach_kernels_supported_devices()` lists, and
# clip_grad_norm_ asks `_device_has_foreach_support(device)`. On lazy, the foreach path records one
# node per `_foreach_*` op for all parameters together (an Adam step is a handful of nodes, not a
# dozen per parameter). So those two deciders answer for lazy tensors as they do for CUDA, and
# for everything else return exactly what PyTorch's own answer is (the device list itself is left
# alone: Note [Lazy-only kernels on Functionalize] says why). The modules that imported a decider
# by name (torch.optim.adam, clip_grad, ...) get the same wrapper; an explicit `foreach=False`
# still selects the per-tensor loop. `fused=True` is the user's choice, never a default: its
# device check (`_device_dtype_check_for_fused`) passes floating lazy parameters and asks
# PyTorch's for every other tensor; the fused step then records one node (Note [Fused optimizer
# steps] in backend/write_functionalization.cpp).


def _foreach_deciders():
    import torch.nn.utils.clip_grad  # noqa: F401 (imports the modules that bind the deciders)
    import torch.optim  # noqa: F401
    import torch.optim.optimizer as optimizer
    import torch.utils._foreach_utils as foreach_utils

    default_to = optimizer._default_to_fused_or_foreach
    device_has = foreach_utils._device_has_foreach_support
    check_fused = optimizer._device_dtype_check_for_fused

    def _default_to_fused_or_foreach(params, differentiable, use_fused=False):
        fused, foreach = default_to(params, differentiable, use_fused)
        if fused or foreach or differentiable or torch.jit.is_scripting():
            return fused, foreach
        if not any(isinstance(p, torch.Tensor) and p.device.type == "lazy" for p in params):
            return fused, foreach
        devices = foreach_utils._get_foreach_kernels_supported_devices() + ["lazy"]
        foreach = all(p is None or (type(p) in optimizer._foreach_supported_types
                                    and p.device.type in devices) for p in params)
        return fused, foreach

    def _device_has_foreach_support(device):
        if device.type == "lazy" and not torch.jit.is_scripting():
            return True
        return device_has(device)

    def _device_dtype_check_for_fused(p, cuda_unsupported=False):
        if p.device.type == "lazy" and torch.is_floating_point(p):
            return
        check_fused(p, cuda_unsupported)

    return {default_to: _default_to_fused_or_foreach, device_has: _device_has_foreach_support,
            check_fused: _device_dtype_check_for_fused}


def _enable_foreach_optimizers():
    import sys

    for original, routed in _foreach_deciders().items():
        if getattr(original, "_lazyfuse_routed", False):
            continue
        routed = functools.wraps(original)(routed)
        routed._lazyfuse_routed = True
        for name, module in list(sys.modules.items()):
            if not name.startswith(("torch.optim", "torch.nn.utils", "torch.utils._foreach")):
                continue
            attr = original.__name__
            if getattr(module, attr, None) is original:
                setattr(module, attr, routed)


def _initialize():
    """Loads the library and hooks lazyfuse into torch. Idempotent."""
    _library.load()
    _register_device_module()
    _patch_tensor_numpy()
    _patch_tensor_serialization()
    _patch_storage_resize()
    _register_serialization()
    _patch_module_apply()
    _enable_foreach_optimizers()
    _torch_lazy.install()
    _unsupported.install()


def _torch_is_initializing():
    spec = getattr(torch, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


# Note [Autoload never breaks import torch]
# The `torch.backends` entry point is `lazyfuse._autoload:autoload`; to reach it, `import torch`
# first imports this package. Raising here would break `import torch`, so while torch is still
# initializing we only define things, and `_autoload.autoload()` calls `_initialize()` under a
# try/except that turns a failure into a warning. Any other `import lazyfuse` initializes here
# and raises the real error.
if not _torch_is_initializing():
    _initialize()
