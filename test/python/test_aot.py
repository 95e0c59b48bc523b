"""Ahead-of-time packages (lazyfuse.aot_compile / aot_load; Note [Ahead-of-time packages]):
written from torch.export programs, run against eager PyTorch, in this process and in a fresh one
with no C++ compiler, and refused when damaged or built elsewhere."""

import hashlib
import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lazyfuse


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(24, 48)
        self.norm = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 6)

    def forward(self, x):
        return self.fc2(self.norm(F.gelu(self.fc1(x)))).softmax(-1)


class TwoInputs(nn.Module):
    """Structured arguments (a keyword tensor, an int) and outputs (a dict and a tuple), a weight
    read twice through different views, and an output that is a view of an intermediate."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x, y, *, scale, steps):
        h = x @ self.w + y @ self.w.t()
        for _ in range(steps):
            h = torch.tanh(h) * scale
        return {"h": h, "parts": (h.sum(0), h.t())}


def export(model, *args, **kwargs):
    return torch.export.export(model.eval(), args, kwargs)


def test_package_runs_like_eager(tmp_path):
    torch.manual_seed(0)
    model = Classifier().eval()
    path = lazyfuse.aot_compile(export(model, torch.randn(5, 24)), tmp_path / "m.lfpkg")
    loaded = lazyfuse.aot_load(path)
    for _ in range(3):
        x = torch.randn(5, 24)
        torch.testing.assert_close(loaded(x), model(x))
    # An input with other strides is laid out as the package was built for.
    xt = torch.randn(24, 5).t()
    torch.testing.assert_close(loaded(xt), model(xt))


def test_structured_arguments_and_outputs(tmp_path):
    torch.manual_seed(0)
    model = TwoInputs().eval()
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    ep = export(model, x, y, scale=torch.tensor(0.5), steps=2)
    loaded = lazyfuse.aot_load(lazyfuse.aot_compile(ep, tmp_path / "two.lfpkg"))
    x, y, s = torch.randn(4, 16), torch.randn(4, 16), torch.tensor(0.75)
    torch.testing.assert_close(loaded(x, y, scale=s, steps=2), model(x, y, scale=s, steps=2))
    with pytest.raises(ValueError, match="exported with argument 3 = 2"):
        loaded(x, y, scale=s, steps=3)
    with pytest.raises(RuntimeError, match=r"was built for input 0 of Float\[4, 16\]"):
        loaded(torch.randn(3, 16), y, scale=s, steps=2)
    with pytest.raises(RuntimeError, match="was built for input 1 of Float"):
        loaded(x, y.double(), scale=s, steps=2)
    with pytest.raises(TypeError, match="takes arguments structured as"):
        loaded(x, y, s, steps=2)


def test_fresh_process_without_a_compiler_runs_the_packaged_kernels(tmp_path):
    torch.manual_seed(0)
    model = Classifier().eval()
    path = lazyfuse.aot_compile(export(model, torch.randn(7, 24)), tmp_path / "m.lfpkg")
    x = torch.randn(7, 24)
    torch.save([x, model(x).detach()], tmp_path / "data.pt")
    script = textwrap.dedent(f"""
        import torch, lazyfuse
        x, expected = torch.load({str(tmp_path / "data.pt")!r})
        # Lazy work before the package: the CPU target is found unavailable (no compiler) ...
        torch.testing.assert_close((torch.ones(4, device="lazy") * 2).cpu(), torch.full((4,), 2.))
        # ... and the package's kernels still run.
        loaded = lazyfuse.aot_load({path!r})
        for _ in range(3):
            torch.testing.assert_close(loaded(x), expected)
        m = lazyfuse.metrics()
        print(m["KernelsCompiled"], m["KernelDiskCacheHits"], m["FusionFallback"],
              m["KernelsLaunched"])
    """)
    env = dict(os.environ, PATH="/nonexistent", LAZYFUSE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("CXX", None)
    env.pop("LAZYFUSE_CXX", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    compiled, disk_hits, fallbacks, launched = map(int, done.stdout.split())
    assert compiled == 0 and fallbacks == 0
    assert disk_hits > 0 and launched > 0


def rewrite(path, out, edit):
    """`path`'s package with its payload changed by `edit(fields)`, checksummed again."""
    data = open(path, "rb").read()
    header, payload = data.split(b"\n", 1)
    fields = list(torch.load(io.BytesIO(payload), weights_only=False))
    edit(fields)
    buf = io.BytesIO()
    torch.save(tuple(fields), buf)
    body = buf.getvalue()
    magic, fmt = header.split()[:2]
    with open(out, "wb") as f:
        f.write(b"%s %s %s %d\n" % (magic, fmt, hashlib.sha1(body).hexdigest().encode(),
                                     len(body)) + body)
    return out


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    torch.manual_seed(0)
    model = Classifier().eval()
    path = tmp_path_factory.mktemp("aot") / "m.lfpkg"
    return model, lazyfuse.aot_compile(export(model, torch.randn(5, 24)), path)


