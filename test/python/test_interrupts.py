"""Ctrl-C during a long sync raises KeyboardInterrupt without waiting for the sync to end, and
leaves the program working: the interrupted tensors stay pending and compute eager's values at
the next sync. See Note [Interrupting a sync].

Each case runs in its own interpreter, which sends itself SIGINT from a timer thread while the
main thread is inside a sync (as a terminal's Ctrl-C would). Whether the sync was cut short is
read from lazyfuse's metrics (no graph finished, no kernel compiled), not from timings.
"""

import os
import textwrap

import pytest

import lazyfuse

# The check lives in liblazyfuse_python.so (built where Python's headers are); on a GPU the plan's
# kernels launch asynchronously and NVRTC compiles in-process, so there is nothing to cut short.
pytestmark = [
    pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(lazyfuse.library_path()),
                                                       "liblazyfuse_python.so")),
                       reason="liblazyfuse_python.so was not built (no Python headers)"),
    pytest.mark.skipif(lazyfuse.hardware_device() != "cpu",
                       reason="lazy tensors run on a GPU: syncs are asynchronous launches"),
]

PRELUDE = textwrap.dedent("""
    import os, signal, threading, time
    import torch, lazyfuse

    # A process a non-interactive shell started in the background inherits SIGINT ignored,
    # and Python then leaves it so: the check is of a terminal's Ctrl-C, under Python's own
    # handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_after(seconds):
        threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT)).start()

    def interrupted(sync):
        try:
            sync()
        except KeyboardInterrupt:
            return True
        return False

    torch.manual_seed(0)
    W, X0 = torch.randn(1024, 1024) / 32, torch.randn(1024, 1024)
    start = time.perf_counter()
    for _ in range(3):
        X0 @ W
    STEPS = max(100, min(5000, int(3.0 / ((time.perf_counter() - start) / 3))))

    def matmul_chain(x, w):
        # STEPS chained matmuls of 1024, one extern step each: about 3 s on this machine.
        for _ in range(STEPS):
            x = x @ w.to(x.device)
        return x
""")


def run(python_subprocess, body, tmp_path):
    # LAZYFUSE_TRACE_LIMIT=0: the chains are one long sync, not cut where their ops repeat
    # (Note [Automatic step boundaries]).
    env = {"LAZYFUSE_CACHE_DIR": str(tmp_path / "cache"), "LAZYFUSE_FUSION": "always",
           "LAZYFUSE_TRACE_LIMIT": "0"}
    result = python_subprocess(PRELUDE + textwrap.dedent(body), env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok"), result.stdout


def test_interrupt_between_plan_steps_keeps_the_values_pending(python_subprocess, tmp_path):
    run(python_subprocess, """
        x = matmul_chain(X0.to("lazy"), W)
        lazyfuse.reset_metrics()
        interrupt_after(0.3)
        assert interrupted(x.cpu)
        assert lazyfuse.metrics()["GraphsExecuted"] == 0  # the plan did not run to its end
        torch.testing.assert_close(x.cpu(), matmul_chain(X0, W))  # still pending, computed now
        print("ok")
    """, tmp_path)


def test_interrupt_of_mark_step_leaves_parameters_to_update_later(python_subprocess, tmp_path):
    # A step whose in-place update (donating the parameter's memory) comes after a long chain.
    run(python_subprocess, """
        p = X0.to("lazy")
        lazyfuse.mark_step()
        p.sub_(0.1 * matmul_chain(p, W).tanh())
        lazyfuse.reset_metrics()
        interrupt_after(0.3)
        assert interrupted(lazyfuse.mark_step)
        m = lazyfuse.metrics()
        assert m["GraphsExecuted"] == 0 and m["BuffersDonated"] == 0, m  # stopped before the update
        torch.testing.assert_close(p.cpu(), X0 - 0.1 * matmul_chain(X0, W).tanh())
        print("ok")
    """, tmp_path)


def test_interrupt_during_compile_stops_the_compiler(python_subprocess, tmp_path):
    # 24 different pointwise chains of 120 ops, in one C++ compile of about two seconds.
    run(python_subprocess, """
        xs = [torch.randn(64 + i, 33) for i in range(24)]
        fns = [torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.atan, torch.erf,
               torch.nn.functional.silu, torch.nn.functional.softsign]
        def chain(t, i):
            for k in range(60):
                t = fns[(i * 7 + k) % 8](t * 0.5) + t * (0.25 + k / 1000)
            return t
        ys = [chain(x.to("lazy"), i) for i, x in enumerate(xs)]
        lazyfuse.reset_metrics()
        interrupt_after(0.3)
        assert interrupted(lazyfuse.mark_step)
        m = lazyfuse.metrics()
        assert m["KernelsCompiled"] == 0 and m["GraphsExecuted"] == 0, m
        cache = os.environ["LAZYFUSE_CACHE_DIR"]
        left = os.listdir(cache) if os.path.isdir(cache) else []
        assert not any(".cpp." in f or ".so." in f for f in left), left  # no temporary files
        for i, (x, y) in enumerate(zip(xs, ys)):
            torch.testing.assert_close(y.cpu(), chain(x, i))
        print("ok")
    """, tmp_path)
