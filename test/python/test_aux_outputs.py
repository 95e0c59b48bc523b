"""Ops whose CPU kernel returns auxiliary outputs (normalization statistics, embedding_bag
bookkeeping) that the meta kernel describes differently: lazy tensors claim eager's shapes and
dtypes before any sync, and hold eager's values. See Note [Aux outputs on the CPU]."""

import pytest
import torch

import lazyfuse
from helpers import REFERENCE, reference, to_cpu, to_lazy, to_reference

aten = torch.ops.aten


def inputs(dtype, param_dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, generator=g).to(dtype)
    weight = torch.rand(3, generator=g).to(param_dtype) + 0.5
    bias = torch.randn(3, generator=g).to(param_dtype)
    return x, weight, bias, torch.zeros(3, dtype=param_dtype), torch.ones(3, dtype=param_dtype)


CASES = {
    "native_batch_norm_train": lambda x, w, b, m, v: aten.native_batch_norm(x, w, b, m, v, True, 0.1, 1e-5),
    "native_batch_norm_eval": lambda x, w, b, m, v: aten.native_batch_norm(x, w, b, m, v, False, 0.1, 1e-5),
    "legit_eval": lambda x, w, b, m, v: aten._native_batch_norm_legit(x, w, b, m, v, False, 0.1, 1e-5),
    "legit_no_stats": lambda x, w, b, m, v: aten._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5),
    "legit_no_training": lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training(x, w, b, m, v, 0.1, 1e-5),
    "with_update": lambda x, w, b, m, v: aten._batch_norm_with_update(x, w, b, m, v, 0.1, 1e-5)[:3],
    "no_update": lambda x, w, b, m, v: aten._batch_norm_no_update(x, w, b, m, v, 0.1, 1e-5),
    "layer_norm": lambda x, w, b, m, v: aten.native_layer_norm(x, [4], None, None, 1e-5),
    "layer_norm_affine": lambda x, w, b, m, v: aten.native_layer_norm(x.transpose(1, 2), [3], w, b, 1e-5),
}

DTYPES = [(torch.float32, torch.float32), (torch.float64, torch.float64),
          (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
          (torch.bfloat16, torch.float32)]


def assert_claims_like_eager(expected, lazy_out):
    for e, a in zip(expected, lazy_out, strict=True):
        assert (a.device.type, a.dtype, a.shape) == ("lazy", e.dtype, e.shape)


@pytest.mark.skipif(lazyfuse.hardware_device() != "cpu", reason="the corrections are for the CPU")
@pytest.mark.parametrize("dtypes", DTYPES, ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
@pytest.mark.parametrize("name", sorted(CASES))
def test_norm_aux_outputs_like_eager(name, dtypes):
    cpu_inputs = inputs(*dtypes)
    lazy_inputs = to_lazy(list(cpu_inputs))
    expected = CASES[name](*cpu_inputs)
    lazy_out = CASES[name](*lazy_inputs)
    assert_claims_like_eager(expected, lazy_out)
    torch.testing.assert_close(to_cpu(list(lazy_out)), list(expected))


# Eager's _batch_norm_no_update runs the CPU kernel whatever the device: CUDA tensors fail.
NO_UPDATE = pytest.param("no_update", marks=pytest.mark.skipif(
    REFERENCE.type != "cpu", reason="eager's _batch_norm_no_update runs on the CPU only"))


@pytest.mark.parametrize("name", ["native_batch_norm_train", "native_batch_norm_eval",
                                  "legit_eval", "legit_no_training", "with_update", NO_UPDATE])
def test_norm_running_stats_like_eager(name):
    cpu_inputs = inputs(torch.float32, torch.float32)
    lazy_inputs = to_lazy(list(cpu_inputs))
    cpu_inputs = to_reference(list(cpu_inputs))
    CASES[name](*cpu_inputs)
    lazy_out = CASES[name](*lazy_inputs)
    torch.testing.assert_close(to_cpu(lazy_inputs), to_cpu(cpu_inputs))  # read before the outputs
    lazyfuse.mark_step()
    del lazy_out
    torch.testing.assert_close(to_cpu(lazy_inputs), to_cpu(cpu_inputs))


def test_batch_norm_running_stats_with_a_sync_mid_step():
    # A sync of the loss alone runs batch norm; backward then needs its saved statistics, so
    # mark_step runs it again: the running stats must still be updated once, as in eager.
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    model, lazy_model = torch.nn.BatchNorm2d(3).to(REFERENCE), torch.nn.BatchNorm2d(3).to("lazy")
    for _ in range(2):
        loss = model(x.to(REFERENCE)).square().mean()
        lazy_loss = lazy_model(x.to("lazy")).square().mean()
        torch.testing.assert_close(lazy_loss.item(), loss.item())
        loss.backward()
        lazy_loss.backward()
        lazyfuse.mark_step()
    for name, t in lazy_model.state_dict().items():
        torch.testing.assert_close(t.cpu(), model.state_dict()[name].cpu(), msg=name)
    torch.testing.assert_close(lazy_model.weight.grad.cpu(), model.weight.grad.cpu())


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_bag_outputs_like_eager(mode, padding_idx):
    weight = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 4, 8])
    args = [weight, indices, offsets, False, mode, False, None, True, padding_idx]
    expected = reference(aten._embedding_bag, *args)
    lazy_out = aten._embedding_bag(*to_lazy(args))
    assert_claims_like_eager(expected, lazy_out)
    torch.testing.assert_close(to_cpu(list(lazy_out)), list(expected))


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_batch_norm_backward_without_input_grad(train):
    # The input needs no gradient, so output_mask leaves grad_input out: the CPU kernel returns
    # an undefined tensor where the meta kernel promises one.
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    model = torch.nn.BatchNorm2d(3).to(REFERENCE).train(train)
    lazy_model = torch.nn.BatchNorm2d(3).to("lazy").train(train)
    model(x.to(REFERENCE)).square().sum().backward()
    lazy_model(x.to("lazy")).square().sum().backward()
    lazyfuse.mark_step()
    torch.testing.assert_close(lazy_model.weight.grad.cpu(), model.weight.grad.cpu())
    torch.testing.assert_close(lazy_model.bias.grad.cpu(), model.bias.grad.cpu())
