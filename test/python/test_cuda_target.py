"""The CUDA target's kernels computing against eager PyTorch without a GPU: each test runs its
graphs with LAZYFUSE_CUDA_EMULATION=1, so the CUDA C++ the renderer writes (group reductions,
the 4-wide variant, index width, casts) is compiled as host C++ and run with one OS thread per
CUDA thread (Note [CUDA emulation]). With a GPU the same tests run the real kernels."""

import os
import subprocess
import sys

import pytest
import torch

import lazyfuse

from helpers import REFERENCE, reference, to_lazy


@pytest.fixture(autouse=True)
def cuda_kernels(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    if lazyfuse.hardware_device() == "cpu":
        monkeypatch.setenv("LAZYFUSE_CUDA_EMULATION", "1")
    # Plans cached by earlier tests hold CPU kernels.
    torch.ops.lazyfuse.clear_graph_cache()
    yield
    torch.ops.lazyfuse.clear_graph_cache()


def check(fn, *inputs, exact=False, **tolerances):
    lazyfuse.reset_metrics()
    expected = reference(fn, *inputs)
    got = fn(*to_lazy(inputs))
    got = [t.cpu() for t in got] if isinstance(got, (tuple, list)) else got.cpu()
    counters = lazyfuse.metrics()
    launched = counters.get("CudaEmulatedLaunches", 0) if lazyfuse.hardware_device() == "cpu" \
        else counters.get("KernelsLaunched", 0)
    assert launched > 0, "no CUDA kernel ran"
    assert counters.get("FusionFallback", 0) == 0
    if exact:
        tolerances = dict(rtol=0, atol=0)
    torch.testing.assert_close(got, expected, equal_nan=True, **tolerances)


def rows_with_edges(rows, cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    x[0, cols // 2] = float("nan")
    x[1, :] = 1.0  # ties everywhere: argmax/argmin take the first
    x[2, cols - 1] = float("inf")
    x[3, 0] = -float("inf")
    return x


@pytest.mark.parametrize("cols", [5, 100, 1000, 5000], ids=["thread", "eight", "warp", "block"])
@pytest.mark.parametrize("op", ["sum", "amax", "amin", "argmax", "argmin", "prod", "mean"])
def test_row_reductions_by_thread_warp_and_block(op, cols):
    x = rows_with_edges(37, cols)
    if op == "prod":
        x = 1 + x / cols
    check(lambda t: getattr(t, op)(1), x, exact=op.startswith("arg"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, dim", [((3000, 64), 0), ((64, 3000, 5), 1), ((2, 5000), None)],
                         ids=["leading_dim", "middle_dim", "full"])
def test_reductions_over_other_dims(shape, dim):
    x = torch.randn(*shape)
    check(lambda t: t.sum() if dim is None else t.sum(dim), x, rtol=1e-4, atol=1e-3)
    check(lambda t: t.amax() if dim is None else t.amax(dim), x, exact=True)


def test_integer_reductions_wrap_like_eager():
    x = torch.randint(-2**62, 2**62, (8, 3000), dtype=torch.int64)
    check(lambda t: t.sum(1), x, exact=True)
    check(lambda t: t.int().sum(1, dtype=torch.int32), x, exact=True)


@pytest.mark.parametrize("cols", [100, 3000])
def test_softmax_layer_norm_and_var_forward_and_backward(cols):
    x = rows_with_edges(33, cols)[4:]
    w, b = torch.randn(cols), torch.randn(cols)

    def fn(t, weight, bias):
        t = t.detach().requires_grad_(True)
        y = torch.nn.functional.layer_norm(t, (cols,), weight, bias).softmax(-1)
        (g,) = torch.autograd.grad((y * y).sum(), t)
        return y.detach(), g, t.var(-1).detach()

    check(fn, x, w, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int32, torch.uint8, torch.bool])
def test_pointwise_chain_contiguous_and_misaligned(dtype):
    base = (torch.randn(4097) * 50).to(dtype)
    for x in (base[:4096], base[1:]):  # aligned: the 4-wide variant; offset by one: not
        if dtype == torch.bool:
            check(lambda t: (t ^ t.roll(0)).logical_not() | t, x, exact=True)
        elif dtype.is_floating_point:
            check(lambda t: ((t * 3).exp2().sqrt() - t).sigmoid(), x)
        else:
            check(lambda t: (t * 3 + 7) ^ (t - 1), x, exact=True)


def test_float_to_uint8_wraps_like_eager():
    x = torch.tensor([-1.0, -129.5, 300.7, 5.0, -0.5] * 2000)
    check(lambda t: (t - 5).to(torch.uint8), x, exact=True)
    check(lambda t: (t * 2).to(torch.uint8) + 1, x, exact=True)


def test_index_math_with_intermediates_beyond_32_bits():
    # Lowers to a load at (v0 * 2^28 + v1) % 64: the product passes 2^31 though the index is
    # small, so the kernel needs 64-bit index math. Eager would materialize the 16 GB reshape,
    # so the expected rows are built directly: each is x repeated, times 2.
    x = torch.randn(64)
    lazyfuse.reset_metrics()
    got = (x.to("lazy").expand(2**26, 64).reshape(2**16, 2**16)[::4096] * 2).cpu()
    counters = lazyfuse.metrics()
    assert counters.get("FusionFallback", 0) == 0
    assert counters.get("CudaEmulatedLaunches", 0) + counters.get("KernelsLaunched", 0) > 0
    torch.testing.assert_close(got, (x.repeat(1024) * 2).expand(16, 65536), rtol=0, atol=0)


def test_views_scatters_and_broadcasts():
    x, y = torch.randn(40, 30), torch.randn(30)

    def fn(a, b):
        s = a.t()[5:25:2] + b[:, None][::3].T.expand(10, 10).sum() * 0
        return torch.slice_scatter(a, a[:, ::2].exp(), dim=1, start=0, step=2) * 2, s

    check(fn, x, y, rtol=1e-5, atol=1e-5)


def test_dump_writes_the_cuda_source(tmp_path):
    code = (
        "import torch, lazyfuse\n"
        "x = torch.ones(30, 7, device='lazy')\n"
        "print((x.softmax(-1) * 2).cpu().sum().item())\n"
    )
    env = dict(os.environ, LAZYFUSE_FUSION="always", LAZYFUSE_DUMP="cuda",
               LAZYFUSE_DUMP_DIR=str(tmp_path), LAZYFUSE_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert abs(float(run.stdout) - 60.0) < 1e-4
    (source,) = tmp_path.glob("lazyfuse-kernels-*.cu")
    assert 'extern "C" __global__ void __launch_bounds__(256) lf_kernel_0(' in source.read_text()


def optimizer_run(device, make_optimizer, shapes, steps):
    """The parameters after `steps` training steps, and the metrics of the steps alone."""
    torch.manual_seed(0)
    params = [torch.randn(s).to(device).requires_grad_() for s in shapes]
    optimizer = make_optimizer(params)
    if device == "lazy":
        lazyfuse.mark_step()
    lazyfuse.reset_metrics()
    for _ in range(steps):
        loss = sum((p * p).sum() * (i % 7 + 1) for i, p in enumerate(params))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device == "lazy":
            lazyfuse.mark_step()
    counters = lazyfuse.metrics()
    return [p.detach().cpu() for p in params], counters


# Sizes around the 4-wide width, a 0-dim and a 1-element tensor, several chunks of a block.
BATCH_SHAPES = [(64, 3, 7, 7), (64,), (128, 64), (5000,), (3,), (), (1,), (4097,), (9000,)]


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: torch.optim.Adam(ps, lr=0.01),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
], ids=["adam", "adamw", "sgd_nesterov"])
def test_optimizer_step_runs_its_per_tensor_kernels_as_one_batch(make_optimizer):
    got, counters = optimizer_run("lazy", make_optimizer, BATCH_SHAPES, steps=3)
    expected, _ = optimizer_run(REFERENCE, make_optimizer, BATCH_SHAPES, steps=3)
    torch.testing.assert_close(got, expected)
    assert counters.get("FusionFallback", 0) == 0
    assert counters.get("KernelBatchLaunches", 0) >= 3, counters
    if lazyfuse.hardware_device() == "cpu":
        # A step: the loss and gradient kernel, then one batch updating every parameter (the
        # partitioner's kernel for the two of shape [64] splits in two, Note [Splitting kernels
        # for batches]; the 1-element one, which reads every buffer at 0, joins too).
        assert counters["CudaEmulatedLaunches"] == 3 * 2, counters
        assert counters["KernelsLaunched"] >= 3 * 6, counters


def test_batch_larger_than_one_table_takes_several_launches():
    # One Adam kernel per shape, of at least 4 buffers in, 3 out and 3 parameters: a
    # 32000-byte table holds at most 400 of them.
    shapes = [(i + 1,) for i in range(600)]
    make = lambda ps: torch.optim.Adam(ps, lr=0.01)  # noqa: E731
    got, counters = optimizer_run("lazy", make, shapes, steps=1)
    torch.testing.assert_close(got, optimizer_run(REFERENCE, make, shapes, steps=1)[0])
    assert counters.get("KernelBatchLaunches", 0) == 1, counters
    if lazyfuse.hardware_device() == "cpu":
        # The loss and gradient kernels (a loss over 600 tensors is several kernels: Note
        # [Bounded kernels]), then the batch of 600 in 2 to 4 launches.
        others = counters["KernelsLaunched"] - len(shapes)
        assert 1 <= others <= 12, counters
        assert 2 <= counters["CudaEmulatedLaunches"] - others <= 4, counters


def test_foreach_ops_of_mixed_dtypes_and_dependent_steps():
    shapes = [(300,), (17, 5), (4100,), ()]

    def fn(*xs):
        half = [x.to(torch.bfloat16) for x in xs]
        ys = torch._foreach_mul(list(xs), 3.0)
        zs = torch._foreach_add(ys, [s.float() for s in torch._foreach_sigmoid(half)])
        norms = [z.abs().sum() for z in zs]  # reductions between two batched steps
        return torch._foreach_div(zs, norms) + torch._foreach_exp(half)

    xs = [torch.randn(s) for s in shapes]
    expected = reference(fn, *xs)
    lazyfuse.reset_metrics()
    got = fn(*to_lazy(xs))
    lazyfuse.mark_step()  # one graph: every output at once
    counters = lazyfuse.metrics()
    torch.testing.assert_close([t.cpu() for t in got], expected, rtol=2e-2, atol=1e-5)
    assert counters.get("GraphsExecuted") == 1, counters
    assert counters.get("KernelBatchLaunches", 0) >= 1, counters


SPLIT_X = torch.randn(100003)
SPLIT_X[5000] = float("nan")
SPLIT_COLUMNS = torch.randn(4000, 2048)


@pytest.mark.parametrize("fn, x, exact", [
    (lambda t: t.sum(), SPLIT_X, False),
    (lambda t: t.amax(), SPLIT_X, True),
    (lambda t: t.argmax(), SPLIT_X, True),  # the NaN wins
    (lambda t: torch.where(t.isnan(), 0, t).argmin(), SPLIT_X, True),
    (lambda t: (torch.where(t.isnan(), 0, t) ** 2).mean() + 1, SPLIT_X, False),
    (lambda t: t.sum(0), SPLIT_COLUMNS, False),
    (lambda t: t.amax(0), SPLIT_COLUMNS, True),
    (lambda t: t.argmax(0), SPLIT_COLUMNS, True),
    (lambda t: t.reshape(-1, 40960)[:5].sum(1) * 2, SPLIT_COLUMNS, False),
    (lambda t: torch.ones_like(t).argmax(), SPLIT_X, True),  # ties: the first index
], ids=["sum", "amax", "argmax_nan", "argmin", "mean_epilogue", "columns_sum", "columns_amax",
        "columns_argmax", "few_long_rows", "argmax_ties"])
def test_reductions_to_few_values_split_across_blocks(fn, x, exact):
    # Few outputs, long reductions: each output's blocks fold slices, the last one combines
    # (Note [CUDA split reductions]).
    check(fn, x, exact=exact, rtol=1e-4, atol=1e-3)


def test_conversions_round_as_eager():
    from test_conversions import CONVERSIONS, X
    for fn in CONVERSIONS.values():
        check(fn, X, exact=True)


@pytest.mark.parametrize("value", [float("inf"), -float("inf"), float("nan"), 3e38])
def test_batched_kernels_take_any_floating_scalar(value):
    xs = [torch.randn(s) for s in [(3,), (100,), (5000,)]]

    def fn(ts):
        return [t.masked_fill(t > 0.5, value) * 2 for t in ts]

    expected = reference(fn, xs)
    lazyfuse.reset_metrics()
    got = fn(to_lazy(xs))
    lazyfuse.mark_step()
    assert lazyfuse.metrics().get("KernelBatchLaunches", 0) == 1
    torch.testing.assert_close([t.cpu() for t in got], expected, equal_nan=True)
