"""Ahead-of-time packages: `aot_compile` writes an exported program, its weights and its compiled
kernels to one file; `aot_load` (and `lazyfuse::AotModel` in C++) runs it. See the README's
"Ahead-of-time packages" and Note [Ahead-of-time packages] in backend/aot_package.cpp."""

import json
import math
import os

import torch
from torch.utils import _pytree as pytree

from ._dynamo_backend import _retarget_devices, _share_constants

# What counts a sync, or an op run eagerly, while a program is recorded for a package.
_SYNC_COUNTERS = ("GraphsExecuted", "EagerFallback", "StepCuts", "TraceLimitCuts")


def _sync_counters():
    metrics = torch.ops.lazyfuse.metrics()
    values = dict(zip(metrics[0], metrics[1]))
    return {name: values.get(name, 0) for name in _SYNC_COUNTERS}


class _no_trace_cuts:
    """Automatic trace cuts off on this thread while a program is recorded for a package: a cut
    would run part of it on the example inputs."""

    def __enter__(self):
        self._saved = torch.ops.lazyfuse.override_trace_limit(0)

    def __exit__(self, *exc):
        torch.ops.lazyfuse.override_trace_limit(self._saved)


_LAZY = torch.device("lazy")


def _lazy_copy(leaf):
    return leaf.detach().to(_LAZY) if isinstance(leaf, torch.Tensor) else leaf


def aot_compile(exported_program, path):
    """Writes `exported_program` (what `torch.export.export` returns) to the package file `path`:
    the graph lazyfuse records when it runs the program on its example inputs, the program's
    weights, and the fused kernels compiled for it. The package runs inputs of the example
    inputs' dtypes and shapes; inputs that are not tensors are fixed to their example values.
    Returns `path`."""
    if not isinstance(exported_program, torch.export.ExportedProgram):
        raise TypeError("aot_compile takes what torch.export.export returns, got "
                        f"{type(exported_program).__name__}")
    signature = exported_program.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
        raise NotImplementedError(
            "aot_compile: the program writes its buffers or inputs ("
            + ", ".join(list(signature.buffers_to_mutate.values())
                        + list(signature.user_inputs_to_mutate.values()))
            + "); a package runs programs that only return values (export the model in eval "
            "mode)")
    args, kwargs = exported_program.example_inputs
    flat, in_spec = pytree.tree_flatten((args, kwargs))
    constants = {str(i): leaf for i, leaf in enumerate(flat) if not isinstance(leaf, torch.Tensor)}
    try:
        json.dumps(constants)
    except TypeError as e:
        raise TypeError(f"aot_compile: an input that is not a tensor cannot be stored: {e}") from e
    module = exported_program.module()
    # Factories in the graph name the device it was exported on: they make lazy tensors instead.
    devices = {t.device for t in flat if isinstance(t, torch.Tensor)}
    devices.update(t.device for t in exported_program.state_dict.values())
    _retarget_devices(module, devices or {torch.device("cpu")})
    _share_constants(module)
    module = module.to(_LAZY)
    lazy_flat = [_lazy_copy(leaf) for leaf in flat]
    lazy_args, lazy_kwargs = pytree.tree_unflatten(lazy_flat, in_spec)
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    versions = {name: t._version for name, t in state.items()}
    before = _sync_counters()
    with _no_trace_cuts(), torch.no_grad():
        result = module(*lazy_args, **lazy_kwargs)
    written = sorted(name for name, t in state.items() if t._version != versions[name])
    if written:
        # A training-mode BatchNorm updates its running statistics in place, which the export
        # signature does not always show.
        raise NotImplementedError(
            f"aot_compile: the program writes its buffers or inputs ({', '.join(written)}); a "
            "package runs programs that only return values (export the model in eval mode)")
    synced = {k: v - before[k] for k, v in _sync_counters().items() if v != before[k]}
    if synced:
        # What a sync computed from the example inputs would be stored as a weight.
        raise NotImplementedError(
            "aot_compile: running the program synced lazy values (" +
            ", ".join(f"{k} +{v}" for k, v in sorted(synced.items())) +
            "): an op whose result depends on data (nonzero, boolean masks, item()) or that runs "
            "eagerly makes a package of the example's values; a package holds a graph of its "
            "inputs and weights only")
    out_flat, out_spec = pytree.tree_flatten(result)
    outputs = []
    for leaf in out_flat:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError("aot_compile: the program returns a value that is not a tensor "
                            f"({type(leaf).__name__}); a package returns tensors only")
        # Every output gets memory of its own, laid out contiguously: see Note [Ahead-of-time
        # packages].
        outputs.append(leaf.clone(memory_format=torch.contiguous_format))
    metadata = json.dumps({
        "in_spec": pytree.treespec_dumps(in_spec),
        "out_spec": pytree.treespec_dumps(out_spec),
        "constants": constants,
    })
    path = os.fspath(path)
    inputs = [leaf for leaf in lazy_flat if isinstance(leaf, torch.Tensor)]
    torch.ops.lazyfuse.aot_save(path, inputs, outputs, metadata)
    return path


def _same_constant(given, exported):
    """Whether an argument equals the example value stored (as JSON) in the package."""
    if isinstance(given, float) and isinstance(exported, float):
        return given == exported or (math.isnan(given) and math.isnan(exported))
    try:
        return json.loads(json.dumps(given)) == exported
    except TypeError:
        return False


class AotModel:
    """A package `aot_compile` wrote, loaded: call it with the exported program's arguments."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._model = torch.classes.lazyfuse.AotModel(self.path)
        meta = json.loads(self._model.metadata())
        self._in_spec = pytree.treespec_loads(meta["in_spec"])
        self._out_spec = pytree.treespec_loads(meta["out_spec"])
        self._constants = meta["constants"]

    def __call__(self, *args, **kwargs):
        # Keywords in the order the program was exported with, whatever order they come in.
        order = self._in_spec.child(1).context
        if set(kwargs) == set(order):
            kwargs = {name: kwargs[name] for name in order}
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            raise TypeError(f"{self.path} takes arguments structured as {self._in_spec}, got "
                            f"{spec}")
        tensors = []
        for i, leaf in enumerate(flat):
            if str(i) in self._constants:
                if not _same_constant(leaf, self._constants[str(i)]):
                    raise ValueError(f"{self.path} was exported with argument {i} = "
                                     f"{self._constants[str(i)]!r}, got {leaf!r}")
            elif not isinstance(leaf, torch.Tensor):
                raise TypeError(f"{self.path}: argument {i} must be a tensor, got "
                                f"{type(leaf).__name__}")
            else:
                tensors.append(leaf)
        return pytree.tree_unflatten(self._model.run(tensors), self._out_spec)


def aot_load(path):
    """Loads the package file `path` (written by `aot_compile`) as a callable `AotModel`. Raises
    for a damaged file and for one built by another lazyfuse or torch version or for another
    architecture."""
    return AotModel(path)
