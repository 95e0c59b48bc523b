"""Autograd and whole training loops on the lazy device, against the same thing run eagerly on
the hardware device."""

import copy
import importlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyfuse
from helpers import REFERENCE, randn, reference, to_lazy, to_reference


def grads_same(fn, *cpu_inputs, **close_kwargs):
    """Runs `fn` (returning a scalar) and its backward on leaves on the reference device and on
    lazy leaves; compares the value and the gradient of every input."""
    cpu_leaves = [t.clone().to(REFERENCE).requires_grad_() for t in cpu_inputs]
    lazy_leaves = [t.to("lazy").requires_grad_() for t in cpu_inputs]
    expected = fn(*cpu_leaves)
    expected.backward()
    actual = fn(*lazy_leaves)
    actual.backward()
    torch.testing.assert_close(actual.detach().cpu(), expected.detach().cpu(), **close_kwargs)
    for lazy_leaf, cpu_leaf in zip(lazy_leaves, cpu_leaves):
        assert lazy_leaf.grad is not None and lazy_leaf.grad.device.type == "lazy"
        torch.testing.assert_close(lazy_leaf.grad.cpu(), cpu_leaf.grad.cpu(), **close_kwargs)


# ---- small graphs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x * x).sum(),
        lambda x: x.exp().mean(),
        lambda x: torch.tanh(x).pow(2).sum(),
        lambda x: x.relu().sum() + x.sigmoid().prod(),
        lambda x: torch.softmax(x, dim=-1)[:, 0].sum(),
        lambda x: F.log_softmax(x, dim=1).mean(),
        lambda x: x.amax(dim=1).sum(),
        lambda x: x.norm(),
        lambda x: x.var(dim=0).sum(),
        lambda x: x.t()[1:].abs().sum(),
        lambda x: x.reshape(-1)[::2].sum(),
        lambda x: torch.where(x > 0, x, x * 0.1).sum(),
        lambda x: torch.cat([x, x * 2], dim=1).sum(),
        lambda x: F.layer_norm(x, (x.shape[-1],)).pow(2).sum(),
    ],
    ids=["square", "exp", "tanh", "relu_sigmoid", "softmax", "log_softmax", "amax", "norm",
         "var", "view_abs", "strided", "where", "cat", "layer_norm"],
)
def test_backward_unary_graph(fn):
    grads_same(fn, randn(3, 4))


def test_backward_matmul_and_linear():
    grads_same(lambda a, b: (a @ b).sum(), randn(3, 4, seed=1), randn(4, 5, seed=2))
    grads_same(lambda x, w, b: F.linear(x, w, b).tanh().sum(),
               randn(3, 4, seed=1), randn(6, 4, seed=2), randn(6, seed=3))


def test_backward_broadcasting():
    grads_same(lambda a, b: (a * b + b).sum(), randn(3, 1, 4, seed=1), randn(5, 1, seed=2))


def test_backward_cross_entropy():
    target = torch.tensor([1, 0, 3])
    lazy_target = target.to("lazy")

    def loss(x):
        t = lazy_target if x.device.type == "lazy" else target.to(x.device)
        return F.cross_entropy(x, t)

    grads_same(loss, randn(3, 5))


def test_backward_conv_and_pooling():
    grads_same(lambda x, w: F.max_pool2d(F.conv2d(x, w, padding=1).relu(), 2).sum(),
               randn(1, 2, 6, 6, seed=1), randn(3, 2, 3, 3, seed=2))
    grads_same(lambda x: F.avg_pool2d(x, 2).pow(2).sum(), randn(1, 2, 4, 4))


def test_backward_through_in_place_and_views():
    def fn(x):
        y = x * 1
        y[0].mul_(3)
        y.t()[1].add_(1)
        return (y * y).sum()

    grads_same(fn, randn(3, 4))


def test_grad_accumulates_over_two_backwards():
    cpu = randn(4).to(REFERENCE).requires_grad_()
    lazy = randn(4).to("lazy").requires_grad_()
    for x in (cpu, lazy):
        (x * 2).sum().backward()
        (x * x).sum().backward()
    torch.testing.assert_close(lazy.grad.cpu(), cpu.grad.cpu())


