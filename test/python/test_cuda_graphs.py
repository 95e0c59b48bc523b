"""CUDA graph replay (Note [CUDA graph replay] in backend/plan_replay.cpp): a plan that keeps
running with its inputs in place is captured once and then replayed. Without a GPU the tests run
under CUDA emulation, where a capture records the run's launches and extern calls and a replay
runs them again over the same memory: the same decisions as on a GPU (which inputs are read in
place and which copied, new kernel scalars, outputs handed out or copied, donations checked
again), held to eager's values. With a GPU the same tests capture real CUDA graphs."""

import pytest
import torch

import lazyfuse
from helpers import INDEXES_OUT_OF_RANGE, REFERENCE, base, to_cpu


@pytest.fixture(autouse=True)
def cuda_target(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    monkeypatch.delenv("LAZYFUSE_CUDA_GRAPHS", raising=False)
    if lazyfuse.hardware_device() == "cpu":
        monkeypatch.setenv("LAZYFUSE_CUDA_EMULATION", "1")
    torch.ops.lazyfuse.clear_graph_cache()  # plans cached by earlier tests hold CPU kernels
    lazyfuse.reset_metrics()
    yield
    torch.ops.lazyfuse.clear_graph_cache()


def counter(name):
    return lazyfuse.metrics().get(name, 0)


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.Tanh(), torch.nn.Linear(48, 6))


def batch(step, rows=16):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(rows, 24, generator=g), torch.randint(0, 6, (rows,), generator=g)


def train(device, make_optimizer, steps, schedule=None):
    """Trains mlp() on `device` for `steps` steps; the parameters and every step's loss, on the
    CPU. The losses are kept as the loop goes, as a training loop that logs them does."""
    model = mlp().to(device)
    opt = make_optimizer(model.parameters())
    sched = schedule(opt) if schedule else None
    losses = []
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        if device.type == "lazy":
            lazyfuse.mark_step()
        losses.append(loss.detach())
    return [to_cpu(p.detach()) for p in model.parameters()], [to_cpu(l) for l in losses]


def assert_trains_like_eager(make_optimizer, steps=9, schedule=None):
    expected = train(REFERENCE, make_optimizer, steps, schedule)
    lazyfuse.reset_metrics()
    got = train(torch.device("lazy"), make_optimizer, steps, schedule)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert counter("CudaGraphMismatches") == 0
    assert counter("CudaGraphCaptureFailures") == 0


def test_adam_training_steps_are_replayed_with_new_bias_corrections():
    # Adam's bias corrections are kernel scalars that change every step; the data batch is a new
    # tensor each step (copied in), parameters and state stay in place (donated).
    assert_trains_like_eager(lambda ps: torch.optim.Adam(ps, lr=1e-2))
    assert counter("CudaGraphsCaptured") >= 1
    assert counter("CudaGraphReplays") >= 4


def test_sgd_with_a_learning_rate_schedule_is_replayed():
    assert_trains_like_eager(
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        schedule=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)))
    assert counter("CudaGraphReplays") >= 4


def test_a_loop_that_only_reads_its_loss_is_replayed():
    # No mark_step(): each step's loss.item() syncs one graph (the last step's backward and
    # update, this step's forward) that stores the parameters, optimizer state and activations
    # for the next one (Note [Values a sync keeps for later]). Its outputs are held by the next
    # step's graph, so replays copy them out of the graph's memory.
    def run(device):
        model = mlp().to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for step in range(10):
            x, y = batch(step)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [to_cpu(p.detach()) for p in model.parameters()]

    expected = run(REFERENCE)
    lazyfuse.reset_metrics()
    got = run(torch.device("lazy"))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert counter("CudaGraphReplays") >= 3
    assert counter("CudaGraphMismatches") == 0
    assert counter("CudaGraphCaptureFailures") == 0


