"""Sorting and selection on tpu against the CPU: sort, topk, kthvalue, median,
nanmedian, mode, searchsorted, bucketize, isin and histc."""

import math

import pytest
import torch
from op_utils import check
from torch.testing import make_tensor

import torch_tpu  # noqa: F401

NAN, INF = math.nan, math.inf

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.uint8]


def make(shape, dtype, low=None, high=None, seed=0):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def distinct(shape, dtype=torch.float32, seed=0):
    """Values without ties (a permutation), so every index is well defined."""
    torch.manual_seed(seed)
    n = math.prod(shape)
    return (torch.randperm(n).to(dtype) - n // 2).reshape(shape)


def with_nans(x):
    x = x.clone()
    x.view(-1)[::4] = NAN
    return x


def grad_of(fn):
    """The gradient of sum(fn(x)[0] * weights) with respect to x."""

    def run(x):
        x = x.detach().requires_grad_()
        y = fn(x)
        y = y[0] if isinstance(y, tuple) else y
        w = torch.linspace(0.5, 2.0, y.numel(), dtype=y.dtype).reshape(y.shape).to(y.device)
        (y * w).sum().backward()
        return x.grad

    return run


# ---------------------------------------------------------------- sort


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties(dtype, descending):
    # Few distinct values: a stable sort fixes the order of every tie.
    x = make((6, 9), dtype, low=0, high=4)
    check(lambda t: torch.sort(t, dim=1, descending=descending, stable=True), x)
    check(lambda t: torch.sort(t, dim=0, descending=descending, stable=True), x)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_and_inf(descending):
    x = torch.tensor([[1.0, NAN, -INF, 0.0, INF, NAN, -0.0, 2.0]])
    check(lambda t: torch.sort(t, descending=descending, stable=True), x)


def test_sort_default_and_forms():
    x = distinct((4, 5, 6))
    check(lambda t: torch.sort(t), x)
    check(lambda t: torch.sort(t, 1, True), x)
    check(lambda t: torch.sort(t.transpose(0, 2)[:, ::2]), x)  # non-contiguous
    check(lambda t: torch.argsort(t, dim=0), x)
    check(lambda t: torch.msort(t), x)
    check(lambda t: torch.sort(t, stable=True, dim=0), torch.tensor(3.0))
    check(
        lambda t, v, i: (torch.sort(t, 1, out=(v, i)), v, i),
        x,
        torch.empty(0),
        torch.empty(0, dtype=torch.long),
    )


def test_sort_gradient():
    check(grad_of(lambda t: torch.sort(t, 1)), distinct((4, 6)))


# ---------------------------------------------------------------- topk


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_topk(dtype):
    x = distinct((5, 8), dtype)
    check(lambda t: torch.topk(t, 3), x)
    check(lambda t: torch.topk(t, 2, dim=0, largest=False), x)
    check(lambda t: torch.topk(t.t(), 4, dim=1), x)


def test_topk_nan_and_forms():
    x = with_nans(distinct((3, 8)))
    check(lambda t: torch.topk(t, 3), x)
    check(lambda t: torch.topk(t, 3, largest=False), x)
    check(lambda t: torch.topk(t, 0), x)
    check(
        lambda t, v, i: (torch.topk(t, 2, out=(v, i)), v, i),
        x,
        torch.empty(0),
        torch.empty(0, dtype=torch.long),
    )
    check(grad_of(lambda t: torch.topk(t, 3, dim=0)), distinct((4, 6)))


# ---------------------------------------------------------------- kthvalue, median, mode


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64])
def test_kthvalue_ties(dtype):
    # Which of several equal values is returned follows the CPU's quickselect.
    x = make((4, 9), dtype, low=0, high=4)
    check(lambda t: torch.kthvalue(t, 3), x)
    check(lambda t: torch.kthvalue(t.t(), 2, dim=0, keepdim=True), x)


def test_kthvalue_nan_and_gradient():
    x = make((3, 8), torch.float32, low=-2, high=2).round()
    x[:, 5] = x[0, 2] = x[1, ::3] = NAN
    check(lambda t: torch.kthvalue(t, 5), x)
    check(lambda t: torch.kthvalue(t, 1), torch.tensor(2.0))
    check(grad_of(lambda t: torch.kthvalue(t, 2, 1)), distinct((4, 6)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16] + INTS)
def test_median_ties(dtype):
    # The dim form returns the index a stable sort gives to the median.
    x = make((5, 8), dtype, low=0, high=4)
    check(lambda t: torch.median(t), x)
    check(lambda t: torch.median(t, 1), x)
    check(lambda t: torch.median(t, 0, keepdim=True), x)
    check(lambda t: torch.nanmedian(t), x)
    check(lambda t: torch.nanmedian(t, 1), x)


def test_median_nan():
    x = with_nans(make((4, 7), torch.float32, low=-3, high=3))
    check(lambda t: torch.nanmedian(t, 1), x)
    check(lambda t: torch.nanmedian(t, 0), x)
    x[2] = NAN  # an all-NaN row: median's index is its first NaN
    check(lambda t: torch.median(t), x)
    check(lambda t: torch.median(t, 1), x)
    check(lambda t: torch.median(t.t(), 0), x)
    check(lambda t: torch.nanmedian(t), x)
    check(lambda t: torch.nanmedian(t, 1)[0], x)
    check(lambda t: torch.nanmedian(t), torch.full((3,), NAN))
    check(
        lambda t, v, i: (torch.median(t, 1, out=(v, i)), v, i),
        x,
        torch.empty(0),
        torch.empty(0, dtype=torch.long),
    )


