"""What the fused-kernel tests share: inputs with the edge values of a dtype, the check of a
function on lazy against eager that also proves fused kernels ran, and the tolerances of
16-bit chains."""

import math

import torch

import lazyfuse
from helpers import reference, to_cpu, to_lazy


def edge_tensor(shape, dtype, seed=0):
    """Random values plus the edge values of the dtype: NaN, +-inf, -0.0, integer extremes."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g) * 3).to(dtype)
        flat = t.view(-1)
        for i, v in enumerate([math.nan, math.inf, -math.inf, -0.0, 0.0]):
            if i < flat.numel():
                flat[(i * 7) % flat.numel()] = v
        return t
    info = torch.iinfo(dtype)
    t = torch.randint(max(info.min, -100), min(info.max, 100), shape, generator=g, dtype=dtype)
    flat = t.view(-1)
    flat[0], flat[-1] = info.min, info.max
    return t


def check(fn, *inputs, rtol=None, atol=None, equal_nan=True):
    lazyfuse.reset_metrics()
    expected = reference(fn, *inputs)
    actual = fn(*to_lazy(list(inputs)))
    lazyfuse.mark_step()
    tol = {} if rtol is None else {"rtol": rtol, "atol": atol}
    torch.testing.assert_close(to_cpu(actual), expected, equal_nan=equal_nan, **tol)
    metrics = lazyfuse.metrics()
    assert metrics["KernelsLaunched"] >= 1, "the graph did not run as fused kernels"
    return metrics


def tolerances(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return {"rtol": 2e-2, "atol": 2e-2}  # fused chains round once, eager after every op
    return {}
