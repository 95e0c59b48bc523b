"""The conjugate and negative bits of lazy views (Note [Conjugate and negative bits of lazy
views]): x.conj() and x.conj().imag of lazy tensors report eager's is_conj() and is_neg(), views
keep them, and every read and write through such a view gives eager's values, errors and bits."""

import pytest
import torch

import lazyfuse
from helpers import LAZY, REFERENCE, chain_of, randn


def _complex(seed=0):
    return torch.complex(randn(3, 4, seed=seed), randn(3, 4, seed=seed + 1))


def _bits(t):
    return (t.is_conj(), t.is_neg())


def _values(t):
    return t.detach().cpu().resolve_conj().resolve_neg()


def _on_both(fn, *inputs):
    """fn on eager tensors and on lazy copies; each side's result or (type, message) of its
    error, and each side's inputs after the call."""
    results = []
    for device in (REFERENCE, LAZY):
        args = [t.to(device) if device != REFERENCE else t.clone() for t in inputs]
        try:
            out = fn(*args)
        except RuntimeError as e:
            out = (type(e), str(e).split("\n")[0])
        results.append((out, args))
    return results


def _assert_same(fn, *inputs):
    (eager, eager_args), (lazy, lazy_args) = _on_both(fn, *inputs)
    if isinstance(eager, tuple):
        assert lazy == eager
        return
    assert _bits(lazy) == _bits(eager)
    assert lazy.dtype == eager.dtype and lazy.shape == eager.shape
    if eager._base is not None:  # a view: its geometry over the storage is eager's
        assert (lazy.stride(), lazy.storage_offset()) == (eager.stride(), eager.storage_offset())
    torch.testing.assert_close(_values(lazy), _values(eager))
    for e, l in zip(eager_args, lazy_args):  # the inputs, written through views or not
        torch.testing.assert_close(_values(l), _values(e))


