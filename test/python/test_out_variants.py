"""Writes whose functionalization needs kernels of lazyfuse's own, against eager: composite
out= kernels that rebind their `out`, out= ops that also write other arguments, polygamma_, and
`x.data = t` across InferenceMode (backend/write_functionalization.cpp)."""

import pytest
import torch

import lazyfuse
from helpers import REFERENCE, reference


def _seeded(*shape):
    torch.manual_seed(0)
    return torch.randn(*shape)


def _run(device, fn, inputs):
    """fn(*inputs moved to device) -> (returned, outs) on the CPU, with `returned is out` kept."""
    moved = [t.clone().to(device) for t in inputs]
    returned, outs = fn(*moved)
    lazyfuse.mark_step()
    returned_tuple = returned if isinstance(returned, tuple) else (returned,)
    same = tuple(r is o for r, o in zip(returned_tuple, outs))
    return same, [o.cpu() for o in outs], [t.cpu() for t in moved]


def _assert_like_eager(fn, inputs):
    eager = _run(REFERENCE, fn, inputs)
    lazy = _run("lazy", fn, inputs)
    assert lazy[0] == eager[0]  # the out tensors themselves are returned, as eager returns them
    for actual, expected in zip(lazy[1] + lazy[2], eager[1] + eager[2]):
        assert actual.shape == expected.shape
        torch.testing.assert_close(actual, expected)


def _matrix_rank_out(kwargs, empty):
    def fn(x):
        out = torch.empty(0 if empty else x.shape[:-2], dtype=torch.int64, device=x.device)
        return torch.linalg.matrix_rank(x, out=out, **kwargs), (out,)

    return fn


@pytest.mark.parametrize("empty", [False, True], ids=["sized", "empty"])
@pytest.mark.parametrize(
    "kwargs", [{}, {"hermitian": True}, {"atol": 0.5, "rtol": 0.1}, {"tol": 0.3}],
    ids=["default", "hermitian", "atol_rtol", "tol"])
def test_composite_out_writes_out_like_eager(kwargs, empty):
    # linalg_matrix_rank.out rebinds its `out` for functional tensors: lazy's out must still hold
    # the rank, resized from empty, and be what the call returns.
    x = _seeded(3, 5, 5)
    x[1, 4] = x[1, 3]  # one matrix of rank 4
    _assert_like_eager(_matrix_rank_out(kwargs, empty), [x])


def test_composite_out_writes_out_in_inference_mode():
    x = _seeded(2, 4, 4)
    with torch.inference_mode():
        _assert_like_eager(_matrix_rank_out({}, empty=True), [x])


def _batch_norm_legit_out(training, empty):
    def fn(x, weight, bias, running_mean, running_var):
        outs = tuple(torch.empty(0 if empty else shape, device=x.device)
                     for shape in (x.shape, x.shape[1:2], x.shape[1:2]))
        returned = torch.ops.aten._native_batch_norm_legit(
            x, weight, bias, running_mean, running_var, training, 0.5, 1e-5,
            out=outs[0], save_mean=outs[1], save_invstd=outs[2])
        return returned, outs + (running_mean, running_var)

    return fn


@pytest.mark.parametrize("empty", [False, True], ids=["sized", "empty"])
def test_out_and_written_stats_like_eager(empty):
    # _native_batch_norm_legit.out writes running_mean and running_var besides its three outs;
    # each must get its own value (PyTorch's functionalization kernel shuffles them).
    inputs = [_seeded(4, 3, 5), torch.rand(3) + 0.5, torch.randn(3), torch.zeros(3), torch.ones(3)]
    _assert_like_eager(_batch_norm_legit_out(training=True, empty=empty), inputs)


@pytest.mark.skipif(REFERENCE.type == "cuda",
                    reason="eager's cuDNN batch norm refuses an empty reserve (CUDNN_STATUS_BAD_PARAM)")
