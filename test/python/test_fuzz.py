"""Differential fuzzer: random small programs run eagerly and on the lazy device, in lockstep.

A program is a list of Python statements over tensors named t0, t1, ... built from a seed
(`random.Random(seed)`, inputs from torch generators seeded from it): inputs of mixed dtypes
(float32, float64, int64, bool), views (slices with steps, select, narrow, transpose, permute,
view/reshape, unsqueeze/squeeze, expand, diagonal, unfold, as_strided, flatten, chunk, unbind),
in-place ops on views and bases (add_, mul_, copy_, fill_, zero_, clamp_, masked_fill_,
index_add_, index_copy_, slice and mask assignment, out=), out-of-place pointwise ops with
broadcasting and dtype promotion, reductions (sum, mean, amax, amin, argmax, softmax), matmul,
deletions, and syncs (`lazyfuse.mark_step()`, `lazyfuse.sync(...)`, `.cpu()` of an
intermediate, `.item()`). The program is built first, against an eager shadow run that keeps
its steps valid, then run twice from the same inputs: on the reference device (eager) and on
lazy copies, step by step. After each step the new tensor's dtype, shape, strides, storage
offset and contiguity must be eager's; at each sync point (and at the end) the values of every
live tensor too. A step that raises eagerly must raise the same exception type on lazy, at the
step or at the sync that follows it; the program stops there. A lazy step or sync that raises
where eager does not is a failure. A failure prints the seed and the program as runnable Python
(set DEV to "cpu" to see eager), reduced to the steps it needs.

Writes into tensors whose elements overlap themselves (expand, unfold with step < size,
as_strided with overlapping strides, and views of those) are generated too, unless
LAZYFUSE_FUZZ_OVERLAP=0 (Note [Writes into views that overlap themselves]); on CUDA only with
LAZYFUSE_FUZZ_OVERLAP=1 (eager's own results there are races: fuzz_config.py).

Runs:
  pytest test/python/test_fuzz.py           # CI: test_fuzz_fixed_seeds, a fixed list of seeds
  LAZYFUSE_FUZZ_PROGRAMS=500 LAZYFUSE_FUZZ_SEED=10000 pytest -s test/python/test_fuzz.py
                                            # long mode: 500 programs from seed 10000 instead
                                            # (default start 1000000), each failing seed
                                            # reported, the test failing at the end if any did
Other variables: LAZYFUSE_FUZZ_OVERLAP=0 (no writes into overlapping views),
LAZYFUSE_FUZZ_KNOWN_BUGS=1 (also the cases of the known bugs listed at KNOWN_BUGS in
fuzz_config.py, which are left out otherwise), LAZYFUSE_FUZZ_STEPS=N (ops per program, default
24), LAZYFUSE_FUZZ_REDUCE=0 (print failing programs unreduced). A program picks
LAZYFUSE_FUSION=always (fused kernels) or auto (small graphs run node by node) from its seed,
unless LAZYFUSE_FUSION is set. With -s the tests print how many programs and steps ran.

Modules: fuzz_config (the settings above), fuzz_program (steps and programs), fuzz_tensors (the
layout facts of tensors), fuzz_generator (the generator, with its step builders in fuzz_views,
fuzz_writes and fuzz_compute), fuzz_runner (lockstep runs, comparisons, reduction).
"""

import time

import pytest

from fuzz_config import LONG_PROGRAMS, LONG_START, OVERLAP
from fuzz_generator import generate
from fuzz_runner import STATS, check_seed

# Chosen so that the batch takes about 2 minutes on a 2-core CPU machine (115 s with an empty
# kernel cache; pytest -s prints the totals).
FIXED_SEEDS = list(range(1, 451))


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    start = time.monotonic()
    yield
    print(f"\nfuzz: {STATS['programs']} programs, {STATS['steps']} steps run "
          f"({STATS['syncs']} sync points, {STATS['raised']} programs ended by an eager error, "
          f"{STATS['failed']} failed) in {time.monotonic() - start:.1f} s"
          f"{' (with writes into overlapping views)' if OVERLAP else ''}")


@pytest.mark.skipif(LONG_PROGRAMS > 0, reason="LAZYFUSE_FUZZ_PROGRAMS runs the long mode instead")
@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fuzz_fixed_seeds(seed):
    report = check_seed(seed)
    assert report is None, report


@pytest.mark.skipif(LONG_PROGRAMS == 0, reason="long mode: set LAZYFUSE_FUZZ_PROGRAMS=N")
def test_fuzz_long():
    failures = []
    for seed in range(LONG_START, LONG_START + LONG_PROGRAMS):
        report = check_seed(seed)
        if report is not None:
            print(f"\n==== FAILED {report}\n", flush=True)
            failures.append(seed)
    assert not failures, f"{len(failures)} failing seeds: {failures}"


def test_generator_is_deterministic():
    assert generate(12345).text() == generate(12345).text()
