"""Reductions and scans on tpu against the CPU: sums, extrema and their indices,
statistics, boolean reductions, norms and cumulative ops."""

import math
import warnings

import pytest
import torch
from op_utils import check, fallbacks
from torch.testing import make_tensor

import torch_tpu

NAN, INF = math.nan, math.inf

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.bool]


def make(shape, dtype, low=None, high=None, seed=0):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def with_nans(x):
    x = x.clone()
    x.view(-1)[::5] = NAN
    return x


def check_allowing(others, fn, *args, **kwargs):
    """check(), tolerating CPU fallbacks of the named ops of other families only."""
    before = fallbacks()
    check(fn, *args, allow_fallback=True, **kwargs)
    new = {op for op, n in fallbacks().items() if n != before.get(op, 0)}
    assert new <= set(others), f"ops fell back to the CPU: {new - set(others)}"


def dim_kwargs(dim, keepdim):
    return {} if dim is None else {"dim": dim, "keepdim": keepdim}


# ---------------------------------------------------------------- sum, mean, prod, nansum


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.complex64])
def test_sum(dtype):
    x = make((3, 4, 5), dtype)
    check(lambda t: torch.sum(t), x)
    check(lambda t: torch.sum(t, (0, 2), keepdim=True), x)


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), ()])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_dims(dim, keepdim):
    check(lambda t: torch.sum(t, **dim_kwargs(dim, keepdim)), make((3, 4, 5), torch.float32))


@pytest.mark.parametrize(
    "src,dtype",
    [
        (torch.int32, torch.float32),
        (torch.float32, torch.float64),
        (torch.float32, torch.bfloat16),
        (torch.bool, torch.int32),
        (torch.float64, torch.float32),
        (torch.bool, torch.bool),
    ],
)
def test_sum_dtype_casts_first(src, dtype):
    x = make((6, 7), src, low=-3, high=3)
    check(lambda t: torch.sum(t, dtype=dtype), x)
    check(lambda t: torch.sum(t, 1, dtype=dtype), x)


@pytest.mark.parametrize("dtype", FLOATS + [torch.complex64])
def test_mean(dtype):
    x = make((3, 4, 5), dtype)
    check(lambda t: torch.mean(t), x)
    check(lambda t: torch.mean(t, (0, 2), keepdim=True), x)
    check(lambda t: torch.mean(t, -1), x)


@pytest.mark.parametrize("dim", [None, 1, (0, 2), ()])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean_dims(dim, keepdim):
    check(lambda t: torch.mean(t, **dim_kwargs(dim, keepdim)), make((3, 4, 5), torch.float32))


def test_mean_dtype_and_empty():
    check(lambda t: torch.mean(t, dtype=torch.float64), make((4, 5), torch.float32))
    check(lambda t: torch.mean(t, 1, dtype=torch.float32), make((4, 5), torch.int32))
    check(lambda t: torch.mean(t, 0), torch.empty(0, 3))  # 0 / 0
    check(lambda t: torch.mean(t), torch.empty(0))


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.bfloat16,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.complex64,
    ],
)
def test_prod(dtype):
    # Values near 1 keep low-precision products finite.
    if dtype.is_floating_point or dtype.is_complex:
        x = make((3, 6), dtype, low=0.5, high=1.5)
    else:
        x = make((3, 6), dtype, low=-3, high=4)
    check(lambda t: torch.prod(t), x)
    check(lambda t: torch.prod(t, 0, keepdim=True), x)


