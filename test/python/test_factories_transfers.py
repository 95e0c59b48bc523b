"""Factories on the lazy device, and moving tensors between the CPU and the lazy device."""

import copy

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from helpers import REFERENCE

ALL_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def sample(dtype, shape=(3, 4)):
    """Deterministic values of `dtype`, with negatives where the dtype has them."""
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 255, shape, generator=g, dtype=torch.uint8)
    if not dtype.is_floating_point and not dtype.is_complex:
        return torch.randint(-100, 100, shape, generator=g, dtype=dtype)
    return torch.randn(shape, generator=g, dtype=dtype)


# ---- factories -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: torch.zeros(2, 3, **kw),
        lambda **kw: torch.ones(2, 3, **kw),
        lambda **kw: torch.full((2, 3), 7.5, **kw),
        lambda **kw: torch.arange(10, **kw),
        lambda **kw: torch.arange(1, 4, 0.5, **kw),
        lambda **kw: torch.linspace(-1, 1, 7, **kw),
        lambda **kw: torch.eye(4, **kw),
        lambda **kw: torch.eye(3, 5, **kw),
        lambda **kw: torch.zeros(0, 3, **kw),
        lambda **kw: torch.ones((), **kw),
    ],
    ids=["zeros", "ones", "full", "arange", "arange_step", "linspace", "eye", "eye_rect",
         "zeros_empty", "ones_scalar"],
)
def test_deterministic_factory_matches_eager(factory):
    expected = factory(device=REFERENCE)
    lazy = factory(device="lazy")
    assert lazy.device.type == "lazy"
    assert lazy.shape == expected.shape
    assert lazy.dtype == expected.dtype
    torch.testing.assert_close(lazy.cpu(), expected.cpu())


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool, torch.float16])
def test_factories_with_dtype(dtype):
    for make in (torch.zeros, torch.ones):
        expected = make(2, 5, dtype=dtype)
        lazy = make(2, 5, dtype=dtype, device="lazy")
        assert lazy.dtype == dtype
        torch.testing.assert_close(lazy.cpu(), expected)
    torch.testing.assert_close(
        torch.full((3,), 1, dtype=dtype, device="lazy").cpu(), torch.full((3,), 1, dtype=dtype)
    )


def test_full_infers_dtype_like_eager():
    for fill in (3, 2.5, True):
        expected = torch.full((2, 2), fill)
        lazy = torch.full((2, 2), fill, device="lazy")
        assert lazy.dtype == expected.dtype
        torch.testing.assert_close(lazy.cpu(), expected)


def test_empty_has_shape_and_dtype():
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        x = torch.empty(3, 4, dtype=dtype, device="lazy")
        ref = torch.empty(3, 4, dtype=dtype)
        assert x.device.type == "lazy"
        assert (x.shape, x.dtype) == (ref.shape, ref.dtype)
        assert x.cpu().shape == ref.shape


@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: torch.rand(4, 5, **kw),
        lambda **kw: torch.randn(4, 5, **kw),
        lambda **kw: torch.randint(0, 10, (4, 5), **kw),
        lambda **kw: torch.randperm(9, **kw),
        lambda **kw: torch.rand(3, dtype=torch.float64, **kw),
    ],
    ids=["rand", "randn", "randint", "randperm", "rand_f64"],
)
def test_random_factory_shape_and_dtype(factory):
    expected = factory()
    lazy = factory(device="lazy")
    assert lazy.device.type == "lazy"
    assert (lazy.shape, lazy.dtype) == (expected.shape, expected.dtype)
    values = lazy.cpu()
    assert (values.shape, values.dtype) == (expected.shape, expected.dtype)


def test_random_values_in_range():
    u = torch.rand(1000, device="lazy").cpu()
    assert bool((u >= 0).all()) and bool((u < 1).all())
    r = torch.randint(3, 7, (1000,), device="lazy").cpu()
    assert bool((r >= 3).all()) and bool((r < 7).all())
    p = torch.randperm(20, device="lazy").cpu()
    torch.testing.assert_close(p.sort().values, torch.arange(20))


RANDOM_OPS = {
    "rand": lambda x: torch.rand(5, 3, device="lazy"),
    "randn": lambda x: torch.randn(5, 3, device="lazy"),
    "randint": lambda x: torch.randint(0, 100, (5, 3), device="lazy"),
    "randperm": lambda x: torch.randperm(15, device="lazy"),
    "rand_like": torch.rand_like,
    "randn_like": torch.randn_like,
    "randint_like": lambda x: torch.randint_like(x, 10),
    "bernoulli": lambda x: torch.bernoulli(x.sigmoid()),
    "normal_": lambda x: x.clone().normal_(),
    "uniform_": lambda x: x.clone().uniform_(-2, 2),
    "dropout": lambda x: F.dropout(x, 0.5),
    "multinomial": lambda x: torch.multinomial(x.abs() + 0.1, 2),
}


