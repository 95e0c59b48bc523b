"""Donated buffers (Note [Donated buffers] in lowering/plan_donations.cpp): a fused kernel writes
an output into the memory of an input it replaces, when nothing but the graph still holds that
input. Values must be eager's whether or not memory is donated, and an input that anything else
still reads (a pending value, a CPU copy, an alias) must keep its values. BuffersDonated shows
that donation happened where the test expects it."""

import pytest
import torch

import lazyfuse
from helpers import INDEXES_OUT_OF_RANGE, LAZY, REFERENCE, base, to_cpu, to_lazy


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    yield


def donated():
    return lazyfuse.metrics().get("BuffersDonated", 0)


def on_lazy(t):
    """A lazy copy of `t`, already on the hardware device (not pending)."""
    x = to_lazy(t.clone())
    lazyfuse.sync(x)
    return x


def gradient(shape, step, seed):
    return base(shape, seed=seed) * (1 + step) / 4


SHAPES = [(257, 129), (64,), (3, 5, 7), (1,)]

OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_steps_write_into_the_state_they_replace(name):
    make = OPTIMIZERS[name]
    start = [base(s, seed=i) for i, s in enumerate(SHAPES)]
    eager = [t.clone().to(REFERENCE).requires_grad_() for t in start]
    lazy = [on_lazy(t).requires_grad_() for t in start]
    eager_opt, lazy_opt = make(eager), make(lazy)
    steps = 4
    for step in range(steps):
        for i, (e, z) in enumerate(zip(eager, lazy)):
            g = gradient(SHAPES[i], step, seed=10 + i)
            e.grad = g.to(REFERENCE)
            z.grad = to_lazy(g)
        eager_opt.step()
        lazy_opt.step()
        lazyfuse.mark_step()
    for e, z in zip(eager, lazy):
        torch.testing.assert_close(to_cpu(z.detach()), to_cpu(e.detach()))
    for e, z in zip(eager, lazy):
        for key, value in eager_opt.state[e].items():
            torch.testing.assert_close(to_cpu(lazy_opt.state[z][key]), to_cpu(value))
    # Each step's update of a parameter writes into the parameter it replaces.
    assert donated() >= steps * len(SHAPES)


def test_input_a_pending_value_still_reads_keeps_its_values():
    t = base((64, 33))
    x = on_lazy(t)
    y = x + 1  # pending: reads the buffer x has now
    x.mul_(2)
    lazyfuse.sync(x)
    assert donated() == 0
    torch.testing.assert_close(to_cpu(x), t * 2)
    torch.testing.assert_close(to_cpu(y), t + 1)


# Over more bytes than a last-level cache holds (three buffers of 8M floats: 96 MB), the CPU
# kernel streams its stores (Note [Streaming stores] in kernels/cpu_codegen.cpp), into donated
# memory or into a new buffer.
LARGE = (1 << 23,)


def test_large_update_written_into_the_memory_it_replaces():
    t, u = base(LARGE, seed=1), base(LARGE, seed=2)
    x, z = on_lazy(t), on_lazy(u)
    x.mul_(0.5).add_(z)
    lazyfuse.mark_step()
    assert donated() >= 1
    torch.testing.assert_close(to_cpu(x), t * 0.5 + u)
    torch.testing.assert_close(to_cpu(z), u)


def test_large_update_whose_input_a_pending_value_reads_is_streamed_elsewhere():
    t, u = base(LARGE, seed=1), base(LARGE, seed=2)
    x, z = on_lazy(t), on_lazy(u)
    y = x + 1  # pending: holds the buffer x has now
    x.mul_(0.5).add_(z)
    lazyfuse.sync(x)
    assert donated() == 0
    torch.testing.assert_close(to_cpu(x), t * 0.5 + u)
    torch.testing.assert_close(to_cpu(y), t + 1)


def test_input_read_by_every_target_may_be_donated():
    t = base((64, 33))
    x = on_lazy(t)
    y = x + 1
    x.mul_(2)
    lazyfuse.mark_step()  # one graph computes y and the new x from the old x
    torch.testing.assert_close(to_cpu(x), t * 2)
    torch.testing.assert_close(to_cpu(y), t + 1)


