"""Conversions inside fused kernels round as eager's do (Note [Conversions round]): a value
converted to or from Half or BFloat16 is the nearest value of that type, though the kernel
computes in Float between ops."""

import pytest
import torch

import lazyfuse

from helpers import reference, to_lazy

X = torch.randn(4000) * 3.3
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
