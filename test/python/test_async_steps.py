"""mark_step() with LAZYFUSE_ASYNC=1: the step runs on a worker thread while the program records the
next one, and every result matches eager CPU. See Note [Asynchronous steps]."""

import copy
import statistics
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazyfuse

pytestmark = pytest.mark.skipif(lazyfuse.hardware_device() != "cpu",
                                reason="asynchronous steps run on the CPU only")


@pytest.fixture(autouse=True)
def async_steps(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_ASYNC", "1")
    yield
    lazyfuse.wait()


def async_count():
    return lazyfuse.metrics().get("AsyncSteps", 0)


def test_training_steps_match_eager_and_run_on_the_worker():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.GELU(), nn.Linear(32, 4))
    ref = copy.deepcopy(model)
    lazy = copy.deepcopy(model).to("lazy")
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    xl, yl = x.to("lazy"), y.to("lazy")
    opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    before = async_count()
    losses, ref_losses = [], []
    for _ in range(5):
        opt.zero_grad()
        loss = F.cross_entropy(lazy(xl), yl)
        loss.backward()
        opt.step()
        lazyfuse.mark_step()  # returns while the step runs; the next one is recorded meanwhile
        losses.append(loss)
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.detach())
    lazyfuse.wait()  # takes the last step's results
    assert async_count() - before == 5
    torch.testing.assert_close(torch.stack([l.cpu() for l in losses]), torch.stack(ref_losses))
    for p, q in zip(lazy.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q)
    for p, q in zip(lazy.buffers(), ref.buffers()):  # BatchNorm's running stats, assigned in place
        torch.testing.assert_close(p.cpu(), q)


