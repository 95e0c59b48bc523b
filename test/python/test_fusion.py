"""Fused kernels against eager PyTorch on the hardware device: every lowering on random inputs
with edge values, in each dtype it supports, with LAZYFUSE_FUSION=always so even small graphs are
compiled. Counters prove the graph really ran as fused kernels."""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from fused_checks import check, edge_tensor, tolerances
from helpers import reference, to_cpu, to_lazy

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    yield


UNARY = ["abs", "neg", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
         "atan", "sinh", "tanh", "asinh", "erf", "erfc", "sigmoid", "floor", "ceil", "round",
         "trunc", "sign", "reciprocal", "relu", "isnan", "isinf", "logical_not", "exp2", "log2"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary_float(name, dtype):
    x = edge_tensor((6, 33), dtype)
    check(lambda t: getattr(torch, name)(t), x, **tolerances(dtype))


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("name", ["abs", "neg", "sign", "bitwise_not", "logical_not", "exp", "sqrt"])
def test_unary_int(name, dtype):
    if dtype == torch.uint8 and name in ("neg", "abs"):
        pytest.skip("eager rejects or wraps unsigned negation differently by design")
    x = edge_tensor((5, 17), dtype)
    check(lambda t: getattr(torch, name)(t), x)


BINARY = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - 2 * b), ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b), ("pow", lambda a, b: torch.pow(a.abs(), b)),
    ("maximum", torch.maximum), ("minimum", torch.minimum), ("atan2", torch.atan2),
    # fmod and remainder with a fused neighbour: on the CPU they are ATen's (Note [Ops left to
    # ATen on a target]), fused under CUDA emulation.
    ("fmod", lambda a, b: torch.fmod(a, b) + a), ("remainder", lambda a, b: torch.remainder(a, b) + a),
    ("eq", torch.eq), ("lt", torch.lt),
    ("ge", torch.ge), ("ne", torch.ne), ("logical_and", torch.logical_and),
    ("logical_xor", torch.logical_xor), ("copysign", torch.copysign), ("hypot", torch.hypot),
    ("where", lambda a, b: torch.where(a > b, a, b)), ("lerp", lambda a, b: torch.lerp(a, b, 0.3)),
    ("addcdiv", lambda a, b: torch.addcdiv(a, a, b, value=0.5)),
    ("clamp", lambda a, b: a.clamp(-1.0, 2.0)), ("masked_fill", lambda a, b: a.masked_fill(b > 0, 7.0)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_float_with_broadcast(name, fn, dtype):
    if name == "hypot" and dtype == torch.bfloat16:
        pytest.skip("eager has no bfloat16 hypot on cpu")
    a, b = edge_tensor((7, 9), dtype, 1), edge_tensor((9,), dtype, 2)
    check(fn, a, b, **tolerances(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2, 2.5, 0, 1])
def test_pow_scalar_exponent_like_eager(exponent, dtype):
    # Exponents eager computes by multiplication, sqrt or division (and one it sends to pow),
    # inside a reduction and outside one.
    x = edge_tensor((5, 37), dtype, 8)
    check(lambda t: (t ** exponent, (t.abs() ** exponent).sum(1)), x, **tolerances(dtype))


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_integer_arithmetic_wraps_like_eager(dtype):
    a, b = edge_tensor((4, 25), dtype, 3), edge_tensor((4, 25), dtype, 4)
    if dtype == torch.bool:
        check(lambda x, y: (x & y) | (x ^ y), a, b)
        return
    check(lambda x, y: (x + y) * y - x, a, b)
    check(lambda x, y: torch.maximum(x, y) & (x | 3), a, b)
    check(lambda x, y: (x + y) > x, a, b)  # a comparison after overflow sees the wrapped value


def test_type_promotion_with_scalars_and_mixed_tensors():
    i = edge_tensor((8, 8), torch.int32)
    f = edge_tensor((8,), torch.float32, 5)
    h = edge_tensor((8, 8), torch.float16, 6)
    check(lambda a, b, c: (a * 2.5 + b, a < 2.5, a + c, c * 3, a // 1 + (a > 3)), i, f, h,
          rtol=1e-3, atol=1e-3)


ACTIVATIONS = [
    ("gelu", lambda x: F.gelu(x)), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("silu", F.silu), ("softplus", lambda x: F.softplus(x, beta=2.0, threshold=5.0)),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.1)), ("hardtanh", lambda x: F.hardtanh(x, -0.5, 2.0)),
    ("threshold", lambda x: F.threshold(x, 0.3, -1.0)), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
]


