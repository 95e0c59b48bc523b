"""Helpers of the error tests: inputs, their lazy twins, and eager-versus-lazy error checks."""

import pytest
import torch

import lazyfuse


def data(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 5, shape, generator=g, dtype=dtype)


def on(device, *tensors):
    """The tensors on `device`; lazy ones are pending computations (a clone), not just uploads,
    so an op that wrongly syncs its inputs would show."""
    if device == "cpu":
        return [t.clone() for t in tensors]
    return [t.to("lazy").clone() for t in tensors]


def check_raises_at_op(inputs, op):
    """`op(*inputs)` raises eagerly; on lazy copies it must raise the same type at once, and the
    inputs must still read and compute like their CPU twins afterwards."""
    cpu_inputs = on("cpu", *inputs)
    with pytest.raises(Exception) as eager:
        op(*cpu_inputs)
    lazy_inputs = on("lazy", *inputs)
    try:
        op(*lazy_inputs)
    except Exception as err:  # noqa: BLE001 (any type: compared with eager's below)
        lazy_error = err
    else:
        lazy_error = None
    assert lazy_error is not None, (
        f"eager raised {type(eager.value).__name__} ({eager.value}); lazy raised nothing at the op"
    )
    assert type(lazy_error) is type(eager.value), (
        f"eager raised {type(eager.value).__name__}, lazy {type(lazy_error).__name__}: {lazy_error}"
    )
    del lazy_error
    for lazy_t, cpu_t in zip(lazy_inputs, cpu_inputs):
        torch.testing.assert_close(lazy_t.cpu(), cpu_t)
        torch.testing.assert_close((lazy_t.clone() + lazy_t).cpu(), cpu_t + cpu_t)
    lazyfuse.mark_step()


def case(cases, name):
    case = cases[name]
    if hasattr(case, "marks"):  # a pytest.param carrying an xfail
        return pytest.param(*case.values, marks=case.marks, id=name)
    return pytest.param(*case, id=name)