def test_prod_dtype():
    x = make((3, 6), torch.int32, low=-3, high=4)
    check(lambda t: torch.prod(t, dtype=torch.float64), x)
    check(lambda t: torch.prod(t, -1, dtype=torch.float32), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_nansum(dtype):
    x = make((4, 5), dtype)
    if dtype.is_floating_point:
        x = with_nans(x)
    check(lambda t: torch.nansum(t), x)
    check(lambda t: torch.nansum(t, 1, keepdim=True), x)
    check(lambda t: torch.nansum(t, (0, 1), dtype=torch.float64), x)


def test_sum_edge_shapes():
    check(lambda t: torch.sum(t), torch.tensor(3.0))
    check(lambda t: torch.sum(t, 0), torch.tensor(3))
    check(lambda t: torch.sum(t, -1, keepdim=True), torch.tensor(3.0))
    check(lambda t: torch.sum(t), torch.empty(0, 4))
    check(lambda t: torch.sum(t, 1), torch.empty(0, 4))
    check(lambda t: torch.prod(t, 0), torch.empty(0, 4))


def test_sum_noncontiguous():
    x = make((6, 8), torch.float32)
    check(lambda t: torch.sum(t.t(), 1), x)
    check(lambda t: torch.sum(t[:, ::2], 0), x)
    check(lambda t: torch.mean(t[1:, ::3].t(), 1), x)
    check(lambda t: torch.prod(t.t()[::2], 1), make((6, 8), torch.float32, low=0.5, high=1.5))


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2), (0, 3)])
def test_trace(shape):
    check(lambda t: torch.trace(t), make(shape, torch.float32))
    check(lambda t: torch.trace(t.t()), make(shape, torch.int32))
    # trace_backward writes the diagonal with index_fill_ (the indexing family's).
    check_allowing(
        {"aten::index_fill_.int_Tensor"}, grad_of(torch.trace), make(shape, torch.float32)
    )


def test_sum_large_bfloat16_accumulates_in_float32():
    x = torch.ones(4096, dtype=torch.bfloat16)
    out = torch.sum(x.to("tpu")).cpu()
    assert out.item() == 4096  # a bf16 accumulator would stop at 256
    check(lambda t: torch.sum(t, 0), make((1000, 3), torch.bfloat16))


# ---------------------------------------------------------------- extrema


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.uint8, torch.bool]
)
@pytest.mark.parametrize("op", [torch.amax, torch.amin])
def test_amax_amin(dtype, op):
    x = make((3, 4, 5), dtype)
    if dtype.is_floating_point:
        x = with_nans(x)
    check(lambda t: op(t), x)
    check(lambda t: op(t, (0, 2), keepdim=True), x)


@pytest.mark.parametrize("dim", [(), 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_amax_dims(dim, keepdim):
    check(lambda t: torch.amax(t, dim, keepdim), with_nans(make((3, 4, 5), torch.float32)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("op", [torch.max, torch.min])
def test_max_min_full(dtype, op):
    x = make((4, 5), dtype)
    check(lambda t: op(t), x)
    if dtype.is_floating_point:
        check(lambda t: op(t), with_nans(x))
        check(lambda t: op(t), torch.full((4, 5), -INF, dtype=dtype))
    check(lambda t: op(t), make((), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_aminmax(dtype):
    x = make((4, 5), dtype)
    if dtype.is_floating_point:
        x = with_nans(x)
    check(lambda t: tuple(torch.aminmax(t)), x)
    check(lambda t: tuple(torch.aminmax(t, keepdim=True)), x)
    check(lambda t: tuple(torch.aminmax(t, dim=-1)), x)
    check(lambda t: tuple(torch.aminmax(t, dim=0, keepdim=True)), x)


def ties_and_nans():
    # Ties (first occurrence wins) and NaNs (the first NaN wins) per row.
    return torch.tensor(
        [
            [1.0, 3.0, 3.0, 2.0, 3.0],
            [1.0, NAN, 5.0, NAN, 5.0],
            [-INF, -INF, -INF, -INF, -INF],
            [2.0, 0.0, 0.0, 2.0, 1.0],
        ]
    )


@pytest.mark.parametrize("op", [torch.argmax, torch.argmin])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (0, False), (-1, True)])
def test_argmax_argmin(op, dim, keepdim):
    check(lambda t: op(t, dim=dim, keepdim=keepdim), ties_and_nans())
    check(lambda t: op(t, dim=dim, keepdim=keepdim), make((4, 5), torch.int32, low=0, high=3))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("op", [torch.argmax, torch.argmin])
def test_argmax_dtypes(dtype, op):
    x = make((6, 7), dtype)
    check(lambda t: op(t), x)
    check(lambda t: op(t.t(), 1), x)


@pytest.mark.parametrize("op", [torch.max, torch.min])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (-1, False), (1, True)])
def test_max_min_dim(op, dim, keepdim):
    check(lambda t: tuple(op(t, dim, keepdim)), ties_and_nans())
    check(lambda t: tuple(op(t, dim, keepdim)), make((3, 4), torch.int64, low=0, high=3))
    check(lambda t: tuple(op(t, dim, keepdim)), make((3, 4), torch.bool))


def test_arg_reductions_of_zero_dim_and_empty():
    s = torch.tensor(2.5)
    check(lambda t: torch.argmax(t), s)
    check(lambda t: torch.argmin(t, 0, keepdim=True), s)
    check(lambda t: tuple(torch.max(t, 0)), s)
    check(lambda t: tuple(torch.min(t, -1, keepdim=True)), s)
    check(lambda t: torch.argmax(t, 1), torch.empty(0, 3))
    check(lambda t: tuple(torch.max(t, 1)), torch.empty(0, 3))
    check(lambda t: torch.amax(t, 1), torch.empty(0, 3))


@pytest.mark.parametrize(
    "fn,message",
    [
        (lambda t: torch.max(t), "Expected reduction dim to be specified"),
        (lambda t: torch.min(t), "Expected reduction dim to be specified"),
        (lambda t: torch.max(t, 0), "Expected reduction dim 0 to have non-zero size"),
        (lambda t: torch.argmin(t, 0), "reduction dim 0 to have non-zero size"),
        (lambda t: torch.amax(t, 0), "reduction dim 0 to have non-zero size"),
    ],
)
def test_empty_extrema_raise(fn, message):
    with pytest.raises((RuntimeError, IndexError), match=message):
        fn(torch.empty(0, 3, device="tpu"))


def test_unsupported_dtypes_raise_like_cpu():
    with pytest.raises(RuntimeError, match="only support floating point and complex"):
        torch.var(torch.arange(4, device="tpu"))
    with pytest.raises(RuntimeError, match="does not support bool"):
        torch.argmax(torch.ones(3, dtype=torch.bool, device="tpu"))


# ---------------------------------------------------------------- var, std


@pytest.mark.parametrize("op", [torch.var, torch.std, torch.var_mean, torch.std_mean])
@pytest.mark.parametrize("dim,correction", [(None, None), (1, 0), ((0, 2), 2.5), ((), None)])
def test_var_std(op, dim, correction):
    x = make((3, 4, 5), torch.float32)
    kwargs = {} if correction is None else {"correction": correction}
    check(lambda t: op(t, dim, keepdim=dim == 1, **kwargs), x)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16, torch.complex64])