def test_seeding_before_any_device_use_reproduces_random_ops(python_subprocess):
    # Note [Seeds queued before CUDA starts]: in a fresh process torch.manual_seed only queues
    # CUDA's seeding until torch's Python side starts CUDA; lazyfuse starts it before its first
    # draw, so the seed holds on every hardware device.
    code = (
        "import torch, lazyfuse\n"
        "def draws():\n"
        "    torch.manual_seed(7)\n"
        "    return [torch.rand(6, device='lazy').cpu(), torch.randn(6, device='lazy').cpu(),\n"
        "            torch.randint(0, 1000, (6,), device='lazy').cpu()]\n"
        "first, again = draws(), draws()\n"
        "assert all(torch.equal(a, b) for a, b in zip(first, again)), (first, again)\n"
        "torch.manual_seed(8)\n"
        "assert not torch.equal(torch.rand(6, device='lazy').cpu(), first[0])\n"
        "if lazyfuse.hardware_device().startswith('cuda'):\n"
        "    assert torch.cuda.is_initialized()\n"
        "print('ok')\n"
    )
    run = python_subprocess(code)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_random_values_are_drawn_when_recorded(name):
    # Note [Random ops draw when recorded]: the generator's state when the op is recorded decides
    # its values, however the syncs that run it come.
    op = RANDOM_OPS[name]
    x = torch.randn(5, 3).to("lazy")
    lazyfuse.mark_step()
    torch.manual_seed(7)
    first = op(x)
    state = torch.get_rng_state()
    torch.manual_seed(7)
    again = op(x)
    assert torch.equal(torch.get_rng_state(), state)  # each recording draws the same
    later = torch.rand(8, device="lazy")
    lazyfuse.sync(later)  # runs between the recording of `again` and its run
    torch.testing.assert_close(again.cpu(), first.cpu(), rtol=0, atol=0)
    torch.manual_seed(8)
    assert not torch.equal(op(x).cpu(), first.cpu())


def test_random_values_of_a_restored_generator_state_are_drawn_again_when_recorded():
    # torch.lazy's generator state is the hardware device's generator's.
    x = torch.ones(64).to("lazy")
    state = torch.lazy.get_rng_state()
    a = F.dropout(x, 0.5) + torch.rand(64, device="lazy")
    torch.lazy.set_rng_state(state)
    b = F.dropout(x, 0.5) + torch.rand(64, device="lazy")
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


def test_manual_seed_makes_random_reproducible():
    lazyfuse.manual_seed(123)
    a = torch.randn(16, device="lazy").cpu()
    lazyfuse.manual_seed(123)
    b = torch.randn(16, device="lazy").cpu()
    torch.testing.assert_close(a, b)


def test_like_factories():
    src = torch.randn(2, 3, dtype=torch.float64)
    lazy_src = src.to("lazy")
    for like in (torch.zeros_like, torch.ones_like):
        out = like(lazy_src)
        assert out.device.type == "lazy"
        torch.testing.assert_close(out.cpu(), like(src))
    torch.testing.assert_close(
        torch.full_like(lazy_src, 4.0).cpu(), torch.full_like(src, 4.0)
    )
    assert torch.empty_like(lazy_src).shape == src.shape
    assert torch.rand_like(lazy_src).cpu().dtype == torch.float64


@pytest.mark.parametrize("make", [
    lambda x, d: torch.empty_like(x, device=d).zero_(),
    lambda x, d: torch.zeros_like(x, device=d),
    lambda x, d: torch.ones_like(x, device=d, dtype=torch.float64),
    lambda x, d: torch.full_like(x, 2.5, device=d),
    lambda x, d: x.new_zeros((2, 5), device=d),
    lambda x, d: x.new_full((3,), 7, device=d),
    lambda x, d: torch.rand_like(x, device=d),
    lambda x, d: torch.randn_like(x, device=d),
    lambda x, d: torch.randint_like(x, 10, device=d),
], ids=["empty_like", "zeros_like", "ones_like", "full_like", "new_zeros", "new_full",
        "rand_like", "randn_like", "randint_like"])
