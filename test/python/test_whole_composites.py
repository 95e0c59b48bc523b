"""matmul and linear on lazy tensors: recorded as one node where autograd records nothing, the
composite with autograd, and under functorch transforms, against eager on the hardware device
(Note [Composite ops recorded whole])."""

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
    strides; with autograd they decompose as before and give eager's gradients."""
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