@pytest.mark.parametrize("op", [torch.var, torch.std_mean])
def test_var_std_dtypes(dtype, op):
    x = make((4, 6), dtype)
    check(lambda t: op(t.t(), 1, correction=0), x)


@pytest.mark.parametrize(
    "shape,dim,correction",
    [
        ((3, 1), 1, 1),  # one sample: 0 / 0 = nan
        ((3, 4), 1, 4),  # correction == N: inf
        ((3, 4), 1, 7),  # correction > N: inf
        ((), None, 1),  # 0-dim
        ((0, 3), 0, 1),  # empty: nan
    ],
)
def test_var_degenerate(shape, dim, correction):
    x = make(shape, torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns about degrees of freedom <= 0
        check(lambda t: torch.var(t, dim, correction=correction), x)
        check(lambda t: torch.std_mean(t, dim, correction=correction), x)


def test_var_constant_input_is_zero():
    check(lambda t: torch.var(t, 1), torch.full((3, 50), 0.1))


# ---------------------------------------------------------------- any, all, count_nonzero


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.uint8, torch.int32, torch.float32, torch.bfloat16, torch.complex64]
)
@pytest.mark.parametrize("op", [torch.any, torch.all])
def test_any_all(dtype, op):
    x = make((3, 4, 5), dtype, low=0, high=2) if not dtype.is_complex else make((3, 4, 5), dtype)
    x.view(-1)[::3] = 0
    check(lambda t: op(t), x)
    check(lambda t: op(t, dim=(0, 2), keepdim=True), x)


@pytest.mark.parametrize("op", [torch.any, torch.all])
def test_any_all_dims(op):
    x = make((3, 4, 5), torch.bool)
    check(lambda t: op(t, -1, keepdim=True), x)
    check(lambda t: op(t, dim=(0, 2)), x)
    check(lambda t: op(t, dim=()), x)  # reduces nothing
    check(lambda t: op(t[:, ::2].transpose(0, 2), 0), x)
    check(lambda t, o: (op(t, 1, out=o), o), x, torch.empty(0, dtype=torch.bool))