def test_autograd_grad_and_retain_graph():
    cpu = randn(3, 3).to(REFERENCE).requires_grad_()
    lazy = randn(3, 3).to("lazy").requires_grad_()
    results = []
    for x in (cpu, lazy):
        y = (x.sin() * x).sum()
        (g,) = torch.autograd.grad(y, x, retain_graph=True)
        (g2,) = torch.autograd.grad(y * 2, x)
        results.append((g.cpu(), g2.cpu()))
    torch.testing.assert_close(results[1], results[0])


def test_double_backward():
    cpu = randn(4).to(REFERENCE).requires_grad_()
    lazy = randn(4).to("lazy").requires_grad_()
    results = []
    for x in (cpu, lazy):
        (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), x)
        results.append(gg.cpu())
    torch.testing.assert_close(results[1], results[0])


def test_no_grad_and_detach():
    x = randn(3).to("lazy").requires_grad_()
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    assert not (x.detach() + 1).requires_grad
    assert (x + 1).requires_grad


def test_backward_after_mark_step_between_forward_and_backward():
    cpu = randn(3, 4).to(REFERENCE).requires_grad_()
    lazy = randn(3, 4).to("lazy").requires_grad_()
    for x in (cpu, lazy):
        loss = (x.tanh() @ x.t()).sum()
        if x.device.type == "lazy":
            lazyfuse.mark_step()
        loss.backward()
    torch.testing.assert_close(lazy.grad.cpu(), cpu.grad.cpu())


# ---- training parity -----------------------------------------------------------------------

STEPS = 20


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(torch.relu(self.fc1(x)))))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)  # 8x8 -> 4x4
        x = F.avg_pool2d(torch.relu(self.conv2(x)), 2)  # 4x4 -> 2x2
        return self.fc(x.flatten(1))


def make_data(model_name):
    g = torch.Generator().manual_seed(1)
    if model_name == "mlp":
        xs = torch.randn(STEPS, 8, 16, generator=g)
    else:
        xs = torch.randn(STEPS, 4, 1, 8, 8, generator=g)
    ys = torch.randint(0, 4, (STEPS, xs.shape[1]), generator=g)
    return xs, ys


def make_optimizer(name, params):
    # foreach=False: the same per-parameter update on both devices.
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=False)
    return torch.optim.Adam(params, lr=1e-2, foreach=False)


def train(model, optimizer, xs, ys, lazy, counters=None):
    losses, cache_trace = [], []
    for x, y in zip(xs, ys):
        if lazy:
            x, y = x.to("lazy"), y.to("lazy")
        else:
            x, y = to_reference((x, y))
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())  # before mark_step, which then materializes it too
        if lazy:
            lazyfuse.mark_step()
            m = counters()
            cache_trace.append((m["UncachedCompile"], m["CachedCompile"], m["GraphsExecuted"]))
    return torch.stack([loss.cpu() for loss in losses]), cache_trace


@pytest.mark.parametrize("optimizer_name", ["sgd_momentum", "adam"])
@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_training_parity(model_name, optimizer_name, counters):
    torch.manual_seed(0)
    cpu_model = MLP() if model_name == "mlp" else SmallCNN()
    lazy_model = copy.deepcopy(cpu_model).to("lazy")
    lazy_model.load_state_dict(cpu_model.state_dict())
    cpu_model.to(REFERENCE)
    for p in lazy_model.parameters():
        assert p.device.type == "lazy"
    xs, ys = make_data(model_name)

    expected, _ = train(cpu_model, make_optimizer(optimizer_name, cpu_model.parameters()),
                        xs, ys, lazy=False)
    actual, cache_trace = train(lazy_model,
                                make_optimizer(optimizer_name, lazy_model.parameters()),
                                xs, ys, lazy=True, counters=counters)

    torch.testing.assert_close(actual, expected)
    for name, p in lazy_model.state_dict().items():
        torch.testing.assert_close(p.cpu(), cpu_model.state_dict()[name].cpu(), msg=name)

    # Steps settle into one graph each: after the first few, each step's mark_step runs one
    # cached graph. The exception: a small step graph is compiled fused once it has run often
    # enough (Note [Fusing recurring small graphs]), and a fused plan's outputs may share
    # buffers (Note [Strided views of buffers]), which gives the next step's graph other input
    # aliasing: one new graph then.
    settled = 3
    uncached, cached, executed = (list(column) for column in zip(*cache_trace))
    allowed = 1 if counters()["RecurringGraphsFused"] else 0
    assert uncached[-1] - uncached[settled] <= allowed, cache_trace
    steps = list(zip(uncached[settled:], cached[settled:], executed[settled:]))
    for (u0, c0, e0), (u1, c1, e1) in zip(steps, steps[1:]):
        assert e1 == e0 + 1 and (u1 - u0) + (c1 - c0) == 1, cache_trace