def test_training_is_the_same_without_replay(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_CUDA_GRAPHS", "0")
    assert_trains_like_eager(lambda ps: torch.optim.Adam(ps, lr=1e-2), steps=6)
    assert counter("CudaGraphsCaptured") == 0
    assert counter("CudaGraphReplays") == 0


def inference(device, steps, keep, wide=False):
    """A small network on a new batch each step; the outputs of the last step or, with `keep`,
    of every step, or with keep="last" of the last step, dropped only once the next one ran.
    Its outputs are small (copied out of the graph's memory), or with `wide` large (handed out
    as the graph's own memory)."""
    model = mlp(seed=3).to(device)
    w = base((24, 128), seed=9).to(device)
    outputs = []
    with torch.no_grad():
        for step in range(steps):
            x = base((4096 if wide else 512, 24), seed=step).to(device)
            if not keep:
                outputs = []  # the last step's output is dropped before this one runs
            y = torch.relu(x @ w) * 2 if wide else torch.relu(model(x)) * 2
            y = y + x.sum(1, keepdim=True)
            if device.type == "lazy":
                lazyfuse.sync(y)
            if keep == "last":
                outputs = []
            outputs.append(y)
    return [to_cpu(y) for y in outputs]


@pytest.mark.parametrize("wide", [False, True], ids=["copied_out", "handed_out"])
@pytest.mark.parametrize("keep", [False, "last", True], ids=["dropped", "last", "kept"])
def test_inference_on_new_batches_is_replayed_unless_it_would_overwrite_a_kept_output(keep, wide):
    expected = inference(REFERENCE, 7, keep=keep, wide=wide)
    lazyfuse.reset_metrics()
    got = inference(torch.device("lazy"), 7, keep=keep, wide=wide)
    torch.testing.assert_close(got, expected)
    # Replays after two runs and the capture, but none while a large output handed out (the
    # graph's own memory) is still held: kept for good, none; the last one still held while
    # the next step runs, one step without replay, and then its output is copied out. The
    # model's first step is a graph of its own: it also stores the parameters, which the
    # module holds as pending detaches of the data `.to()` copied (Note [Values a sync keeps
    # for later]), so its steady graph runs from the second step.
    replays = {False: 4, "last": 3, True: 0} if wide else {False: 3, "last": 3, True: 3}
    assert counter("CudaGraphReplays") == replays[keep]
    assert counter("CudaGraphMismatches") == 0


def test_an_input_read_in_place_that_moves_is_captured_again():
    w = base((64, 64), seed=1)
    lazy_w = w.to("lazy")
    lazyfuse.sync(lazy_w)
    expected, got = [], []
    for step in range(9):
        x = base((64, 64), seed=50 + step)
        if step == 5:  # the weight is replaced: the graph read it in place
            w = w * 0.5
            lazy_w = w.to("lazy")
            lazyfuse.sync(lazy_w)
        expected.append(torch.tanh(x @ w) + 1)
        y = torch.tanh(x.to("lazy") @ lazy_w) + 1
        lazyfuse.sync(y)
        got.append(to_cpu(y))
    torch.testing.assert_close(got, expected)
    assert counter("CudaGraphsCaptured") == 2
    assert counter("CudaGraphMismatches") == 0


def test_changed_extern_scalars_are_never_replayed_stale():
    bias, a, b = base((32, 16), seed=1), base((32, 8), seed=2), base((8, 16), seed=3)
    lazy = [t.to("lazy") for t in (bias, a, b)]
    for t in lazy:
        lazyfuse.sync(t)
    for step in range(8):
        alpha = 1.0 if step < 5 else 0.5 * step  # baked into the extern addmm call
        expected = to_cpu(torch.addmm(*(t.to(REFERENCE) for t in (bias, a, b)), alpha=alpha).exp())
        y = torch.addmm(*lazy, alpha=alpha).exp()
        torch.testing.assert_close(to_cpu(y), expected)
    assert counter("CudaGraphReplays") >= 1
    assert counter("CudaGraphMismatches") == 0


def test_an_alias_of_donated_state_follows_it_as_in_eager():
    params = [torch.nn.Parameter(base((40, 30), seed=i).to("lazy")) for i in range(2)]
    eager = [torch.nn.Parameter(base((40, 30), seed=i)) for i in range(2)]
    opts = [torch.optim.SGD(ps, lr=0.1, momentum=0.9) for ps in (params, eager)]
    held = held_expected = None
    for step in range(9):
        for p, e in zip(params, eager):
            g = base((40, 30), seed=100 + step)
            p.grad, e.grad = g.to("lazy"), g.clone()
        if step == 5:  # an alias of the state the replays write in place, as eager's is
            held, held_expected = params[0].detach(), eager[0].detach()
        for opt in opts:
            opt.step()
        lazyfuse.mark_step()
        if held is not None:
            torch.testing.assert_close(to_cpu(held), held_expected)
    torch.testing.assert_close([to_cpu(p.detach()) for p in params], [e.detach() for e in eager])
    assert counter("CudaGraphReplays") >= 2
    assert counter("CudaGraphMismatches") == 0


@pytest.mark.parametrize("random_op", [
    lambda x: torch.nn.functional.dropout(x, 0.5),
    lambda x: torch.nn.functional.rrelu(x, training=True),  # rrelu_with_noise: tagged only
], ids=["dropout", "rrelu"])
def test_graphs_with_random_ops_are_not_captured(random_op):
    torch.manual_seed(0)
    x = base((64, 64), seed=0).to("lazy")
    lazyfuse.sync(x)
    for _ in range(6):
        y = random_op(x) + 1
        lazyfuse.sync(y)
    assert counter("CudaGraphsCaptured") == 0


def test_the_capture_plugin_loads_beside_the_library():
    # liblazyfuse.so loads it on a GPU's first capture; here it must at least link and load.
    import ctypes
    import pathlib

    path = pathlib.Path(lazyfuse.__file__).parent / "lib" / "liblazyfuse_cuda_graphs.so"
    plugin = ctypes.CDLL(str(path))
    for name in ("begin", "end", "abort", "replay", "free"):
        assert hasattr(plugin, "lazyfuse_graph_" + name)


def test_a_host_scalar_changed_in_place_is_never_replayed_stale(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "0")  # the product is an extern call, as on a GPU
    a, b = base((16, 8), seed=1), base((8, 12), seed=2)
    lazy_a, lazy_b = a.to("lazy"), b.to("lazy")
    lazyfuse.sync(lazy_a, lazy_b)
    s = torch.tensor(2.0)  # a 0-dim CPU tensor: its value is baked into a captured call
    for step in range(8):
        if step >= 5:
            s.fill_(float(step))
        y = (lazy_a @ lazy_b) * s
        torch.testing.assert_close(to_cpu(y), (a @ b) * s)
    assert counter("CudaGraphReplays") >= 1
    assert counter("CudaGraphMismatches") == 0


def test_replay_resumes_after_a_checkpoint_held_the_parameters_for_a_step():
    # A state_dict shares the parameters' memory: while it is held they cannot be updated in
    # place, so they move; the plan is then captured anew with them read in place again.
    expected_model, model = mlp().to(REFERENCE), mlp().to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (expected_model,
                                                                          model)]
    replays_at = {}
    for step in range(16):
        x, y = batch(step)
        checkpoint = model.state_dict() if step == 6 else None
        for m, opt, device in zip((expected_model, model), opts, (REFERENCE, "lazy")):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x.to(device)), y.to(device)).backward()
            opt.step()
        lazyfuse.mark_step()
        del checkpoint
        replays_at[step] = counter("CudaGraphReplays")
    torch.testing.assert_close([to_cpu(p.detach()) for p in model.parameters()],
                               [to_cpu(p.detach()) for p in expected_model.parameters()])
    assert replays_at[15] - replays_at[10] == 5  # every step replayed again
    assert counter("CudaGraphMismatches") == 0


