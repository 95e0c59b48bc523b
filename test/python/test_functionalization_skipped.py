"""Calls on lazy tensors made with functionalization excluded (Note [Lazy calls that skipped
functionalization]): inside a __torch_dispatch__, PyTorch excludes every dispatch key above
Python, Functionalize among them, so a tensor subclass wrapping lazy tensors (DTensor, for one)
ran its in-place ops on the lazy tensors without functionalization, and the views' bases never
saw the writes. Each case runs on CPU and on lazy inner tensors and compares."""

import pytest
import torch
from torch.utils._pytree import tree_map

import lazyfuse


class Wrapper(torch.Tensor):
    """The smallest wrapper subclass: every op runs on the inner tensors."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, Wrapper) else t  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        if func._schema.is_mutable:  # in place: self (or nothing, as _foreach_add_ returns)
            return args[0] if func._schema.returns else None
        return tree_map(lambda t: Wrapper(t) if isinstance(t, torch.Tensor) else t, out)


def views_of(base):
    return {"slice": base[1:3], "column": base[:, 2], "transposed": base.t(), "whole": base}


@pytest.mark.parametrize("view", ["slice", "column", "transposed", "whole"])
@pytest.mark.parametrize("op", ["add_", "mul_", "copy_", "zero_", "foreach"])
def test_in_place_op_through_a_wrapper_subclass_reaches_the_base(view, op):
    results = []
    for device in ("cpu", "lazy"):
        base = torch.arange(12.0).reshape(3, 4).to(device)
        inner = views_of(base)[view]
        w = Wrapper(inner)
        if op == "add_":
            w.add_(2.5)
        elif op == "mul_":
            w.mul_(Wrapper(torch.full_like(inner, 3.0)))
        elif op == "copy_":
            w.copy_(Wrapper(torch.ones_like(inner)))
        elif op == "zero_":
            w.zero_()
        else:
            torch._foreach_add_([w], [Wrapper(torch.ones_like(inner))], alpha=-0.5)
        lazyfuse.mark_step()
        results.append((base.cpu(), inner.cpu()))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_out_of_place_op_through_a_wrapper_subclass_matches_cpu():
    results = []
    for device in ("cpu", "lazy"):
        base = torch.arange(12.0).reshape(3, 4).to(device)
        out = Wrapper(base[1:]) * 2 + Wrapper(base[:2]).exp()
        results.append(out.inner.cpu())
    torch.testing.assert_close(results[1], results[0])