@pytest.mark.parametrize("name,fn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_and_its_backward(name, fn):
    x = torch.randn(16, 40, dtype=torch.float64)
    g = torch.randn(16, 40, dtype=torch.float64)

    def forward_backward(t, grad):
        t = t.detach().requires_grad_(True)
        y = fn(t)
        (dx,) = torch.autograd.grad(y, t, grad)
        return y.detach(), dx

    check(forward_backward, x, g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_follows_atens_formula_on_special_values(approximate, dtype):
    """Eager computes GELU of a contiguous float32 or bfloat16 tensor with oneDNN where it can,
    whose erf makes +inf NaN and overflows near the largest value; its own kernel (a strided
    input, oneDNN off, float64) is x * 0.5 * (1 + erf(x / sqrt(2))), whose special values the
    fused forward and backward take: gelu(inf) = inf, gelu(-inf) = NaN, no overflow below the
    largest value. Compared with eager with oneDNN off; values on both sides of each branch."""
    top = torch.finfo(dtype).max
    values = [math.inf, -math.inf, math.nan, top, -top, top / 2, -top / 2, 1e30, -1e30, 0.0,
              -0.0, 1e-40, -1e-40, 3.0, -3.0, 0.5]
    x = torch.tensor(values * 3, dtype=torch.float64).to(dtype)
    grad = torch.linspace(-2, 2, x.numel(), dtype=torch.float64).to(dtype)

    def forward_backward(t, g):
        t = t.detach().requires_grad_(True)
        y = F.gelu(t, approximate=approximate)
        (dx,) = torch.autograd.grad(y, t, g)
        return y.detach(), dx

    with torch.backends.mkldnn.flags(enabled=False):
        check(forward_backward, x, grad, **tolerances(dtype))
    assert lazyfuse.metrics()["KernelsLaunched"] >= 1


REDUCTIONS = [
    ("sum_dim", lambda x: x.sum(1)), ("sum_all", lambda x: x.sum()),
    ("sum_keepdim_first", lambda x: x.sum(0, keepdim=True)), ("mean", lambda x: x.mean((0, 2))),
    ("amax", lambda x: x.amax(-1)), ("amin", lambda x: x.amin(0)), ("prod", lambda x: (x / 4).prod(1)),
    ("var", lambda x: x.var(1)), ("std", lambda x: x.std(-1, correction=0)),
    ("argmax", lambda x: x.argmax(1)), ("argmin_all", lambda x: x.argmin()),
    ("softmax", lambda x: x.softmax(-1)), ("log_softmax", lambda x: x.log_softmax(1)),
    ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],))),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name,fn", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reduction(name, fn, dtype):
    x = torch.randn(6, 50, 7, dtype=dtype)
    check(fn, x)


