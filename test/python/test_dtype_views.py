"""Views that reinterpret a tensor's bytes as another dtype (view(dtype)), chained with the views
that move elements (slices, transposes, unfolds, as_strided, expand), then written through, on
lazy tensors against eager: the base's bytes and the view's, bit for bit, or eager's error."""

import random

import pytest
import torch

from helpers import LAZY, REFERENCE, chain_of


def _base():
    # distinct, finite values whose bytes read as int32 and int16 are distinct too
    return (torch.arange(48, dtype=torch.float32) * 1.25 - 20).view(4, 12)


def _bytes(t):
    """A tensor's elements as integers of its own width (exact, NaN-proof)."""
    t = t.detach().cpu().contiguous()
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(width) if t.dtype != torch.bool else t


VIEWS = [
    ("t", lambda t: t.t() if t.dim() == 2 else t),
    ("step_slice", lambda t: t[..., ::2] if t.shape[-1] > 1 else t),
    ("row_slice", lambda t: t[1:] if t.dim() > 1 and t.shape[0] > 1 else t),
    ("select", lambda t: t[1] if t.dim() > 1 and t.shape[0] > 1 else t),
    ("unfold", lambda t: t.unfold(-1, 2, 2) if t.shape[-1] >= 2 else t),
    ("unfold_overlapping", lambda t: t.unfold(-1, 2, 1) if t.shape[-1] >= 2 else t),
    ("diagonal", lambda t: t.diagonal() if t.dim() == 2 else t),
    ("as_strided", lambda t: t.as_strided((2, 3), (3, 1), 1) if t.numel() >= 8 else t),
    ("expand", lambda t: t.unsqueeze(0).expand(2, *t.shape)),
    ("int32", lambda t: t.view(torch.int32) if t.element_size() == 4 else t),
    ("float32", lambda t: t.view(torch.float32) if t.element_size() == 4 else t),
    ("int16", lambda t: t.view(torch.int16)),
    ("int64", lambda t: t.view(torch.int64)),
    ("uint8", lambda t: t.view(torch.uint8)),
]
WRITES = [
    ("add_", lambda t: t.add_(1)),
    ("mul_", lambda t: t.mul_(3)),
    ("zero_", lambda t: t.zero_()),
    ("fill_", lambda t: t.fill_(5)),
    ("copy_", lambda t: t.copy_(torch.full((), 7, dtype=t.dtype, device=t.device))),
    ("neg_", lambda t: t.neg_() if t.dtype != torch.uint8 else t.add_(1)),
]


def _program(seed):
    rng = random.Random(seed)
    steps = [rng.choice(VIEWS) for _ in range(rng.randint(1, 4))]
    if not any(name in ("int32", "float32", "int16", "int64", "uint8") for name, _ in steps):
        steps.insert(rng.randrange(len(steps) + 1), rng.choice(VIEWS[-5:]))
    steps.append(rng.choice(WRITES))
    return chain_of(steps)


def _run(fn, device):
    x = _base().to(device)
    try:
        out = fn(x)
    except RuntimeError as e:
        return (type(e), str(e).split("\n")[0]), None
    return out, x


@pytest.mark.parametrize("seed", range(120))
def test_writes_through_dtype_views_match_eager(seed):
    text, fn = _program(seed)
    eager, eager_base = _run(fn, REFERENCE)
    lazy, lazy_base = _run(fn, LAZY)
    if isinstance(eager, tuple):
        assert lazy == eager, text
        return
    geometry = (eager.dtype, eager.shape, eager.stride())
    assert (lazy.dtype, lazy.shape, lazy.stride()) == geometry, text
    assert torch.equal(_bytes(lazy), _bytes(eager)), text
    assert torch.equal(_bytes(lazy_base), _bytes(eager_base)), text
