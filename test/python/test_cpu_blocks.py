"""Row loops in blocks (kernels/cpu_codegen.cpp). Note [Half blocks]: contiguous float16
operands of a fused row loop are converted into float arrays before the loop and out of them
after it. Note [Streaming stores]: a kernel moving more bytes than the last-level cache holds
writes its outputs with non-temporal stores (the large cases below, on a cache of up to 64 MB). The chains here use only operations whose
float results are exact to the bit (-ffp-contract=off keeps a*b+c two roundings), so the fused
kernel, which computes in float between ops and rounds once at the store (Note [Conversions
round]), must give eager's float32 chain rounded to half, bit for bit, at every block edge."""

import pytest
import torch

import lazyfuse

from helpers import to_lazy

# Around the block of 256 points and the 8 conversions of one F16C instruction.
SIZES = [1, 7, 8, 9, 255, 256, 257, 520, 4099]


@pytest.fixture(autouse=True)
def fused(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    yield


def halves(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 300
    x[: min(n, 4)] = torch.tensor([float("nan"), float("inf"), 6e-8, -65504.0])[: min(n, 4)]
    return x.half()


def chain(a, b, c):
    return (a * b + c).maximum(a.abs() - 1)


def expected(*operands):
    return chain(*[t.float() for t in operands]).half()


def assert_bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))


@pytest.mark.parametrize("n", SIZES)
def test_contiguous_half_chain_rounds_once_as_eager(n):
    a, b, c = halves(n, 0), halves(n, 1), halves(n, 2)
    lazyfuse.reset_metrics()
    got = chain(*to_lazy([a, b, c])).cpu()
    assert lazyfuse.metrics().get("KernelsLaunched", 0) == 1
    assert_bits_equal(got, expected(a, b, c))


@pytest.mark.parametrize("shape", [(3, 257), (33, 64), (2, 1)])
def test_half_rows_with_strided_and_broadcast_operands(shape):
    # Contiguous rows next to a transposed operand (converted in the loop) and a broadcast row.
    rows, cols = shape
    a = halves(rows * cols, 3).view(rows, cols)
    b = halves(rows * cols, 4).view(cols, rows).t()
    c = halves(cols, 5)
    got = chain(*to_lazy([a, b, c])).cpu()
    assert_bits_equal(got, expected(a, b, c))


def test_half_store_into_a_transposed_output():
    a, b, c = (halves(300 * 7, s).view(300, 7) for s in (6, 7, 8))
    out = torch.empty(7, 300, dtype=torch.half).t()
    lazy_out = to_lazy(out)
    lazy_out.copy_(chain(*to_lazy([a, b, c])))
    assert_bits_equal(lazy_out.cpu(), expected(a, b, c))


@pytest.mark.parametrize("n", [255, 4099])
def test_in_place_half_update_reads_its_block_before_writing_it(n):
    # The update may write into the memory it reads (Note [Donated buffers]).
    a, b = halves(n, 9), halves(n, 10)
    x = to_lazy(a.clone())
    lazyfuse.sync(x)
    for _ in range(3):
        x.mul_(to_lazy(b)).add_(1)
        lazyfuse.mark_step()
    want = a.clone()
    for _ in range(3):
        want = ((want.float() * b.float()) + 1).half()
    assert_bits_equal(x.cpu(), want)


LARGE = 6 << 20  # 24 MB a float32 tensor: a binary op moves 72 MB


def test_large_float_chain_matches_eager_exactly():
    a, b, c = (torch.randn(LARGE, generator=torch.Generator().manual_seed(s)) for s in (11, 12, 13))
    got = (to_lazy(a) * to_lazy(b) + to_lazy(c)).cpu()
    assert torch.equal(got, a * b + c)


def test_large_half_chain_rounds_once():
    a, b, c = halves(2 * LARGE, 14), halves(2 * LARGE, 15), halves(2 * LARGE, 16)
    assert_bits_equal(chain(*to_lazy([a, b, c])).cpu(), expected(a, b, c))


def test_large_in_place_update_and_write_into_an_offset_slice():
    a, b = (torch.randn(LARGE, generator=torch.Generator().manual_seed(s)) for s in (17, 18))
    x, y = to_lazy(a.clone()), to_lazy(b)
    lazyfuse.sync(x)
    x.mul_(2).add_(y)
    out = to_lazy(torch.zeros(LARGE + 3))
    out[3:].copy_(x * 3)
    lazyfuse.mark_step()
    want = a * 2 + b
    assert torch.equal(x.cpu(), want)
    assert torch.equal(out.cpu()[3:], want * 3)
    assert torch.equal(out.cpu()[:3], torch.zeros(3))