@pytest.mark.parametrize("name,fn", REDUCTIONS[:6], ids=[r[0] for r in REDUCTIONS[:6]])
def test_reduction_propagates_nan_and_inf(name, fn):
    check(fn, edge_tensor((6, 50, 7), torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_vectorized_max_and_min_keep_nan_in_any_lane(dtype):
    # The loop folds lanes side by side and combines them after it: a NaN in any lane (first,
    # last, in the remainder after the last full vector) must win, and infinities must survive.
    x = torch.randn(40, 1031, dtype=dtype)
    for row, col in enumerate(range(0, 1031, 27)):
        x[row, col] = math.nan
    x[-3] = math.inf  # a NaN beats an infinity, wherever it comes in the row
    x[-3, 1030] = math.nan
    x[-2] = -math.inf
    x[-1] = math.inf
    check(lambda t: (t.amax(1), t.amin(1), t.amax(0), t.amin(), t.max(1).values), x)


def test_reductions_over_several_dimensions_loop_per_dimension():
    # Note [CPU loop structure]: a loop per reduced dimension, the innermost vectorized.
    x = edge_tensor((5, 9, 3, 17), torch.float32, 12)
    check(lambda t: (t.sum((0, 2)), t.amax((1, 3)), t.amin((0, 1, 3), keepdim=True),
                     t.argmax(), (t / 4).nan_to_num(0.5).prod(2), t.mean((1, 2, 3))), x)
    y = torch.randn(4, 6, 33, dtype=torch.float64)
    w, b = torch.randn(6, 33, dtype=torch.float64), torch.randn(6, 33, dtype=torch.float64)

    def norm_over_two_dims(t, weight, bias):
        t, weight, bias = (v.detach().requires_grad_(True) for v in (t, weight, bias))
        out = F.layer_norm(t, (6, 33), weight, bias)
        return (out.var((0, 2)),) + torch.autograd.grad((out * out).sum(), (t, weight, bias))

    check(norm_over_two_dims, y, w, b)


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape,dims", [((3000, 200), (0,)), ((9, 600), (0,)), ((5, 300, 7), (1,)),
                                        ((4, 6, 67), (0, 1)), ((1, 70), (0,))], ids=str)
def test_column_reductions_fold_a_segment_of_points_at_a_time(shape, dims, dtype):
    # Note [CPU loop structure]: a reduction reading along the innermost point dimension folds
    # up to 256 neighbouring points side by side; segments end at row ends and where the runner
    # splits the points between threads.
    # Sums accumulate in double here, in float in eager: float32 columns of 3000 differ by more
    # than the default tolerance, and eager's is the larger error.
    x = edge_tensor(shape, dtype, 13)
    tol = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else tolerances(dtype)
    check(lambda t: (t.sum(dims), t.mean(dims, keepdim=True), t.amax(dims), t.amin(dims),
                     t.var(dims), (t / 8).nan_to_num(0.5, 0.5, 0.5).prod(dims[0]),
                     t.softmax(dims[0])),
          x, **tol)


FULL_REDUCTIONS = [
    ("sum", lambda t: t.sum()), ("mean_keepdim", lambda t: t.mean(tuple(range(t.dim())), keepdim=True)),
    ("amax", lambda t: t.amax()), ("amin_keepdim", lambda t: t.amin(tuple(range(t.dim())), keepdim=True)),
    ("var", lambda t: t.var()), ("std", lambda t: t.std(correction=0)), ("prod", lambda t: (t / 400 + 1).prod()),
    ("argmax", lambda t: t.argmax()),
]


@pytest.mark.parametrize("shape,split", [((1 << 16,), True), ((70000,), True), ((300, 300), True),
                                         ((65537,), False), ((2, 3, 20000), False)], ids=str)
@pytest.mark.parametrize("name,fn", FULL_REDUCTIONS, ids=[r[0] for r in FULL_REDUCTIONS])
def test_large_full_reductions_split_across_threads(name, fn, shape, split):
    # Note [Split full reductions]: partials over the leading dimensions (or a 1-d input viewed
    # as [parts, n / parts]), then their fold: one kernel more, none fewer for argmax or sizes
    # that do not split.
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    metrics = check(fn, x)
    one_pass = 2 if name in ("var", "std") else 1
    assert metrics["KernelsLaunched"] == one_pass * (2 if split and name != "argmax" else 1)


def test_split_full_reductions_keep_nan_and_inf():
    x = torch.randn(300, 300)
    x[7, 9] = math.inf
    check(lambda t: (t.sum(), t.amax(), t.amin()), x)
    x[200, 3] = math.nan
    check(lambda t: (t.sum(), t.amax(), t.amin(), t.mean()), x)