def test_like_and_new_on_another_device(make):
    # The device named wins over the lazy tensor's, as in eager: a CPU tensor of eager's
    # geometry, values and random draws (Note [Tensors made like a lazy tensor on another device]).
    x = torch.arange(12.0).reshape(3, 4).t()
    torch.manual_seed(3)
    expected = make(x, "cpu")
    torch.manual_seed(3)
    got = make(x.to("lazy"), "cpu")
    assert got.device.type == "cpu" and not torch._is_functional_tensor(got)
    assert (got.dtype, got.shape, got.stride()) == (expected.dtype, expected.shape, expected.stride())
    torch.testing.assert_close(got, expected)
    assert make(x.to("lazy"), "lazy").device.type == "lazy"
    assert make(x.to("lazy"), None).device.type == "lazy"


def test_tensor_constructor_on_lazy():
    for data in ([1.0, 2.0, 3.0], [[1, 2], [3, 4]], [True, False], 5, 2.5):
        expected = torch.tensor(data)
        lazy = torch.tensor(data, device="lazy")
        assert lazy.device.type == "lazy"
        assert lazy.dtype == expected.dtype
        torch.testing.assert_close(lazy.cpu(), expected)
    lazy = torch.tensor([1, 2, 3], dtype=torch.float16, device="lazy")
    torch.testing.assert_close(lazy.cpu(), torch.tensor([1, 2, 3], dtype=torch.float16))


def test_factory_result_feeds_computation():
    expected = torch.arange(6).reshape(2, 3) * 2 + torch.ones(2, 3)
    lazy = torch.arange(6, device="lazy").reshape(2, 3) * 2 + torch.ones(2, 3, device="lazy")
    torch.testing.assert_close(lazy.cpu(), expected)


