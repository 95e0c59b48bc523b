"""PyTorch entry points that cannot take lazy tensors yet, refused with a clear error.

Note [Transforms lazy tensors cannot go through]
torch.func.functionalize and torch._to_functional_tensor wrap their inputs in a
FunctionalTensorWrapper. A lazy tensor already is one (Note [Lazy data]: lazyfuse functionalizes
every lazy op), and PyTorch cannot wrap a functional tensor again: it stopped on an internal
assert in FunctionalStorageImpl. make_fx traced a lazy input as a constant of the graph, a wrong
graph with no warning. Each entry point below now checks its tensor arguments: a lazy one gets a
RuntimeError that says what is unsupported and what to do instead; every other call is
PyTorch's, unchanged (test_containment.py runs make_fx and functionalize on CPU tensors with and
without lazyfuse). Pinned by test_api.py::test_transforms_refuse_lazy_tensors_clearly.
"""

import functools

import torch
from torch.utils._pytree import tree_leaves

from ._torch_lazy import _is_lazy


def _has_lazy(values):
    return any(_is_lazy(v) for v in tree_leaves(values))


_FUNCTIONALIZE = (
    "{what} cannot take a lazy tensor: lazy tensors are functionalized already (lazyfuse records "
    "every op on them as a functional op), and PyTorch cannot functionalize a tensor twice; call "
    "the function on the lazy tensors directly"
)
_MAKE_FX = (
    "make_fx cannot trace lazy tensors: they would be traced as constants of the graph; trace "
    "CPU, meta or fake tensors instead (lazyfuse compiles what lazy tensors record by itself)"
)


def _guard(original, check):
    @functools.wraps(original)
    def guarded(*args, **kwargs):
        check(args, kwargs)
        return original(*args, **kwargs)

    guarded._lazyfuse_guarded = True
    return guarded


def _refuse(message):
    def check(args, kwargs):
        if _has_lazy((args, kwargs)):
            raise RuntimeError(message)

    return check


def install():
    """Guards the entry points; idempotent."""
    import torch._functorch.eager_transforms as eager_transforms
    import torch.fx.experimental.proxy_tensor as proxy_tensor

    targets = (
        (eager_transforms, "_wrap_functional_tensor",
         _refuse(_FUNCTIONALIZE.format(what="torch.func.functionalize"))),
        (torch, "_to_functional_tensor",
         _refuse(_FUNCTIONALIZE.format(what="torch._to_functional_tensor"))),
        (proxy_tensor._MakefxTracer, "trace", _refuse(_MAKE_FX)),
    )
    for owner, name, check in targets:
        original = getattr(owner, name)
        if not getattr(original, "_lazyfuse_guarded", False):
            setattr(owner, name, _guard(original, check))
