"""PyTorch's ModuleInfo and OptimizerInfo databases (`module_db`, `optim_db`, shipped in the wheel
under torch.testing._internal) swept on the lazy device against eager on the CPU, instantiated by
PyTorch's own device-generic harness for the `lazy` device type (`@modules`, `@optims`, with
lazy:0 as the primary device; see lazy_device_type.py).

  test_module_forward   every module input, in training and eval mode where they differ: the
                        module built on the CPU under a fixed seed and copied to lazy
                        (`.to("lazy")`), both run on the same inputs; outputs and, after the call,
                        parameters and buffers (running statistics) compared (float32)
  test_module_backward  the same in float64, then gradients of the outputs against fixed random
                        output gradients: the inputs' and every parameter's
  test_optimizer_steps  every optimizer input (its hyper-parameters; foreach and the for-loop
                        implementation where the optimizer has both): three steps over the same
                        parameters and gradients on lazy and on the CPU, then the parameters and
                        the optimizer state compared (float32)

Modules whose outputs are random in training (dropout and its kin, RReLU) compare shapes and
dtypes only there. Known failures are in MODULE_XFAIL / OPTIM_XFAIL below with the reason; they
report as xfail, and one that starts passing fails until its entry is removed.
"""

import copy
import math

import harness  # noqa: I001  (imported first: registers the lazy device type)

harness.register_lazy_device()

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.testing._internal.common_device_type import instantiate_device_type_tests  # noqa: E402
from torch.testing._internal.common_modules import module_db, modules  # noqa: E402
from torch.testing._internal.common_optimizers import optim_db, optims  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import lazyfuse  # noqa: E402

LAZY = torch.device("lazy")

# Modules whose training-mode outputs are random draws: lazy draws from its own stream.
RANDOM_IN_TRAINING = {"nn.Dropout", "nn.Dropout1d", "nn.Dropout2d", "nn.Dropout3d",
                      "nn.AlphaDropout", "nn.FeatureAlphaDropout", "nn.RReLU",
                      "nn.FractionalMaxPool2d", "nn.FractionalMaxPool3d",
                      "nn.TransformerEncoder", "nn.TransformerEncoderLayer",
                      "nn.TransformerDecoderLayer", "nn.Transformer", "nn.MultiheadAttention"}

# (module or optimizer name, test kind) -> why it fails on lazy today.
MODULE_XFAIL = {}
OPTIM_XFAIL = {}


def to_lazy(value, memo=None):
    """`value` with its tensors on lazy; one tensor passed twice (KLDivLoss's scalar input is
    both input and target) stays one tensor, as autograd must see it."""
    memo = {} if memo is None else memo

    def move(t):
        if id(t) not in memo:
            moved = t.detach().to(LAZY)
            if t.is_floating_point() or t.is_complex():
                moved.requires_grad_(t.requires_grad)
            memo[id(t)] = moved
        return memo[id(t)]
    return pytree.tree_map_only(torch.Tensor, move, value)


def call_on_lazy(fn, module, args, kwargs):
    """fn(module, args, kwargs) with the arguments on lazy, then synced."""
    memo = {}
    result = fn(module, to_lazy(args, memo), to_lazy(kwargs, memo))
    lazyfuse.mark_step()
    return result


def to_cpu(value):
    def move(t):
        if t.device.type != "lazy":
            raise AssertionError(f"a lazy module gave a tensor on {t.device}")
        return t.detach().cpu()
    return pytree.tree_map_only(torch.Tensor, move, value)


def assert_same(actual, expected, what, shapes_only=False, **tolerance):
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"{what}: structure {a_spec} != {e_spec}"
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, float):  # optimizer state kept as Python floats (LBFGS)
            assert math.isclose(a, e, rel_tol=1e-4, abs_tol=1e-6), f"{what}: {a!r} != {e!r}"
            continue
        if not isinstance(e, torch.Tensor):
            assert a == e, f"{what}: {a!r} != {e!r}"
            continue
        if shapes_only:
            assert (a.shape, a.dtype) == (e.shape, e.dtype), f"{what}: {a.shape} != {e.shape}"
        else:
            torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m: f"{what}: {m}",
                                       **tolerance)


def expect(table, name, kind, run):
    """Runs `run`; a known failure becomes an xfail, an unexpected pass of one a failure."""
    reason = table.get((name, kind))
    if reason is None:
        return run()
    try:
        run()
    except Exception as e:  # noqa: BLE001
        pytest.xfail(f"{reason} [{type(e).__name__}: {str(e)[:200]}]")
    finally:
        harness.recover()
    pytest.fail(f"{name} {kind} unexpectedly passed: remove its entry ({reason})")


def module_pairs(module_info, dtype, training, requires_grad):
    """(description, cpu module, lazy module, cpu args, cpu kwargs) for each module input."""
    inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=dtype,
                                            requires_grad=requires_grad, training=training)
    for index, mi in enumerate(inputs):
        if mi.forward_input is None:
            continue
        torch.manual_seed(index)
        args, kwargs = mi.constructor_input.args, mi.constructor_input.kwargs
        cpu = module_info.module_cls(*args, **kwargs).to(dtype=dtype)
        cpu.train(training)
        if isinstance(cpu, torch.nn.modules.lazy.LazyModuleMixin):
            # Materialized by a first call on the CPU, so that both hold the same initial values
            # (test_factories_transfers.py checks materializing on lazy).
            with torch.no_grad():
                cpu(*mi.forward_input.args, **mi.forward_input.kwargs)
        lazy = copy.deepcopy(cpu).to(LAZY)
        yield (f"input {index} ({mi.desc or 'default'})", cpu, lazy, mi.forward_input.args,
               mi.forward_input.kwargs)