# ---- transfers -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_every_dtype(dtype):
    src = sample(dtype)
    lazy = src.to("lazy")
    assert lazy.device.type == "lazy"
    assert lazy.dtype == dtype and lazy.shape == src.shape
    back = lazy.cpu()
    assert back.device.type == "cpu"
    torch.testing.assert_close(back, src, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_every_dtype_through_an_op(dtype):
    """A value that was computed on the lazy device (not just uploaded) comes back right."""
    src = sample(dtype)
    torch.testing.assert_close(src.to("lazy").t().clone().cpu(), src.t().clone(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "make_view",
    [
        lambda x: x.t(),
        lambda x: x[:, 1::2],
        lambda x: x[1:3],
        lambda x: x.unsqueeze(0).expand(2, 4, 6),
        lambda x: x.flip(0)[::2],
        lambda x: x.permute(1, 0)[2:],
    ],
    ids=["transpose", "column_stride", "row_slice", "expand", "flip_step", "permute_slice"],
)
def test_non_contiguous_source(make_view):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = make_view(base)
    lazy = view.to("lazy")
    torch.testing.assert_close(lazy.cpu(), view)
    torch.testing.assert_close((lazy * 2).cpu(), view * 2)


def test_cpu_source_unchanged_by_lazy_ops():
    src = torch.randn(3, 3)
    keep = src.clone()
    lazy = src.to("lazy")
    lazy.add_(1)
    lazy.cpu()
    torch.testing.assert_close(src, keep)


def test_to_lazy_with_dtype_conversion():
    src = torch.randn(4, 3)
    torch.testing.assert_close(
        src.to("lazy", dtype=torch.float64).cpu(), src.to(torch.float64)
    )
    torch.testing.assert_close(src.to("lazy", torch.int32).cpu(), src.to(torch.int32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32,
                                   torch.int64, torch.bool, torch.complex64])
def test_dtype_conversion_on_lazy(dtype):
    src = torch.randn(3, 4) * 10
    lazy = src.to("lazy").to(dtype)
    assert lazy.device.type == "lazy" and lazy.dtype == dtype
    torch.testing.assert_close(lazy.cpu(), src.to(dtype))


def test_float_helpers_on_lazy():
    src = torch.randn(5)
    lazy = src.to("lazy")
    torch.testing.assert_close(lazy.double().cpu(), src.double())
    torch.testing.assert_close(lazy.half().cpu(), src.half())
    torch.testing.assert_close(lazy.long().cpu(), src.long())
    torch.testing.assert_close(lazy.bool().cpu(), src.bool())


def test_to_same_device_is_noop():
    lazy = torch.ones(3, device="lazy")
    assert lazy.to("lazy") is lazy
    cpu = torch.ones(3)
    assert cpu.cpu() is cpu


def test_copy_cpu_into_lazy():
    src = torch.randn(3, 4)
    dst = torch.zeros(3, 4, device="lazy")
    ret = dst.copy_(src)
    assert ret is dst
    assert dst.device.type == "lazy"
    torch.testing.assert_close(dst.cpu(), src)


def test_copy_lazy_into_cpu():
    src = torch.randn(3, 4)
    lazy = src.to("lazy") * 3
    dst = torch.zeros(3, 4)
    dst.copy_(lazy)
    torch.testing.assert_close(dst, src * 3)


def test_copy_between_lazy_tensors():
    src = torch.randn(2, 5)
    dst = torch.zeros(2, 5, device="lazy")
    dst.copy_(src.to("lazy") + 1)
    torch.testing.assert_close(dst.cpu(), src + 1)


def test_copy_converts_dtype_and_broadcasts():
    src = torch.arange(4, dtype=torch.float64)
    dst_cpu = torch.zeros(3, 4, dtype=torch.float32)
    dst_lazy = torch.zeros(3, 4, dtype=torch.float32, device="lazy")
    dst_cpu.copy_(src)
    dst_lazy.copy_(src)
    torch.testing.assert_close(dst_lazy.cpu(), dst_cpu)

    int_dst_cpu = torch.zeros(4, dtype=torch.int32)
    int_dst_cpu.copy_(src.to("lazy"))
    torch.testing.assert_close(int_dst_cpu, src.to(torch.int32))


def test_copy_into_non_contiguous_targets():
    src = torch.randn(4, 3)
    # CPU view target, lazy source.
    base_cpu = torch.zeros(3, 4)
    base_cpu.t().copy_(src.to("lazy"))
    expected = torch.zeros(3, 4)
    expected.t().copy_(src)
    torch.testing.assert_close(base_cpu, expected)
    # Lazy view target, CPU source.
    base_lazy = torch.zeros(3, 4, device="lazy")
    base_lazy.t().copy_(src)
    torch.testing.assert_close(base_lazy.cpu(), expected)


def test_transfer_counters(counters):
    before = counters()
    lazy = torch.randn(4).to("lazy")
    lazy.cpu()
    after = counters()
    assert after["TransferToLazy"] > before["TransferToLazy"]
    assert after["TransferFromLazy"] > before["TransferFromLazy"]


# torch.tensor(data, device="lazy") builds a CPU tensor, copies it with Functionalize excluded and
# then calls lift_fresh; the result must be a functional tensor like every other lazy tensor, or
# mutation through views and in-place ops with other lazy operands go wrong.
CONSTRUCTORS = {
    "tensor": lambda data: torch.tensor(data, device="lazy"),
    "as_tensor": lambda data: torch.as_tensor(data, device="lazy"),
    "new_tensor": lambda data: torch.ones(1, device="lazy").new_tensor(data),
    "to": lambda data: torch.tensor(data).to("lazy"),
}


@pytest.mark.parametrize(
    "name",
    sorted(CONSTRUCTORS),
)
def test_constructed_tensor_mutates_through_view(name):
    expected = torch.tensor([1.0, 2.0, 3.0])
    expected[0].add_(10)
    lazy = CONSTRUCTORS[name]([1.0, 2.0, 3.0])
    lazy[0].add_(10)
    torch.testing.assert_close(lazy.cpu(), expected)


@pytest.mark.parametrize(
    "name",
    sorted(CONSTRUCTORS),
)
def test_constructed_tensor_in_place_with_lazy_operand(name):
    expected = torch.tensor([1.0, 2.0, 3.0])
    expected.mul_(torch.full((3,), 2.0))
    lazy = CONSTRUCTORS[name]([1.0, 2.0, 3.0])
    lazy.mul_(torch.full((3,), 2.0, device="lazy"))
    torch.testing.assert_close(lazy.cpu(), expected)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_torch_save_and_load(tmp_path):
    src = torch.randn(3, 4)
    path = tmp_path / "t.pt"
    torch.save({"x": src.to("lazy") * 2}, path)
    loaded = torch.load(path, map_location="cpu")
    torch.testing.assert_close(loaded["x"], src * 2)


def test_torch_load_restores_lazy_tensors_on_lazy(tmp_path):
    src = torch.randn(3, 4)
    path = tmp_path / "t.pt"
    weight = (src.to("lazy") * 2).requires_grad_()
    torch.save({"w": weight, "t": src.to("lazy").t()}, path)
    loaded = torch.load(path)
    assert loaded["w"].device.type == "lazy"
    assert loaded["w"].requires_grad and loaded["w"].is_leaf
    torch.testing.assert_close(loaded["w"].detach().cpu(), src * 2)
    loaded["t"].add_(1)  # a lazy tensor like any other: functionalized, mutable
    torch.testing.assert_close(loaded["t"].cpu(), src.t() + 1)


def test_module_state_dict_round_trip(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("lazy")
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    restored = torch.nn.Linear(4, 2)
    restored.load_state_dict(torch.load(path, map_location="cpu"))
    torch.testing.assert_close(restored.weight, model.weight.detach().cpu())
    torch.testing.assert_close(restored.bias, model.bias.detach().cpu())


def test_torch_load_with_map_location_lazy(tmp_path):
    # A training checkpoint: a lazy model's state, its optimizer's (Adam's step is a CPU tensor),
    # and a CPU tensor; loaded the way code written for CUDA loads one (map_location=device).
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to("lazy")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4).to("lazy")).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "cpu": torch.arange(3.0)},
               path)
    loaded = torch.load(path, map_location=torch.device("lazy"))
    assert loaded["model"]["weight"].device.type == "lazy"
    torch.testing.assert_close(loaded["model"]["weight"].cpu(), model.weight.detach().cpu())
    torch.testing.assert_close(loaded["cpu"], torch.arange(3.0))  # a CPU storage stays there
    fresh = torch.nn.Linear(4, 3).to("lazy")
    fresh_opt = torch.optim.Adam(fresh.parameters())
    fresh.load_state_dict(loaded["model"])
    fresh_opt.load_state_dict(loaded["opt"])
    x = torch.randn(2, 4).to("lazy")
    for m, o in ((model, opt), (fresh, fresh_opt)):  # one more step each, from the same state
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    torch.testing.assert_close(fresh.weight.detach().cpu(), model.weight.detach().cpu())


