"""matmul and linear on lazy tensors: recorded as one node without autograd and with it (a
derivative of ours), the composite where that does not apply, and under functorch transforms,
against eager on the hardware device (Notes [Composite ops recorded whole] and [Derivatives of ops
recorded whole])."""

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from helpers import REFERENCE, randn, reference



MATMUL_SHAPES = [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)),
                 ((2, 3, 5), (5, 4)), ((5,), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 6)),
                 ((4, 4, 1, 8), (4, 4, 8, 6))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_and_linear_recorded_whole(shapes):
    """Without autograd, matmul and linear record one node each, with eager's values and
    strides; with autograd they give eager's gradients."""
    a, b = randn(*shapes[0]), randn(*shapes[1], seed=1)
    weight, bias = randn(7, shapes[0][-1], seed=2), randn(7, seed=3)
    expected_mm, expected_lin = reference(torch.matmul, a, b), reference(F.linear, a, weight, bias)
    la, lb, lw, lbias = (t.to("lazy") for t in (a, b, weight, bias))
    lazyfuse.mark_step()
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            before = lazyfuse.metrics()["OpsRecorded"]
            mm, lin = torch.matmul(la, lb), F.linear(la, lw, lbias)
            assert lazyfuse.metrics()["OpsRecorded"] - before == 2
            for got, expected in ((mm, expected_mm), (lin, expected_lin)):
                assert got.stride() == expected.stride()
                torch.testing.assert_close(got.cpu(), expected)

    def grads(device):
        leaves = [t.to(device).requires_grad_() for t in (a, b, weight, bias)]
        out = torch.matmul(leaves[0], leaves[1]).sum() + F.linear(*leaves[:1], *leaves[2:]).sum()
        out.backward()
        return [t.grad.cpu() for t in leaves]

    for got, expected in zip(grads("lazy"), grads(REFERENCE)):
        torch.testing.assert_close(got, expected)


def test_matmul_and_linear_under_functorch_transforms():
    """torch.func.grad and vmap of matmul and linear over lazy tensors, and a forward-mode
    tangent through matmul, give eager's values: the kernels of Note [Composite ops recorded
    whole] go below autograd with the call's own keys, so a functorch layer sees each call once."""
    from torch.autograd import forward_ad

    x, w, batch = randn(3, 4), randn(4, 5, seed=1), randn(6, 3, 4, seed=2)
    loss = lambda a, m: torch.matmul(a, m).sin().sum()
    grad_of = lambda a, m: torch.func.grad(loss)(a, m)
    mapped = lambda b, m: torch.func.vmap(lambda a: torch.matmul(a, m))(b)
    mapped_linear = lambda b, m: torch.func.vmap(lambda a: F.linear(a, m.t()))(b)
    for fn, inputs in ((grad_of, (x, w)), (mapped, (batch, w)), (mapped_linear, (batch, w))):
        expected = reference(fn, *inputs)
        with torch.no_grad() if fn is mapped_linear else torch.enable_grad():
            got = fn(*(t.to("lazy") for t in inputs))
        torch.testing.assert_close(got.cpu(), expected)

    tangent = randn(3, 4, seed=3)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(x.to("lazy"), tangent.to("lazy"))
        got = forward_ad.unpack_dual(torch.matmul(dual, w.to("lazy"))).tangent
    torch.testing.assert_close(got.cpu(), reference(torch.matmul, tangent, w))


GRAD_SHAPES = [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((2, 1, 3, 5), (4, 5, 6)),
               ((3, 5), (2, 5, 4)), ((4, 4, 1, 8), (4, 4, 8, 6))]


