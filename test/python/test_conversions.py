"""Conversions inside fused kernels round as eager's do (Note [Conversions round]): a value
converted to or from Half or BFloat16 is the nearest value of that type, though the kernel
computes in Float between ops."""

import pytest
import torch

import lazyfuse

from helpers import reference, to_lazy

X = torch.randn(4000, generator=torch.Generator().manual_seed(0)) * 3.3
X[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 65520.0])  # 65520: half's inf

CONVERSIONS = {
    "half_then_float": lambda t: (t * 1.1).half().float() * 3,
    "bfloat16_then_float": lambda t: (t * 1.1).bfloat16().float() - 1,
    "sum_of_half": lambda t: t.half().sum(),
    "half_sum_as_float": lambda t: torch.where(t.isfinite(), t, 0).half().sum().float(),
    "bfloat16_amax_as_float": lambda t: t.bfloat16().amax().float(),
    "half_product_as_float": lambda t: (t.half() * 1.1).float(),
    "double_to_bfloat16": lambda t: (t.double() / 3).bfloat16() * 2,
    "int_to_half": lambda t: (t * 1000).long().half() + 0.5,
    "copy_into_half": lambda t: torch.zeros_like(t, dtype=torch.half).copy_(t / 7) + 1,
    "half_to_bfloat16": lambda t: (t / 3).half().bfloat16(),
}


@pytest.fixture(autouse=True)
def fused(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    torch.ops.lazyfuse.clear_graph_cache()
    yield
    torch.ops.lazyfuse.clear_graph_cache()


@pytest.mark.parametrize("name", CONVERSIONS)
def test_conversions_round_exactly_as_eager(name):
    fn = CONVERSIONS[name]
    lazyfuse.reset_metrics()
    got = fn(*to_lazy([X])).cpu()
    assert lazyfuse.metrics().get("KernelsLaunched", 0) > 0
    torch.testing.assert_close(got, reference(fn, X), rtol=0, atol=0, equal_nan=True)


def float_bit_patterns():
    """Floats spread over every exponent and sign, with the edges half rounds at: subnormal
    halves, the largest half, the overflow boundary, infinities and NaN."""
    bits = torch.arange(0, 2**32, 65537, dtype=torch.int64)
    bits = torch.cat([bits, bits + 4095, bits + 4096, bits + 8191]) % 2**32
    edges = torch.tensor([5.96e-8, 2.98e-8, 2.99e-8, 6.1e-5, 65504.0, 65519.99, 65520.0, 1e-45])
    values = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
    return torch.cat([values, edges, -edges])


@pytest.mark.parametrize("dtype", [torch.half, torch.bfloat16])
def test_every_16_bit_value_loads_as_eager(dtype):
    # Each of the 65536 bit patterns, read from a 16-bit buffer by a fused kernel.
    h = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    got = (to_lazy(h).float() * 1).cpu()
    torch.testing.assert_close(got, h.float(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.half, torch.bfloat16])
def test_floats_store_into_16_bits_as_eager(dtype):
    x = float_bit_patterns()
    got = (to_lazy(x) * 1).to(dtype).cpu()
    want = x.to(dtype)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))
