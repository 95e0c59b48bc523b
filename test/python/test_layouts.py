"""Memory formats that ops propagate (channels_last through convolution, batch norm and pooling,
forward and backward): lazy results report eager's strides and hold eager's values."""

import pytest
import torch
import torch.nn.functional as F

import lazyfuse

CL = torch.channels_last
CL3D = torch.channels_last_3d


def _layout(t):
    return (t.shape, t.stride(), t.is_contiguous(), t.is_contiguous(memory_format=CL),
            t.dim() == 5 and t.is_contiguous(memory_format=CL3D))


def _inputs(channels_last_input=True, channels_last_weight=False, dims=2, dtype=torch.float32):
    torch.manual_seed(0)
    x = torch.randn(2, 3, *([7] * dims), dtype=dtype)
    w = torch.randn(4, 3, *([3] * dims), dtype=dtype)
    fmt = CL if dims == 2 else CL3D
    if channels_last_input:
        x = x.to(memory_format=fmt)
    if channels_last_weight:
        w = w.to(memory_format=fmt)
    return x, w


OPS = {
    "conv2d": lambda x, w: F.conv2d(x, w),
    "conv2d_padded_bias": lambda x, w: F.conv2d(x, w, torch.ones(4, dtype=x.dtype, device=x.device), padding=1),
    "conv2d_strided": lambda x, w: F.conv2d(x, w, stride=2),
    "conv_transpose2d": lambda x, w: F.conv_transpose2d(x, w.transpose(0, 1).contiguous()),
    "conv_then_relu": lambda x, w: F.conv2d(x, w).relu(),
    "batch_norm": lambda x, w: F.batch_norm(x, None, None, training=True),
    "batch_norm_affine": lambda x, w: F.batch_norm(
        x, torch.zeros(3, device=x.device, dtype=x.dtype), torch.ones(3, device=x.device, dtype=x.dtype),
        torch.ones(3, device=x.device, dtype=x.dtype), torch.zeros(3, device=x.device, dtype=x.dtype),
        training=True),
    "max_pool2d": lambda x, w: F.max_pool2d(x, 2),
    "avg_pool2d": lambda x, w: F.avg_pool2d(x, 3, stride=2),
    "adaptive_avg_pool2d": lambda x, w: F.adaptive_avg_pool2d(x, 3),
    "adaptive_max_pool2d": lambda x, w: F.adaptive_max_pool2d(x, 2),
}


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("layout", ["input_cl", "weight_cl", "contiguous"])
def test_channels_last_strides_like_eager(name, layout):
    x, w = _inputs(channels_last_input=layout == "input_cl", channels_last_weight=layout == "weight_cl")
    expected = OPS[name](x, w)
    actual = OPS[name](x.to("lazy"), w.to("lazy"))
    assert _layout(actual) == _layout(expected)
    moved = actual.cpu()
    assert moved.stride() == expected.stride()
    torch.testing.assert_close(moved, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", list(OPS))
def test_channels_last_gradient_strides_like_eager(name):
    x, w = _inputs()

    def grads(device):
        xx = x.clone().to(device).requires_grad_()
        ww = w.clone().to(device).requires_grad_()
        y = OPS[name](xx, ww)
        torch.manual_seed(1)
        g = torch.randn(y.shape).to(memory_format=CL).to(device)
        return torch.autograd.grad(y, [xx, ww], g, allow_unused=True)

    expected, actual = grads("cpu"), grads("lazy")
    lazyfuse.mark_step()
    for e, a in zip(expected, actual):
        assert (a is None) == (e is None)
        if e is None:
            continue
        assert _layout(a) == _layout(e)
        torch.testing.assert_close(a.cpu(), e, atol=1e-4, rtol=1e-4)


def test_conv3d_channels_last_3d_strides_like_eager():
    x, w = _inputs(dims=3)
    expected = F.conv3d(x, w)
    actual = F.conv3d(x.to("lazy"), w.to("lazy"))
    assert _layout(actual) == _layout(expected)
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-4, rtol=1e-4)


def test_conv1d_strides_like_eager():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 9), torch.randn(4, 3, 3)
    expected = F.conv1d(x.transpose(1, 2).contiguous().transpose(1, 2), w)
    actual = F.conv1d(x.to("lazy").transpose(1, 2).contiguous().transpose(1, 2), w.to("lazy"))
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual.cpu(), expected)


def test_channels_last_model_like_eager():
    # conv -> batch norm -> relu -> max pool -> conv -> adaptive pool, trained one step: every
    # activation and gradient keeps eager's layout, and the values agree.
    def model(device):
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3), torch.nn.AdaptiveAvgPool2d(1))
        return net.to(device).to(memory_format=CL)

    x, _ = _inputs()
    x = torch.cat([x, x.flip(0)]).contiguous(memory_format=CL)
    results = {}
    for device in ("cpu", "lazy"):
        net = model(device)
        acts = []
        h = x.to(device)
        for layer in net:
            h = layer(h)
            acts.append(_layout(h))
        h.sum().backward()
        lazyfuse.mark_step()
        results[device] = (acts, [(_layout(p.grad), p.grad.cpu()) for p in net.parameters()],
                           h.detach().cpu())
    assert results["lazy"][0] == results["cpu"][0]
    for (lay_l, g_l), (lay_e, g_e) in zip(results["lazy"][1], results["cpu"][1]):
        assert lay_l == lay_e
        torch.testing.assert_close(g_l, g_e, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(results["lazy"][2], results["cpu"][2], atol=1e-4, rtol=1e-4)