def test_any_all_special_values():
    check(lambda t: (torch.any(t), torch.all(t)), torch.tensor([NAN, 1.0]))
    check(lambda t: (torch.any(t), torch.all(t)), torch.tensor([0.0, -0.0]))
    check(lambda t: (torch.any(t), torch.all(t)), torch.empty(0))
    check(lambda t: (torch.any(t, 0), torch.all(t, 0)), torch.empty(0, 2))


def test_is_all_true_any_true():
    x = torch.tensor([[True, False], [True, True]])
    check(lambda t: (t._is_all_true(), t._is_any_true()), x)
    check(lambda t: (t._is_all_true(), t._is_any_true()), torch.ones(3, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex64])
def test_count_nonzero(dtype):
    x = make((3, 4, 5), dtype, low=0, high=2) if not dtype.is_complex else make((3, 4, 5), dtype)
    x.view(-1)[::3] = 0
    check(lambda t: torch.count_nonzero(t), x)
    check(lambda t: torch.count_nonzero(t, -1), x)
    check(lambda t: torch.count_nonzero(t, (0, 2)), x)


# ---------------------------------------------------------------- logsumexp


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.complex64]
)
def test_logsumexp(dtype):
    x = make((3, 4, 2), dtype, low=-5, high=5)
    check(lambda t: torch.logsumexp(t, -1), x)
    check(lambda t: torch.logsumexp(t, (0, 1), keepdim=True), x)
    check(lambda t: torch.logsumexp(t.transpose(0, 2), 0), x)


@pytest.mark.parametrize(
    "row",
    [
        [INF, 1.0],
        [-INF, -INF],
        [INF, INF],
        [NAN, 1.0],
        [-INF, 1.0],
        [INF, -INF],
        [1000.0, 1000.0],
        [-1000.0, -1000.0],
    ],
)
def test_logsumexp_special_values(row):
    x = torch.tensor([row, row[::-1]])
    check(lambda t: torch.logsumexp(t, 1), x)
    check(lambda t: torch.logcumsumexp(t, 1), x)


def test_logsumexp_empty():
    check(lambda t: torch.logsumexp(t, 0), torch.empty(0, 3))


# ---------------------------------------------------------------- norms


ORDS = [2, 1, 0, 3, 0.5, -1, INF, -INF]


@pytest.mark.parametrize("ord", ORDS)
@pytest.mark.parametrize("dim", [None, 1, (0, 2)])
def test_vector_norm(ord, dim):
    x = make((3, 4, 5), torch.float32)
    x.view(-1)[::7] = 0
    check(lambda t: torch.linalg.vector_norm(t, ord, dim, keepdim=dim == 1), x)


@pytest.mark.parametrize("ord", [2, 1, 0, INF, -INF, 2.5])
def test_vector_norm_nan_and_complex(ord):
    check(lambda t: torch.linalg.vector_norm(t, ord, 1), with_nans(make((4, 6), torch.float32)))
    check(lambda t: torch.linalg.vector_norm(t, ord, 0), make((4, 6), torch.complex64))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_vector_norm_dtypes(dtype):
    x = make((5, 6), dtype)
    check(lambda t: torch.linalg.vector_norm(t.t(), 3, 0), x)
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), x)


@pytest.mark.parametrize("p", [None, 2, 1, 3, INF])
def test_norm_overloads(p):
    x = make((4, 5), torch.float32)
    check(lambda t: torch.norm(t, p), x)
    check(lambda t: torch.norm(t, p, dim=1), x)
    check(lambda t: torch.norm(t, p, dim=(0, 1), keepdim=True), x)
    check(lambda t: torch.norm(t, p, dim=0, dtype=torch.float64), x)
    check(lambda t: torch.ops.aten.norm.ScalarOpt_dtype(t, p, dtype=torch.float64), x)


NORMS = {
    "vector_norm": lambda t, p: torch.linalg.vector_norm(t, p),
    "norm_dim": lambda t, p: t.norm(p, dim=0),
    "foreach_norm": lambda t, p: torch._foreach_norm([t], p)[0],
}


