"""Resampling against the CPU: interpolate (nearest, nearest-exact, linear, bilinear,
bicubic, trilinear, antialiased), grid_sample, unfold/fold and channel_shuffle, forward and
backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_checks import randn, run
from op_utils import check

A = torch.ops.aten

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]

# (mode, input shape, size, scale_factor, align_corners)
INTERP = [
    ("nearest", (2, 3, 7), 12, None, None),
    ("nearest", (2, 3, 5, 6), None, 1.7, None),
    ("nearest", (2, 3, 8, 6), (4, 3), None, None),
    ("nearest", (1, 2, 3, 4, 5), None, (2.0, 1.5, 0.6), None),
    ("nearest-exact", (2, 3, 7), 10, None, None),
    ("nearest-exact", (2, 3, 5, 6), None, 0.6, None),
    ("nearest-exact", (1, 2, 3, 4, 5), (5, 3, 7), None, None),
    ("linear", (2, 3, 7), 12, None, False),
    ("linear", (2, 3, 7), None, 0.6, True),
    ("bilinear", (2, 3, 5, 6), (9, 4), None, False),
    ("bilinear", (2, 3, 5, 6), None, 1.7, True),
    ("bilinear", (1, 2, 6, 7), (6, 7), None, False),
    ("bicubic", (2, 3, 5, 6), (9, 4), None, False),
    ("bicubic", (2, 3, 5, 6), None, 2.3, True),
    ("trilinear", (1, 2, 3, 4, 5), (5, 3, 7), None, False),
    ("trilinear", (1, 2, 3, 4, 5), None, 1.5, True),
]


def interp(mode, size, scale, align, antialias=False):
    kwargs = {} if align is None else {"align_corners": align}
    if antialias:
        kwargs["antialias"] = True
    if scale is not None:
        kwargs["recompute_scale_factor"] = False
    return lambda t: F.interpolate(t, size=size, scale_factor=scale, mode=mode, **kwargs)


@pytest.mark.parametrize("cfg", INTERP, ids=str)
def test_interpolate(cfg):
    mode, shape, size, scale, align = cfg
    run(interp(mode, size, scale, align), randn(*shape), grad=[0])


@pytest.mark.parametrize("dtype", FLOATS[1:])
@pytest.mark.parametrize("cfg", [INTERP[1], INTERP[5], INTERP[7], INTERP[10], INTERP[12]], ids=str)
def test_interpolate_dtypes(cfg, dtype):
    mode, shape, size, scale, align = cfg
    run(interp(mode, size, scale, align), randn(*shape, dtype=dtype), grad=[0])


def test_interpolate_large_bilinear_half():
    # Outputs with H + W > 128 take the CPU's generic kernel (half weights).
    fn = interp("bilinear", (70, 90), None, False)
    run(fn, randn(1, 2, 9, 11, dtype=torch.float16))
    run(fn, randn(1, 2, 9, 11, dtype=torch.bfloat16))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size, align", [((3, 4), False), ((9, 5), False), ((4, 3), True)])
def test_interpolate_antialias(mode, size, align):
    run(interp(mode, size, None, align, antialias=True), randn(2, 3, 10, 9), grad=[0])


def test_interpolate_noncontiguous_and_channels_last():
    x = randn(2, 3, 6, 10)[:, :, :, ::2]
    run(interp("bilinear", (7, 9), None, False), x, grad=[0])
    y = randn(2, 5, 6, 7).contiguous(memory_format=torch.channels_last)
    run(interp("bicubic", (8, 4), None, False), y, grad=[0])
    run(interp("nearest", (8, 4), None, None), y, grad=[0])


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_nearest_uint8(mode):
    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    check(interp(mode, (9, 4), None, None), x)


def test_upsample_out_variants():
    x = randn(2, 3, 5, 6)
    out = torch.empty(2, 3, 8, 9)
    check(lambda t, o: A.upsample_bilinear2d.out(t, (8, 9), False, out=o), x, out)
    check(lambda t, o: A.upsample_nearest2d.out(t, (8, 9), out=o), x, out)


# (mode, padding_mode, align_corners): every mode with every padding, both alignments
GRID = [
    (m, p, (i + j) % 2 == 1)
    for i, m in enumerate(("bilinear", "nearest", "bicubic"))
    for j, p in enumerate(("zeros", "border", "reflection"))
]
GRID_3D = [
    ("bilinear", "zeros", False),
    ("bilinear", "reflection", True),
    ("nearest", "border", False),
]


def grid_2d(n, h, w, dtype=torch.float32):
    return (torch.rand(n, h, w, 2, generator=torch.Generator().manual_seed(3)) * 2.4 - 1.2).to(
        dtype
    )


@pytest.mark.parametrize("mode, padding, align", GRID, ids=str)
def test_grid_sample_2d(mode, padding, align):
    x, grid = randn(2, 3, 5, 6), grid_2d(2, 4, 7)
    fn = lambda t, g: F.grid_sample(t, g, mode, padding, align_corners=align)
    run(fn, x, grid, grad=[0, 1])


@pytest.mark.parametrize("mode, padding, align", GRID_3D, ids=str)
def test_grid_sample_3d(mode, padding, align):
    x = randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 2, 3, generator=torch.Generator().manual_seed(4)) * 2.4 - 1.2
    fn = lambda t, g: F.grid_sample(t, g, mode, padding, align_corners=align)
    run(fn, x, grid, grad=[0, 1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_grid_sample_dtypes(dtype):
    # The CPU computes the sampling positions in the input's dtype: a grid of multiples of
    # 1/16 keeps them exact in bfloat16 and half, so both sides use the same positions.
    x, grid = randn(2, 3, 5, 6, dtype=dtype), (grid_2d(2, 4, 7) * 16).round() / 16
    grid = grid.to(dtype)
    run(lambda t, g: F.grid_sample(t, g, "bilinear", "zeros", align_corners=False), x, grid)


def test_grid_sample_noncontiguous():
    x = randn(2, 3, 5, 12)[..., ::2]
    grid = grid_2d(2, 7, 4).transpose(1, 2)
    fn = lambda t, g: F.grid_sample(t, g, "bilinear", "reflection", align_corners=False)
    run(fn, x, grid, grad=[0, 1])


# (kernel_size, dilation, padding, stride)
UNFOLD = [(2, 1, 0, 1), (3, 1, 1, 2), ((2, 3), (2, 1), (1, 0), (1, 2))]


@pytest.mark.parametrize("cfg", UNFOLD, ids=str)
def test_unfold_fold(cfg):
    k, d, p, s = cfg
    x = randn(2, 3, 7, 8)
    run(lambda t: F.unfold(t, k, d, p, s), x, grad=[0])
    cols = F.unfold(x, k, d, p, s)
    run(lambda t: F.fold(t, (7, 8), k, d, p, s), cols, grad=[0])


def test_unfold_fold_unbatched_and_dtypes():
    run(lambda t: F.unfold(t, 3, 1, 1, 1), randn(3, 5, 6), grad=[0])
    run(lambda t: F.fold(t, (5, 6), 2), randn(8, 20), grad=[0])
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        run(lambda t: F.unfold(t, 3, 1, 1, 2), randn(2, 3, 7, 8, dtype=dtype))
        run(lambda t: F.fold(t, (7, 8), 3, 1, 1, 2), randn(2, 27, 16, dtype=dtype))
    check(lambda t: F.unfold(t, 2), torch.randint(0, 9, (1, 2, 4, 4)).bool())


def test_channel_shuffle():
    run(lambda t: F.channel_shuffle(t, 3), randn(2, 6, 4, 5), grad=[0])
    check(lambda t: F.channel_shuffle(t, 2), torch.arange(48).view(2, 4, 6))
