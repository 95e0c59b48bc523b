"""Shape-generic kernels (Note [Shape-generic kernels]): programs whose sizes, widths or view
offsets change match eager at every size, and after a kernel family has been seen with two sizes,
later sizes compile nothing (counters, not times). Kernel families are process-wide, so a test's
chain of ops is its own (Python scalars are kernel parameters and do not make a new family), and
a test does not assume that its first size compiles."""

import os

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from helpers import LAZY

SIZES = [0, 1, 2, 3, 7, 8, 13, 97, 128, 257, 1000]

# The CUDA renderings (emulated on the CPU) choose their structure from sizes too (how many threads
# share a point, the 4-wide variant, 32-bit indices: Note [CUDA kernel structure]), and write a
# kernel's point count into its code: a sweep that stays in one structure compiles nothing after
# its second size, as the CPU's does over any sizes. The same holds on a CUDA device.
CUDA_RENDERING = (os.environ.get("LAZYFUSE_CUDA_EMULATION", "0") not in ("", "0")
                  or lazyfuse.hardware_device().startswith("cuda"))


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")


def built():
    """Fused kernels compiled or loaded from the disk cache since the last reset."""
    m = lazyfuse.metrics()
    return m["KernelsCompiled"] + m["KernelDiskCacheHits"]


def run_lazy(fn, *inputs):
    out = fn(*[x.to(LAZY) for x in inputs])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    lazyfuse.sync(*outs)
    return [o.cpu() for o in outs]


def check(fn, *inputs, **tol):
    expected = fn(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    got = run_lazy(fn, *inputs)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, **tol)