def test_tied_parameters_stay_tied_across_devices():
    # A language model's head shares the embedding's weight; eager's .to() keeps one Parameter.
    def make():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
        m[1].weight = m[0].weight
        return m

    eager, lazy = make(), make().to("lazy")
    assert lazy[1].weight is lazy[0].weight and lazy[0].weight.device.type == "lazy"
    assert len(list(lazy.parameters())) == 1
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for model, device in ((eager, "cpu"), (lazy, "lazy")):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(3):
            opt.zero_grad()
            model(tokens.to(device)).logsumexp(-1).sum().backward()
            opt.step()
    torch.testing.assert_close(lazy[0].weight.detach().cpu(), eager[0].weight.detach())
    lazy.cpu()
    assert lazy[1].weight is lazy[0].weight and lazy[0].weight.device.type == "cpu"


@pytest.mark.parametrize("make", [
    lambda: torch.nn.LazyLinear(3),
    lambda: torch.nn.Sequential(torch.nn.LazyConv1d(4, 3), torch.nn.LazyBatchNorm1d()),
], ids=["LazyLinear", "LazyConv1d_LazyBatchNorm1d"])
def test_uninitialized_module_materializes_on_lazy(make):
    """A lazy module (uninitialized parameters) moved to lazy stays uninitialized and takes its
    shapes at its first call, on lazy, as on any device; then it trains like eager from the same
    values."""
    module = make().to("lazy")
    assert any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in module.parameters())
    x = torch.randn(2, 3, 8) if isinstance(module, torch.nn.Sequential) else torch.randn(2, 5)
    out = module(x.to("lazy"))
    params = list(module.parameters())
    assert not any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in params)
    assert all(p.device.type == "lazy" for p in params) and out.device.type == "lazy"
    eager = copy.deepcopy(module).to(REFERENCE)
    for m, device in ((module, "lazy"), (eager, REFERENCE)):
        m(x.to(device)).square().sum().backward()
    for lazy_p, eager_p in zip(module.parameters(), eager.parameters()):
        torch.testing.assert_close(lazy_p.grad.cpu(), eager_p.grad.cpu())


def test_tied_uninitialized_parameter_stays_tied():
    a, b = torch.nn.LazyLinear(4), torch.nn.Linear(2, 2)
    b.weight = a.weight  # one uninitialized Parameter in two places
    model = torch.nn.ModuleList([a, b]).to("lazy")
    assert model[1].weight is model[0].weight
    assert isinstance(model[0].weight, torch.nn.parameter.UninitializedParameter)


def test_deepcopy_of_lazy_tensor():
    import copy

    src = torch.randn(3)
    lazy = src.to("lazy") * 2
    clone = copy.deepcopy(lazy)
    assert clone.device.type == "lazy"
    lazy.add_(1)
    torch.testing.assert_close(clone.cpu(), src * 2)
