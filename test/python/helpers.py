"""Helpers shared by the test files: run a function on CPU and on lazy copies, compare."""

import torch

import lazyfuse  # noqa: F401 (loads the lazy device)

LAZY = torch.device("lazy")


def to_lazy(value):
    """Lazy copies of the tensors in `value` (a tensor, or a list/tuple of them); others as is."""
    if isinstance(value, torch.Tensor):
        return value.to(LAZY)
    if isinstance(value, (list, tuple)):
        return type(value)(to_lazy(v) for v in value)
    return value


def to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def assert_same(fn, *cpu_inputs, **close_kwargs):
    """Runs `fn` on `cpu_inputs` and on lazy copies of them, checks the lazy results are lazy and
    equal eager's; returns the lazy result brought back to the CPU."""
    expected = fn(*cpu_inputs)
    lazy_out = fn(*to_lazy(list(cpu_inputs)))
    _check_lazy(lazy_out)
    actual = to_cpu(lazy_out)
    torch.testing.assert_close(actual, expected, **close_kwargs)
    return actual


def _check_lazy(value):
    if isinstance(value, torch.Tensor):
        assert value.device.type == "lazy", f"expected a lazy result, got {value.device}"
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_lazy(v)