def test_damaged_files_are_refused(package, tmp_path):
    _, path = package
    data = open(path, "rb").read()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    cases = {
        "flipped": (bytes(flipped), "damaged: its payload does not match the checksum"),
        "truncated": (data[: len(data) - 100], "is damaged: its payload is"),
        "not a package": (b"PK\x03\x04" + data[4:], "is not a lazyfuse package"),
        "empty": (b"", "is not a lazyfuse package"),
    }
    for name, (content, message) in cases.items():
        bad = tmp_path / f"{name}.lfpkg"
        bad.write_bytes(content)
        with pytest.raises(RuntimeError, match=message):
            lazyfuse.aot_load(bad)
    with pytest.raises(RuntimeError, match="cannot read the lazyfuse package"):
        lazyfuse.aot_load(tmp_path / "missing.lfpkg")


@pytest.mark.parametrize("key,value,message", [
    ("lazyfuse", "0.0.1", "was built for lazyfuse 0.0.1"),
    ("torch", "1.13.0", "was built for torch 1.13.0"),
    ("arch", "riscv64", "was built for the architecture riscv64"),
])
def test_packages_built_elsewhere_are_refused(package, tmp_path, key, value, message):
    _, path = package
    other = rewrite(path, tmp_path / "other.lfpkg", lambda f: f[1].__setitem__(key, value))
    with pytest.raises(RuntimeError, match=message):
        lazyfuse.aot_load(other)


def test_kernels_of_another_cpu_are_compiled_again(package, tmp_path):
    model, path = package
    other = rewrite(path, tmp_path / "cpu.lfpkg",
                    lambda f: f[1].__setitem__("cpu", "model name: another CPU"))
    x = torch.randn(5, 24)
    torch.testing.assert_close(lazyfuse.aot_load(other)(x), model(x))


def test_unsupported_programs_say_why(tmp_path):
    bn = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).train()
    ep = torch.export.export(bn, (torch.randn(4, 8),))
    with pytest.raises(NotImplementedError, match="writes its buffers or inputs"):
        lazyfuse.aot_compile(ep, tmp_path / "bn.lfpkg")

    class ReturnsInt(nn.Module):
        def forward(self, x):
            return x + 1, 3

    ep = torch.export.export(ReturnsInt(), (torch.randn(2),))
    with pytest.raises(TypeError, match="returns a value that is not a tensor"):
        lazyfuse.aot_compile(ep, tmp_path / "int.lfpkg")
    with pytest.raises(TypeError, match="takes what torch.export.export returns"):
        lazyfuse.aot_compile(nn.Linear(2, 2), tmp_path / "module.lfpkg")


def test_factories_casts_and_views(tmp_path):
    """Factories name the device the program was exported on; outputs may be views of inputs."""

    class Program(nn.Module):
        def forward(self, x):
            grid = torch.zeros(3, 4) + x.new_ones(4) * torch.arange(4.0)
            return grid * x, x.to(torch.float64).mean(), x[1:, ::2]

    ep = torch.export.export(Program(), (torch.randn(3, 4),))
    loaded = lazyfuse.aot_load(lazyfuse.aot_compile(ep, tmp_path / "p.lfpkg"))
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x), Program()(x))