VIEWS = {
    "conj": lambda x: x.conj(),
    "conj_conj": lambda x: x.conj().conj(),
    "imag": lambda x: x.conj().imag,
    "real": lambda x: x.conj().real,
    "neg_view": lambda x: torch._neg_view(x),
    "neg_view_of_conj": lambda x: torch._neg_view(x.conj()),
    "neg_view_of_imag": lambda x: torch._neg_view(x.conj().imag),
    "t": lambda x: x.conj().t(),
    "transpose": lambda x: x.conj().transpose(0, 1),
    "view": lambda x: x.conj().view(12),
    "reshape": lambda x: x.conj().reshape(2, 6),
    "select": lambda x: x.conj()[1],
    "slice": lambda x: x.conj()[:, 1:3],
    "expand": lambda x: x.conj()[0].expand(2, 4),
    "diagonal": lambda x: x.conj().diagonal(),
    "unsqueeze": lambda x: x.conj().unsqueeze(1),
    "permute": lambda x: x.conj().permute(1, 0),
    "unfold": lambda x: x.conj().unfold(1, 2, 1),
    "as_strided": lambda x: x.conj().as_strided((2, 2), (1, 1)),
    "as_strided_of_transposed": lambda x: x.conj().t().as_strided((2, 3), (4, 1), 1),
    "chunk": lambda x: x.conj().chunk(2, 1)[1],
    "unbind": lambda x: x.conj().unbind(0)[2],
    "split_imag": lambda x: x.conj().imag.split(2, 1)[0],
    "detach": lambda x: x.conj().detach(),
    "alias": lambda x: torch.ops.aten.alias(x.conj()),
    "narrow": lambda x: x.conj().narrow(1, 1, 2),
    "movedim": lambda x: x.conj().movedim(0, 1),
    "unsqueeze_": lambda x: x.conj().unsqueeze_(0),
    "view_as_real_of_neg": lambda x: torch.view_as_real(torch._neg_view(x)),
    "view_as_complex_of_neg":
        lambda x: torch.view_as_complex(torch._neg_view(torch.view_as_real(x))),
    # the views eager refuses
    "view_as_real_of_conj": lambda x: torch.view_as_real(x.conj()),
    "view_dtype_of_conj": lambda x: x.conj().view(torch.float64),
    "view_dtype_of_neg": lambda x: x.conj().imag.view(torch.int32),
    "view_same_dtype_of_conj": lambda x: x.conj().view(torch.complex64),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_have_eagers_bits_and_values(name):
    _assert_same(VIEWS[name], _complex())


READS = {
    "mul": lambda x: x.conj() * 2,
    "add": lambda x: x.conj() + x,
    "mm": lambda x: x.conj() @ x.t(),
    "mm_of_transposed_view": lambda x: x @ x.conj().t(),
    "dot": lambda x: torch.dot(x.conj()[0], x[1]),
    "vdot": lambda x: torch.vdot(x.conj()[0], x[1]),
    "clone": lambda x: x.conj().clone(),
    "contiguous": lambda x: x.conj().t().contiguous(),
    "resolve_conj": lambda x: x.conj().resolve_conj(),
    "resolve_neg": lambda x: x.conj().imag.resolve_neg(),
    "sum": lambda x: x.conj().sum(0),
    "abs": lambda x: x.conj().abs(),
    "to_complex128": lambda x: x.conj().to(torch.complex128),
    "neg_times": lambda x: x.conj().imag * 3,
    "eq": lambda x: x.conj() == x,
    "cat": lambda x: torch.cat([x.conj(), x, x.conj().t().t()]),
    "where": lambda x: torch.where(x.real > 0, x.conj(), x),
    "index_select": lambda x: x.conj().index_select(0, torch.tensor([2, 0], device=x.device)),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_reads_of_views_with_bits_match_eager(name):
    _assert_same(READS[name], _complex())


WRITES = {
    "add_": lambda x: x.conj().add_(1j),
    "mul_": lambda x: x.conj().mul_(2j),
    "copy_": lambda x: x.conj().copy_(torch.full((3, 4), 1 + 2j, device=x.device)),
    "copy_from_conj": lambda x: x.copy_(x.conj() * 1j),
    "fill_": lambda x: x.conj()[1].fill_(3 + 4j),
    "view_of_view_add_": lambda x: x.conj().t()[1:].add_(1j),
    "imag_add_": lambda x: x.conj().imag.add_(1),
    "imag_mul_": lambda x: x.conj().imag.mul_(3),
    "real_of_conj_zero_": lambda x: x.conj().real.zero_(),
    "conj_physical_": lambda x: x.conj().conj_physical_(),
    "addmm_": lambda x: x.conj()[:, :3].addmm_(x[:, :2], x[:2, :3]),
    "index_put_": lambda x: x.conj().index_put_(
        (torch.tensor([0, 2], device=x.device),), torch.tensor(5j, device=x.device)),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_writes_through_views_with_bits_match_eager(name):
    _assert_same(WRITES[name], _complex())


def test_bits_outlive_syncs_and_later_writes():
    x = _complex()
    xl = x.to(LAZY)
    c, cl = x.conj(), xl.conj()
    lazyfuse.mark_step()
    for fn in (lambda t: t.add_(1j), lambda t: t.t().mul_(2), lambda t: t.imag.sub_(1)):
        fn(c)
        fn(cl)
        assert _bits(cl) == _bits(c)
        lazyfuse.mark_step()
        torch.testing.assert_close(_values(cl), _values(c))
        torch.testing.assert_close(xl.cpu(), x)
    assert _bits(cl.imag) == _bits(c.imag) == (False, True)


def test_gradients_through_conjugate_views_match_eager():
    x, w = _complex(0), torch.complex(randn(4, 2, seed=5), randn(4, 2, seed=6))

    def run(device):
        xx = x.to(device).detach().clone().requires_grad_()
        ww = w.to(device).detach().clone().requires_grad_()
        c = xx.conj()
        loss = (c @ ww).imag.sum() + (c.t().real * 2).sum() + (c * c.conj()).real.sum()
        loss.backward()
        return loss, xx.grad, ww.grad

    for eager, lazy in zip(run(REFERENCE), run(LAZY)):
        assert _bits(lazy) == _bits(eager)
        torch.testing.assert_close(_values(lazy), _values(eager))


def test_foreach_writes_into_conjugate_views_raise_eagers_error():
    def fn(x):
        torch._foreach_add_([x.conj()], 1)
        return x

    (eager, _), (lazy, _) = _on_both(fn, _complex())
    assert isinstance(eager, tuple) and lazy == eager


@pytest.mark.parametrize("view", ["conj", "imag"])
def test_numpy_refuses_a_math_bit_as_eager_does(view):
    x = _complex()
    make = VIEWS[view]
    with pytest.raises(RuntimeError) as eager:
        make(x).numpy()
    with pytest.raises(RuntimeError) as lazy:
        make(x.to(LAZY)).numpy()
    assert str(lazy.value) == str(eager.value)
    assert (make(x.to(LAZY)).numpy(force=True) == make(x).numpy(force=True)).all()


def test_real_tensors_get_no_bits():
    x = randn(3, 4)
    for fn in (lambda t: t.conj(), lambda t: t.conj().t(), lambda t: t.conj().view(2, 6)):
        assert _bits(fn(x.to(LAZY))) == _bits(fn(x)) == (False, False)


# ---- random chains of views with and without bits, then a read or a write --------------------

CHAIN_VIEWS = [
    ("conj", lambda t: t.conj()),
    ("imag", lambda t: t.imag if t.is_complex() else t),
    ("real", lambda t: t.real if t.is_complex() else t),
    ("neg_view", lambda t: torch._neg_view(t)),
    ("transpose", lambda t: t.transpose(0, -1)),
    ("slice", lambda t: t[..., 1:] if t.shape[-1] > 1 else t),
    ("select", lambda t: t[1] if t.dim() > 1 and t.shape[0] > 1 else t),
    ("unsqueeze", lambda t: t.unsqueeze(0)),
    ("view_as_real", lambda t: torch.view_as_real(t) if t.is_complex() else t),
    ("flatten", lambda t: t.flatten()),
    ("diagonal", lambda t: t.diagonal() if t.dim() == 2 else t),
    ("unfold", lambda t: t.unfold(-1, 1, 1)),
]
CHAIN_ENDS = [
    ("mul", lambda t: t * 2),
    ("sum", lambda t: t.sum()),
    ("clone", lambda t: t.clone()),
    ("abs", lambda t: t.abs()),
    ("add_", lambda t: t.add_(1)),
    ("mul_", lambda t: t.mul_(-2)),
    ("copy_", lambda t: t.copy_(torch.ones((), dtype=t.dtype, device=t.device))),
    ("zero_", lambda t: t.zero_()),
    ("view_dtype", lambda t: t.view(t.dtype)),
]


def _chain(seed):
    import random
    rng = random.Random(seed)
    steps = [rng.choice(CHAIN_VIEWS) for _ in range(rng.randint(1, 5))] + [rng.choice(CHAIN_ENDS)]
    return chain_of(steps)


@pytest.mark.parametrize("seed", range(150))
def test_random_chains_through_views_with_bits_match_eager(seed):
    text, fn = _chain(seed)
    try:
        _assert_same(fn, _complex(seed))
    except AssertionError as e:
        raise AssertionError(f"{text}: {e}") from e


@pytest.mark.parametrize("seed", range(150, 210))
def test_random_chains_in_inference_mode_match_eager(seed):
    # composite views (imag, real, reshape) then decompose on Functionalize (Note [Decomposing on
    # Functionalize]), where their parts set the bits
    text, fn = _chain(seed)

    def in_inference_mode(x):
        with torch.inference_mode():
            return fn(x)

    try:
        _assert_same(in_inference_mode, _complex(seed))
    except AssertionError as e:
        raise AssertionError(f"{text}: {e}") from e


@pytest.mark.parametrize("name", ["conj", "imag", "real", "reshape"])
def test_composite_view_ops_called_as_ops_keep_eagers_bits(name):
    ops = {"conj": lambda c: torch.ops.aten.conj(c), "imag": lambda c: torch.ops.aten.imag(c),
           "real": lambda c: torch.ops.aten.real(c),
           "reshape": lambda c: torch.ops.aten.reshape(c, [12])}
    for mode in (torch.no_grad, torch.inference_mode):
        def fn(x):
            with mode():
                return ops[name](x.conj())
        _assert_same(fn, _complex())
