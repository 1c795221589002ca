"""Reflection, replication and circular padding (1d/2d/3d), forward and backward, against
the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_checks import randn, run
from op_utils import check

A = torch.ops.aten

# (input shape, pad)
CASES = [
    ((2, 3, 7), (2, 3)),
    ((2, 3, 7), (-1, 2)),
    ((2, 3, 5, 6), (1, 2, 3, 0)),
    ((3, 5, 6), (2, 2, 1, 1)),
    ((1, 2, 3, 4, 5), (1, 2, 0, 3, 2, 1)),
]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", CASES, ids=str)
def test_pad(mode, shape, pad):
    run(lambda t: F.pad(t, pad, mode=mode), randn(*shape), grad=[0])


def test_replicate_wider_than_input():
    run(lambda t: F.pad(t, (5, 7, 4, 0), mode="replicate"), randn(2, 3, 3, 2), grad=[0])


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_pad_dtypes(mode, dtype):
    run(lambda t: F.pad(t, (1, 2, 2, 1), mode=mode), randn(2, 3, 5, 6, dtype=dtype), grad=[0])


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_integers_and_complex(mode):
    check(lambda t: F.pad(t, (1, 2, 2, 1), mode=mode), torch.randint(-9, 9, (2, 3, 5, 6)))
    check(lambda t: F.pad(t, (2, 1), mode=mode), torch.randint(0, 255, (2, 5), dtype=torch.uint8))
    check(lambda t: F.pad(t, (1, 2, 2, 1), mode=mode), torch.randn(2, 4, 5, dtype=torch.cfloat))


def test_pad_noncontiguous():
    x = randn(2, 3, 6, 10)[:, :, 1:, ::2]
    run(lambda t: F.pad(t, (1, 2, 2, 1), mode="reflect"), x, grad=[0])
    y = randn(2, 4, 5, 3).transpose(1, 3)
    run(lambda t: F.pad(t, (1, 2, 2, 1), mode="replicate"), y, grad=[0])


def test_pad_out_variants():
    x = randn(2, 3, 5, 6)
    out = torch.empty(2, 3, 8, 9)
    check(lambda t, o: A.reflection_pad2d.out(t, (1, 2, 2, 1), out=o), x, out)
    check(lambda t, o: A.replication_pad2d.out(t, (1, 2, 2, 1), out=o), x, out)