def test_decoding_with_a_cache_written_in_place_is_replayed():
    # Each token writes K and V rows into a preallocated cache (Note [Region writes]): both
    # writes go into the cache's own memory, and every replay writes there again.
    torch.manual_seed(0)
    w, x0 = torch.randn(8, 16) * 0.3, torch.randn(2, 8)

    def run(device, sync):
        cache = torch.zeros(2, 2, 6, 8, device=device)
        weight, x = w.to(device), x0.to(device)
        for t in range(6):
            pos = torch.tensor([t], device=device)
            k, v = (x @ weight).split(8, dim=-1)
            cache[0].index_copy_(1, pos, k.unsqueeze(1))
            cache[1].index_copy_(1, pos, v.unsqueeze(1))
            scores = (cache[0] @ x.unsqueeze(-1)).squeeze(-1)
            x = (scores.softmax(-1).unsqueeze(-1) * cache[1]).sum(1).tanh()
            sync()
        return to_cpu(x), to_cpu(cache)

    expected = run(REFERENCE, lambda: None)
    lazyfuse.reset_metrics()
    got = run(torch.device("lazy"), lazyfuse.mark_step)
    torch.testing.assert_close(got, expected)
    assert counter("CudaGraphReplays") >= 2
    assert counter("BuffersDonated") >= 2 * counter("CudaGraphReplays")
    assert counter("CudaGraphMismatches") == 0


