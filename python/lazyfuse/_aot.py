"""Ahead-of-time packages: `aot_compile` writes an exported program, its weights and its compiled
kernels to one file; `aot_load` (and `lazyfuse::AotModel` in C++) runs it. See the README's
"Ahead-of-time packages" and Note [Ahead-of-time packages] in backend/aot_package.cpp."""

import json
import os

import torch
from torch.utils import _pytree as pytree

from ._dynamo_backend import _retarget_devices

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
    module = module.to(_LAZY)
    lazy_flat = [_lazy_copy(leaf) for leaf in flat]
    lazy_args, lazy_kwargs = pytree.tree_unflatten(lazy_flat, in_spec)
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    versions = {name: t._version for name, t in state.items()}
    with torch.no_grad():
        result = module(*lazy_args, **lazy_kwargs)
    written = sorted(name for name, t in state.items() if t._version != versions[name])
    if written:
        # A training-mode BatchNorm updates its running statistics in place, which the export
        # signature does not always show.
        raise NotImplementedError(
            f"aot_compile: the program writes its buffers or inputs ({', '.join(written)}); a "
            "package runs programs that only return values (export the model in eval mode)")
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
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            raise TypeError(f"{self.path} takes arguments structured as {self._in_spec}, got "
                            f"{spec}")
        tensors = []
        for i, leaf in enumerate(flat):
            if str(i) in self._constants:
                if leaf != self._constants[str(i)]:
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
