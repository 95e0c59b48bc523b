"""Fused row loops over short rows and over transposed inputs against eager PyTorch, with
LAZYFUSE_FUSION=always so even small graphs are compiled."""

import math

import pytest
import torch
import torch.nn.functional as F

from fused_checks import check, edge_tensor, tolerances


@pytest.fixture(autouse=True)
def always_fuse(monkeypatch):
    monkeypatch.setenv("LAZYFUSE_FUSION", "always")
    yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cols", [2, 3, 7, 10, 15, 16, 17])
def test_folds_shorter_than_a_vector_match_eager(cols, dtype):
    # Folds over fewer elements than one vector holds (a cross-entropy over 10 classes): the
    # vector loop is all remainder; NaN, infinities and the last element each count once.
    x = edge_tensor((37, cols), dtype, cols)
    x[5, -1] = math.nan
    x[6] = -math.inf
    x[7, -1] = math.inf
    labels = torch.arange(37) % cols
    check(lambda t: (t.log_softmax(1), t.amax(1), t.amin(1), t.sum(1), (t / 4).exp().sum(1),
                     (t / 8).nan_to_num(0.5, 2.0, -2.0).prod(1), t.max(1).values),
          x, **tolerances(dtype))
    if dtype != torch.bfloat16:
        y = torch.randn(37, cols, dtype=dtype)
        check(lambda t, target: F.cross_entropy(t, target), y, labels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
@pytest.mark.parametrize("shape", [(70, 150), (150, 70), (3, 33, 131), (16, 64), (1, 300), (300, 2)],
                         ids=str)
def test_transposed_inputs_run_in_tiles_like_eager(shape, dtype):
    # Note [Tiled loops]: an input read transposed is staged in tiles of whole rows; sizes that
    # are no multiple of the tile, a batch dimension, and rows split between threads.
    x = edge_tensor(shape[:-2] + (shape[-1], shape[-2]), dtype, 21)
    y = edge_tensor(shape, dtype, 22)
    check(lambda a, b: (a.transpose(-1, -2).exp() * 0.5 + b, a.transpose(-1, -2).neg()),
          x, y, **tolerances(dtype))