CHAINS = {
    "pointwise_broadcast": lambda x, w: ((x * 1.125 + w).sigmoid() * x - 0.5).relu(),
    "softmax": lambda x, w: (x * w).softmax(-1),
    "layer_norm": lambda x, w: F.layer_norm(x.tanh(), (x.shape[-1],), w),
    "row_sum": lambda x, w: (x * w).exp().sum(-1),
    "column_sum": lambda x, w: (x + w).square().sum(0),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_every_size_matches_eager(name):
    fn = CHAINS[name]
    g = torch.Generator().manual_seed(0)
    for rows in (SIZES[::3] + [33]):
        for width in SIZES:
            x = torch.randn(rows, width, generator=g)
            w = torch.randn(width, generator=g)
            check(fn, x, w, atol=1e-5, rtol=1e-5)
            # A non-contiguous input: the transpose of a [width, rows] tensor.
            xt = torch.randn(width, rows, generator=g).t()
            check(fn, xt, w, atol=1e-5, rtol=1e-5)


def test_backward_over_widths_matches_eager():
    g = torch.Generator().manual_seed(1)
    for width in (5, 64, 97, 300):
        x = torch.randn(16, width, generator=g)
        w = torch.randn(width, generator=g)

        def step(x, w):
            x, w = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            out = F.layer_norm(x, (width,), w).softmax(-1)
            return torch.autograd.grad((out * out).sum(), (x, w))

        check(step, x, w, atol=1e-5, rtol=1e-4)


def sweep_builds(fn, shapes, make):
    """Kernels built at each shape of `shapes`, checking each result against eager."""
    counts = []
    for shape in shapes:
        inputs = make(shape)
        lazyfuse.reset_metrics()
        check(fn, *inputs, atol=1e-5, rtol=1e-5)
        counts.append(built())
    return counts


def test_new_widths_compile_nothing_after_the_second():
    # Constants of their own, so no other test has made these families.
    fn = lambda x, w: ((x * 1.0625 - w).softmax(-1) * 0.375).exp()  # noqa: E731
    g = torch.Generator().manual_seed(2)
    widths = ([300, 420, 500, 1000, 2048, 640, 700, 257] if CUDA_RENDERING
              else [300, 420, 7, 13, 97, 1000, 2049, 5, 64])
    counts = sweep_builds(fn, widths,
                          lambda n: (torch.randn(24, n, generator=g), torch.randn(n, generator=g)))
    assert counts[2:] == [0] * (len(widths) - 2), counts
    lazyfuse.reset_metrics()
    check(fn, torch.randn(24, 333, generator=g), torch.randn(333, generator=g))
    m = lazyfuse.metrics()
    assert built() == 0 and m["DynamicKernelHits"] > 0 and m["KernelsReused"] > 0, m


@pytest.mark.skipif(CUDA_RENDERING, reason="the CUDA rendering picks its structure from sizes "
                    "(threads per point, 4-wide variants), so this sweep starts families of its "
                    "own there; the family logic is the same for both renderings")
def test_sizes_equal_to_a_changed_size_become_arguments_with_it():
    # Duck sizing: with 256 rows and a first width of 256, every constant that started as 256
    # becomes an argument when the width changes, so a width that changes one of them no more
    # (softmax's backward splits its column sum by the width) compiles nothing.
    fn = lambda x, w: (x * w * 1.1875).softmax(-1)  # noqa: E731
    g = torch.Generator().manual_seed(9)

    def make(n):
        return (torch.randn(256, n, generator=g).requires_grad_(True),
                torch.randn(n, generator=g).requires_grad_(True))

    def step(x, w):
        out = fn(x, w)
        return (out, *torch.autograd.grad(out.square().sum(), (x, w)))

    counts = sweep_builds(step, [256, 384, 500, 1024, 2048], make)
    assert counts[2:] == [0, 0, 0], counts


def test_new_row_counts_reuse_kernels():
    fn = lambda x, w: (x * 1.3125 + w).tanh() * w  # noqa: E731
    g = torch.Generator().manual_seed(3)
    rows = [40, 41, 2, 1000, 77]
    counts = sweep_builds(fn, rows,
                          lambda n: (torch.randn(n, 48, generator=g), torch.randn(48, generator=g)))
    # The CPU's code never holds the row count; a CUDA kernel's holds its point count.
    first = 2 if CUDA_RENDERING else 1
    assert counts[first:] == [0] * (len(rows) - first), counts


def test_static_policy_compiles_every_size(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_DYNAMIC", "static")
    fn = lambda x: (x * 1.4375).cos().sum(-1)  # noqa: E731
    g = torch.Generator().manual_seed(4)
    counts = sweep_builds(fn, [50, 60, 70, 80], lambda n: (torch.randn(8, n, generator=g),))
    assert all(c > 0 for c in counts), counts
    assert lazyfuse.metrics()["DynamicKernelHits"] == 0


def test_dynamic_policy_is_generic_from_the_first_size(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_DYNAMIC", "dynamic")
    fn = lambda x: (x * 1.5625).sin().amax(-1)  # noqa: E731
    g = torch.Generator().manual_seed(5)
    counts = sweep_builds(fn, [50, 60, 70, 80], lambda n: (torch.randn(8, n, generator=g),))
    assert counts[1:] == [0, 0, 0], counts


def test_mark_dynamic_is_generic_from_the_first_size(monkeypatch):
    # Python scalars are kernel parameters, not code: the chain's ops make its families its own.
    fn = lambda x: (x * 2.4375).sin().neg().exp2().amin(-1)  # noqa: E731
    g = torch.Generator().manual_seed(9)
    counts = []
    for n in (50, 60, 70, 80):
        x = torch.randn(8, n, generator=g)
        lazy = x.to(LAZY)
        lazyfuse.mark_dynamic(lazy, 1)
        lazyfuse.reset_metrics()
        torch.testing.assert_close(fn(lazy).cpu(), fn(x))
        counts.append(built())
    assert counts[1:] == [0, 0, 0], counts
    # LAZYFUSE_DYNAMIC=static overrides the mark: a new width compiles.
    monkeypatch.setenv("LAZYFUSE_DYNAMIC", "static")
    lazy = torch.randn(8, 90, generator=g).to(LAZY)
    lazyfuse.mark_dynamic(lazy, -1)
    lazyfuse.reset_metrics()
    lazyfuse.sync(fn(lazy))
    assert built() > 0


def test_mark_dynamic_checks_its_arguments():
    with pytest.raises(IndexError, match="Dimension out of range"):
        lazyfuse.mark_dynamic(torch.ones(2, 3).to(LAZY), 2)
    with pytest.raises(RuntimeError, match="expected a lazy tensor"):
        lazyfuse.mark_dynamic(torch.ones(2, 3), 0)


def test_invalid_policy_raises(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_DYNAMIC", "sometimes")
    x = torch.randn(8, 9).to(LAZY)
    with pytest.raises(RuntimeError, match="LAZYFUSE_DYNAMIC must be auto, static or dynamic"):
        lazyfuse.sync((x * 1.6875).exp())


def test_cache_write_at_python_int_positions_compiles_once():
    g = torch.Generator().manual_seed(6)
    steps = 10
    cache = torch.zeros(3, steps, 16)
    lazy_cache = cache.to(LAZY)
    counts = []
    for t in range(steps):
        k = torch.randn(3, 16, generator=g)
        lazyfuse.reset_metrics()
        cache[:, t] = k * 1.8125 + 1
        lazy_cache[:, t] = k.to(LAZY) * 1.8125 + 1
        scores = (lazy_cache * 2).sum(-1)
        lazyfuse.sync(scores, lazy_cache)
        counts.append(built())
        torch.testing.assert_close(lazy_cache.cpu(), cache)
        torch.testing.assert_close(scores.cpu(), (cache * 2).sum(-1))
    assert counts[2:] == [0] * (steps - 2), counts

    narrow_counts = []
    for t in range(steps):
        k = torch.randn(3, 1, 16, generator=g)
        lazyfuse.reset_metrics()
        cache.narrow(1, t, 1).copy_(k.exp())
        lazy_cache.narrow(1, t, 1).copy_(k.to(LAZY).exp())
        lazyfuse.sync(lazy_cache)
        narrow_counts.append(built())
        torch.testing.assert_close(lazy_cache.cpu(), cache)
    # Offset 0 renders no offset at all (0 and 1 are specialized, as PyTorch's symbolic shapes
    # do): position 1 starts the family, position 2 makes it generic.
    assert narrow_counts[3:] == [0] * (steps - 3), narrow_counts


def test_training_over_sequence_lengths_matches_eager_and_stops_compiling():
    torch.manual_seed(7)
    eager = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    lazy = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    lazy.load_state_dict(eager.state_dict())
    lazy.to(LAZY)
    counts = []
    for t in ((40, 48, 56, 60, 44, 52) if CUDA_RENDERING else (10, 12, 17, 31, 5, 64)):
        x = torch.randn(4, t, 32)
        for model, inp in ((eager, x), (lazy, x.to(LAZY))):
            model.zero_grad()
            F.layer_norm(model(inp), (32,)).square().mean().backward()
        lazyfuse.reset_metrics()
        lazyfuse.sync(*[p.grad for p in lazy.parameters()])
        counts.append(built())
        for pe, pl in zip(eager.parameters(), lazy.parameters()):
            torch.testing.assert_close(pl.grad.cpu(), pe.grad, atol=1e-5, rtol=1e-4)
    assert counts[2:] == [0] * 4, counts


def test_data_dependent_sizes_reuse_kernels():
    g = torch.Generator().manual_seed(8)
    counts = []
    for _ in range(6):
        x = torch.randn(500, generator=g)
        lazyfuse.reset_metrics()
        check(lambda v: (v[v > 0.25] * 1.9375).exp() + v.nonzero().sum(), x)
        counts.append(built())
    assert counts[2:] == [0] * 4, counts


def test_recompile_log_names_the_changed_constants(tmp_path, python_subprocess):
    program = (
        "import torch, lazyfuse\n"
        "for n in (100, 140, 180):\n"
        "    x = torch.randn(8, n).to('lazy')\n"
        "    lazyfuse.sync((x * 2.0625).softmax(-1))\n"
        "m = lazyfuse.metrics()\n"
        "print(m['KernelsGeneralized'], m['DynamicKernelHits'])\n")
    proc = python_subprocess(program, env={
        "LAZYFUSE_FUSION": "always", "LAZYFUSE_LOG_RECOMPILES": "1",
        "LAZYFUSE_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    generalized, hits = (int(v) for v in proc.stdout.split())
    assert generalized > 0 and hits > 0, proc.stdout
    assert "recompile in graph 0x" in proc.stderr, proc.stderr
    assert "100 -> 140" in proc.stderr, proc.stderr
    assert proc.stderr.count("recompile in graph") >= 1, proc.stderr


def lazy_and_eager(fn, *inputs):
    """fn on lazy copies and eagerly; checks sizes, strides, dtypes and values."""
    expected = fn(*inputs)
    got = fn(*[x.to(LAZY) for x in inputs])
    assert (got.shape, got.stride(), got.dtype) == \
        (expected.shape, expected.stride(), expected.dtype)
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)


TEMPLATED = {
    "broadcast": lambda x, w: (x * w + 1).exp(),
    "reductions": lambda x, w: x.sum(-1, keepdim=True) / (x.amax(0) + 3),
    "matmul_softmax": lambda x, w: (x @ w.unsqueeze(1).expand(-1, 3).contiguous()).softmax(-1),
    "dtypes": lambda x, w: x.to(torch.float64).mean(0) + w.to(torch.int32),
}


@pytest.mark.parametrize("name", list(TEMPLATED))
def test_new_sizes_take_their_metadata_from_templates(name):
    # Note [Size-generic meta]: once an op was inferred on Meta at two sizes, other sizes take
    # their outputs' sizes from a template, with eager's sizes, strides and dtypes.
    fn = TEMPLATED[name]
    g = torch.Generator().manual_seed(3)
    lazyfuse.reset_metrics()
    for rows, width in ((5, 7), (9, 11), (13, 17), (4, 29), (1, 8), (8, 1)):
        lazy_and_eager(fn, torch.randn(rows, width, generator=g), torch.randn(width, generator=g))
    assert lazyfuse.metrics()["MetaTemplateHits"] > 0


def test_templates_learned_on_squares_tell_which_size_a_wide_input_gives():
    # Seen on squares only, sum(0)'s and mm's output sizes could come from either input size:
    # a wide input breaks that equality and is inferred on Meta (then the template knows).
    g = torch.Generator().manual_seed(4)
    for n in (6, 10, 14):
        lazy_and_eager(lambda x: x.sum(0) * 2, torch.randn(n, n, generator=g))
        lazy_and_eager(lambda a, b: (a @ b).sigmoid(), torch.randn(n, n, generator=g),
                       torch.randn(n, n, generator=g))
    for rows, width in ((6, 15), (15, 6), (7, 9)):
        lazy_and_eager(lambda x: x.sum(0) * 2, torch.randn(rows, width, generator=g))
        lazy_and_eager(lambda a, b: (a @ b).sigmoid(), torch.randn(rows, width, generator=g),
                       torch.randn(width, 3, generator=g))


def test_templates_keep_eagers_size_errors():
    for n in (6, 10):
        lazy_and_eager(lambda a, b: (a + b).relu(), torch.randn(n), torch.randn(n))
        lazy_and_eager(torch.mm, torch.randn(n, n), torch.randn(n, n))
    for fn, a, b in ((lambda a, b: (a + b).relu(), torch.randn(6), torch.randn(7)),
                     (torch.mm, torch.randn(3, 4), torch.randn(5, 2))):
        with pytest.raises(RuntimeError) as eager:
            fn(a, b)
        with pytest.raises(RuntimeError) as lazy:
            fn(a.to(LAZY), b.to(LAZY))
        assert str(lazy.value) == str(eager.value)


def test_template_results_agree_with_the_meta_kernels(python_subprocess):
    # LAZYFUSE_VERIFY_META=1 infers every call a template served on Meta too and fails on a
    # difference: a training sweep over sequence lengths runs through it.
    code = (
        "import torch, lazyfuse\n"
        "from torch import nn\n"
        "torch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))\n"
        "model = model.to('lazy')\n"
        "for t in (5, 9, 12, 17, 30):\n"
        "    model.zero_grad()\n"
        "    x = torch.randn(3, t, 16).to('lazy')\n"
        "    loss = model(x).softmax(-1).square().mean()\n"
        "    loss.backward()\n"
        "    lazyfuse.sync(loss, *[p.grad for p in model.parameters()])\n"
        "print('hits', lazyfuse.metrics()['MetaTemplateHits'])\n"
    )
    run = python_subprocess(code, env={"LAZYFUSE_VERIFY_META": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert int(run.stdout.split()[-1]) > 0, run.stdout


def _scatter_into_views(x):
    y = x.clone()
    y[:, 1] = 0
    y[1:, :2] *= 2
    return y


SHAPE_FUNCTIONS = {
    "transpose_reshape": lambda x: (x.t() * 2).reshape(x.shape[1], -1)[:, 1:] + 1,
    "chunk_cat": lambda x: torch.cat(x.chunk(2, dim=1)[::-1], 1) * 2,
    "narrow_select_expand": lambda x: x.narrow(1, 1, x.shape[1] - 2).select(0, -1)
    .unsqueeze(1).expand(-1, 4) * 3,
    "permute_unbind_stack": lambda x: torch.stack(x.view(x.shape[0], -1, 1).permute(2, 0, 1)
                                                  .unbind(0)).squeeze(0) + 1,
    "layer_norm": lambda x: F.layer_norm(x * 2, x.shape[-1:]),
    "scatter_into_views": _scatter_into_views,
}


@pytest.mark.parametrize("name", list(SHAPE_FUNCTIONS))
def test_views_cat_and_layer_norm_of_new_sizes_run_no_meta_kernel(name):
    # Note [Shape functions]: views, cat and LayerNorm take their outputs' sizes from C++ shape
    # functions, and views their geometry from eager's rules, so a size seen for the first time
    # records without a meta kernel once each op was inferred once (pointwise ops: twice).
    fn = SHAPE_FUNCTIONS[name]
    g = torch.Generator().manual_seed(5)
    misses = []
    for rows, width in ((5, 7), (9, 11), (13, 17), (4, 29), (6, 8)):
        before = lazyfuse.metrics()["MetaCacheMiss"]
        lazy_and_eager(fn, torch.randn(rows, width, generator=g))
        misses.append(lazyfuse.metrics()["MetaCacheMiss"] - before)
    assert misses[-2:] == [0, 0], misses


def rows_and_weights(seed):
    """Per width of a sweep: x [6, width] and w [width] requiring grad, and their lazy copies."""
    g = torch.Generator().manual_seed(seed)
    for width in (8, 12, 20, 33, 47):
        x = torch.randn(6, width, generator=g, requires_grad=True)
        w = torch.randn(width, generator=g, requires_grad=True)
        yield width, x, w, *(t.detach().to(LAZY).requires_grad_(True) for t in (x, w))


def test_layer_norm_backward_over_widths_runs_no_meta_kernel():
    misses = []
    for width, x, w, lx, lw in rows_and_weights(6):
        before = lazyfuse.metrics()["MetaCacheMiss"]
        F.layer_norm(lx, (width,), lw).square().sum().backward()
        lazyfuse.sync(lx.grad, lw.grad)
        misses.append(lazyfuse.metrics()["MetaCacheMiss"] - before)
        F.layer_norm(x, (width,), w).square().sum().backward()
        torch.testing.assert_close(lx.grad.cpu(), x.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(lw.grad.cpu(), w.grad, atol=1e-4, rtol=1e-4)
    assert misses[-2:] == [0, 0], misses


def test_backward_of_new_widths_runs_no_meta_kernel_for_geometry():
    # Note [Row-major pointwise results]: the backward of softmax(x * w).square().sum() multiplies
    # the expanded gradient of sum() with row-major tensors; a new width lays those results out
    # without running the op on Meta.
    geometry = []
    for _, x, w, lx, lw in rows_and_weights(7):
        before = lazyfuse.metrics().get("GeometryOnMeta", 0)
        lazy = F.softmax(lx * lw, -1)
        lazy_grads = torch.autograd.grad(lazy.square().sum(), (lx, lw))
        lazyfuse.sync(lazy, *lazy_grads)
        geometry.append(lazyfuse.metrics().get("GeometryOnMeta", 0) - before)
        out = F.softmax(x * w, -1)
        grads = torch.autograd.grad(out.square().sum(), (x, w))
        for got, expected in zip((lazy, *lazy_grads), (out, *grads)):
            assert got.stride() == expected.stride()
            torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
    assert geometry == [0] * 5, geometry


VIEWS = {
    "t": lambda x: x.t(),
    "strided_slice": lambda x: x[1:, ::2],
    "select": lambda x: x.select(1, 2),
    "unsqueeze": lambda x: x.t().unsqueeze(1),
    "expand": lambda x: x.t().expand(2, -1, -1),
    "split": lambda x: x.split(3, 1)[1],
    "narrow": lambda x: x.t().narrow(0, 1, 2),
    "view": lambda x: x[1:].view(-1),
    "squeeze": lambda x: x.t().unsqueeze(0).squeeze(0),
    "permute": lambda x: x.unsqueeze(2).permute(2, 1, 0),
    "unbind": lambda x: x.t().unbind(1)[2],
    "pointwise_of_transposed": lambda x: x.t() * 2 + x.t(),
    "broadcast_of_transposed": lambda x: x.t() + x[0].unsqueeze(1),
    "matmul_of_transposed": lambda x: x.t() @ x,
    "layer_norm_of_transposed": lambda x: F.layer_norm(x.t(), x.shape[:1]),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_of_new_sizes_report_eagers_geometry(name):
    # Note [View geometry], computed without Meta for views of new sizes and for the results of
    # pointwise ops, matrix products and LayerNorm over them.
    fn = VIEWS[name]
    g = torch.Generator().manual_seed(7)
    for rows, width in ((5, 7), (9, 11), (13, 17), (6, 8)):
        x = torch.randn(rows, width, generator=g)
        expected, got = fn(x), fn(x.to(LAZY))
        assert (got.shape, got.stride(), got.storage_offset()) == \
            (expected.shape, expected.stride(), expected.storage_offset())
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)


def test_shape_functions_keep_eagers_errors():
    # A call eager refuses is never served by a shape function: it goes to the meta kernel,
    # which raises.
    g = torch.Generator().manual_seed(8)
    for rows, width in ((4, 6), (8, 10), (5, 12)):
        x = torch.randn(rows, width, generator=g)
        lazy_and_eager(lambda x: x.view(-1, 2) + 1, x)
        lazy_and_eager(lambda x: x.select(1, 3) + 1, x)
        lazy_and_eager(lambda x: torch.cat([x, x], 1) + 1, x)
        lazy_and_eager(lambda x: x.expand(3, -1, -1) + 1, x)
        lazy_and_eager(lambda x: F.layer_norm(x, (width,)), x)
        lazy_and_eager(lambda x: x.narrow(1, 2, 3) + 1, x)
    bad = [lambda x: x.view(-1, 7), lambda x: x.select(1, 9), lambda x: x.select(0, -8),
           lambda x: torch.cat([x, x[:, 1:]], 0), lambda x: x.expand(3, 5, -1),
           lambda x: F.layer_norm(x, (7,)), lambda x: x.narrow(1, 2, 5),
           lambda x: x.split(0, 1), lambda x: x.permute(1, 1)]
    x = torch.randn(6, 6, generator=g)
    for fn in bad:
        with pytest.raises(Exception) as eager:
            fn(x)
        with pytest.raises(type(eager.value)):
            lazyfuse.sync(*[t for t in [fn(x.to(LAZY))] if isinstance(t, torch.Tensor)])


def test_views_of_empty_dims_and_slices_past_the_end_report_eagers_geometry():
    programs = [lambda x: x.permute(2, 1, 0).split(2, dim=1)[0],
                lambda x: torch.ops.aten.slice.Tensor(x.permute(2, 1, 0), 0, 2**63 - 1, None, 2)]
    for n in (0, 3):
        x = torch.zeros(3, n, 4)
        for fn in programs:
            expected, got = fn(x), fn(x.to(LAZY))
            assert (got.shape, got.stride(), got.storage_offset()) == \
                (expected.shape, expected.stride(), expected.storage_offset())