@pytest.mark.parametrize("name", list(NORMS))
def test_norms_of_ten_million_elements_as_accurate_as_the_cpu(name):
    # One variadic reduce of the candidate sums ran as one sequential float32 sum on XLA's
    # CPU backend: 6e-4 relative error at 2e6 elements, where the CPU has 3e-5.
    x = torch.randn(10**7, generator=torch.Generator().manual_seed(0))
    t = x.to("tpu")
    for p in (1.0, 2.0, 3.0, float("inf")):
        exact = NORMS[name](x.double(), p)
        cpu_error = ((NORMS[name](x, p).double() - exact).abs() / exact).item()
        tpu_error = ((NORMS[name](t, p).cpu().double() - exact).abs() / exact).item()
        assert tpu_error <= max(cpu_error, 1e-6), (p, tpu_error, cpu_error)


def test_clip_grad_norm_of_a_large_gradient_is_accurate():
    g = torch.randn(4_000_000, generator=torch.Generator().manual_seed(1))
    exact = g.double().norm()
    for foreach in (False, True):
        w = torch.nn.Parameter(torch.zeros_like(g, device="tpu"))
        w.grad = g.to("tpu")
        total = torch.nn.utils.clip_grad_norm_([w], 1.0, foreach=foreach)
        assert abs(total.cpu().double() - exact) / exact < 1e-6, foreach


def test_norm_of_empty_and_zero_dim():
    check(lambda t: torch.linalg.vector_norm(t), torch.empty(0, 3))
    check(lambda t: torch.linalg.vector_norm(t, 1, 0), torch.empty(0, 3))
    check(lambda t: torch.linalg.vector_norm(t, 3), torch.tensor(-2.0))


# ---------------------------------------------------------------- scans


@pytest.mark.parametrize("n", [1, 2, 7, 33])
@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod, torch.logcumsumexp])
def test_scan_lengths(n, op):
    x = make((2, n, 3), torch.float32, low=0.5, high=1.5)
    check(lambda t: op(t, 1), x)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.complex64])
@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod])
def test_cumsum_cumprod(dtype, op):
    if dtype.is_floating_point or dtype.is_complex:
        x = make((5, 6), dtype, low=0.5, high=1.5)
    else:
        x = make((5, 6), dtype, low=0, high=3)
    check(lambda t: op(t, -1), x)


@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod])
def test_cumsum_dtype_and_layouts(op):
    x = make((6, 8), torch.int32, low=-2, high=3)
    check(lambda t: op(t, 1, dtype=torch.float64), x)
    check(lambda t: op(t, 0, dtype=torch.int32), x)
    y = make((6, 8), torch.float32, low=0.5, high=1.5)
    check(lambda t: op(t.t(), 1), y)
    check(lambda t: op(t[:, ::2], 0), y)
    check(lambda t: op(t, 0), torch.tensor(2.5))
    check(lambda t: op(t, 0), torch.empty(0, 3))