def test_model_to_lazy_and_back():
    torch.manual_seed(0)
    model = MLP()
    lazy_model = copy.deepcopy(model).to("lazy")
    back = lazy_model.cpu()
    for name, p in back.state_dict().items():
        assert p.device.type == "cpu"
        torch.testing.assert_close(p, model.state_dict()[name])


def test_eval_forward_under_no_grad():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    lazy_model = copy.deepcopy(model).to("lazy")
    model.to(REFERENCE)
    x = randn(2, 1, 8, 8)
    with torch.no_grad():
        expected = model(x.to(REFERENCE))
        actual = lazy_model(x.to("lazy"))
    torch.testing.assert_close(actual.cpu(), expected.cpu())


def test_batchnorm_training_parity():
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                              nn.Linear(4 * 6 * 6, 3))
    lazy_model = copy.deepcopy(cpu_model).to("lazy")
    cpu_model.to(REFERENCE)
    xs = randn(3, 4, 1, 8, 8)
    ys = torch.tensor([[0, 1, 2, 0]] * 3)
    for model, lazy in ((cpu_model, False), (lazy_model, True)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
        losses = []
        for x, y in zip(xs, ys):
            if lazy:
                x, y = to_lazy(x), to_lazy(y)
            else:
                x, y = to_reference((x, y))
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if lazy:
                lazyfuse.mark_step()
            losses.append(loss.detach().cpu())
        model.losses = torch.stack(losses)
    torch.testing.assert_close(lazy_model.losses, cpu_model.losses)
    for name, t in lazy_model.state_dict().items():
        torch.testing.assert_close(t.cpu(), cpu_model.state_dict()[name].cpu(), msg=name)


OPTIMIZERS = {
    "sgd_foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "sgd_nesterov_weight_decay": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                           nesterov=True, weight_decay=1e-2),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, foreach=False),
    "adamw_default": lambda p: torch.optim.AdamW(p, lr=1e-2),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2),
}


@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clip_grad_norm"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_variants_parity(name, clip):
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    lazy_model = copy.deepcopy(cpu_model).to("lazy")
    cpu_model.to(REFERENCE)
    g = torch.Generator().manual_seed(2)
    xs, ys = torch.randn(5, 4, 8, generator=g), torch.randint(0, 3, (5, 4), generator=g)
    results = []
    for model, lazy in ((cpu_model, False), (lazy_model, True)):
        opt = OPTIMIZERS[name](model.parameters())
        losses = []
        for x, y in zip(xs, ys):
            if lazy:
                x, y = x.to("lazy"), y.to("lazy")
            else:
                x, y = to_reference((x, y))
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            losses.append(loss.detach())
            if lazy:
                lazyfuse.mark_step()
        results.append(torch.stack([loss.cpu() for loss in losses]))
    torch.testing.assert_close(results[1], results[0])
    for (name_, p_lazy), p_cpu in zip(lazy_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p_lazy.detach().cpu(), p_cpu.detach().cpu(), msg=name_)


# ---- optimizers default to foreach on lazy (Note [Optimizers default to foreach on lazy]) ----

DEFAULT_OPTIMIZERS = {
    "adam": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, **kw),
    "adamw": lambda p, **kw: torch.optim.AdamW(p, lr=1e-2, **kw),
    "sgd_momentum": lambda p, **kw: torch.optim.SGD(p, lr=0.1, momentum=0.9, **kw),
    "rmsprop": lambda p, **kw: torch.optim.RMSprop(p, lr=1e-2, **kw),
}


def _ops_per_step(make, params, grads, **kw):
    """OpsRecorded by the third step of an optimizer over lazy copies of `params`."""
    lazy = [p.detach().to("lazy").requires_grad_(True) for p in params]
    opt = make(lazy, **kw)
    for _ in range(3):
        for p, g in zip(lazy, grads):
            p.grad = g.to("lazy")
        lazyfuse.mark_step()
        lazyfuse.reset_metrics()
        opt.step()
        recorded = lazyfuse.metrics()["OpsRecorded"]
        lazyfuse.mark_step()
    return recorded, lazy


