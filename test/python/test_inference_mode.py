"""InferenceMode on the lazy device against eager CPU: tensors and models made outside the mode
used, written and viewed inside it, and views made inside it."""

import copy

import pytest
import torch
import torch.nn.functional as F

from helpers import base


# ---- InferenceMode on tensors made outside it ----------------------------------------------
# See Note [Values made in InferenceMode] in backend/lazy_tensor.cpp and Note [Decomposing on
# Functionalize] in backend/registration.cpp.

INFERENCE_MODE_USES = {
    "select_fill_": lambda x: x[0].fill_(2),
    "diagonal_fill_": lambda x: x.diagonal().fill_(2),
    "fill_diagonal_": lambda x: x.fill_diagonal_(2),
    "t_add_": lambda x: x.t().add_(1),
    "write_then_view_write": lambda x: (x.add_(1), x[1:].mul_(2)),
    "view_read": lambda x: x[1:].t() * 2,
    "reshape_contiguous": lambda x: x.t().reshape(-1).contiguous() + 1,
    "linear": lambda x: F.linear(x, x[:2] * 2, x[0, :2]),
}


@pytest.mark.parametrize("use", INFERENCE_MODE_USES.values(), ids=list(INFERENCE_MODE_USES))
def test_inference_mode_on_tensors_made_outside_it(use):
    cpu = base((4, 4))
    lazy = cpu.to("lazy")
    with torch.inference_mode():
        expected, actual = use(cpu), use(lazy)
        if isinstance(expected, torch.Tensor):
            assert torch.is_inference(actual) == torch.is_inference(expected)
            torch.testing.assert_close(actual.cpu(), expected)
    assert torch.is_inference(lazy) == torch.is_inference(cpu)
    torch.testing.assert_close(lazy.cpu(), cpu)
    torch.testing.assert_close((lazy * 2).cpu(), cpu * 2)  # usable afterwards, outside the mode


def test_model_made_outside_inference_mode_runs_inside_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 2))
    lazy_model = copy.deepcopy(model).to("lazy")
    x = torch.randn(2, 3, 6, 6)
    with torch.inference_mode():
        expected, actual = model(x), lazy_model(x.to("lazy"))
        assert torch.is_inference(actual) and torch.is_inference(expected)
        torch.testing.assert_close(actual.cpu(), expected)
    assert all(not torch.is_inference(p) for p in lazy_model.parameters())


def test_views_in_inference_mode_are_inference_tensors_as_in_eager():
    for device in ("cpu", "lazy"):
        normal = torch.ones(3, 3, device=device)
        with torch.inference_mode():
            made_inside = torch.ones(3, 3, device=device)
            assert not torch.is_inference(normal[0])
            assert torch.is_inference(made_inside[0])
            assert torch.is_inference(normal + 1)
