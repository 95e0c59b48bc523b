"""One configuration (Note [Configuration]): every environment variable is read in
lazy_ir/config.cpp (the library) or python/lazyfuse/_library.py (the package), and the README's
configuration table lists exactly what lazyfuse.config() reports."""

import pathlib
import re

import pytest
import torch

import lazyfuse

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_rows():
    text = (ROOT / "README.md").read_text()
    section = text.split("### Configuration", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([A-Z_]+)` \| (.*) \| (.*) \| (.*) \| (.*) \|$", line)
        if m:
            unescape = lambda t: t.replace("\\|", "|")
            rows[m.group(1)] = tuple(unescape(g) for g in m.groups()[1:])
    return rows


def test_readme_lists_every_setting():
    table = {name: (r["values"], r["default"], r["read"], r["effect"])
             for name, r in lazyfuse.config().items()}
    assert readme_rows() == table


def test_no_environment_read_elsewhere():
    readers = []
    for folder in ("backend", "lazy_ir", "lowering", "kernels"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".cpp", ".h") and "getenv" in path.read_text():
                readers.append(str(path.relative_to(ROOT)))
    for path in (ROOT / "python" / "lazyfuse").rglob("*.py"):
        text = path.read_text()
        if "os.environ" in text or "getenv" in text:
            readers.append(str(path.relative_to(ROOT)))
    assert sorted(readers) == ["lazy_ir/config.cpp", "python/lazyfuse/__init__.py",
                               "python/lazyfuse/_library.py"]


def test_reports_current_values(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    monkeypatch.delenv("LAZYFUSE_CUDA_GRAPHS", raising=False)
    config = lazyfuse.config()
    assert config["LAZYFUSE_FUSION"]["value"] == "always"
    assert config["LAZYFUSE_FUSION"]["read"] == "each graph"
    assert config["LAZYFUSE_CUDA_GRAPHS"]["value"] is None


def test_a_plan_cached_under_one_fusion_setting_does_not_serve_another(monkeypatch):
    # The same graph, first with fusion off, then always: the second sync makes a fused plan
    # rather than running the unfused one the first cached.
    base = torch.arange(5 * 11, dtype=torch.float32).reshape(5, 11)
    launched = []
    for mode in ("0", "always", "0"):
        monkeypatch.setenv("LAZYFUSE_FUSION", mode)
        before = lazyfuse.metrics().get("KernelsLaunched", 0)
        y = ((base.to("lazy") - 0.25) * 3.0).cos()
        torch.testing.assert_close(y.cpu(), ((base - 0.25) * 3.0).cos())
        launched.append(lazyfuse.metrics().get("KernelsLaunched", 0) - before)
    assert launched[0] == 0 and launched[1] > 0 and launched[2] == 0, launched


@pytest.mark.parametrize("mode,fused", [("0", False), ("off", False), ("always", True),
                                        ("1", True)])
def test_fusion_switch_read_at_each_graph(monkeypatch, mode, fused):
    monkeypatch.setenv("LAZYFUSE_FUSION", mode)
    lazyfuse.reset_metrics()
    # A shape no other test uses, so the graph is new and its plan is made under `mode`.
    x = torch.arange(7 * 13, dtype=torch.float32, device="lazy").reshape(7, 13)
    y = ((x + 1.5) * 2.0).sin()
    expected = ((torch.arange(7 * 13, dtype=torch.float32).reshape(7, 13) + 1.5) * 2.0).sin()
    plan = lazyfuse.dump_ir(y, "plan")
    assert ("kernels=0" not in plan) == fused, plan
    torch.testing.assert_close(y.cpu(), expected)
