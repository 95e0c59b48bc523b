"""Shared fixtures for the lazyfuse tests. Every test compares the lazy device with eager
PyTorch, on the hardware device where values are compared (helpers.REFERENCE); nothing here
hard-codes a result."""

import gc
import os
import subprocess
import sys

import pytest
import torch

import lazyfuse

# Some tests compare CUDA results with CPU ones at float32 tolerances: cuDNN's convolutions then
# compute in float32, not TF32 (PyTorch's default for them), in eager and lazy calls alike.
torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(autouse=True)
def fresh_trace():
    """Each test starts from an empty trace and zeroed counters, so a counter delta seen by a
    test is its own (the graph cache itself is process-wide and stays warm)."""
    _drop_last_failure()
    lazyfuse.mark_step()
    lazyfuse.reset_metrics()
    yield
    if os.environ.get("LAZYFUSE_NVRTC_CHECK"):
        _check_cuda_renderings()


_cuda_checked = {"kernels": 0}


def _check_cuda_renderings():
    """With LAZYFUSE_NVRTC_CHECK=<arch>, every graph the CPU fuses is also rendered as CUDA and
    compiled by NVRTC (no GPU needed): a test whose kernels do not compile for the GPU fails."""
    lazyfuse.mark_step()
    values = lazyfuse.metrics()
    assert values.get("CudaCheckFailures", 0) == 0, (
        "a fused graph of this test does not compile as CUDA (see the warning in the log)")
    _cuda_checked["kernels"] += values.get("CudaKernelsChecked", 0)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("LAZYFUSE_NVRTC_CHECK") and session.testscollected and exitstatus == 0:
        if _cuda_checked["kernels"] == 0:
            print("\nLAZYFUSE_NVRTC_CHECK is set but no kernel was compiled as CUDA")
            session.exitstatus = 1
        else:
            print(f"\n{_cuda_checked['kernels']} fused kernels also compiled as CUDA for "
                  f"sm_{os.environ['LAZYFUSE_NVRTC_CHECK']}")


def _drop_last_failure():
    """pytest keeps the last failure in sys.last_* (for post-mortem debugging) until the next
    test's call phase; its frames keep that test's lazy tensors alive, and a tensor whose pending
    computation cannot run would make this test's mark_step fail too. Drop them first."""
    if getattr(sys, "last_value", None) is None:
        return
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()


@pytest.fixture
def counters():
    """`counters()` returns lazyfuse.metrics() with a missing counter read as 0."""

    def read():
        values = lazyfuse.metrics()
        return _Counters(values)

    return read


class _Counters(dict):
    def __missing__(self, key):
        return 0


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter (the venv's python) and returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python_subprocess():
    return run_python
