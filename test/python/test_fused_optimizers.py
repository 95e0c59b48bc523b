"""torch.optim's `fused=True` steps on lazy parameters (Note [Fused optimizer steps]): the step is
recorded as one node, lowered to fused kernels for Adam, AdamW and SGD (Note [Lowering fused
Adam], Note [Lowering fused SGD]), and matches the same optimizer on eager tensors."""

import pytest
import torch

import lazyfuse

from helpers import REFERENCE

SHAPES = [(16, 8), (37,), (4, 16), (16, 8)]

OPTIMIZERS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "adam_weight_decay": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, fused=True),
    "adam_maximize_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, maximize=True,
                                                        amsgrad=True, fused=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05, fused=True),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, fused=True),
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-2, fused=True),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, fused=True),
    "sgd_nesterov_weight_decay": lambda p: torch.optim.SGD(
        p, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.01, fused=True),
    "sgd_dampening_maximize": lambda p: torch.optim.SGD(
        p, lr=1e-2, momentum=0.5, dampening=0.3, maximize=True, fused=True),
}
if REFERENCE.type == "cpu":  # ATen's fused Adagrad runs on the CPU only
    OPTIMIZERS["adagrad"] = lambda p: torch.optim.Adagrad(p, lr=1e-2, fused=True)


def train(make, device, dtype, steps=4):
    """`steps` steps of the optimizer `make` gives, with a learning-rate schedule, over
    parameters of SHAPES on `device`; their values and the optimizer's state on the CPU."""
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g, dtype=dtype).to(device).requires_grad_(True)
              for s in SHAPES]
    opt = make(params)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)
    for _ in range(steps):
        for p in params:
            p.grad = (torch.randn(p.shape, generator=g, dtype=dtype) * 0.1).to(device)
        opt.step()
        schedule.step()
        if device.type == "lazy":
            lazyfuse.mark_step()
    state = [{k: v.detach().cpu() for k, v in opt.state[p].items() if torch.is_tensor(v)}
             for p in params]
    return [p.detach().cpu() for p in params], state


@pytest.mark.parametrize("fusion", ["auto", "always"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_steps_like_eager(name, dtype, fusion, monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", fusion)
    expected, expected_state = train(OPTIMIZERS[name], REFERENCE, dtype)
    lazyfuse.reset_metrics()
    got, got_state = train(OPTIMIZERS[name], torch.device("lazy"), dtype)
    assert lazyfuse.metrics().get("EagerFallback", 0) == 0
    # The lowered steps compute ATen's formulas, rounding as it does but for contractions
    # into fused multiply-adds that ATen's build may make: a unit in the last place or two.
    tol = dict(rtol=4e-7, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-15, atol=1e-15)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, **tol)
    for e, g in zip(expected_state, got_state):
        assert e.keys() == g.keys()
        for key in e:
            torch.testing.assert_close(g[key], e[key], **tol)


@pytest.mark.parametrize("name", ["adam", "adamw_amsgrad", "sgd_momentum"])
def test_fused_steps_are_fused_kernels_and_one_plan(name, monkeypatch):
    # One plan serves every step after the first two (the first creates the state, SGD's second
    # is its first with momentum buffers), the learning rate a parameter of it; the step runs as
    # fused kernels, the parameters and state updated in their own memory.
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    params = [torch.randn(s).to("lazy").requires_grad_(True) for s in SHAPES]
    opt = OPTIMIZERS[name](params)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    for step in range(5):
        for p in params:
            p.grad = torch.full_like(p, 0.01)
        lazyfuse.mark_step()
        lazyfuse.reset_metrics()
        opt.step()
        schedule.step()
        lazyfuse.mark_step()
        counters = lazyfuse.metrics()
        labels = [label for label, _ in lazyfuse.last_plan_profile()]
        assert not any("extern" in label for label in labels), labels
        assert any("_fused_" in label for label in labels), labels
        if step >= 2:
            assert counters.get("UncachedCompile", 0) == 0
            assert counters["BuffersDonated"] >= len(params)


@pytest.mark.parametrize("fused", [True, False])
def test_fused_step_with_grad_scale_like_eager(fused, monkeypatch):
    # With grad_scale and found_inf (what GradScaler passes) the step stays ATen's kernel, which
    # also unscales the gradients in place: they are written back.
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    g = torch.Generator().manual_seed(1)
    cpu = {name: [torch.randn(s, generator=g) for s in SHAPES]
           for name in ["params", "grads", "exp_avgs", "exp_avg_sqs"]}
    cpu["exp_avg_sqs"] = [t.abs() for t in cpu["exp_avg_sqs"]]
    cpu["steps"] = [torch.tensor(3.0) for _ in SHAPES]
    scale, found_inf = torch.tensor(4.0), torch.tensor(0.0)

    def step(t, scale, found_inf):
        torch._fused_adam_(t["params"], t["grads"], t["exp_avgs"], t["exp_avg_sqs"], [],
                           t["steps"], lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.0,
                           eps=1e-8, amsgrad=False, maximize=False,
                           grad_scale=scale if fused else None,
                           found_inf=found_inf if fused else None)

    ref = {k: [t.clone().to(REFERENCE) for t in v] for k, v in cpu.items()}
    step(ref, scale.to(REFERENCE), found_inf.to(REFERENCE))
    lazy = {k: [t.to("lazy") for t in v] for k, v in cpu.items()}
    step(lazy, scale.to("lazy"), found_inf.to("lazy"))
    lazyfuse.mark_step()
    for key in cpu:
        for e, t in zip(ref[key], lazy[key]):
            torch.testing.assert_close(t.cpu(), e.cpu(), rtol=4e-7, atol=1e-7)


def test_fused_check_unchanged_for_other_devices():
    # The device check lazyfuse wraps answers for lazy tensors only: a meta parameter is still
    # refused with PyTorch's error.
    p = torch.zeros(3, device="meta", requires_grad=True)
    p.grad = torch.zeros(3, device="meta")
    with pytest.raises(RuntimeError, match="supported devices"):
        torch.optim.Adam([p], fused=True).step()