@INDEXES_OUT_OF_RANGE
def test_a_replay_that_fails_after_writing_into_the_cache_never_gives_wrong_values():
    # The replayed plan writes a row into the held cache, then index_select raises on the last
    # step: what the step read before the write must not be computed again from the new cache.
    table, row = torch.randn(5, 3), torch.randn(1, 4)
    cache = torch.zeros(6, 4, device="lazy")
    lazy_table, lazy_row = table.to("lazy"), row.to("lazy")
    eager_cache = torch.zeros(6, 4)
    lazyfuse.mark_step()
    for t in range(6):
        index = torch.tensor([t if t < 5 else 7])
        total = cache.sum()
        want = eager_cache.sum()
        cache.index_copy_(0, torch.tensor([t], device="lazy"), lazy_row * t)
        picked = lazy_table.index_select(0, index.to("lazy"))
        if t < 5:
            eager_cache.index_copy_(0, torch.tensor([t]), row * t)
            lazyfuse.mark_step()
            torch.testing.assert_close(picked.cpu(), table.index_select(0, index))
            continue
        with pytest.raises(IndexError):
            table.index_select(0, index)
        with pytest.raises(IndexError):
            lazyfuse.mark_step()
        try:
            got = total.cpu()
        except RuntimeError:
            return
        torch.testing.assert_close(got, want)


def test_a_plan_captured_at_one_position_never_replays_at_another():
    # One plan serves every position t of `cache[:, t] = row` (Note [Positions as plan
    # arguments]), but a CUDA graph bakes the offset it captured: replay state is kept per
    # position, so t = 3 never replays what t = 2 captured.
    g = torch.Generator().manual_seed(5)
    positions = [2, 2, 2, 2, 2, 3, 2, 5, 3, 3, 3, 3, 2]
    rows = [torch.randn(3, 4, generator=g) for _ in positions]

    def run(device, sync):
        cache = torch.zeros(3, 6, 4, device=device)
        sums = []
        for t, row in zip(positions, rows):
            cache[:, t] = row.to(device).exp()
            sums.append(cache.sum(1) * 1.5)
            sync()
        return [to_cpu(s) for s in sums], to_cpu(cache)

    expected = run(REFERENCE, lambda: None)
    lazyfuse.reset_metrics()
    got = run(torch.device("lazy"), lazyfuse.mark_step)
    torch.testing.assert_close(got, expected)
    assert counter("UncachedCompile") == 2  # the first step also makes the zeros of the cache
    assert counter("CudaGraphReplays") >= 2
    assert counter("CudaGraphMismatches") == 0