@pytest.mark.parametrize("name", sorted(DEFAULT_OPTIMIZERS))
def test_optimizers_default_to_foreach_on_lazy(name):
    make = DEFAULT_OPTIMIZERS[name]
    torch.manual_seed(0)
    params = [torch.randn(s, requires_grad=True) for s in [(16, 8), (16,), (4, 16), (4,), (3, 3)]]
    grads = [torch.randn_like(p) for p in params]
    lazy_param = params[0].detach().to("lazy")
    choose = importlib.import_module("torch.optim.optimizer")._default_to_fused_or_foreach
    assert choose([lazy_param], False) == (False, True)
    assert choose([params[0]], False) == (False, False)
    default_ops, lazy = _ops_per_step(make, params, grads)
    foreach_ops, _ = _ops_per_step(make, params, grads, foreach=True)
    loop_ops, _ = _ops_per_step(make, params, grads, foreach=False)
    assert default_ops == foreach_ops
    # One node per _foreach_* op for all five tensors together, against several per tensor.
    assert default_ops * 3 <= loop_ops
    eager = [p.detach().clone().to(REFERENCE).requires_grad_(True) for p in params]
    opt = make(eager, foreach=True)
    for _ in range(3):
        for p, g in zip(eager, grads):
            p.grad = g.clone().to(REFERENCE)
        opt.step()
    for p_lazy, p_eager in zip(lazy, eager):
        torch.testing.assert_close(p_lazy.detach().cpu(), p_eager.detach().cpu())


def test_foreach_scalar_lists_are_graph_parameters(counters):
    """A foreach Adam step divides by per-step bias corrections (a Scalar[] argument): new values
    must reuse the cached graph, and compute with the new values."""
    xs = [torch.randn(3, 4), torch.randn(5)]
    for step, scalars in enumerate(([1.5, -2.0], [0.25, 4.0], [3.0, 0.5])):
        lazy = [x.to("lazy") for x in xs]
        lazyfuse.mark_step()
        before = counters()
        out = torch._foreach_addcdiv(lazy, lazy, [t.abs() + 1 for t in lazy], scalars)
        torch._foreach_div_(out, scalars)
        got = [t.cpu() for t in out]
        expected = reference(
            lambda xs: torch._foreach_div(
                torch._foreach_addcdiv(xs, xs, [t.abs() + 1 for t in xs], scalars), scalars),
            xs)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        if step > 0:
            after = counters()
            assert after["UncachedCompile"] == before["UncachedCompile"]
            assert after["CachedCompile"] > before["CachedCompile"]


@pytest.mark.parametrize("fusion", ["0", "always"])
def test_efficient_zero_grads_are_real_buffers(fusion, monkeypatch):
    """Autograd makes sgn's gradient with _efficientzerotensor: a tensor without memory. A lazy
    buffer must hold real zeros, so a fused kernel can read it and an in-place op can write it."""
    monkeypatch.setenv("LAZYFUSE_FUSION", fusion)
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = x.detach().to("lazy").requires_grad_(True)
    torch.sgn(x).sum().backward()
    torch.sgn(y).sum().backward()
    grad = y.grad.detach()
    torch.testing.assert_close(grad.cpu(), x.grad)
    grad.add_(2.0)
    torch.testing.assert_close((grad * 3).cpu(), (x.grad + 2.0) * 3)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_with_dropout_gives_the_gradients_of_the_plain_forward(reentrant):
    """torch.utils.checkpoint recomputes the segment in backward from the generator state the
    forward saw: its dropout masks must be the forward's (Note [Random ops draw when recorded])."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.5), nn.GELU(), nn.Linear(32, 16))
    block = block.to("lazy")
    results = []
    for use_checkpoint in (False, True):
        torch.manual_seed(5)
        x = torch.ones(8, 16).to("lazy").requires_grad_()
        y = checkpoint(block, x, use_reentrant=reentrant) if use_checkpoint else block(x)
        y.square().sum().backward()
        grads = [x.grad] + [p.grad for p in block.parameters()]
        results.append([y.detach().cpu()] + [g.cpu() for g in grads])
        block.zero_grad(set_to_none=True)
    for plain, checkpointed in zip(*results):
        torch.testing.assert_close(checkpointed, plain)
