"""The CPU buffer pool (Note [Buffer pool] in kernels/buffer_pool.cpp): large plan buffers take
memory freed by earlier steps, values stay eager's, and a pooled tensor behaves as any CPU
tensor once it reaches the user."""

import os
import subprocess
import sys

import pytest
import torch

import lazyfuse
from helpers import LAZY, REFERENCE

pytestmark = pytest.mark.skipif(REFERENCE.type != "cpu", reason="the pool serves the CPU target")

ROWS, COLS = 512, 1024  # 2 MiB of float32: above the pool's 1 MiB threshold


@pytest.fixture(autouse=True)
def fused(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    yield


def step(x, w):
    return (x * w + 1).sin() * 0.5


def test_steady_state_steps_reuse_memory_and_match_eager():
    # x and w stay alive, so no output can take their memory (Note [Donated buffers]): each
    # step's y is new memory, and the y of two steps before has been freed by then.
    x = torch.randn(ROWS, COLS)
    w = torch.randn(ROWS, COLS)
    lx, lw = x.to(LAZY), w.to(LAZY)
    lazyfuse.mark_step()
    for _ in range(3):  # warm up: compile, and let freed buffers reach the pool
        ly = step(lx, lw)
        lazyfuse.mark_step()
    before = lazyfuse.buffer_pool_stats()
    for i in range(10):
        ly = step(lx + i, lw)
        lazyfuse.mark_step()
    after = lazyfuse.buffer_pool_stats()
    assert after["misses"] == before["misses"]  # no fresh memory in the steady state
    assert after["hits"] >= before["hits"] + 10
    torch.testing.assert_close(ly.cpu(), step(x + 9, w), rtol=1e-5, atol=1e-5)


def test_empty_cache_frees_what_the_pool_keeps():
    y = step(torch.randn(ROWS, COLS, device=LAZY), torch.randn(ROWS, COLS, device=LAZY))
    lazyfuse.mark_step()
    del y
    assert lazyfuse.buffer_pool_stats()["cached_bytes"] >= ROWS * COLS * 4
    lazyfuse.empty_cache()
    assert lazyfuse.buffer_pool_stats()["cached_bytes"] == 0


def test_a_pooled_result_behaves_as_a_cpu_tensor():
    x = torch.randn(ROWS, COLS)
    out = step(x.to(LAZY), x.to(LAZY))
    lazyfuse.mark_step()
    cpu = out.cpu()
    want = step(x, x)
    torch.testing.assert_close(cpu, want, rtol=1e-5, atol=1e-5)
    cpu.resize_(ROWS * 3, COLS)  # reallocates through the pool's allocator
    torch.testing.assert_close(cpu[:ROWS], want, rtol=1e-5, atol=1e-5)
    cpu.add_(1)
    torch.testing.assert_close(cpu[:ROWS], want + 1, rtol=1e-5, atol=1e-5)
    shared = cpu.share_memory_()  # moves to shared memory like any CPU tensor
    assert shared.is_shared()


def test_limit_zero_turns_the_pool_off():
    code = (
        "import torch, lazyfuse\n"
        "x = torch.randn(512, 1024).to('lazy')\n"
        "for _ in range(4):\n"
        "    y = (x * 2).sin()\n"
        "    lazyfuse.mark_step()\n"
        "s = lazyfuse.buffer_pool_stats()\n"
        "assert s['limit_bytes'] == 0 and s['hits'] == 0 and s['misses'] == 0, s\n"
        "print('ok')\n"
    )
    env = dict(os.environ, LAZYFUSE_BUFFER_POOL_MB="0", LAZYFUSE_FUSION="always")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_a_bad_limit_is_a_clear_error():
    code = ("import torch, lazyfuse\nx = torch.randn(512, 1024).to('lazy')\n"
            "print((x * 2).cpu().sum())\n")
    env = dict(os.environ, LAZYFUSE_BUFFER_POOL_MB="lots", LAZYFUSE_FUSION="always")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "LAZYFUSE_BUFFER_POOL_MB must be a whole number" in result.stderr