def test_input_a_later_sync_reads_keeps_its_values():
    t = base((16, 8))
    x = on_lazy(t)
    y = x.exp()
    z = x * 3  # synced on its own, after y
    del x  # only the pending values hold its buffer now
    lazyfuse.sync(y)
    assert donated() == 0
    torch.testing.assert_close(to_cpu(z), t * 3)
    torch.testing.assert_close(to_cpu(y), t.exp())


def test_cpu_copy_taken_before_the_update_keeps_its_values():
    t = base((128, 64))
    x = on_lazy(t)
    saved = x.cpu()
    x.add_(1)
    lazyfuse.mark_step()
    torch.testing.assert_close(saved, t)
    torch.testing.assert_close(to_cpu(x), t + 1)


def test_cpu_tensor_a_lazy_tensor_was_made_from_keeps_its_values():
    # On the CPU a transfer may share the source's memory: the source must not change.
    source = base((128, 64))
    kept = source.clone()
    x = source.to(LAZY)
    lazyfuse.sync(x)
    x.add_(1)
    lazyfuse.mark_step()
    torch.testing.assert_close(source, kept)
    torch.testing.assert_close(to_cpu(x), kept + 1)


def test_output_written_into_the_tensor_it_overwrites():
    # out.copy_(f(x)) records copy(old out, f(x)); nothing reads the old value, so the kernel
    # writes f(x) into its memory, as eager's `out=` does (an input the kernel reads comes
    # first, but the user still holds x and y).
    t, u = base((64, 33)), base((64, 33), seed=1)
    x, y = on_lazy(t), on_lazy(u)
    out = on_lazy(torch.zeros(64, 33))
    steps = 3
    for step in range(steps):
        out.copy_(x * step + y)
        lazyfuse.mark_step()
        torch.testing.assert_close(to_cpu(out), t * step + u)
    assert donated() == steps
    torch.testing.assert_close(to_cpu(x), t)
    torch.testing.assert_close(to_cpu(y), u)


def test_overwritten_tensor_a_pending_value_still_reads_keeps_its_values():
    t = base((32, 16))
    out = on_lazy(t)
    saved = out * 2  # pending: reads the value out.copy_ replaces
    out.copy_(torch.ones(32, 16, device=LAZY))
    lazyfuse.sync(out)
    assert donated() == 0
    torch.testing.assert_close(to_cpu(saved), t * 2)
    torch.testing.assert_close(to_cpu(out), torch.ones(32, 16))


def test_overwritten_tensor_of_another_layout_gets_new_memory():
    t = base((16, 8))
    x = on_lazy(t)
    out = on_lazy(torch.zeros(8, 16)).t()  # strides (1, 16): not the kernel's layout
    out.copy_(x.exp())
    lazyfuse.mark_step()
    torch.testing.assert_close(to_cpu(out), t.exp())
    assert out.stride() == (1, 16)


@pytest.mark.parametrize("alias", ["detach", "data", "view", "slice"])
def test_aliases_of_an_updated_tensor_follow_eager(alias):
    t = base((32, 16))

    def take(x):
        if alias == "detach":
            return x.detach()
        if alias == "data":
            return x.data
        if alias == "view":
            return x.view(16, 32)
        return x[3:9]

    expected_x = t.clone().to(REFERENCE)
    expected_alias = take(expected_x)
    expected_x.mul_(3).add_(1)
    x = on_lazy(t)
    a = take(x)
    x.mul_(3).add_(1)
    lazyfuse.mark_step()
    torch.testing.assert_close(to_cpu(x), to_cpu(expected_x))
    torch.testing.assert_close(to_cpu(a), to_cpu(expected_alias))




