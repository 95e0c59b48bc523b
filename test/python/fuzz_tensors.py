"""What the fuzzer asks of a tensor: which elements it addresses (overlaps, shared storage,
write hazards), how its strides are laid out, and whether its values may be cast."""

import math

import torch

from fuzz_config import KNOWN_BUGS


def addresses(t):
    """The storage offset of each element of t (a tensor of t's shape)."""
    a = torch.full((), t.storage_offset(), dtype=torch.int64)
    for d, (n, s) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[d] = n
        a = a + (torch.arange(n) * s).view(shape)
    return a.expand(t.shape)


def overlaps_itself(t):
    if t.numel() <= 1:
        return False
    return torch.unique(addresses(t)).numel() < t.numel()


def storage_id(t):
    return t.untyped_storage().data_ptr() if t.untyped_storage().nbytes() else None


def shares_storage(a, b):
    return storage_id(a) is not None and storage_id(a) == storage_id(b)


def write_hazard(dest, operand):
    """Whether writing `dest` elementwise from `operand` (broadcast to dest) reads an element of
    dest that another element's write changes: then eager's values depend on its loop order."""
    if not isinstance(operand, torch.Tensor) or not shares_storage(dest, operand):
        return False
    da = addresses(dest)
    try:
        oa = addresses(operand).expand(dest.shape)
    except RuntimeError:
        return True
    written = set(da.flatten().tolist())
    return any(o in written and o != d
               for o, d in zip(oa.flatten().tolist(), da.flatten().tolist()))


def permuted(t):
    """Whether t's dims of more than one element are not in the order of their strides."""
    strides = [s for n, s in zip(t.shape, t.stride()) if n > 1]
    return strides != sorted(strides, reverse=True)


def odd_unit_strides(t):
    """Whether t has a dim of one element whose stride is not larger than that of a dim of more
    elements: eager's TensorIterator then orders the dims of an elementwise result by that
    stride, lazy ignores it (KNOWN_BUGS: zeros(3, 2) + zeros(6).as_strided((1, 1, 2), (1, 1, 1))
    has strides (1, 1, 3) eagerly, (6, 2, 1) on lazy); so their results' strides are not
    compared, unless LAZYFUSE_FUZZ_KNOWN_BUGS=1."""
    if KNOWN_BUGS or not isinstance(t, torch.Tensor):
        return False
    big = [s for n, s in zip(t.shape, t.stride()) if n > 1]
    return bool(big) and any(n == 1 and s <= max(big) for n, s in zip(t.shape, t.stride()))


def full_geometry(t):
    """All of t's layout, strides of one-element dims included (what eager's overlap checks
    compare, and what a geometry mismatch prints)."""
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.is_contiguous())


def numel_of(shape):
    return math.prod(shape)


def castable(t, dtype):
    """A float tensor cast to an integer dtype only when its values are finite and small (the
    cast of others is undefined)."""
    if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
        return True
    if dtype.is_floating_point or dtype == torch.bool:
        return True
    return t.numel() == 0 or bool((t.isfinite() & (t.abs() < 2 ** 30)).all())
