"""Max, average and adaptive pooling (1d/2d/3d), forward and backward, against the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_checks import randn, run
from op_utils import check

A = torch.ops.aten

FLOATS = [torch.float32, torch.float64, torch.bfloat16]
FLOATS3D = [torch.float32, torch.float64]  # the CPU has no bfloat16 avg_pool3d
LAYOUTS = {
    "contiguous": lambda t: t,
    "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
}

# (kernel_size, stride, padding, dilation, ceil_mode)
MAX2D = [
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2), (2, 3), (1, 0), (2, 1), True),
    (2, 3, 1, 2, True),
    ((1, 4), 1, 0, 1, False),
]


# Every configuration in float32; dtypes and channels_last on a few.
def cases(configs, dtypes=FLOATS, layouts=True):
    out = [(cfg, torch.float32, "contiguous") for cfg in configs]
    out += [(configs[1], dtype, "contiguous") for dtype in dtypes if dtype != torch.float32]
    if layouts:
        out += [(configs[-2], dtype, "channels_last") for dtype in dtypes]
    return out


@pytest.mark.parametrize("cfg, dtype, layout", cases(MAX2D), ids=str)
def test_max_pool2d(cfg, dtype, layout):
    k, s, p, d, ceil = cfg
    x = LAYOUTS[layout](randn(2, 3, 9, 10, dtype=dtype))
    run(lambda t: F.max_pool2d(t, k, s, p, d, ceil_mode=ceil, return_indices=True), x, grad=[0])


def test_max_pool2d_unbatched():
    run(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), randn(3, 7, 8), grad=[0])


def test_max_pool2d_ties_nan_inf():
    # Ties keep the first index, NaN wins (the last NaN of a window), -inf windows point at
    # their first element: PyTorch's scan order.
    x = torch.tensor(
        [
            [1.0, 1.0, 2.0, 2.0, 0.0],
            [float("nan"), 1.0, 2.0, float("nan"), 0.0],
            [float("-inf"), float("-inf"), 5.0, 5.0, float("nan")],
            [float("-inf"), float("-inf"), 5.0, 5.0, float("nan")],
        ]
    )
    x = x.view(1, 1, 4, 5)
    run(lambda t: F.max_pool2d(t, 2, 1, return_indices=True), x, grad=[0])
    run(lambda t: F.max_pool2d(t, 2, 2, 1, ceil_mode=True, return_indices=True), x, grad=[0])
    run(lambda t: F.adaptive_max_pool2d(t, (3, 2), return_indices=True), x, grad=[0])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_max_pool2d_integers(dtype):
    x = torch.randint(-50, 50, (2, 3, 6, 7), dtype=dtype)
    check(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), x)


@pytest.mark.parametrize("ceil", [False, True])
def test_max_pool1d(ceil):
    x = randn(2, 3, 11)
    run(lambda t: F.max_pool1d(t, 3, 2, 1, ceil_mode=ceil, return_indices=True), x, grad=[0])
    run(lambda t: F.max_pool1d(t, 2, dilation=2), x, grad=[0])


MAX3D = [
    (2, None, 0, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2, 2), (2, 1, 2), (1, 0, 1), (1, 2, 1), False),
]


@pytest.mark.parametrize("cfg, dtype, layout", cases(MAX3D, layouts=False), ids=str)
def test_max_pool3d(cfg, dtype, layout):
    k, s, p, d, ceil = cfg
    x = randn(2, 2, 6, 7, 8, dtype=dtype)
    run(lambda t: F.max_pool3d(t, k, s, p, d, ceil_mode=ceil, return_indices=True), x, grad=[0])


def test_max_pool_non_contiguous():
    x = randn(2, 3, 10, 12)
    run(lambda t: F.max_pool2d(t.transpose(2, 3), 3, 2, 1, return_indices=True), x)
    run(lambda t: F.max_pool2d(t[:, :, ::2], 2, return_indices=True), x)


def test_pool_out_variants():
    x = randn(2, 3, 8, 9)
    check(
        lambda t, o, i: torch._C._nn.max_pool2d_with_indices(t, 3, 2, 1, out=(o, i)),
        x,
        torch.empty(0),
        torch.empty(0, dtype=torch.int64),
    )
    # adaptive_avg_pool2d.out has a CPU kernel but no meta kernel: it can only fall back.
    check(
        lambda t, o: torch._C._nn.adaptive_avg_pool2d(t, (3, 4), out=o),
        x,
        torch.empty(0),
        allow_fallback=True,
    )
    check(lambda t, o: A.avg_pool1d.out(t, [3], [2], [1], True, False, out=o), x[0], torch.empty(0))


def test_max_pool2d_module():
    pool = torch.nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)
    run(pool, randn(4, 3, 13, 11), grad=[0])
    unpool_input = randn(1, 2, 8, 8)
    out = run(torch.nn.MaxPool2d(2, return_indices=True), unpool_input)
    assert out[1].dtype == torch.int64


# (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG2D = [
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, False, False, None),
    (3, 2, 1, True, True, None),
    (3, 2, 1, True, False, None),
    ((3, 2), (2, 3), (1, 1), True, False, None),
    (3, 2, 1, True, True, 4),
]


@pytest.mark.parametrize("cfg, dtype, layout", cases(AVG2D), ids=str)
def test_avg_pool2d(cfg, dtype, layout):
    k, s, p, ceil, cip, div = cfg
    x = LAYOUTS[layout](randn(2, 3, 9, 10, dtype=dtype))
    run(lambda t: F.avg_pool2d(t, k, s, p, ceil, cip, div), x, grad=[0])


def test_avg_pool2d_integers():
    x = torch.randint(-50, 50, (2, 3, 7, 6))
    check(lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), x)


@pytest.mark.parametrize("cfg", [(2560, 0, True, True), (9, 1, True, False), (6, 3, True, True)])
def test_avg_pool2d_kernel_wider_than_input(cfg):
    # EfficientNet's head: AvgPool2d(2560, ceil_mode=True) over a 1x1 map.
    k, p, ceil, cip = cfg
    run(lambda t: F.avg_pool2d(t, k, None, p, ceil, cip), randn(2, 4, 1, 3), grad=[0])


@pytest.mark.parametrize(
    "cfg", [(3, 2, 1, False, True), (4, 3, 2, True, False), (2, 1, 0, False, True)], ids=str
)
def test_avg_pool1d(cfg):
    k, s, p, ceil, cip = cfg
    run(lambda t: F.avg_pool1d(t, k, s, p, ceil, cip), randn(2, 3, 13), grad=[0])


AVG3D = [
    (2, None, 0, False, True, None),
    (3, 2, 1, True, False, None),
    ((3, 2, 2), (1, 2, 2), (1, 0, 1), True, True, 5),
]


@pytest.mark.parametrize("cfg, dtype, layout", cases(AVG3D, FLOATS3D, layouts=False), ids=str)
def test_avg_pool3d(cfg, dtype, layout):
    k, s, p, ceil, cip, div = cfg
    run(
        lambda t: F.avg_pool3d(t, k, s, p, ceil, cip, div),
        randn(2, 2, 6, 7, 5, dtype=dtype),
        grad=[0],
    )


def test_avg_pool2d_module_and_out():
    run(
        torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
        randn(2, 4, 9, 9),
        grad=[0],
    )
    x = randn(2, 3, 8, 8)
    check(lambda t, o: torch._C._nn.avg_pool2d(t, 2, out=o), x, torch.empty(0))


@pytest.mark.parametrize(
    "size, dtype, layout", cases([(1, 1), (4, 3), (9, 10), (3, 5), (5, 7), (2, None)]), ids=str
)
def test_adaptive_avg_pool2d(size, dtype, layout):
    x = LAYOUTS[layout](randn(2, 3, 9, 10, dtype=dtype))
    run(lambda t: F.adaptive_avg_pool2d(t, size), x, grad=[0])


def test_adaptive_avg_pool_1d_3d_module():
    run(lambda t: F.adaptive_avg_pool1d(t, 4), randn(2, 3, 11), grad=[0])
    run(lambda t: F.adaptive_avg_pool3d(t, (2, 3, 4)), randn(2, 2, 5, 7, 9), grad=[0])
    run(torch.nn.AdaptiveAvgPool2d((3, 5)), randn(3, 8, 11), grad=[0])
    run(lambda t: F.adaptive_avg_pool2d(t.transpose(2, 3), (3, 2)), randn(2, 3, 7, 8))


@pytest.mark.parametrize("size, dtype, layout", cases([(1, 1), (4, 3), (9, 10), (5, 7)]), ids=str)
def test_adaptive_max_pool2d(size, dtype, layout):
    x = LAYOUTS[layout](randn(2, 3, 9, 10, dtype=dtype))
    run(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True), x, grad=[0])


def test_adaptive_max_pool_1d_3d():
    run(lambda t: F.adaptive_max_pool1d(t, 4, return_indices=True), randn(2, 3, 11), grad=[0])
    run(
        lambda t: F.adaptive_max_pool3d(t, (2, 3, 4), return_indices=True),
        randn(2, 2, 5, 7, 9),
        grad=[0],
    )
