#!/usr/bin/env python3
"""Exports a small model with torch.export and writes it as a lazyfuse ahead-of-time package,
with inputs and eager PyTorch's outputs for the C++ program in examples/cpp/aot_main.cpp to run
and check against:

    python examples/aot/export_model.py OUT
    build/examples-cpp/lazyfuse_aot_example OUT/model.lfpkg OUT/inputs.pt OUT/expected.pt
"""

import pathlib
import sys

import torch
from torch import nn

import lazyfuse


class Classifier(nn.Module):
    """Two Linear layers with GELU and LayerNorm between them, and a softmax head."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.norm = nn.LayerNorm(128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = self.norm(torch.nn.functional.gelu(self.fc1(x)))
        return self.fc2(h).softmax(-1)


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "aot-example")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = Classifier().eval()
    example = torch.randn(32, 64)
    exported = torch.export.export(model, (example,))
    lazyfuse.aot_compile(exported, out / "model.lfpkg")

    x = torch.randn(32, 64)
    with torch.no_grad():
        expected = model(x)
    torch.save([x], out / "inputs.pt")
    torch.save([expected], out / "expected.pt")
    # The same package from Python, as a check that both sides agree.
    loaded = lazyfuse.aot_load(out / "model.lfpkg")
    torch.testing.assert_close(loaded(x), expected)
    print(f"wrote {out / 'model.lfpkg'} ({(out / 'model.lfpkg').stat().st_size} bytes)")


if __name__ == "__main__":
    main()