def test_ops_recorded_on_a_step_in_flight_read_its_results():
    x = torch.randn(256, 256)
    lazy = x.to("lazy")
    before = async_count()
    w = (lazy * 0.5).exp().sin()
    lazyfuse.mark_step()
    v = w.sum(0) + w[0]  # recorded while the step that computes w may still run
    u = w.t() @ w
    lazyfuse.mark_step()
    lazyfuse.wait()
    assert async_count() - before == 2
    expected = (x * 0.5).exp().sin()
    torch.testing.assert_close(v.cpu(), expected.sum(0) + expected[0], rtol=1e-5, atol=1e-5)
    # The worker's matmul runs on one thread: another summation order than eager's.
    torch.testing.assert_close(u.cpu(), expected.t() @ expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(w.cpu(), expected)


def test_cache_written_in_place_across_steps():
    cache = torch.zeros(4, 8, 6)
    lazy_cache = cache.to("lazy")
    for t in range(8):
        row = torch.full((4, 1, 6), float(t + 1))
        pos = torch.tensor([t])
        cache.index_copy_(1, pos, row)
        lazy_cache.index_copy_(1, pos.to("lazy"), row.to("lazy"))
        lazyfuse.mark_step()
    torch.testing.assert_close(lazy_cache.cpu(), cache)
    assert lazyfuse.metrics()["AsyncSteps"] > 0


def test_an_error_surfaces_at_the_next_sync_and_the_process_goes_on():
    x = torch.randn(5).to("lazy")
    bad = x[torch.tensor([7]).to("lazy")]  # out of range: known only when the step runs
    lazyfuse.mark_step()
    with pytest.raises(IndexError, match="out of bounds"):  # eager's exception
        lazyfuse.wait()
    with pytest.raises(RuntimeError, match="out of bounds"):  # the value it left broken
        bad.cpu()
    y = torch.arange(4.0).to("lazy") * 3
    lazyfuse.mark_step()
    torch.testing.assert_close(y.cpu(), torch.arange(4.0) * 3)


def test_a_loop_that_never_syncs_is_cut_on_the_worker():
    torch.manual_seed(0)
    lin = nn.Linear(8, 8).to("lazy")
    ref = nn.Linear(8, 8)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    x = torch.randn(4, 8)
    xl = x.to("lazy")
    before = async_count()
    with torch.no_grad():
        for _ in range(120):
            lin.weight.mul_(0.99).add_(lin(xl).mean() * 1e-3)
            ref.weight.mul_(0.99).add_(ref(x).mean() * 1e-3)
    torch.testing.assert_close(lin.weight.cpu(), ref.weight, rtol=1e-4, atol=1e-5)
    assert async_count() > before  # the trace was cut at its repeated step, asynchronously


def test_a_step_the_program_always_waits_for_runs_synchronously():
    # Waiting right after each mark_step() (a loss read at once) waits for the whole run: a run
    # on the main thread, on all threads, costs the program less, and after its first runs (on
    # the worker, then timed on the main thread) the plan runs there.
    def step(x):  # compute-bound, in the cache: faster on two threads than on one
        for _ in range(4):
            x = (x * 0.5).sin().exp().cos().tanh()
        return x

    x = torch.randn(256, 1024)
    xl = x.to("lazy")
    counts = []
    for _ in range(20):  # judged after 12 runs, then kept for 200
        xl = step(xl)
        lazyfuse.mark_step()
        lazyfuse.wait()
        counts.append(async_count())
    assert counts[-1] - counts[-6] == 0  # the last steps ran synchronously
    assert counts[-1] - counts[0] > 0  # the first ones on the worker
    for _ in range(20):
        x = step(x)
    torch.testing.assert_close(xl.cpu(), x)


def test_a_step_that_overlaps_the_next_recording_stays_on_the_worker(monkeypatch):
    # A decoding loop: the program records the next step while this one runs, and waits for
    # part of the run at the next mark_step(). On one thread in both places, a run on the main
    # thread costs the program the whole run, the worker only what the recording did not cover:
    # the plan stays on the worker (with the wait above half the run, as here, it used to be
    # judged synchronous).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(1024, 1024)
        xl = x.to("lazy")
        monkeypatch.setenv("LAZYFUSE_ASYNC", "0")
        runs = []
        for _ in range(5):
            xl = (xl * 0.5).sin().exp().cos().tanh().sin()
            start = time.perf_counter()
            lazyfuse.mark_step()  # runs the step on this thread
            runs.append(time.perf_counter() - start)
            x = (x * 0.5).sin().exp().cos().tanh().sin()
        monkeypatch.setenv("LAZYFUSE_ASYNC", "1")
        run = statistics.median(runs)
        counts = []
        for _ in range(24):
            xl = (xl * 0.5).sin().exp().cos().tanh().sin()
            lazyfuse.mark_step()
            time.sleep(0.35 * run)  # the recording of the next step: less than half the run
            counts.append(async_count())
        lazyfuse.wait()
        for _ in range(24):
            x = (x * 0.5).sin().exp().cos().tanh().sin()
        assert counts[-1] - counts[-9] == 8  # judged after the first 12 runs: on the worker
        torch.testing.assert_close(xl.cpu(), x)
    finally:
        torch.set_num_threads(threads)


def _child_reads_and_steps(in_flight, queue):
    """In a forked child: the parent's value that was in flight at the fork, and a step of its
    own on the worker the child starts."""
    own = torch.arange(4.0, device="lazy") * 3
    lazyfuse.mark_step()
    queue.put((in_flight.cpu().tolist(), own.cpu().tolist()))


def test_a_forked_child_takes_the_step_in_flight_and_runs_its_own():
    """A fork (a DataLoader's workers) while a step runs on the worker: the child reads that
    step's results and runs steps of its own (it waited forever before), and so does the parent."""
    import multiprocessing

    lazyfuse.mark_step()
    lazyfuse.wait()
    value = torch.arange(4.0, device="lazy") + 1
    lazyfuse.mark_step()  # in flight while the child is forked
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_reads_and_steps, args=(value, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
    assert queue.get(timeout=5) == ([1.0, 2.0, 3.0, 4.0], [0.0, 3.0, 6.0, 9.0])
    again = value * 2
    lazyfuse.mark_step()
    assert again.cpu().tolist() == [2.0, 4.0, 6.0, 8.0]
