"""torch.compile(fn, backend="lazyfuse") on CPU tensors, against the same functions run eagerly.

See python/lazyfuse/_dynamo_backend.py and Note [Sharing memory with the hardware device]."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import lazyfuse

pytestmark = pytest.mark.skipif(lazyfuse.hardware_device() != "cpu",
                                reason="these programs run on CPU tensors")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def chain(a, b, c):
    x = a * b + c
    x = x.sin() * 0.5 + x.cos()
    x = torch.tanh(x) * b - a / (c.abs() + 1)
    return x.exp().clamp(max=10)


def test_backend_is_found_by_name_and_runs_one_fused_plan_per_call():
    a, b, c = (torch.randn(256, 320) for _ in range(3))
    f = torch.compile(chain, backend="lazyfuse")
    torch.testing.assert_close(f(a, b, c), chain(a, b, c))
    before = lazyfuse.metrics()
    out = f(a, b, c)
    after = lazyfuse.metrics()
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, chain(a, b, c))
    # The second call records the same graph: its plan comes from the cache, nothing compiles.
    assert after["CachedCompile"] == before.get("CachedCompile", 0) + 1
    assert after.get("UncachedCompile", 0) == before.get("UncachedCompile", 0)
    assert after["GraphsExecuted"] == before["GraphsExecuted"] + 1


def test_training_steps_match_eager():
    torch.manual_seed(0)
    x, y = torch.randn(32, 16), torch.randint(0, 5, (32,))
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 5))
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="lazyfuse")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        for m, o in ((compiled, opt), (ref, ref_opt)):
            o.zero_grad()
            F.cross_entropy(m(x), y).backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.device.type == "cpu"
        torch.testing.assert_close(p, q)


def test_input_mutation_factories_and_constants_like_eager():
    table = torch.arange(6.0)

    def f(x):
        x.add_(1)
        ones = torch.ones(x.shape[0], device=x.device)
        return x * ones + table[: x.shape[0]]

    x, ref = torch.randn(6), None
    ref = x.clone()
    out = torch.compile(f, backend="lazyfuse")(x)
    expected = f(ref)
    torch.testing.assert_close(x, ref)  # the input was written as eager writes it
    torch.testing.assert_close(out, expected)


def test_new_sizes_give_eager_results():
    f = torch.compile(lambda x: torch.softmax(x * 2, dim=-1), backend="lazyfuse")
    for n in (5, 7, 12, 3):
        x = torch.randn(4, n)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, dim=-1))


def test_results_keep_eager_strides():
    def f(x):
        return x.t() * 2, x.sum(0)

    x = torch.randn(3, 5)
    out, total = torch.compile(f, backend="lazyfuse")(x)
    expected, expected_total = f(x)
    assert out.stride() == expected.stride()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(total, expected_total)


def test_sharing_with_the_hardware_device_copies_nothing_it_need_not():
    x = torch.randn(4, 6)
    lazy = torch.ops.lazyfuse.share_into_lazy(x)
    assert lazy.device.type == "lazy"
    back = torch.ops.lazyfuse.share_out_of_lazy(lazy)
    assert back.data_ptr() == x.data_ptr()  # in and out over the same memory
    result = torch.ops.lazyfuse.share_out_of_lazy(lazy * 2 + 1)
    torch.testing.assert_close(result, x * 2 + 1)
    # A result that reports other strides than its buffer's leaves as a copy laid out as eager's.
    moved = torch.ops.lazyfuse.share_out_of_lazy(lazy.t())
    assert moved.stride() == x.t().stride()
    torch.testing.assert_close(moved, x.t())
    with pytest.raises(RuntimeError, match="expected a lazy tensor"):
        torch.ops.lazyfuse.share_out_of_lazy(x)
    with pytest.raises(RuntimeError, match="got a lazy tensor"):
        torch.ops.lazyfuse.share_into_lazy(lazy)


class _PassThrough(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_sync_under_a_python_mode_runs_below_it():
    # AOTAutograd calls compiled graphs under a mode of its own; a sync under any mode runs
    # lazyfuse's own calls (reading the wrapped number 0.5 here) below it. Note [Syncs below
    # Python modes].
    x = torch.randn(256, 256)  # large enough for the plan to read 0.5 when it runs
    lazy = x.to("lazy")
    with _PassThrough() as mode:
        y = lazy.sin() * 0.5
        lazyfuse.sync([y])
    torch.testing.assert_close(y.cpu(), x.sin() * 0.5)
    assert not any("_local_scalar_dense" in op or "item" in op for op in mode.seen)