@pytest.mark.parametrize("shape, fn, split", [
    ((4096, 64), lambda t: t.sum(0), True),
    ((512, 300), lambda t: (t.mean(0, keepdim=True), t.amax(0), t.amin(0)), True),
    ((8, 64, 200), lambda t: t.sum((0, 1)), True),
    # A transformer's in-projection bias gradient: keepdim keeps both reduced dimensions.
    ((64, 4, 3, 128), lambda t: (t.sum((0, 1), keepdim=True), t.mean((1, 0), keepdim=True)), True),
    ((320, 7, 50), lambda t: (t * 2).sum(0, keepdim=True), True),
    ((257, 300), lambda t: t.sum(0), False),  # no group size divides 257 rows
    ((100, 1000), lambda t: t.sum(0), False),  # too few rows
    ((512, 300), lambda t: t.sum(1), False),  # a row reduction
], ids=["tall", "mean_keepdim_max_min", "two_leading_dims", "two_leading_dims_keepdim", "keepdim", "prime_rows", "short",
        "rows"])
def test_split_column_reductions(shape, fn, split):
    # Note [Split column reductions]: partials over groups of rows, then their fold.
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    x.view(-1)[123] = math.inf if split else 0.0
    kernels = check(fn, x, rtol=1e-12, atol=1e-12)["KernelsLaunched"]
    assert kernels >= 2 if split else kernels == 1


def test_layer_norm_backward_splits_its_weight_and_bias_gradients():
    x = torch.randn(8, 64, 256, generator=torch.Generator().manual_seed(6))
    w, b, g = torch.randn(256), torch.randn(256), torch.randn(8, 64, 256)

    def grads(x, w, b, g):
        x, w, b = (t.detach().requires_grad_(True) for t in (x, w, b))
        out = torch.nn.functional.layer_norm(x, (256,), w, b)
        return torch.autograd.grad(out, (x, w, b), g)

    check(grads, x, w, b, g, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool], ids=str)
def test_integer_reductions(dtype):
    x = edge_tensor((9, 31), dtype, 7)
    check(lambda t: (t.sum(1), t.amax(0)) + (() if dtype == torch.bool else (t.argmax(1),)), x)


def rows_with_edges(shape, dtype):
    """Random rows, then a row holding a NaN, one holding +inf and one of all -inf."""
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(9)) * 3).to(dtype)
    rows = x.view(-1, shape[-1])
    for r, (col, value) in enumerate([(0, math.nan), (shape[-1] // 2, math.inf), (None, -math.inf)]):
        if r + 1 < rows.shape[0]:
            if col is None:
                rows[r + 1] = value
            else:
                rows[r + 1, col] = value
    return x


ROW_REDUCTIONS = [
    ("softmax", lambda x: x.softmax(-1), 2), ("log_softmax", lambda x: x.log_softmax(-1), 2),
    ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],)), 2),
    # var's mean is over [rows, 1], its result over [rows]: two domains, two kernels
    ("var_mean_std", lambda x: (x.var(-1), x.mean(-1), x.std(-1, correction=0)), 2),
    ("softmax_composite", lambda x: (x - x.amax(-1, True)).exp() / (x - x.amax(-1, True)).exp().sum(-1, True), 2),
    ("layer_norm_composite", lambda x: (x - x.mean(-1, True)) * ((x - x.mean(-1, True)) ** 2).mean(-1, True).add(1e-5).rsqrt(), 2),
]


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(4, 1), (5, 17), (6, 1031), (2, 5, 129)], ids=str)
@pytest.mark.parametrize("name,fn,kernels", ROW_REDUCTIONS, ids=[r[0] for r in ROW_REDUCTIONS])
def test_reductions_of_the_same_rows_share_a_kernel(name, fn, kernels, shape, dtype):
    # The statistics of a row come from one kernel whose reduction loops run one after the
    # other over the row (Note [Fusion partitioning]); the output is a second kernel, unless a
    # row is one element and everything has one domain.
    metrics = check(fn, rows_with_edges(shape, dtype))
    assert metrics["KernelsLaunched"] == (kernels if shape[-1] > 1 or name == "var_mean_std" else 1)


def _normalized_exp(x):
    e = (x - x.amax(-1, True)).exp()
    return e / e.sum(-1, True)