def tolerance(dtype):
    return {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}


def module_grads(module, args, kwargs):
    out = module(*args, **kwargs)
    outputs = [t for t in pytree.tree_leaves(out)
               if isinstance(t, torch.Tensor) and t.requires_grad]
    inputs = [t for t in pytree.tree_leaves((args, kwargs))
              if isinstance(t, torch.Tensor) and t.requires_grad]
    inputs += [p for p in module.parameters() if p.requires_grad]
    if not outputs or not inputs:
        return None
    generator = torch.Generator().manual_seed(0)
    grad_outputs = [torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device)
                    for t in outputs]
    grads = torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)
    return [g if g is not None else "none" for g in grads]


def optimizer_steps(optim_info, dtype, kwargs, what):
    generator = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (3, 2), (2, 5)]  # 2-D: what every optimizer takes (Muon only that)
    cpu_params = [torch.randn(s, dtype=dtype, generator=generator, requires_grad=True)
                  for s in shapes]
    grads = [[torch.randn(s, dtype=dtype, generator=generator) for s in shapes]
             for _ in range(3)]
    lazy_params = [p.detach().to(LAZY).requires_grad_() for p in cpu_params]
    optimizers = [optim_info.optim_cls(params, **kwargs)
                  for params in (cpu_params, lazy_params)]
    for step_grads in grads:
        for params, optimizer, device in zip((cpu_params, lazy_params), optimizers,
                                             ("cpu", LAZY)):
            for p, g in zip(params, step_grads):
                p.grad = g.to(device)
            if optim_info.step_requires_closure:
                optimizer.step(lambda ps=params: sum((p * p).sum() for p in ps))
            else:
                optimizer.step()
        lazyfuse.mark_step()
    assert_same(to_cpu([p.detach() for p in lazy_params]), [p.detach() for p in cpu_params],
                f"{what}: parameters", **tolerance(dtype))
    cpu_state = [optimizers[0].state[p] for p in cpu_params]
    lazy_state = [optimizers[1].state[p] for p in lazy_params]

    def lazy_to_cpu(t):  # optimizer state may keep a CPU step count, as eager's does
        return t.detach().cpu()
    assert_same(pytree.tree_map_only(torch.Tensor, lazy_to_cpu, lazy_state), cpu_state,
                f"{what}: optimizer state", **tolerance(dtype))


class TestLazyfuseModules(TestCase):
    @modules(module_db, allowed_dtypes=(torch.float32,))
    def test_module_forward(self, device, dtype, module_info, training):
        expect(MODULE_XFAIL, module_info.name, "forward",
               lambda: self._forward(module_info, dtype, training))

    def _forward(self, module_info, dtype, training):
        shapes_only = training and module_info.name in RANDOM_IN_TRAINING
        for what, cpu, lazy, args, kwargs in module_pairs(module_info, dtype, training, False):
            expected = cpu(*args, **kwargs)
            actual = call_on_lazy(lambda m, a, k: m(*a, **k), lazy, args, kwargs)
            assert_same(to_cpu(actual), expected, f"{what}: output", shapes_only,
                        **tolerance(dtype))
            assert_same(to_cpu(dict(lazy.state_dict())), dict(cpu.state_dict()),
                        f"{what}: parameters and buffers after the call", shapes_only,
                        **tolerance(dtype))

    @modules(module_db, allowed_dtypes=(torch.float64,))
    def test_module_backward(self, device, dtype, module_info, training):
        expect(MODULE_XFAIL, module_info.name, "backward",
               lambda: self._backward(module_info, dtype, training))

    def _backward(self, module_info, dtype, training):
        shapes_only = training and module_info.name in RANDOM_IN_TRAINING
        for what, cpu, lazy, args, kwargs in module_pairs(module_info, dtype, training, True):
            expected = module_grads(cpu, args, kwargs)
            if expected is None:
                continue
            actual = call_on_lazy(module_grads, lazy, args, kwargs)
            assert_same(to_cpu(actual), expected, f"{what}: gradients", shapes_only)

    @optims(optim_db, dtypes=[torch.float32])
    def test_optimizer_steps(self, device, dtype, optim_info):
        expect(OPTIM_XFAIL, optim_info.name, "steps",
               lambda: self._optimizer_steps(optim_info, dtype))

    def _optimizer_steps(self, optim_info, dtype):
        if optim_info.only_supports_sparse_grads:
            pytest.skip("sparse gradients: lazy tensors are dense")
        inputs = optim_info.optim_inputs_func(device="cpu", dtype=dtype)
        impls = [("foreach", False), ("foreach", True)]
        if "foreach" not in optim_info.supported_impls:
            impls = [(None, None)]
        # fused=True where eager's CPU has a fused kernel (Note [Fused optimizer steps]).
        if "fused" in optim_info.supported_impls and "cpu" in optim_info.supports_fused_on:
            impls.append(("fused", True))
        ran = 0
        for optim_input in inputs:
            for impl, value in impls:
                kwargs = dict(optim_input.kwargs)
                if kwargs.get("fused") or kwargs.get("capturable") or kwargs.get("differentiable"):
                    continue  # device-specific implementations, not what lazy runs
                if impl is not None:
                    kwargs[impl] = value
                if impl == "fused" and kwargs.get("foreach"):
                    continue
                optimizer_steps(optim_info, dtype, kwargs, f"{optim_input.desc} {impl}={value}")
                ran += 1
        if ran == 0:
            pytest.skip("no optimizer input runs without fused/capturable/differentiable")

instantiate_device_type_tests(TestLazyfuseModules, globals(), only_for="lazy")
