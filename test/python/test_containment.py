"""Loading lazyfuse changes nothing for programs without lazy tensors: the CPU programs of
containment_programs.py (make_fx real/fake/symbolic, torch.compile with aot_eager and inductor,
torch.func transforms and functionalize, torch.export, serialization, optimizers, warnings)
compute, trace and warn the same with lazyfuse loaded as without it.
See Note [Lazy-only kernels on Functionalize]."""

import os
import subprocess
import sys

import pytest

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "containment_programs.py")


def run_programs(loaded):
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if loaded else "0"
    proc = subprocess.run([sys.executable, PROGRAMS], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"lazyfuse loaded: {loaded}" in proc.stderr, proc.stderr[-3000:]
    blocks = {}
    for block in proc.stdout.split("== ")[1:]:
        name, _, text = block.partition("\n")
        blocks[name] = text
    return blocks


@pytest.fixture(scope="module")
def both_runs():
    return run_programs(loaded=False), run_programs(loaded=True)


def program_names():
    sys.path.insert(0, os.path.dirname(PROGRAMS))
    import containment_programs

    return list(containment_programs.PROGRAMS)


@pytest.mark.parametrize("name", program_names())
def test_cpu_program_unchanged_by_lazyfuse(both_runs, name):
    without, with_lazyfuse = both_runs
    assert name in without and name in with_lazyfuse, (sorted(without), sorted(with_lazyfuse))
    assert with_lazyfuse[name] == without[name]
