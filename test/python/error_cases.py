"""Helpers of the error tests: inputs, their lazy twins, and eager-versus-lazy error checks."""

import pytest
import torch

import lazyfuse
from helpers import REFERENCE


def data(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 5, shape, generator=g, dtype=dtype)


def on(device, *tensors):
    """The tensors on `device`: "eager" (copies on the hardware device, where eager's errors and
    values are compared: CPU and CUDA kernels check different things, abs of bool raises on the
    CPU only) or "lazy" (pending computations, a clone, not just uploads, so an op that wrongly
    syncs its inputs would show)."""
    if device == "eager":
        return [t.to(REFERENCE).clone() for t in tensors]
    assert device == "lazy", device
    return [t.to("lazy").clone() for t in tensors]


def check_raises_at_op(inputs, op):
    """`op(*inputs)` raises eagerly; on lazy copies it must raise the same type at once, and the
    inputs must still read and compute like their eager twins afterwards. Where the hardware
    device's kernel accepts the call (CUDA's abs of bool), lazy must too, with eager's values."""
    cpu_inputs = on("eager", *inputs)
    lazy_inputs = on("lazy", *inputs)
    try:
        expected = op(*cpu_inputs)
    except Exception as err:  # noqa: BLE001 (any type: compared with lazy's below)
        eager_error = err
    else:
        assert REFERENCE.type != "cpu", "eager accepts this call: not an error case"
        torch.testing.assert_close(op(*lazy_inputs).cpu(), expected.cpu())
        return
    try:
        op(*lazy_inputs)
    except Exception as err:  # noqa: BLE001 (any type: compared with eager's below)
        lazy_error = err
    else:
        lazy_error = None
    assert lazy_error is not None, (
        f"eager raised {type(eager_error).__name__} ({eager_error}); lazy raised nothing at the op"
    )
    assert type(lazy_error) is type(eager_error), (
        f"eager raised {type(eager_error).__name__}, lazy {type(lazy_error).__name__}: {lazy_error}"
    )
    del lazy_error
    for lazy_t, cpu_t in zip(lazy_inputs, cpu_inputs):
        torch.testing.assert_close(lazy_t.cpu(), cpu_t.cpu())
        torch.testing.assert_close((lazy_t.clone() + lazy_t).cpu(), (cpu_t + cpu_t).cpu())
    lazyfuse.mark_step()


def case(cases, name):
    case = cases[name]
    if hasattr(case, "marks"):  # a pytest.param carrying an xfail
        return pytest.param(*case.values, marks=case.marks, id=name)
    return pytest.param(*case, id=name)