def test_batch_norm_with_update_out_like_eager():
    def fn(x, weight, bias, running_mean, running_var):
        outs = tuple(torch.empty(0, device=x.device) for _ in range(3)) + (
            torch.empty(0, dtype=torch.uint8, device=x.device),)
        returned = torch.ops.aten._batch_norm_with_update.out(
            x, weight, bias, running_mean, running_var, 0.1, 1e-5,
            out=outs[0], save_mean=outs[1], save_invstd=outs[2], reserve=outs[3])
        # reserve is an implementation detail of the backend (empty on the CPU): not compared
        return returned[:3], outs[:3] + (running_mean, running_var)

    inputs = [_seeded(4, 3, 5), torch.rand(3) + 0.5, torch.randn(3), torch.zeros(3), torch.ones(3)]
    _assert_like_eager(fn, inputs)


def test_rrelu_with_noise_out_writes_noise_like_eager():
    # rrelu_with_noise.out writes its noise argument too; in eval mode it draws nothing.
    def fn(x, noise):
        out = torch.empty(0, device=x.device)
        returned = torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.3, False, out=out)
        return returned, (out, noise)

    _assert_like_eager(fn, [_seeded(4, 5), torch.zeros(4, 5)])


@pytest.mark.parametrize("n", [0, 1, 3])
def test_polygamma_inplace_like_eager(n):
    x = torch.rand(6) + 0.5
    expected = reference(lambda x: x.clone().polygamma_(n), x)
    lazy = x.to("lazy")
    view = lazy[1:4]
    returned = view.polygamma_(n)
    assert returned is view
    torch.testing.assert_close(lazy.cpu(), torch.cat([x[:1], expected[1:4], x[4:]]))
    torch.testing.assert_close(x.to("lazy").polygamma_(n).cpu(), expected)


def test_polygamma_inplace_in_inference_mode():
    x = torch.rand(5) + 0.5
    lazy = x.to("lazy")
    with torch.inference_mode():
        lazy.polygamma_(2)
    torch.testing.assert_close(lazy.cpu(), reference(lambda x: torch.polygamma(2, x), x))


def test_polygamma_inplace_refuses_integers_like_eager():
    with pytest.raises(RuntimeError) as eager:
        torch.arange(4).polygamma_(1)
    with pytest.raises(RuntimeError) as lazy:
        torch.arange(4, device="lazy").polygamma_(1)
    assert str(lazy.value) == str(eager.value)


def test_polygamma_inplace_on_meta_is_pytorchs():
    # The kernel acts on lazy calls only (Note [Lazy-only kernels on Functionalize]); what
    # functionalization of CPU tensors does with polygamma_ is PyTorch's own (test_containment).
    meta = torch.empty(5, device="meta").polygamma_(1)
    assert meta.shape == (5,) and meta.device.type == "meta"


def _set_data_across_inference_mode(device):
    seen = {}
    x = torch.zeros(3, device=device)
    with torch.inference_mode():
        t = torch.ones(3, device=device)
        x.data = t  # a normal tensor takes an inference tensor's data
        seen["x_is_inference"] = x.is_inference()
        t.add_(2)  # x and t share their data, as eager's share storage
    seen["x"] = x.cpu()
    with torch.inference_mode():
        z = torch.zeros(2, device=device)
    z.data = torch.arange(2.0, device=device)  # an inference tensor takes a normal one's
    seen["z_is_inference"] = z.is_inference()
    seen["z"] = z.cpu()
    linear = torch.nn.Linear(2, 2).to(device)
    with torch.inference_mode():
        linear.weight.data = torch.eye(2, device=device)
        seen["y"] = linear(torch.ones(1, 2, device=device)).cpu()
    seen["weight"] = linear.weight.detach().cpu()
    seen["bias"] = linear.bias.detach().cpu()
    return seen


def test_set_data_across_inference_mode_like_eager():
    torch.manual_seed(0)
    expected = _set_data_across_inference_mode("cpu")
    torch.manual_seed(0)
    actual = _set_data_across_inference_mode("lazy")
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(actual[key], value)
        else:
            assert actual[key] == value, key


def test_set_data_still_refuses_another_device_like_eager():
    with pytest.raises(RuntimeError) as eager:
        torch.zeros(3).data = torch.zeros(3, device="meta")
    lazy = torch.zeros(3, device="lazy")
    with pytest.raises(RuntimeError) as refused:
        lazy.data = torch.zeros(3)
    assert str(refused.value) == str(eager.value)
