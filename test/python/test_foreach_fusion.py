"""`_foreach_*` ops lowered per element (Note [Foreach lowering]): against eager, fused into one
kernel per tensor, with Scalar[] arguments as graph parameters."""

import pytest
import torch

import lazyfuse

from helpers import REFERENCE, reference, to_lazy


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")


def tensors(dtypes=(torch.float32, torch.float64, torch.bfloat16), seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (13,), (2, 3, 4)]
    return [torch.randn(s, generator=g).to(d) for s, d in zip(shapes, dtypes)]


CASES = {
    "add_list_alpha": lambda a, b: torch._foreach_add(a, b, alpha=-0.5),
    "sub_scalar": lambda a, b: torch._foreach_sub(a, 1.5),
    "mul_scalar_list": lambda a, b: torch._foreach_mul(a, [2.0, -1.0, 0.5]),
    "div_list": lambda a, b: torch._foreach_div(a, torch._foreach_add(b, 3.0)),
    "maximum_list": lambda a, b: torch._foreach_maximum(a, b),
    "clamp_min_scalar": lambda a, b: torch._foreach_clamp_min(a, 0.1),
    "pow_scalar": lambda a, b: torch._foreach_pow(torch._foreach_abs(a), 1.5),
    "lerp_scalar": lambda a, b: torch._foreach_lerp(a, b, 0.25),
    "addcmul_scalar": lambda a, b: torch._foreach_addcmul(a, a, b, value=0.5),
    "addcdiv_scalar_list": lambda a, b: torch._foreach_addcdiv(
        a, a, torch._foreach_add(torch._foreach_abs(b), 1.0), [0.1, -2.0, 3.0]),
    "unary_chain": lambda a, b: torch._foreach_sqrt(torch._foreach_exp(torch._foreach_neg(a))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_foreach_ops_like_eager(name):
    a, b = tensors(), tensors(seed=1)
    expected = reference(CASES[name], a, b)
    lazyfuse.reset_metrics()
    got = [t.cpu() for t in CASES[name](to_lazy(a), to_lazy(b))]
    counters = lazyfuse.metrics()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, equal_nan=True)
    # Every foreach op was fused: one kernel per tensor, no ATen call for any _foreach_ op.
    assert counters.get("KernelsLaunched", 0) == len(a)
    assert not any(k.startswith("aten::_foreach") for k in counters)


def test_adam_step_is_one_kernel_per_parameter():
    torch.manual_seed(0)
    params = [torch.randn(s).to(REFERENCE).requires_grad_(True)
              for s in [(16, 8), (16,), (4, 16), (4,)]]
    lazy = [p.detach().to("lazy").requires_grad_(True) for p in params]
    opts = torch.optim.Adam(params, lr=1e-2, foreach=True), torch.optim.Adam(lazy, lr=1e-2)
    for step in range(3):
        for p, q in zip(params, lazy):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.to("lazy")
        opts[0].step()
        lazyfuse.mark_step()
        lazyfuse.reset_metrics()
        opts[1].step()
        lazyfuse.mark_step()
        counters = lazyfuse.metrics()
        if step > 0:
            assert counters["KernelsLaunched"] == len(params)
        if step > 1:  # the first step also creates the state; later ones are the same graph
            assert counters["CachedCompile"] == 1 and counters.get("UncachedCompile", 0) == 0
    for p, q in zip(params, lazy):
        torch.testing.assert_close(q.detach().cpu(), p.detach().cpu())


def test_tensor_overload_stays_an_aten_call():
    a = tensors()
    expected = reference(lambda a: torch._foreach_mul(a, torch.tensor(3.0)), a)
    lazyfuse.reset_metrics()
    got = [t.cpu() for t in torch._foreach_mul(to_lazy(a), torch.tensor(3.0).to("lazy"))]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert lazyfuse.metrics().get("KernelsLaunched", 0) == 0


@pytest.mark.parametrize("fusion", ["0", "always"])
def test_scalar_list_entry_kinds_are_part_of_the_graph(fusion, monkeypatch):
    """The entries of a Scalar[] are parameters, but an int entry and a float entry make
    different graphs (output dtype, kernel code), as eager's type promotion says."""
    monkeypatch.setenv("LAZYFUSE_FUSION", fusion)
    floats, ints = tensors(), [torch.arange(5), torch.arange(3) - 1, torch.arange(4) * 3]
    for xs in (floats, ints):
        for scalars in ([2, 3, 4], [2.5, 0.5, 1.5], [1, 2.5, True], [True, False, True]):
            expected = reference(lambda xs: torch._foreach_add(xs, scalars), xs)
            got = [t.cpu() for t in torch._foreach_add(to_lazy(xs), scalars)]
            for g, e in zip(got, expected):
                assert g.dtype == e.dtype
                torch.testing.assert_close(g, e)


@pytest.mark.parametrize("name", ["RAdam", "Adagrad"])
def test_optimizers_with_a_tensor_lr(name):
    """With a tensor lr, foreach optimizers put 0-dim CPU tensors in Tensor[] arguments, which
    eager's foreach kernels accept next to device tensors."""
    torch.manual_seed(0)
    params = [torch.randn(s).to(REFERENCE).requires_grad_(True) for s in [(6, 4), (6,)]]
    lazy = [p.detach().to("lazy").requires_grad_(True) for p in params]
    make = getattr(torch.optim, name)
    opts = make(params, lr=torch.tensor(0.01), foreach=True), make(lazy, lr=torch.tensor(0.01))
    for _ in range(3):
        for p, q in zip(params, lazy):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.to("lazy")
        opts[0].step()
        opts[1].step()
        lazyfuse.mark_step()
    for p, q in zip(params, lazy):
        torch.testing.assert_close(q.detach().cpu(), p.detach().cpu())


def test_foreach_writes_reach_views_and_mixed_lists():
    # Note [Functionalizing foreach writes]: the written tensors are replaced like any write.
    base, other, addend = torch.randn(4, 5), torch.randn(5), torch.randn(5)
    scalar = torch.tensor(2.5)  # a 0-dim CPU tensor among lazy ones

    def step(b, o, a):
        row = b[1]
        torch._foreach_add_([row, o], [a, b[2]], alpha=0.5)
        torch._foreach_mul_([row, o[2:]], scalar)
        torch._foreach_zero_([b[3:]])
        return b, o, row

    expected = reference(step, base.clone(), other.clone(), addend)
    got = step(*to_lazy([base.clone(), other.clone(), addend]))
    torch.testing.assert_close([t.cpu() for t in got], list(expected))


@pytest.mark.parametrize("make", [
    lambda xs, ys: torch._foreach_add_(xs, ys[:1]),
    lambda xs, ys: torch._foreach_add_(xs, [ys[0], ys[0].t()]),
    lambda xs, ys: torch._foreach_mul_([x.long() for x in xs], 1.5),
    lambda xs, ys: torch._foreach_add_([xs[0].int(), xs[1]], ys),
], ids=["list_lengths", "shapes", "float_into_long", "cast_in_one_element"])
def test_foreach_write_errors_are_eagers(make):
    xs, ys = [torch.randn(3, 4), torch.randn(3, 4)], [torch.randn(3, 4), torch.randn(3, 4)]
    with pytest.raises(Exception) as eager:
        make([x.clone() for x in xs], ys)
    lazy_xs = to_lazy([x.clone() for x in xs])
    with pytest.raises(type(eager.value)):
        make(lazy_xs, to_lazy(ys))
    # The failed write leaves the tensors as they were.
    torch.testing.assert_close([x.cpu() for x in lazy_xs], xs)


PACKED = {
    "addcdiv": (torch._foreach_addcdiv, torch._foreach_addcdiv_),
    "addcmul": (torch._foreach_addcmul, torch._foreach_addcmul_),
}


def packed_operands():
    return tensors(), tensors(seed=1), [t.abs() + 1 for t in tensors(seed=2)]


@pytest.mark.parametrize("scalars", [[0.5, -2.0, 3.0], [2, -1, 3], [True, False, True]],
                         ids=["float", "int", "bool"])
@pytest.mark.parametrize("name", sorted(PACKED))
def test_foreach_packed_scalars_like_eager(name, scalars):
    out_of_place, in_place = PACKED[name]
    xs, t1, t2 = packed_operands()
    packed = torch.tensor(scalars)  # stays on the CPU, as eager wants it
    expected = reference(lambda *ts: out_of_place(*ts, packed), xs, t1, t2)
    got = out_of_place(*to_lazy([xs, t1, t2]), packed)
    torch.testing.assert_close([g.cpu() for g in got], expected)

    lazy_xs = to_lazy([x.clone() for x in xs])
    in_place(lazy_xs, *to_lazy([t1, t2]), packed)
    torch.testing.assert_close([x.cpu() for x in lazy_xs], expected)

    outs = to_lazy([torch.empty_like(x) for x in xs])
    getattr(torch.ops.aten, f"_foreach_{name}").Tensor_out(*to_lazy([xs, t1, t2]), packed,
                                                            out=outs)
    torch.testing.assert_close([o.cpu() for o in outs], expected)


def test_foreach_packed_scalars_are_parameters():
    xs, t1, t2 = packed_operands()
    lazy = to_lazy([xs, t1, t2])
    for values in ([0.5, -2.0, 3.0], [1.5, 4.0, -1.0]):
        lazyfuse.mark_step()
        before = lazyfuse.metrics().get("UncachedCompile", 0)
        got = torch._foreach_addcdiv(*lazy, torch.tensor(values))
        expected = reference(lambda *ts: torch._foreach_addcdiv(*ts, torch.tensor(values)),
                             xs, t1, t2)
        torch.testing.assert_close([g.cpu() for g in got], expected)
    assert lazyfuse.metrics().get("UncachedCompile", 0) == before  # new values compiled nothing


@pytest.mark.parametrize("make", [
    lambda xs, t1, t2: (xs, t1, t2, torch.tensor(0.5)),
    lambda xs, t1, t2: (xs, t1, t2, torch.tensor([0.5, 1.0])),
    lambda xs, t1, t2: (xs, t1, t2, torch.tensor([[0, 1], [2, 3], [4, 5]])[:, 1]),
    lambda xs, t1, t2: ([], [], [], torch.tensor([0.5])),
    lambda xs, t1, t2: (xs, t1[:2], t2, torch.tensor([0.5, 1.0, 2.0])),
    lambda xs, t1, t2: (xs, t1[:2], t2, torch.tensor([0.5, 1.0])),
], ids=["zero_dim", "length", "non_contiguous", "empty_lists", "list_lengths", "both"])
@pytest.mark.parametrize("name", sorted(PACKED))
def test_foreach_packed_scalars_errors_are_eagers(name, make):
    for op in PACKED[name]:
        with pytest.raises(RuntimeError) as eager:
            op(*make(*packed_operands()))
        xs, t1, t2 = packed_operands()
        with pytest.raises(RuntimeError) as lazy:
            op(*make(*to_lazy([xs, t1, t2])))
        assert str(lazy.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_foreach_packed_scalars_must_be_on_the_cpu_as_in_eager():
    xs, t1, t2 = to_lazy(packed_operands())
    for op in PACKED["addcdiv"]:
        with pytest.raises(RuntimeError, match="Expected scalars to be on CPU, got lazy:0 instead"):
            op(xs, t1, t2, torch.tensor([0.5, 1.0, 2.0]).to("lazy"))


def test_foreach_packed_scalars_keep_pytorchs_kernel_outside_lazy():
    """Other callers of the Functionalize key keep PyTorch's in-place kernel: make_fx over CPU
    tensors never bakes the values of a scalars tensor into its graph (Note [Packed scalars])."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(xs, t1, t2, scalars):
        xs = [x.clone() for x in xs]
        torch._foreach_addcdiv_(xs, t1, t2, scalars)
        return xs

    xs, t1, t2 = packed_operands()
    try:
        graph = make_fx(torch.func.functionalize(step))(xs, t1, t2, torch.tensor([0.5] * 3))
    except RuntimeError:
        return  # PyTorch's kernel refuses to trace it
    other = torch.tensor([2.0, -1.0, 3.0])
    torch.testing.assert_close(graph(xs, t1, t2, other), step(xs, t1, t2, other))