ROW_GROUPS = [
    ("softmax_composite", _normalized_exp),
    ("softmax_composite_and_its_exp", lambda x: (_normalized_exp(x), (x - x.amax(-1, True)).exp())),
    # tanh is computed by the sum's loop and again by the output; |x| ** 1.5 likewise (one node:
    # two nodes' exponents are two parameters, which may differ in the next run)
    ("tanh_over_sum", lambda x: x.tanh() / (x.tanh().abs().sum(-1, True) + 1) + x.tanh()),
    ("pow_over_sum", lambda x: (lambda p: p / p.sum(-1, True))(x.abs().pow(1.5))),
    # every row divides by the sums of row 0: no row group (its rows would read another's)
    ("first_row_sum", lambda x: x.sigmoid() / x.sigmoid().sum(-1, True)[..., :1, :]),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(5, 17), (6, 1031), (2, 5, 129), (3, 20000)], ids=str)
@pytest.mark.parametrize("name,fn", ROW_GROUPS, ids=[r[0] for r in ROW_GROUPS])
def test_row_groups_read_cached_values_like_eager(name, fn, shape, dtype):
    # Note [CPU row groups]: the statistics kernel's reduction loop fills an array of the row
    # with a value the output kernel would compute again; [3, 20000] passes the arrays' budget.
    x = rows_with_edges(shape, dtype)
    if name == "first_row_sum":
        x = x.view(-1, shape[-1])
    check(fn, x, **tolerances(dtype))


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom:UserWarning")
def test_reductions_over_empty_rows_match_eager():
    x = torch.randn(3, 0)
    check(lambda t, u: (t.sum(-1), t.mean(-1), t.softmax(-1), t.var(-1), u.exp()), x, torch.ones(3, 2))


def test_softmax_and_layer_norm_backward_fused():
    x = torch.randn(8, 64, dtype=torch.float64)
    w, b = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)

    def fn(t, weight, bias):
        t, weight, bias = (v.detach().requires_grad_(True) for v in (t, weight, bias))
        y = F.layer_norm(t, (64,), weight, bias).softmax(-1).log_softmax(0)
        loss = (y * y).sum()
        return torch.autograd.grad(loss, (t, weight, bias))

    check(fn, x, w, b)


VIEWS = [
    ("transpose_slice", lambda x: x.t()[2:9:3] * 2),
    ("reshape_split", lambda x: x.reshape(3, 4, 35).exp()),
    ("reshape_merge", lambda x: x.reshape(-1) + 1),
    ("permute_expand", lambda x: x.reshape(12, 5, 7).permute(2, 0, 1).unsqueeze(0).expand(2, 7, 12, 5) + 1),
    ("select_squeeze", lambda x: x[3].unsqueeze(0).squeeze(0) - x[:, 4].sum()),
    ("diagonal", lambda x: x.diagonal(offset=1) * 3),
    ("slice_assign", lambda x: _assign(x)),
]


def _assign(x):
    y = x.clone()
    y[1:7:2, 3] = 5.0
    y[:, -1] += y[:, 0]
    y[4] = x[0] * 2
    return y


