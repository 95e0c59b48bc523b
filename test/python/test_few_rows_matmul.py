"""Matrix products of a few rows (a decoder's token times its weights) run on lazyfuse's own CPU
kernel, and agree with eager at least as closely as eager agrees with float64. See Note [Matrix
products of few rows] in kernels/few_rows_matmul.cpp."""

import pytest
import torch
import torch.nn.functional as F

import lazyfuse

pytestmark = pytest.mark.skipif(lazyfuse.hardware_device() != "cpu",
                                reason="the kernel runs CPU products only")


def kernel_calls():
    return lazyfuse.metrics().get("FewRowsMatmuls", 0)


def _has_vector_fma():
    """Whether the CPU has AVX-512, or AVX2 with FMA: the kernel's two builds."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return False
    return "avx512f" in flags or {"avx2", "fma"} <= flags


# The kernel runs where the CPU has one of its builds; elsewhere the BLAS does, and the values are
# checked all the same.
CALLS = 1 if _has_vector_fma() else 0


PRODUCTS = {
    "mm": lambda a, w, bias: a.flatten(0, -2) @ w,
    "matmul 3-d": lambda a, w, bias: a.unflatten(0, (1, -1)) @ w,
    "linear": lambda a, w, bias: F.linear(a, w.t().contiguous(), bias),
    "linear without bias": lambda a, w, bias: F.linear(a, w.t().contiguous()),
    "linear of a 3-d input": lambda a, w, bias: F.linear(a.unsqueeze(1), w.t().contiguous(), bias),
    "linear of a transposed weight": lambda a, w, bias: F.linear(a, w.t(), bias),
    "addmm": lambda a, w, bias: torch.addmm(bias, a, w),
    "columns of w contiguous": lambda a, w, bias: a @ w.t().contiguous().t(),
}


def check(product, a, w, bias, calls=CALLS):
    """The lazy product of `a`, `w` and `bias` against eager's, and both against float64."""
    before = kernel_calls()
    lazy = product(a.to("lazy"), w.to("lazy"), bias.to("lazy")).cpu()
    assert kernel_calls() - before == calls
    eager = product(a, w, bias)
    exact = product(a.double(), w.double(), bias.double())
    assert lazy.shape == eager.shape and lazy.dtype == eager.dtype
    lazy_error = (lazy.double() - exact).abs().max().item()
    eager_error = (eager.double() - exact).abs().max().item()
    if calls:
        assert lazy_error <= 2 * eager_error + 1e-6, (lazy_error, eager_error)
    # Where the BLAS runs on both sides, the lazy call may pass it another layout of the same
    # values (`w.t().contiguous().t()` reaches it as `w`: Note [Strided views of buffers]), which
    # the BLAS sums in another order (about 3x eager's error here, on an AVX2 machine): the
    # values are held to eager's within float32 tolerance only (bfloat16's: one rounding of a
    # float sum, which may fall either side where the sums differ in their last bits).
    if a.dtype == torch.bfloat16:
        torch.testing.assert_close(lazy, eager, rtol=8e-3, atol=1e-2)
    else:
        torch.testing.assert_close(lazy, eager, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("product", PRODUCTS.values(), ids=PRODUCTS.keys())
@pytest.mark.parametrize("rows,k,n", [(1, 1024, 256), (3, 300, 1031), (4, 512, 1024),
                                      (5, 17, 1100), (8, 64, 257), (2, 16, 1024),
                                      (12, 200, 300)])
def test_products_of_few_rows_match_eager(product, rows, k, n):
    torch.manual_seed(rows * k + n)
    check(product, torch.randn(rows, k), torch.randn(k, n), torch.randn(n))


@pytest.mark.parametrize("product", ["mm", "linear without bias", "addmm"])
@pytest.mark.parametrize("rows,k,n", [(1, 1024, 256), (4, 512, 1024), (5, 17, 1100),
                                      (12, 200, 300), (16, 256, 512)])
def test_bfloat16_products_match_eager(product, rows, k, n):
    # bfloat16 inputs are widened to float as they are read, summed in float and rounded once,
    # as eager's BLAS does; its error against float64 is eager's (both are the final rounding).
    torch.manual_seed(rows * k + n)
    a, w, bias = (torch.randn(rows, k).bfloat16(), torch.randn(k, n).bfloat16(),
                  torch.randn(n).bfloat16())
    # A lazy w.t().contiguous() reaches the call as a view of w (Note [Strided views of
    # buffers]): the products above read w's rows.
    check(PRODUCTS[product], a, w, bias)
    # A linear layer's weight, contiguous before it is lazy: dot products along k, 12 rows at
    # most.
    check(lambda a, weight, bias: F.linear(a, weight, bias), a, w.t().contiguous(), bias,
          calls=CALLS if rows <= 12 else 0)


def test_other_dtypes_and_mixed_dtypes_run_atens_kernel():
    torch.manual_seed(0)
    a, w = torch.randn(4, 256), torch.randn(256, 512)
    for x, y in ((a.half(), w.half()), (a.bfloat16(), w), (a, w.bfloat16())):
        before = kernel_calls()
        try:
            expected = x @ y
        except RuntimeError as error:  # mixed dtypes: eager's error, raised by the lazy call too
            with pytest.raises(RuntimeError, match="dtype"):
                (x.to("lazy") @ y.to("lazy")).cpu()
            assert "dtype" in str(error)
            continue
        torch.testing.assert_close((x.to("lazy") @ y.to("lazy")).cpu(), expected)
        assert kernel_calls() == before


@pytest.mark.parametrize("rows", [13, 16])
def test_up_to_sixteen_rows_along_the_weights_rows(rows):
    # x @ w (w's rows contiguous) takes up to 16 rows; a linear layer (w's columns contiguous)
    # up to 12: the BLAS runs the other.
    torch.manual_seed(rows)
    a, w, bias = torch.randn(rows, 256), torch.randn(256, 1024), torch.randn(1024)
    check(PRODUCTS["mm"], a, w, bias)
    # The weight made contiguous before it is lazy: a lazy .contiguous() of w.t() may reach the
    # call as a strided view of w (Note [Strided views of buffers]).
    check(lambda a, weight, bias: F.linear(a, weight, bias), a, w.t().contiguous(), bias, calls=0)


@pytest.mark.parametrize("rows,k,n", [(4, 4096, 8), (2, 20000, 1), (6, 16, 4099)])
def test_long_sums_and_narrow_weights(rows, k, n):
    # Dot products along a long k into few columns, and a short k into many.
    torch.manual_seed(k + n)
    weight = torch.randn(n, k)  # contiguous when it becomes lazy: dot products along k
    check(lambda a, weight, bias: F.linear(a, weight, bias), torch.randn(rows, k), weight,
          torch.randn(n))


def test_rows_of_a_view_with_a_row_stride():
    torch.manual_seed(0)
    big = torch.randn(8, 600)
    w = torch.randn(300, 512)
    before = kernel_calls()
    lazy = (big.to("lazy")[::2, 100:400] @ w.to("lazy")).cpu()  # rows 1200 floats apart
    assert kernel_calls() - before == CALLS
    torch.testing.assert_close(lazy, big[::2, 100:400] @ w, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("view", ["strided columns of a", "w strided both ways"])
def test_products_of_strided_views_match_eager(view):
    torch.manual_seed(0)
    a, w = torch.randn(4, 512), torch.randn(512, 1024)
    if view == "strided columns of a":
        product = lambda a, w: a[:, ::2] @ w[:256]  # noqa: E731
    else:
        product = lambda a, w: a[:, :256] @ w[::2, ::2]  # noqa: E731
    lazy = product(a.to("lazy"), w.to("lazy")).cpu()
    torch.testing.assert_close(lazy, product(a, w), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", ["seventeen rows", "float64", "beta 2", "small", "batched w",
                                  "fewer columns than a vector", "one row, large w"])
def test_other_products_run_atens_kernel(case):
    torch.manual_seed(0)
    a, w, bias = torch.randn(4, 256), torch.randn(256, 512), torch.randn(512)
    product = PRODUCTS["mm"]
    if case == "seventeen rows":
        a = torch.randn(17, 256)
    elif case == "float64":
        a, w, bias = a.double(), w.double(), bias.double()
    elif case == "beta 2":
        product = lambda a, w, bias: torch.addmm(bias, a, w, beta=2)  # noqa: E731
    elif case == "small":
        a, w, bias = torch.randn(4, 16), torch.randn(16, 16), torch.randn(16)
    elif case == "fewer columns than a vector":  # w's rows contiguous but 8 wide: the BLAS's
        a, w, bias = torch.randn(4, 4096), torch.randn(4096, 8), torch.randn(8)
    elif case == "one row, large w":  # the BLAS's gemv streams w's rows: faster for one row
        a, w, bias = torch.randn(1, 1024), torch.randn(1024, 2049), torch.randn(2049)
    elif case == "batched w":
        w = torch.randn(2, 256, 512)
        product = lambda a, w, bias: a @ w  # noqa: E731
    before = kernel_calls()
    lazy = product(a.to("lazy"), w.to("lazy"), bias.to("lazy")).cpu()
    assert kernel_calls() == before
    torch.testing.assert_close(lazy, product(a, w, bias))


def test_non_finite_values_propagate_as_in_eager():
    torch.manual_seed(0)
    a, w, bias = torch.randn(4, 256), torch.randn(256, 512), torch.randn(512)
    a[1, 3] = float("nan")
    a[2, 7] = float("inf")
    w[5, 9] = float("-inf")
    for product in (PRODUCTS["mm"], PRODUCTS["linear"]):
        lazy = product(a.to("lazy"), w.to("lazy"), bias.to("lazy")).cpu()
        eager = product(a, w, bias)
        assert torch.equal(lazy.isnan(), eager.isnan())
        assert torch.equal(lazy.isinf(), eager.isinf())
        torch.testing.assert_close(lazy, eager, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_a_decoding_loop_on_the_worker_matches_eager(monkeypatch):
    # One token at a time through two layers, each step on the worker thread (one thread).
    monkeypatch.setenv("LAZYFUSE_ASYNC", "1")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 768), torch.nn.Linear(768, 256)]
    lazy_layers = [torch.nn.Linear(256, 768), torch.nn.Linear(768, 256)]
    for mine, theirs in zip(lazy_layers, layers):
        mine.load_state_dict(theirs.state_dict())
        mine.to("lazy")
    x = torch.randn(4, 256)
    xl = x.to("lazy")
    before = kernel_calls()
    with torch.no_grad():
        for _ in range(12):
            x = layers[1](F.gelu(layers[0](x))).tanh()
            xl = lazy_layers[1](F.gelu(lazy_layers[0](xl))).tanh()
            lazyfuse.mark_step()
    torch.testing.assert_close(xl.cpu(), x, rtol=1e-5, atol=1e-5)
    assert kernel_calls() - before == 24 * CALLS
