"""Helpers shared by the test files: run a function eagerly and on lazy copies, compare (also for
functions that mutate their arguments); a seeded input tensor."""

import pytest
import torch

import lazyfuse

LAZY = torch.device("lazy")

# Where eager PyTorch computes the values lazy results are compared with: the hardware device, so
# that lazy tensors running on CUDA meet eager CUDA's kernels and its random generator (the one
# random lazy ops draw from, see lazyfuse.manual_seed). On the CPU, tensors already there stay
# the same objects, so in-place ops on them behave as if eager ran on them directly.
REFERENCE = torch.device(lazyfuse.hardware_device())

# For tests whose graph indexes out of range on purpose: on CUDA that is a device-side assert, in
# eager too, after which no CUDA call of the process succeeds.
INDEXES_OUT_OF_RANGE = pytest.mark.skipif(
    REFERENCE.type == "cuda",
    reason="an index out of range is a device-side assert on CUDA (in eager too), which leaves "
    "the process's CUDA context unusable")


def randn(*shape, seed=0, dtype=torch.float32):
    """A seeded CPU tensor of normal values (the global generator untouched)."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=dtype)


def randint(low, high, shape, seed=0, dtype=torch.int64):
    """A seeded CPU tensor of integers in [low, high)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def to_device(value, device):
    """Copies on `device` of the tensors in `value` (a tensor, or a list/tuple of them); others as
    is. A tensor already there is returned itself."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def to_lazy(value):
    """Lazy copies of the tensors in `value` (a tensor, or a list/tuple of them); others as is."""
    return to_device(value, LAZY)


def to_reference(value):
    """The tensors in `value` on the reference device (on the CPU: the same tensors)."""
    return to_device(value, REFERENCE)


def reference(fn, *cpu_inputs):
    """`fn` run eagerly on `cpu_inputs` moved to the reference device, its result brought back
    to the CPU: the expected value of `fn` run on lazy copies of `cpu_inputs`."""
    return to_cpu(fn(*to_reference(list(cpu_inputs))))


def to_cpu(value):
    """The tensors in `value` brought to the CPU; others as is."""
    return to_device(value, torch.device("cpu"))


def assert_same(fn, *cpu_inputs, **close_kwargs):
    """Runs `fn` eagerly on the reference device and on lazy copies of `cpu_inputs`, checks the
    lazy results are lazy and equal eager's; returns the lazy result brought back to the CPU."""
    expected = reference(fn, *cpu_inputs)
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


def base(shape=(4, 5), seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def assert_mutation_same(fn, *cpu_inputs, mark_step=False):
    """`fn` mutates its arguments (and may return tensors); compares inputs and returns with
    eager's on the reference device."""
    cpu_args = to_reference([t.clone() for t in cpu_inputs])
    lazy_args = to_lazy([t.clone() for t in cpu_inputs])
    expected = fn(*cpu_args)
    actual = fn(*lazy_args)
    if mark_step:
        lazyfuse.mark_step()
    for lazy_arg, cpu_arg in zip(lazy_args, cpu_args):
        assert lazy_arg.device.type == "lazy"
        torch.testing.assert_close(lazy_arg.cpu(), cpu_arg.cpu())
    if expected is not None:
        torch.testing.assert_close(to_cpu(actual), to_cpu(expected))



def train_side_by_side(make_model, make_optimizer, x, y, steps):
    """Trains `make_model()` on the reference device and a lazy copy of it (same initial weights)
    with MSE on CPU tensors (x, y) for `steps` steps, one mark_step per step, checking each step's
    loss against eager's; returns both models (the eager one on the reference device)."""
    import torch.nn.functional as F

    model = make_model()
    lazy_model = make_model().to(LAZY)
    lazy_model.load_state_dict({k: v.to(LAZY) for k, v in model.state_dict().items()})
    model.to(REFERENCE)
    sides = ((model, make_optimizer(model.parameters()), *to_reference((x, y))),
             (lazy_model, make_optimizer(lazy_model.parameters()), x.to(LAZY), y.to(LAZY)))
    for _ in range(steps):
        losses = []
        for m, opt, inputs, targets in sides:
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(m(inputs), targets)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        lazyfuse.mark_step()
        torch.testing.assert_close(losses[1].cpu(), losses[0].cpu())
    return model, lazy_model


def chain_of(steps):
    """The (name, fn) steps as one function, each step applied to the last one's result, and
    its text ("t -> select -> add_") for failure messages."""
    def fn(x):
        t = x
        for _, step in steps:
            t = step(t)
        return t
    return " -> ".join(name for name, _ in steps), fn