def test_cumsum_inplace_and_out():
    x = make((4, 5), torch.float32)
    check(lambda t: t.cumsum_(1), x)
    check(lambda t: t[:, 1:].cumprod_(0), x)
    check(lambda t, o: (torch.cumsum(t, 0, out=o), o), x, torch.empty(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_cummax_cummin(dtype, op):
    x = make((5, 7), dtype, low=0, high=3)  # small range: many ties
    check(lambda t: tuple(op(t, -1)), x)


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_cummax_nan_and_edges(op):
    x = torch.tensor([[1.0, NAN, 3.0, NAN, 0.0, 5.0], [2.0, 5.0, 5.0, -1.0, 5.0, -INF]])
    check(lambda t: tuple(op(t, 1)), x)
    check(lambda t: tuple(op(t, 0)), torch.tensor(1.5))
    check(lambda t: tuple(op(t, 0)), torch.empty(0, 3))
    check(lambda t: tuple(op(t.t(), 0)), x)


def test_logcumsumexp_dtypes():
    check(lambda t: torch.logcumsumexp(t, 0), make((9, 3), torch.float64))
    check(lambda t: torch.logcumsumexp(t, 1), make((3, 9), torch.bfloat16))
    check(lambda t: torch.logcumsumexp(t, 0), torch.tensor(0.5))


# ---------------------------------------------------------------- out= and in-place


def test_out_forms():
    x = make((4, 5), torch.float32)
    check(lambda t, o: (torch.sum(t, 1, out=o), o), x, torch.empty(0))
    check(lambda t, o: (torch.sum(t, 1, out=o), o), x, torch.empty(4, dtype=torch.float64))
    check(lambda t, o: (torch.mean(t, 0, out=o), o), x, torch.empty(5))
    check(lambda t, o: (torch.amax(t, 1, out=o), o), x, torch.empty(4))
    check(lambda t, o: (torch.var(t, 1, out=o), o), x, torch.empty(4))
    check(lambda t, o: (torch.argmax(t, 1, out=o), o), x, torch.empty(4, dtype=torch.long))
    check(lambda t, o: (torch.linalg.vector_norm(t, 3, out=o), o), x, torch.empty(()))
    check(lambda t, o: (torch.logsumexp(t, 1, out=o), o), x, torch.empty(4))
    check(
        lambda t, v, i: (torch.max(t, 1, out=(v, i)), v, i),
        x,
        torch.empty(4),
        torch.empty(4, dtype=torch.long),
    )
    check(
        lambda t, v, i: (torch.cummin(t, 0, out=(v, i)), v, i),
        x,
        torch.empty(4, 5),
        torch.empty(4, 5, dtype=torch.long),
    )
    check(lambda t, o: (torch.any(t, 0, out=o), o), x > 0, torch.empty(5, dtype=torch.bool))
    # A strided view as the destination.
    check(lambda t, o: (torch.sum(t, 0, out=o[::2]), o), x, torch.zeros(10))


def test_runtime_scalars_do_not_recompile():
    x = make((4, 5), torch.float32).to("tpu")
    torch.var(x, 1, correction=1)
    torch.linalg.vector_norm(x, 3.0)
    before = torch_tpu.metrics()["compiles"]
    torch.var(x, 1, correction=3)  # correction and ord are program operands
    torch.linalg.vector_norm(x, 0.5)
    torch.linalg.vector_norm(x, INF)
    assert torch_tpu.metrics()["compiles"] == before


# ---------------------------------------------------------------- gradients


def grad_of(fn):
    """The gradient of sum(fn(x) * weights) with respect to x (weights fixed per
    output element, so reductions that route gradients are told apart)."""

    def run(x):
        x = x.detach().requires_grad_()
        y = fn(x)
        y = y[0] if isinstance(y, tuple) else y
        w = torch.linspace(0.5, 2.0, y.numel(), dtype=y.dtype).reshape(y.shape).to(y.device)
        (y * w).sum().backward()
        return x.grad

    return run


GRADIENTS = {
    "sum": lambda t: torch.sum(t, 1),
    "mean": lambda t: torch.mean(t, (0, 1), keepdim=True),
    "prod": lambda t: torch.prod(t, 1),
    "amax": lambda t: torch.amax(t, 1),
    "amin_ties": lambda t: torch.amin(t.round(), 0),
    "max": lambda t: torch.max(t),
    "max_dim": lambda t: torch.max(t, 1),
    "var_mean": lambda t: torch.var_mean(t, 1),
    "std": lambda t: torch.std(t, 0, correction=0),
    "logsumexp": lambda t: torch.logsumexp(t, 1),
    "norm3": lambda t: torch.linalg.vector_norm(t, 3),
    "norm_inf": lambda t: torch.linalg.vector_norm(t, INF, 0),
    "cumsum": lambda t: torch.cumsum(t, 1),
    "cumprod": lambda t: torch.cumprod(t, 0),
    "cummax": lambda t: torch.cummax(t, 1),
    "logcumsumexp": lambda t: torch.logcumsumexp(t, 1),
}


@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradients(name):
    x = make((4, 6), torch.float32, low=-2, high=2, seed=1)
    check(grad_of(GRADIENTS[name]), x, atol=1e-5, rtol=1e-4)


def test_prod_gradient_with_zeros():
    x = make((4, 6), torch.float32, low=-2, high=2, seed=2)
    x[0, 1] = 0
    x[1, 2] = x[1, 4] = 0
    check(grad_of(lambda t: torch.prod(t, 1)), x, atol=1e-5, rtol=1e-4)
    # The full product's backward looks for the zeros with nonzero (indexing).
    check_allowing({"aten::nonzero"}, grad_of(torch.prod), x[1:2], atol=1e-5, rtol=1e-4)
    check_allowing({"aten::nonzero"}, grad_of(torch.prod), x[2:], atol=1e-5, rtol=1e-4)