def test_median_gradients():
    x = distinct((4, 6))
    check(grad_of(lambda t: torch.median(t)), x)
    check(grad_of(lambda t: torch.median(t, 1)), x)
    check(grad_of(lambda t: torch.nanmedian(t, 0)), with_nans(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_mode(dtype):
    x = make((4, 12), dtype, low=0, high=4)
    check(lambda t: torch.mode(t), x)
    check(lambda t: torch.mode(t, 0, keepdim=True), x)
    check(lambda t: torch.mode(t.t(), 0), x)


def test_mode_edges():
    check(lambda t: torch.mode(t), torch.tensor([3, 1, 2]))  # all unique: the smallest
    check(lambda t: torch.mode(t), torch.tensor([[5]]))
    check(lambda t: torch.mode(t), torch.tensor(7.0))
    check(grad_of(lambda t: torch.mode(t, 1)), make((3, 8), torch.float32, low=0, high=3).round())


# ---------------------------------------------------------------- searches


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted(dtype, right):
    seq = torch.sort(make((3, 6), dtype, low=0, high=8)).values
    values = make((3, 5), dtype, low=0, high=9, seed=1)
    check(lambda s, v: torch.searchsorted(s, v, right=right), seq, values)
    check(lambda s, v: torch.searchsorted(s[0], v, right=right, out_int32=True), seq, values)
    check(lambda s: torch.searchsorted(s[1], 3, right=right), seq)


def test_searchsorted_side_sorter_nan():
    seq = make((2, 7), torch.float32, low=-5, high=5)
    sorter = torch.argsort(seq, dim=1)
    values = torch.tensor([[-6.0, 0.0, NAN, 5.0], [INF, -INF, 1.0, 2.0]])
    values[0, 1] = seq[0, 3]
    check(lambda s, v, o: torch.searchsorted(s, v, sorter=o), seq, values, sorter)
    check(lambda s, v, o: torch.searchsorted(s, v, side="right", sorter=o), seq, values, sorter)
    check(lambda s, v: torch.searchsorted(s, v.double()), torch.sort(seq).values, values)
    check(
        lambda s, v, o: (torch.searchsorted(s, v, out=o), o),
        torch.sort(seq).values,
        values,
        torch.empty(0, dtype=torch.long),
    )


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_of_unsorted_sequences_searches_like_the_cpu(right):
    # Undefined by the docs, but the CPU and CUDA run the same binary search: so does tpu.
    seq = make((3, 9), torch.float32, low=-5, high=5)
    values = make((3, 4), torch.float32, low=-5, high=5)
    check(lambda s, v: torch.searchsorted(s, v, right=right), seq, values)
    check(lambda s, v: torch.bucketize(v, s[0], right=right), seq, values)


def test_bucketize():
    boundaries = torch.tensor([-1.0, 0.0, 0.5, 2.0, 2.0, 4.0])
    x = torch.tensor([[-2.0, -1.0, 0.25, 2.0], [3.0, 4.0, 9.0, NAN]])
    check(lambda t, b: torch.bucketize(t, b), x, boundaries)
    check(lambda t, b: torch.bucketize(t, b, right=True, out_int32=True), x, boundaries)
    check(lambda t, b: torch.bucketize(t.t(), b), x, boundaries)
    check(lambda b: torch.bucketize(2.0, b), boundaries)
    check(lambda t, b: torch.bucketize(t, b), torch.arange(-2, 6), boundaries)


def test_isin():
    x = make((4, 5), torch.int64, low=0, high=10)
    tests = torch.tensor([1, 3, 5, 7, 11])
    check(lambda a, b: torch.isin(a, b), x, tests)
    check(lambda a, b: torch.isin(a, b, invert=True), x, tests)
    check(lambda a, b: torch.isin(a.t(), b.float()), x, tests)
    check(lambda a: torch.isin(a, 3), x)
    check(lambda b: torch.isin(5, b), tests)
    f = torch.tensor([1.0, NAN, 2.5, -0.0])
    check(lambda a, b: torch.isin(a, b), f, torch.tensor([NAN, 0.0, 2.5]))
    check(lambda a, b: torch.isin(a, b), f, torch.tensor([], dtype=torch.float32))


@pytest.mark.parametrize("dtype", FLOATS)
def test_histc(dtype):
    x = make((50,), dtype, low=-3, high=3)
    check(lambda t: torch.histc(t[::2], 7, -2, 2), x)  # non-contiguous
    check(lambda t: torch.histc(t), x)  # min == max: the data's range


def test_histc_edges():
    check(lambda t: torch.histc(t, 3), torch.full((4,), 2.0))  # one value: [1, 3]
    check(lambda t: torch.histc(t, 4, 0, 4), torch.tensor([0.0, 1.0, 4.0, 4.5, -0.5, NAN]))
    check(lambda t, o: (torch.histc(t, 5, out=o), o), make((9,), torch.float32), torch.empty(0))