def test_outputs_have_memory_of_their_own(tmp_path):
    """Outputs that are an input, a weight or each other in the graph are copies."""

    class Renames(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 4))

        def forward(self, x):
            return x.flatten(1), x.contiguous(), self.w, x, x

    model = Renames().eval()
    loaded = lazyfuse.aot_load(lazyfuse.aot_compile(
        export(model, torch.randn(3, 4)), tmp_path / "r.lfpkg"))
    x = torch.randn(3, 4)
    keep = x.clone()
    outs = loaded(x)
    for out in outs:
        out.add_(100)
    torch.testing.assert_close(x, keep)
    torch.testing.assert_close(loaded(x), model(x))


def test_programs_that_sync_while_recorded_are_refused(tmp_path):
    class DataDependent(nn.Module):
        def forward(self, x):
            return x[x > 0].sum() + torch.nonzero(x).shape[0]

    ep = torch.export.export(DataDependent(), (torch.randn(6),))
    with pytest.raises(NotImplementedError, match="synced lazy values"):
        lazyfuse.aot_compile(ep, tmp_path / "d.lfpkg")


def test_a_program_longer_than_the_trace_limit(tmp_path, monkeypatch):
    """Automatic trace cuts are off while the program is recorded: the package holds all of it."""
    monkeypatch.setenv("LAZYFUSE_TRACE_LIMIT", "20")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(20)]).eval()
    loaded = lazyfuse.aot_load(lazyfuse.aot_compile(
        export(model, torch.randn(2, 8)), tmp_path / "deep.lfpkg"))
    x = torch.randn(2, 8)
    torch.testing.assert_close(loaded(x), model(x))


def test_keywords_in_any_order_and_export_after_load(tmp_path):
    class Keywords(nn.Module):
        def forward(self, x, *, a, b):
            return x * a - b

    ep = export(Keywords(), torch.randn(3), a=torch.randn(3), b=torch.randn(3))
    loaded = lazyfuse.aot_load(lazyfuse.aot_compile(ep, tmp_path / "k.lfpkg"))
    x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
    torch.testing.assert_close(loaded(x, b=b, a=a), x * a - b)
    # A process that loaded packaged kernels packages them again.
    again = lazyfuse.aot_load(lazyfuse.aot_compile(ep, tmp_path / "k2.lfpkg"))
    torch.testing.assert_close(again(x, a=a, b=b), x * a - b)


def test_malformed_payloads_are_damaged(package, tmp_path):
    _, path = package

    def constant_dtype(f):
        nodes = f[4]
        i = next(i for i, n in enumerate(nodes) if n[0] == "constant")
        nodes[i] = (nodes[i][0], nodes[i][1], (250,) + tuple(nodes[i][2][1:]), nodes[i][3])

    def storage_index(f):
        nodes = f[4]
        i = next(i for i, n in enumerate(nodes) if n[0] == "constant")
        nodes[i] = (nodes[i][0], 99) + tuple(nodes[i][2:])

    def forward_reference(f):
        nodes = f[4]
        i = next(i for i, n in enumerate(nodes) if n[0] == "aten" and len(n[5]))
        n = list(nodes[i])
        n[5] = [(len(nodes) + 5, 0)] + list(n[5][1:])
        nodes[i] = tuple(n)

    def output_index(f):
        f[6] = [(f[6][0][0], 7)]

    for edit in (constant_dtype, storage_index, forward_reference, output_index):
        bad = rewrite(path, tmp_path / f"{edit.__name__}.lfpkg", edit)
        with pytest.raises(RuntimeError, match="is damaged"):
            lazyfuse.aot_load(bad)(torch.randn(5, 24))


def test_a_package_others_may_write_is_run_without_its_kernels(package, tmp_path):
    model, path = package
    shared = tmp_path / "shared.lfpkg"
    shared.write_bytes(open(path, "rb").read())
    shared.chmod(0o666)
    x = torch.randn(5, 24)
    torch.testing.assert_close(lazyfuse.aot_load(shared)(x), model(x))
