"""index_select, embedding and embedding_dense_backward against the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_checks import randn, run
from op_utils import check

A = torch.ops.aten


def indices(*shape, high=10, dtype=torch.int64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=gen, dtype=dtype)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool]
)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(dim, dtype):
    x = (randn(5, 6, 7) * 5).to(dtype)
    check(lambda t, i: torch.index_select(t, dim, i), x, indices(9, high=5))


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_select_forms(index_dtype):
    x = randn(6, 8)
    i = indices(4, high=6, dtype=index_dtype)
    check(lambda t, ii: t.t().index_select(1, ii), x, i)  # non-contiguous self
    check(lambda t, ii: t.index_select(0, ii[0]), x, i)  # 0-d index
    check(lambda t, ii, o: torch.index_select(t, 0, ii, out=o), x, i, torch.empty(0))
    check(lambda t, ii: t.index_select(0, ii), randn(()), torch.tensor([0]))
    check(lambda t, ii: t.index_select(0, ii), x, torch.empty(0, dtype=torch.int64))
    run(lambda t, ii: t.index_select(1, ii), x, i, grad=[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("index_shape", [(7,), (3, 4), (2, 3, 2)], ids=str)
def test_embedding(index_shape, dtype):
    w = randn(10, 5, dtype=dtype)
    run(lambda ww, ii: F.embedding(ii, ww), w, indices(*index_shape), grad=[0])


@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_embedding_backward(padding_idx, scale_grad_by_freq, index_dtype):
    w = randn(6, 4)
    i = indices(5, 4, high=6, dtype=index_dtype)  # with repeats and the padding index
    run(
        lambda ww, ii: F.embedding(
            ii, ww, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq
        ),
        w,
        i,
        grad=[0],
    )


@pytest.mark.parametrize("padding_idx, scale", [(-1, False), (2, True), (0, False)])
def test_embedding_dense_backward_op(padding_idx, scale):
    g, i = randn(3, 5, 4), indices(3, 5, high=7)
    check(lambda gg, ii: A.embedding_dense_backward(gg, ii, 7, padding_idx, scale), g, i)


def test_embedding_module():
    emb = torch.nn.Embedding(12, 6, padding_idx=0)
    i = indices(4, 5, high=12)
    run(lambda w, ii: F.embedding(ii, w, padding_idx=0), emb.weight.detach(), i, grad=[0])
