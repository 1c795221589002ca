"""Argument checks the CPU's kernels make before computing, on values the host knows
(dtypes, shapes, Python scalars): a tpu op raises the CPU's exception instead of
computing."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

L, I8 = torch.int64, torch.int8
INF = float("inf")


def ones(*shape, dtype=torch.float32, device="cpu"):
    return torch.ones(*shape, dtype=dtype, device=device)


def longs(*values, device="cpu"):
    return torch.tensor(values, dtype=L, device=device)


def put_item(x, index, value):
    x[index] = value
    return x


CASES = {
    "mm": lambda d: ones(2, 2, dtype=L, device=d) @ ones(2, 2, device=d),
    "mm_half": lambda d: ones(2, 2, dtype=torch.bfloat16, device=d) @ ones(2, 2, device=d),
    "addmm_mat1": lambda d: torch.addmm(
        ones(2, 2, device=d), ones(2, 2, dtype=L, device=d), ones(2, 2, device=d)
    ),
    "addmm_self": lambda d: torch.addmm(
        ones(2, 2, dtype=L, device=d), ones(2, 2, device=d), ones(2, 2, device=d)
    ),
    "addbmm": lambda d: torch.addbmm(
        ones(2, 2, device=d), ones(1, 2, 2, dtype=L, device=d), ones(1, 2, 2, device=d)
    ),
    "mv": lambda d: torch.mv(ones(2, 2, dtype=L, device=d), ones(2, device=d)),
    "linear_bias": lambda d: F.linear(
        ones(2, 2, device=d), ones(2, 2, device=d), ones(2, dtype=torch.float64, device=d)
    ),
    "conv_weight": lambda d: F.conv2d(
        ones(1, 1, 3, 3, device=d), ones(1, 1, 1, 1, dtype=L, device=d)
    ),
    "conv_bias": lambda d: F.conv2d(
        ones(1, 1, 3, 3, device=d), ones(1, 1, 1, 1, device=d), ones(1, dtype=L, device=d)
    ),
    "pow_negative": lambda d: torch.tensor([2, 3], device=d) ** -1,
    "pow_negative_inplace": lambda d: torch.tensor([2, 3], device=d).pow_(-2),
    "full_overflow": lambda d: torch.full((2,), 1 << 40, dtype=torch.int32, device=d),
    "fill_overflow": lambda d: torch.zeros(2, dtype=I8, device=d).fill_(300),
    "fill_inf_int": lambda d: torch.zeros(2, dtype=torch.int32, device=d).fill_(float("inf")),
    "full_half_overflow": lambda d: torch.full((2,), 1e6, dtype=torch.float16, device=d),
    "clamp_overflow": lambda d: torch.zeros(2, dtype=I8, device=d).clamp(max=300),
    "masked_fill_overflow": lambda d: torch.zeros(2, dtype=I8, device=d).masked_fill(
        torch.tensor([True, False], device=d), 300
    ),
    "index_fill_overflow": lambda d: torch.zeros(2, dtype=I8, device=d).index_fill(
        0, torch.tensor([0], device=d), 300
    ),
    "randint_empty_range": lambda d: torch.randint(5, 3, (3,), device=d),
    "random_to_out_of_range": lambda d: torch.empty(3, dtype=torch.uint8, device=d).random_(
        0, 1000
    ),
    "random_from_out_of_range": lambda d: torch.empty(2, dtype=I8, device=d).random_(-200, 3),
    "random_half_out_of_range": lambda d: torch.empty(2, dtype=torch.half, device=d).random_(
        0, 1 << 20
    ),
    "bernoulli_p": lambda d: torch.bernoulli(torch.zeros(3, device=d), p=2),
    "bernoulli_inplace_p": lambda d: torch.zeros(3, device=d).bernoulli_(2.0),
    "uniform_reversed": lambda d: torch.empty(2, device=d).uniform_(2, 1),
    "uniform_infinite": lambda d: torch.empty(2, device=d).uniform_(0, float("inf")),
    # Zero-size dimensions (issue 18, item 5).
    "median_dim_empty": lambda d: ones(0, 3, device=d).median(0),
    "nanmedian_dim_empty": lambda d: ones(3, 0, device=d).nanmedian(-1),
    "mode_empty": lambda d: ones(0, device=d).mode(),
    "kthvalue_empty": lambda d: ones(0, 3, device=d).kthvalue(1, 0),
    "max_dim_empty": lambda d: ones(0, 3, device=d).max(0),
    "min_dim_empty": lambda d: ones(3, 0, device=d).min(1),
    "argmax_empty": lambda d: ones(0, device=d).argmax(),
    "argmin_dim_empty": lambda d: ones(3, 0, device=d).argmin(-1),
    "amax_dim_empty": lambda d: ones(3, 0, device=d).amax(-1),
    "amin_empty": lambda d: ones(0, 3, device=d).amin(),
    "aminmax_empty": lambda d: ones(0, 3, device=d).aminmax(),
    "aminmax_dim_empty": lambda d: ones(0, 3, device=d).aminmax(dim=0),
    # The meta kernel's result for ord=2 is cached; ord=-inf must still raise.
    "vector_norm_negative_after_2": lambda d: [
        torch.linalg.vector_norm(ones(0, 3, device=d), p, dim=0) for p in (2, -INF)
    ],
    "norm_inf_empty": lambda d: torch.norm(ones(0, 3, device=d), INF),
    "index_into_empty_dim": lambda d: ones(0, 3, device=d)[longs(0, device=d)],
    "index_put_into_empty_dim": lambda d: put_item(ones(0, device=d), longs(0, device=d), 1.0),
    "index_select_empty_rows": lambda d: ones(0, 3, device=d).index_select(0, longs(0, device=d)),
    "embedding_empty_weight": lambda d: F.embedding(longs(0, device=d), ones(0, 3, device=d)),
    "put_into_empty": lambda d: ones(0, device=d).put(longs(0, device=d), ones(1, device=d)),
    "put_count": lambda d: ones(3, device=d).put(longs(0, 1, device=d), ones(1, device=d)),
    "index_copy_count": lambda d: ones(3, 2, device=d).index_copy(
        0, longs(0, 1, device=d), ones(1, 2, device=d)
    ),
    "index_copy_index_rank": lambda d: ones(3, 2, device=d).index_copy(
        0, longs(0, device=d)[None], ones(1, 2, device=d)
    ),
    "index_copy_slices": lambda d: ones(3, 2, 4, device=d).index_copy(
        0, longs(0, device=d), ones(1, 3, 5, device=d)
    ),
    "slice_scatter_shape": lambda d: ones(4, 4, device=d).slice_scatter(
        ones(3, 4, device=d), 0, 0, 2
    ),
    "select_scatter_index": lambda d: ones(4, 4, device=d).select_scatter(ones(4, device=d), 0, 7),
    "diagonal_scatter_shape": lambda d: ones(4, 4, device=d).diagonal_scatter(ones(3, device=d)),
    "grid_sample_empty": lambda d: F.grid_sample(
        ones(1, 1, 0, 3, device=d), ones(1, 2, 2, 2, device=d), align_corners=False
    ),
    "batch_norm_training_empty": lambda d: torch.native_batch_norm(
        ones(0, 2, 3, device=d), None, None, None, None, True, 0.1, 1e-5
    ),
}

# Calls that look alike but are valid: they must still compute.
CASES["add_float_alpha_to_integers"] = lambda d: torch.sub(longs(1, device=d), 2, alpha=0.5)
CASES["add_bool_alpha_to_integers"] = lambda d: torch.add(
    longs(1, device=d), longs(2, device=d), alpha=True
)
CASES["add_complex_alpha_to_floats"] = lambda d: ones(2, device=d).add_(ones(2, device=d), alpha=1j)
CASES["mul_float_into_int8"] = lambda d: ones(3, dtype=I8, device=d).mul_(2.5)
CASES["mul_long_into_bool"] = lambda d: ones(3, dtype=torch.bool, device=d).mul_(longs(1, device=d))
CASES["addcmul_float_into_int8"] = lambda d: ones(3, dtype=I8, device=d).addcmul_(
    ones(3, device=d), ones(3, device=d)
)
CASES["sort_out_indices_dtype"] = lambda d: torch.sort(
    ones(3, device=d), out=(ones(3, device=d), ones(3, device=d))
)
CASES["sort_out_values_dtype"] = lambda d: torch.sort(
    ones(3, device=d), out=(ones(3, dtype=L, device=d), ones(3, dtype=L, device=d))
)
CASES["index_put_dtypes"] = lambda d: ones(3, device=d).index_put_(
    (longs(0, device=d),), longs(1, device=d)
)
CASES["index_put_accumulate_dtypes"] = lambda d: ones(3, device=d).index_put_(
    (longs(0, device=d),), ones(1, dtype=torch.float64, device=d), accumulate=True
)
CASES["index_add_dtypes"] = lambda d: torch.index_add(
    ones(3, device=d), 0, longs(0, device=d), longs(1, device=d)
)
U8_MASK = (1, 0, 1)
CASES["masked_fill_byte_mask"] = lambda d: ones(3, device=d).masked_fill_(
    torch.tensor(U8_MASK, dtype=torch.uint8, device=d), 1.0
)
CASES["masked_fill_byte_mask_tensor_value"] = lambda d: ones(3, device=d).masked_fill(
    torch.tensor(U8_MASK, dtype=torch.uint8, device=d), torch.tensor(1.0, device=d)
)
CASES["setitem_byte_mask"] = lambda d: put_item(
    ones(3, device=d), torch.tensor(U8_MASK, dtype=torch.uint8, device=d), 1.0
)
CASES["masked_scatter_byte_mask"] = lambda d: ones(3, device=d).masked_scatter_(
    torch.tensor(U8_MASK, dtype=torch.uint8, device=d), ones(3, device=d)
)
CASES["unique_dim_with_other_empty_dims"] = lambda d: torch.unique(ones(0, 3, device=d), dim=1)
CASES["cat_out_dtype"] = lambda d: torch.cat([ones(3, device=d)], out=ones(3, dtype=L, device=d))
CASES["stack_out_dtype"] = lambda d: torch.stack(
    [ones(3, device=d)], out=ones(1, 3, dtype=L, device=d)
)
CASES["clamp_without_bounds"] = lambda d: torch.clamp(ones(2, device=d))
CASES["clamp_tensor_without_bounds"] = lambda d: ones(2, device=d).clamp_(None, None)
CASES["nonzero_out_dtype"] = lambda d: torch.nonzero(ones(3, device=d), out=ones(0, device=d))

# Advanced indexing: index types, indices that do not broadcast, values that do not fit
# the indexed shape (checked before the dtypes, as make_index_put_iterator does).
CASES["index_float_index"] = lambda d: ones(3, device=d)[torch.tensor([], device=d)]
CASES["index_unbroadcastable"] = lambda d: ones(2, 3, 4, device=d)[False, [0, 1], ...]
CASES["setitem_mask_value_shape"] = lambda d: put_item(
    torch.arange(4, device=d), torch.arange(4, device=d) > -1, longs(1, 2, 3, device=d)
)
CASES["setitem_mask_value_shape_before_dtype"] = lambda d: put_item(
    torch.arange(4, device=d), torch.arange(4, device=d) > -1, torch.tensor([], device=d)
)
CASES["index_put_value_shape"] = lambda d: ones(3, 4, device=d).index_put_(
    (longs(0, 1, device=d), longs(1, 2, device=d)), ones(3, device=d)
)

# out= and in-place dtypes, in the CPU's words (TensorIterator's, not the Python
# references').
F16, F32, F64 = torch.float16, torch.float32, torch.float64
CASES["neg_out_dtype"] = lambda d: torch.neg(ones(2, device=d), out=ones(2, dtype=F64, device=d))
CASES["frexp_mantissa_dtype"] = lambda d: torch.frexp(
    ones(2, device=d),
    out=(ones(2, dtype=torch.float64, device=d), ones(2, dtype=torch.int32, device=d)),
)
CASES["frexp_exponent_dtype"] = lambda d: torch.frexp(
    ones(2, device=d), out=(ones(2, device=d), ones(2, dtype=L, device=d))
)
CASES["abs_complex_into_long"] = lambda d: torch.abs(
    ones(2, dtype=torch.complex64, device=d), out=ones(2, dtype=L, device=d)
)
CASES["abs_complex_into_wider_complex"] = lambda d: torch.abs(
    ones(2, dtype=torch.complex64, device=d), out=ones(2, dtype=torch.complex128, device=d)
)
CASES["abs_in_place_complex"] = lambda d: ones(2, dtype=torch.complex64, device=d).abs_()
CASES["round_out_dtype"] = lambda d: torch.round(ones(2, device=d), out=ones(2, dtype=L, device=d))
CASES["nan_to_num_out_dtype"] = lambda d: torch.nan_to_num(
    ones(2, device=d), out=ones(2, dtype=F64, device=d)
)
CASES["heaviside_dtypes"] = lambda d: torch.heaviside(
    ones(2, device=d), ones(2, dtype=F64, device=d)
)
CASES["add_out_unsafe_cast"] = lambda d: torch.add(
    ones(2, device=d), ones(2, device=d), out=ones(2, dtype=L, device=d)
)
CASES["add_int_self_float_scalar"] = lambda d: ones(2, dtype=L, device=d).add_(1.5)
CASES["sub_bool_self"] = lambda d: ones(2, dtype=torch.bool, device=d).sub_(ones(2, device=d))
CASES["addcdiv_integers"] = lambda d: torch.addcdiv(*(longs(1, device=d),) * 3)
CASES["complex_integer_parts"] = lambda d: torch.complex(longs(1, device=d), longs(1, device=d))
CASES["complex_mixed_parts"] = lambda d: torch.complex(
    ones(1, device=d), ones(1, dtype=F64, device=d)
)
CASES["polar_out_dtype"] = lambda d: torch.polar(
    ones(1, device=d), ones(1, device=d), out=ones(1, device=d)
)
CASES["normal_negative_std_tensor"] = lambda d: torch.normal(
    torch.tensor(0.0, device=d), torch.tensor(-1.0, device=d)
)
CASES["randperm_half_too_large"] = lambda d: torch.randperm(2051, dtype=F16, device=d)
CASES["randperm_uint8_too_large"] = lambda d: torch.randperm(
    257, out=torch.empty(0, dtype=torch.uint8, device=d)
)
CASES["roll_unaligned"] = lambda d: ones(2, 4, device=d).roll(shifts=(1,), dims=(1, 2))
CASES["roll_without_shifts"] = lambda d: ones(2, 4, device=d).roll(shifts=(), dims=1)
CASES["arange_nan_end"] = lambda d: torch.arange(-5, float("nan"), device=d)
CASES["arange_overflow"] = lambda d: torch.arange(1.175494351e-38, 3.402823466e38, device=d)
CASES["arange_step_sign"] = lambda d: torch.arange(0, 5, -1, device=d)
CASES["index_fill_complex_value"] = lambda d: ones(2, device=d).index_fill_(
    0, longs(0, device=d), 1 + 1j
)
CASES["logcumsumexp_out_dtype"] = lambda d: torch.logcumsumexp(
    ones(2, device=d), 0, out=ones(2, dtype=F64, device=d)
)

# Memory overlap, as TensorIterator and the indexing ops check it (before the types).
CASES["add_into_expanded"] = lambda d: ones(1, device=d).expand(6).add_(1)
CASES["add_partly_overlapping_input"] = lambda d: (lambda y: y[1:].add_(y[:-1]))(ones(6, device=d))
CASES["index_add_self_as_source"] = lambda d: (
    lambda y: y.index_add_(0, longs(2, 1, 0, device=d), y[:3])
)(ones(6, device=d))
CASES["index_fill_index_is_self"] = lambda d: (lambda i: i.index_fill_(0, i, 0))(
    longs(2, 1, 0, device=d)
)
CASES["shift_overlap_before_dtype"] = lambda d: (lambda x: x[:-1].__ilshift__(x[1:]))(
    ones(3, device=d)
)

# An in-place op never resizes `self` to the broadcast shape.
for _name in ("atan2_", "pow_", "fmod_", "remainder_", "lt_", "eq_", "hypot_", "copysign_"):
    CASES[f"in_place_{_name}broadcast"] = lambda d, n=_name: getattr(ones(1, 3, device=d), n)(
        torch.full((2, 3), 2.0, device=d)
    )


# Reductions: out= types, and the CPU's dim mask (a 64-bit set: no repeated dims, at most
# 64 dims).
CASES["all_out_float"] = lambda d: torch.all(ones(3, 3, device=d), 0, out=ones(3, device=d))
CASES["any_out_long"] = lambda d: torch.any(
    ones(3, 3, dtype=L, device=d), 0, out=ones(3, dtype=L, device=d)
)
CASES["mode_values_dtype"] = lambda d: torch.mode(
    ones(4, dtype=torch.uint8, device=d), -1, out=(ones(1, dtype=I8, device=d), longs(0, device=d))
)
CASES["mode_indices_dtype"] = lambda d: torch.mode(
    ones(4, device=d), -1, out=(ones(1, device=d), ones(1, dtype=I8, device=d))
)
for _name in ("sum", "mean", "nansum", "std", "var", "logsumexp", "amax", "norm", "count_nonzero"):
    CASES[f"{_name}_repeated_dim"] = lambda d, n=_name: getattr(torch, n)(
        ones(3, 3, device=d), dim=(0, -2)
    )
for _name in ("nansum", "argmax", "argmin", "sum"):
    CASES[f"{_name}_over_65_dims"] = lambda d, n=_name: getattr(torch, n)(
        ones(*[1] * 65, device=d), dim=0
    )
# Linear algebra: shapes and scaling factors in the CPU's words.
CASES["addmm_shapes"] = lambda d: torch.addmm(
    ones(0, 0, device=d), ones(0, 1, device=d), ones(0, 0, device=d)
)
CASES["isposinf_out_int"] = lambda d: torch.isposinf(
    ones(2, device=d), out=ones(2, dtype=torch.int32, device=d)
)
CASES["heaviside_complex_before_dtypes"] = lambda d: torch.heaviside(
    ones(2, dtype=torch.complex64, device=d), ones(2, dtype=torch.complex128, device=d)
)
CASES["heaviside_complex_out"] = lambda d: torch.heaviside(
    ones(2, device=d), ones(2, device=d), out=ones(2, dtype=torch.complex64, device=d)
)
CASES["mm_shapes"] = lambda d: torch.mm(ones(2, 3, device=d), ones(2, 2, dtype=L, device=d))
CASES["mm_vector"] = lambda d: torch.mm(ones(2, 2, device=d), ones(2, device=d))
CASES["addr_float_beta_ints"] = lambda d: torch.addr(
    ones(2, 2, dtype=L, device=d), longs(1, 1, device=d), longs(1, 1, device=d), beta=2.0
)
CASES["addr_bool_alpha_ints"] = lambda d: torch.addr(
    ones(2, 2, dtype=L, device=d), longs(1, 1, device=d), longs(1, 1, device=d), alpha=True
)
CASES["cholesky_inverse_out_dtype"] = lambda d: torch.cholesky_inverse(
    torch.eye(2, device=d), out=ones(2, 2, dtype=torch.int32, device=d)
)
CASES["eigh_out_dtype"] = lambda d: torch.linalg.eigh(
    torch.eye(2, device=d), out=(ones(0, device=d), ones(0, dtype=torch.int32, device=d))
)
CASES["cholesky_ex_check_errors"] = lambda d: torch.linalg.cholesky_ex(
    torch.zeros(2, 2, device=d), check_errors=True
)
CASES["inv_ex_check_errors_batched"] = lambda d: torch.linalg.inv_ex(
    torch.stack([torch.eye(2), torch.zeros(2, 2)]).to(d), check_errors=True
)


def narrow_out(factory):
    def run(d):
        x = torch.zeros(2, 3, device=d)
        factory(out=x.narrow(1, 1, 2))
        return x

    return run


NAN = float("nan")
FLOATS_TO_CONVERT = [
    torch.finfo(F32).min,
    -300.0,
    -2.0,
    -1.5,
    0.5,
    300.0,
    3e9,
    torch.finfo(F32).max,
]

VALID = {
    # out='s dtype does not change the computation: float16 overflows to inf first.
    "add_float16_into_float64_out": lambda d: torch.add(
        torch.tensor(33000.0, dtype=F16, device=d),
        torch.tensor(33000.0, dtype=F16, device=d),
        out=torch.empty(0, dtype=F64, device=d),
    ),
    # fill_ and zero_ write an expanded tensor (one value per location).
    "fill_expanded": lambda d: torch.zeros(1, 3, device=d).expand(3, 3).fill_(2),
    "zero_expanded": lambda d: torch.ones(1, 3, device=d).expand(3, 3).zero_(),
    "threshold_expanded": lambda d: F.threshold_(
        torch.arange(6.0, device=d).reshape(1, 6).expand(6, 6), 2.5, 0.5
    ),
    # Factories fill an out of their element count in its own shape.
    "arange_into_narrowed_out": narrow_out(lambda out: torch.arange(0, 4, out=out)),
    "linspace_into_narrowed_out": narrow_out(lambda out: torch.linspace(0, 3, 4, out=out)),
    "logspace_into_narrowed_out": narrow_out(lambda out: torch.logspace(0, 3, 4, out=out)),
    "integer_linspace_truncates": lambda d: torch.linspace(10, -10, 7, dtype=torch.int32, device=d),
    "integer_linspace_exact_step": lambda d: torch.linspace(
        1, 127, 50, dtype=torch.int32, device=d
    ),
    # NaN wins a max or min (the results' NaNs become 7 for the comparison).
    "scatter_reduce_amax_nan": lambda d: (
        torch.zeros(3, device=d)
        .scatter_reduce(
            0, longs(0, 0, 1, 1, device=d), torch.tensor([1, NAN, -INF, 2], device=d), "amax"
        )
        .nan_to_num(7.0)
    ),
    "scatter_reduce_amin_nan": lambda d: (
        torch.zeros(2, device=d)
        .scatter_reduce(
            0,
            longs(0, 0, 1, 1, device=d),
            torch.tensor([NAN, 1, 3, -2], device=d),
            "amin",
            include_self=False,
        )
        .nan_to_num(7.0)
    ),
    "pow_positive": lambda d: torch.tensor([2, 3], device=d) ** 2,
    "pow_float_negative": lambda d: torch.tensor([2.0, 4.0], device=d) ** -1,
    "full_unsigned_wraps": lambda d: torch.full((2,), -1, dtype=torch.uint8, device=d),
    "clamp_promotes": lambda d: torch.zeros(2, dtype=I8, device=d).clamp(max=2.5),
    "randint": lambda d: torch.randint(3, 4, (3,), device=d),
    # Zero-size tensors whose reduced or indexed dimensions are not empty.
    "median_dim_empty_result": lambda d: ones(0, 3, device=d).median(1).values,
    "mode_empty_result": lambda d: ones(0, 3, device=d).mode(1).indices,
    "argmax_empty_result": lambda d: ones(0, 3, device=d).argmax(1),
    "amax_empty_result": lambda d: ones(0, 3, device=d).amax(1),
    "vector_norm_inf_empty_result": lambda d: torch.linalg.vector_norm(
        ones(0, 3, device=d), INF, dim=1
    ),
    "index_empty_result": lambda d: ones(3, 0, device=d)[longs(1, device=d)],
    "setitem_separated_indices": lambda d: put_item(
        torch.zeros(2, 3, 4, device=d),
        (longs(0, 1, device=d), slice(None), longs(2, 3, device=d)),
        torch.arange(6.0, device=d).reshape(2, 3),
    ),
    "setitem_adjacent_indices": lambda d: put_item(
        torch.zeros(2, 3, 4, device=d),
        (slice(None), longs(0, 2, device=d), longs(1, 3, device=d)),
        torch.arange(2.0, device=d).reshape(2, 1),
    ),
    "index_select_empty_index": lambda d: ones(0, 3, device=d).index_select(0, longs(device=d)),
    "put_nothing_into_empty": lambda d: ones(0, device=d).put(longs(device=d), ones(0, device=d)),
    "slice_scatter": lambda d: ones(4, 4, device=d).slice_scatter(ones(2, 4, device=d), 0, 0, 2),
    "unique_dim_empty": lambda d: torch.unique(ones(0, 3, device=d), dim=0),
    "nll_loss_byte_target": lambda d: F.nll_loss(
        torch.linspace(-1, 1, 12, device=d).reshape(3, 4).log_softmax(1),
        torch.tensor([0, 3, 2], dtype=torch.uint8, device=d),
    ),
}


def test_bincount_of_floats_is_not_implemented_like_cuda():
    with pytest.raises(NotImplementedError, match="\"bincount_tpu\" not implemented for 'Float'"):
        torch.bincount(ones(2, device="tpu"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_arguments_raise_like_the_cpu(case):
    with pytest.raises((RuntimeError, IndexError, TypeError)) as cpu:
        CASES[case]("cpu")
    with pytest.raises(type(cpu.value)) as tpu:
        CASES[case]("tpu")
    assert str(tpu.value).splitlines()[0] == str(cpu.value).splitlines()[0]


# Floats out of an integer type's range convert as on the CPU (through a 32- or 64-bit
# integer, whose lowest value NaN and overflow give; narrower types keep its low bits).
for _dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
    VALID[f"float_to_{_dtype}"] = lambda d, t=_dtype: torch.tensor(
        FLOATS_TO_CONVERT + [NAN, INF], device=d
    ).to(t)


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_arguments_compute_like_the_cpu(case):
    torch.testing.assert_close(VALID[case]("tpu").cpu(), VALID[case]("cpu"))


def test_results_follow_the_default_dtype():
    a = torch.tensor([1, 2], device="tpu")
    assert (a / a).dtype == (a + 2.5).dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert (a / a).dtype == (a + 2.5).dtype == torch.div(a, a).dtype == torch.float64
        torch.testing.assert_close((a + 2.5).cpu(), torch.tensor([1, 2]) + 2.5)
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("op", [torch.linalg.det, torch.linalg.slogdet, torch.cholesky_inverse])
def test_meta_kernel_assertions_are_runtime_errors_like_the_cpus(op):
    # PyTorch's Python meta kernels `raise AssertionError` here; the CPU raises RuntimeError.
    with pytest.raises(RuntimeError, match="must have at least 2 dimensions"):
        op(ones(3))
    with pytest.raises(RuntimeError, match="must have at least 2 dimensions"):
        op(ones(3, device="tpu"))


@pytest.mark.parametrize(
    "use",
    [
        lambda d, m: ones(3, device=d)[m],
        lambda d, m: put_item(ones(3, device=d), m, ones(2, device=d)),
        lambda d, m: ones(3, device=d).masked_scatter_(m, ones(3, device=d)),
    ],
    ids=["index", "setitem", "masked_scatter"],
)
def test_byte_masks_warn_like_the_cpu(use):
    for device in ("cpu", "tpu"):
        mask = torch.tensor(U8_MASK, dtype=torch.uint8, device=device)
        with pytest.warns(UserWarning, match="uint8"), contextlib.suppress(RuntimeError):
            use(device, mask)


def test_nll_loss_byte_targets_have_gradients():
    grads = []
    for device in ("cpu", "tpu"):
        x = torch.linspace(-1, 1, 12, device=device).reshape(3, 4).requires_grad_()
        target = torch.tensor([0, 3, 2], dtype=torch.uint8, device=device)
        F.nll_loss(x.log_softmax(1), target).backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize(
    "in_place",
    [lambda x: F.leaky_relu_(x, -0.5), lambda x: F.elu_(x, alpha=-1.0)],
    ids=["leaky_relu_", "elu_"],
)
def test_in_place_activations_with_a_negative_slope_have_no_backward(in_place):
    errors = []
    for device in ("cpu", "tpu"):
        x = torch.ones(2, device=device, requires_grad=True).clone()
        with pytest.raises(RuntimeError, match="negative slope which is not supported") as e:
            in_place(x).sum().backward()
        errors.append(str(e.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("op", ["masked_fill_", "index_fill_", "index_put_"])
def test_indexed_writes_into_expanded_tensors_warn_like_the_cpu(op):
    def call(d):
        x = torch.zeros(1, device=d).expand(6)
        index = longs(2, 1, 0, device=d)
        if op == "masked_fill_":
            return x.masked_fill_(torch.arange(6, device=d) > 2, 1.0)
        if op == "index_fill_":
            return x.index_fill_(0, index, 1.0)
        return x.index_put_((index,), torch.ones(3, device=d))

    for device in ("cpu", "tpu"):
        with pytest.warns(UserWarning, match=f"{op} on expanded tensors"):
            call(device)