@pytest.mark.parametrize("name,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_views_and_scatters_as_index_math(name, fn):
    check(fn, torch.randn(12, 35))


def test_constants_and_arange():
    x = torch.randn(10, 3)
    check(lambda t: (t + torch.arange(3, device=t.device) * 0.5, torch.full_like(t, 2.0) * t,
                     torch.ones(10, 3, device=t.device) + torch.zeros_like(t)), x)


def test_fused_chain_writes_only_its_output():
    x = torch.randn(256, 256)
    metrics = check(lambda t: ((t * 2 + 1).exp() - t).tanh() * 0.5 + t.sigmoid(), x)
    assert metrics["KernelsLaunched"] == 1


def _huge_page_advised_bytes():
    """Bytes of this process's mappings advised MADV_HUGEPAGE (VmFlags "hg" in smaps). Whether
    the kernel then finds 2 MiB pages for them depends on the machine's free memory; the advice
    itself is what lazyfuse controls."""
    total, size = 0, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            if line.startswith("Size:"):
                size = int(line.split()[1]) * 1024
            elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
                total += size
    return total


def _transparent_huge_pages_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "never"


@pytest.mark.skipif(_transparent_huge_pages_mode() != "madvise",
                    reason="transparent huge pages are not in madvise mode")
@pytest.mark.skipif(lazyfuse.hardware_device() != "cpu", reason="buffers on the CPU only")
@pytest.mark.skipif(os.environ.get("LAZYFUSE_CUDA_EMULATION", "") not in ("", "0", "off"),
                    reason="the CUDA emulation allocates its outputs itself")
def test_large_kernel_outputs_are_advised_huge_pages():
    # See Note [Buffer pool]: a 64 MiB output is advised to be written through 2 MiB pages (all
    # of it but the partial 2 MiB pages at its ends).
    x = torch.randn(4096, 4096).to("lazy")
    lazyfuse.mark_step()
    before = _huge_page_advised_bytes()
    y = x * 2 + 1
    lazyfuse.mark_step()
    lazyfuse.wait()
    assert _huge_page_advised_bytes() - before >= 60 << 20
    torch.testing.assert_close(y.cpu(), x.cpu() * 2 + 1)


def test_plan_is_cached_and_reused():
    x = torch.randn(64, 64)
    check(lambda t: (t + 1).relu(), x)
    metrics = check(lambda t: (t + 1).relu(), torch.randn(64, 64))
    assert metrics["CachedCompile"] == 1 and metrics["UncachedCompile"] == 0
    assert metrics["KernelsCompiled"] == 0


def test_second_process_compiles_nothing(tmp_path):
    code = (
        "import torch, lazyfuse\n"
        "x = torch.ones(300, 7, device='lazy')\n"
        "y = ((x * 3).exp() + x.sum(0)).cpu()\n"
        "m = lazyfuse.metrics()\n"
        "print(m['KernelsCompiled'], m['KernelDiskCacheHits'])\n"
    )
    env = dict(os.environ, LAZYFUSE_FUSION="always", LAZYFUSE_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    first = [int(v) for v in runs[0].stdout.split()]
    second = [int(v) for v in runs[1].stdout.split()]
    assert first[0] >= 1 and first[1] == 0
    assert second == [0, first[0]]
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == oct(0o700)


def test_dumps_plan_and_source(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYFUSE_DUMP_DIR", str(tmp_path))
    code = (
        "import torch, lazyfuse\n"
        "x = torch.ones(30, 7, device='lazy')\n"
        "print((x.softmax(-1) * 2).cpu().sum())\n"
    )
    cuda = lazyfuse.hardware_device().startswith("cuda")
    env = dict(os.environ, LAZYFUSE_FUSION="always", LAZYFUSE_DUMP="plan,cuda" if cuda else "plan,cpp",
               LAZYFUSE_DUMP_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    plans = list(tmp_path.glob("lazyfuse-plan-*.txt"))
    sources = list(tmp_path.glob("lazyfuse-kernels-*.cu" if cuda else "lazyfuse-kernels-*.cpp"))
    assert len(plans) == 1, list(tmp_path.iterdir())
    assert len(sources) == 1, (list(tmp_path.iterdir()), plans[0].read_text())
    assert "kernel lf_kernel_0" in plans[0].read_text()
    # lf_kernel_0, or lf_kernel_0_rows when it runs row by row with the next kernel.
    entry = ') lf_kernel_0' if cuda else 'extern "C" void lf_kernel_0'  # after __launch_bounds__(..)
    assert entry in sources[0].read_text()


def test_extern_ops_mix_with_kernels():
    x, w = torch.randn(32, 16), torch.randn(16, 8)
    check(lambda a, b: torch.relu(a @ b + 1).sum(0) * 2, x, w)
    check(lambda a, b: F.dropout(a, 0.0) + torch.nonzero(a > 10).numel(), x, w)


@pytest.mark.parametrize("make_other", [
    lambda w: w * 2,                                   # contiguous: [64, 16, 3, 3] is one loop
    lambda w: w.flip(0).transpose(0, 1).contiguous().transpose(0, 1),  # first two dims swapped
    lambda w: w[:, :1].expand_as(w),                   # broadcast over the second dimension
    lambda w: w.sum(-1, keepdim=True).expand_as(w),
    lambda w: torch.cat([w, w], -1)[..., 1::2],        # strided view of a computed value
], ids=["contiguous", "permuted", "broadcast", "reduced", "strided"])
@pytest.mark.parametrize("shape", [(64, 16, 3, 3), (32, 64, 1, 1), (7, 1, 5)], ids=str)
def test_coalesced_domains_like_eager(shape, make_other):
    """Kernels over conv-weight shapes run over one merged dimension where every operand allows
    it and keep the dimensions apart where one does not (Note [Coalescing kernel domains])."""
    w = torch.randn(shape)
    check(lambda t: torch.addcmul(t.exp(), make_other(t), t, value=0.5), w)


SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 2.5, -3.0, 1e-40, -1e30]


@pytest.mark.parametrize("exponent", [0, 1, 0.0, 1.0, 2, -1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_pow_by_a_scalar_matches_eager_on_special_values(exponent, dtype):
    # ATen gives 1 for the exponent 0 and the base itself for 1, NaN included; square's backward
    # is 2 * pow(x, 1).
    x = torch.tensor(SPECIAL * 3, dtype=dtype)
    fn = lambda t: (t * 1).pow(exponent)  # noqa: E731
    torch.testing.assert_close(to_cpu(fn(to_lazy(x))), reference(fn, x), equal_nan=True)


def test_mean_of_a_square_reads_its_rows_and_matches_eager():
    # A full reduction split into row partials over a segment loop, with pow(x, 2) inside: the
    # exponent is a scalar there, not an array per point.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 128, 256, generator=g), torch.randn(8, 128, 256, generator=g)
    fn = lambda a, b: (a + 0.5 * b).square().mean()  # noqa: E731
    torch.testing.assert_close(to_cpu(fn(to_lazy(a), to_lazy(b))), reference(fn, a, b))


def test_a_long_chain_compiles_as_bounded_kernels_and_matches_eager(monkeypatch):
    # Note [Bounded kernels]: 1,200 ops are cut into kernels of at most 512 nodes, whose C++
    # compiles in about linear time, instead of one function that takes minutes to compile.
    # One trace of them all: no automatic cut at the repeated step (Note [Automatic step
    # boundaries]).
    def chain(x, w):
        for _ in range(600):
            x = x * 0.999 + w
        return x

    monkeypatch.setenv("LAZYFUSE_TRACE_LIMIT", "0")
    x, w = torch.rand(257), torch.rand(257)
    lx, lw = to_lazy(x), to_lazy(w)
    lazyfuse.mark_step()
    out = chain(lx, lw)
    plan = lazyfuse.dump_ir(out, "plan")
    assert plan.count(" kernel ") >= 3, plan
    torch.testing.assert_close(to_cpu(out), reference(chain, x, w))


def test_ops_left_to_aten_on_the_cpu():
    """fmod, remainder and lgamma have no vector form on the CPU: there they run ATen's kernel as
    extern steps between fused kernels; on CUDA (or emulated) they fuse with the rest. Either
    way the numbers are eager's."""
    a, b = edge_tensor((64, 33), torch.float32, 1), edge_tensor((64, 33), torch.float32, 2)
    chain = lambda x, y: (((x * 2).fmod(y) + 1).lgamma().remainder(0.7) * 3).tanh()  # noqa: E731
    metrics = check(chain, a, b)
    plan = lazyfuse.dump_ir([chain(*to_lazy([a, b]))], "plan")
    cuda = (os.environ.get("LAZYFUSE_CUDA_EMULATION") == "1"
            or lazyfuse.hardware_device().startswith("cuda"))
    externs = {line.split("= ")[1] for line in plan.splitlines() if ": extern " in line}
    assert externs == (set() if cuda else {"aten::fmod.Tensor", "aten::lgamma",
                                           "aten::remainder.Scalar"}), plan
    assert metrics["KernelsLaunched"] >= (1 if cuda else 3)  # the neighbours still fuse