def _linear_and_matmul_grads(device, shapes, needs, create_graph=False):
    """Gradients of a loss over matmul(a, b) and linear(a, w, bias) of leaves on `device`; only
    the leaves whose `needs` is true require grad."""
    a, b = randn(*shapes[0]), randn(*shapes[1], seed=1)
    weight, bias = randn(7, shapes[0][-1], seed=2), randn(7, seed=3)
    leaves = [t.to(device).requires_grad_(n) for t, n in zip((a, b, weight, bias), needs)]
    mm, lin = torch.matmul(leaves[0], leaves[1]), F.linear(leaves[0], leaves[2], leaves[3])
    loss = (mm.sin().sum() + (lin * lin).sum())
    wanted = [t for t in leaves if t.requires_grad]
    grads = torch.autograd.grad(loss, wanted, create_graph=create_graph)
    if create_graph:  # the gradients' own derivatives
        grads = torch.autograd.grad(sum((g * g).sum() for g in grads), wanted)
    return (mm, lin), grads


@pytest.mark.parametrize("shapes", GRAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_and_linear_with_autograd_recorded_whole(shapes):
    """With autograd, matmul and linear of tensors of 2 or more dims record one node each
    forward, whose grad_fns are ours; their gradients (any subset of the inputs requiring grad,
    broadcast batch dims summed back) and second derivatives are eager's."""
    lazyfuse.mark_step()
    la, lb = randn(*shapes[0]).to("lazy"), randn(*shapes[1], seed=1).to("lazy")
    lw = randn(7, shapes[0][-1], seed=2).to("lazy").requires_grad_()
    la.requires_grad_()
    before = lazyfuse.metrics()["OpsRecorded"]
    mm, lin = torch.matmul(la, lb), F.linear(la, lw)
    assert lazyfuse.metrics()["OpsRecorded"] - before == 2
    assert (mm.grad_fn.name(), lin.grad_fn.name()) == ("LazyMatmulBackward", "LazyLinearBackward")
    for needs in ((True, True, True, True), (True, False, False, True), (False, True, True, False)):
        for create_graph in (False, True):
            (got_mm, got_lin), got = _linear_and_matmul_grads("lazy", shapes, needs, create_graph)
            (exp_mm, exp_lin), expected = _linear_and_matmul_grads(REFERENCE, shapes, needs,
                                                                   create_graph)
            torch.testing.assert_close(got_mm.cpu(), exp_mm.cpu())
            torch.testing.assert_close(got_lin.cpu(), exp_lin.cpu())
            # Second derivatives sum float32 products in another order than eager's composite.
            tol = {"rtol": 1e-5, "atol": 1e-4} if create_graph else {}
            for g, e in zip(got, expected):
                torch.testing.assert_close(g.cpu(), e.cpu(), **tol)


def test_derivatives_of_ops_recorded_whole_pass_gradcheck():
    """gradcheck and gradgradcheck of matmul and linear over lazy float64 tensors."""
    a = randn(2, 3, 4, dtype=torch.float64).to("lazy").requires_grad_()
    b = randn(4, 5, seed=1, dtype=torch.float64).to("lazy").requires_grad_()
    w = randn(6, 4, seed=2, dtype=torch.float64).to("lazy").requires_grad_()
    bias = randn(6, seed=3, dtype=torch.float64).to("lazy").requires_grad_()
    assert torch.matmul(a, b).grad_fn.name() == "LazyMatmulBackward"
    for fn, inputs in ((torch.matmul, (a, b)), (F.linear, (a, w, bias)), (F.linear, (a, w))):
        assert torch.autograd.gradcheck(fn, inputs)
        assert torch.autograd.gradgradcheck(fn, inputs)


def test_derivatives_of_ops_recorded_whole_keep_autograd_rules():
    """A second backward without retain_graph, and an in-place write to a saved input before
    backward, raise eager's errors; saved-tensor hooks see the saved inputs."""
    def run(device):
        x = randn(4, 3).to(device).requires_grad_()
        w = randn(5, 3, seed=1).to(device).requires_grad_()
        out = F.linear(x, w)
        out.sum().backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            out.sum().backward()
        y = randn(4, 3).to(device)
        out = F.linear(x, w) + F.linear(y, w).sum()
        with torch.no_grad():
            w.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
        packed = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t,
                                                      lambda t: t * 1):
            z = F.linear(x, w)
        z.sum().backward()
        return len(packed) > 0, x.grad.cpu()

    got, expected = run("lazy"), run(REFERENCE)
    assert got[0] and expected[0]
    torch.testing.assert_close(got[1], expected[1])