@pytest.mark.parametrize("name", ["adam", "sgd_momentum"])
def test_many_parameters_of_one_shape_update_in_place(name):
    # 20 parameters of one shape fuse into one kernel of over 100 buffers, which the CPU runs
    # in parts (Note [CPU loop parts]); each output takes the memory of the tensor it replaces,
    # not that of the gradient beside it, which the program still holds.
    make = OPTIMIZERS[name]
    count, shape = 20, (33, 65)
    start = [base(shape, seed=i) for i in range(count)]
    eager = [t.clone().to(REFERENCE).requires_grad_() for t in start]
    lazy = [on_lazy(t).requires_grad_() for t in start]
    eager_opt, lazy_opt = make(eager), make(lazy)
    for step in range(3):
        for i, (e, z) in enumerate(zip(eager, lazy)):
            g = gradient(shape, step, seed=100 + i)
            e.grad = g.to(REFERENCE)
            z.grad = on_lazy(g)
        eager_opt.step()
        before = donated()
        lazy_opt.step()
        lazyfuse.mark_step()
        per_step = donated() - before
    for e, z in zip(eager, lazy):
        torch.testing.assert_close(to_cpu(z.detach()), to_cpu(e.detach()))
        for key, value in eager_opt.state[e].items():
            torch.testing.assert_close(to_cpu(lazy_opt.state[z][key]), to_cpu(value))
    # The last step: every parameter and every state tensor (Adam: two, SGD: the momentum).
    states = sum(1 for v in lazy_opt.state[lazy[0]].values() if v.dim() > 0)
    assert per_step == count * (1 + states)


def test_training_steps_match_eager_with_donated_state():
    from helpers import train_side_by_side

    torch.manual_seed(0)
    x, y = torch.randn(32, 24), torch.randn(32, 8)

    def make_model():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.Tanh(), torch.nn.Linear(48, 8))

    steps = 4
    model, lazy_model = train_side_by_side(
        make_model, lambda ps: torch.optim.Adam(ps, lr=1e-2), x, y, steps=steps)
    for p, q in zip(model.parameters(), lazy_model.parameters()):
        torch.testing.assert_close(to_cpu(q.detach()), to_cpu(p.detach()))
    # Every step updates each weight in place, and from the second step on its two Adam buffers
    # too. A module's parameter and the base functionalization keeps for it share a storage. A
    # bias's update runs in the kernel that sums its gradient over the batch (Note [Derivatives
    # of ops recorded whole] gives that sum its final shape), and a reduction kernel writes
    # fresh buffers.
    weights = sum(1 for p in lazy_model.parameters() if p.dim() == 2)
    assert donated() >= weights + 3 * weights * (steps - 1)


def test_donation_can_be_turned_off(tmp_path):
    import subprocess
    import sys

    script = (
        "import torch, lazyfuse\n"
        "x = torch.ones(64, 64, device='lazy'); lazyfuse.mark_step()\n"
        "x.mul_(2); lazyfuse.mark_step()\n"
        "assert x.cpu().eq(2).all()\n"
        "print(lazyfuse.metrics().get('BuffersDonated', 0))\n")
    import os

    counts = {}
    for value in ("1", "0"):
        env = dict(os.environ, LAZYFUSE_DONATE=value, LAZYFUSE_FUSION="always",
                   LAZYFUSE_CACHE_DIR=str(tmp_path))
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True)
        counts[value] = int(out.stdout.strip().splitlines()[-1])
    assert counts == {"1": 1, "0": 0}


@INDEXES_OUT_OF_RANGE
def test_failed_graph_after_donating_an_intermediate_keeps_other_values():
    # The kernel between the matmuls writes into the first matmul's result; the graph then fails
    # at the out-of-range index. Targets that do not need the index are computed one by one.
    t, w = base((16, 16)), base((16, 16), seed=1)
    x, lw = on_lazy(t), on_lazy(w)
    h = ((x @ lw) * 2 + 1).relu()
    out = h @ lw
    bad = out[torch.tensor([99], device=LAZY)]
    x.add_(1)  # a device-data update in the same graph
    with pytest.raises(IndexError):
        lazyfuse.mark_step()
    lazyfuse.mark_step()
    expected_h = ((t @ w) * 2 + 1).relu()
    torch.testing.assert_close(to_cpu(h), expected_h)
    torch.testing.assert_close(to_cpu(out), expected_h @ w)
    torch.testing.assert_close(to_cpu(x), t + 1)
    with pytest.raises(RuntimeError, match="failed at sync"):
        bad.cpu()
