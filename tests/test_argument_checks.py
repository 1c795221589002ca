"""Argument checks the CPU's kernels make before computing, on values the host knows
(dtypes, Python scalars): a tpu op raises the CPU's exception instead of computing."""

import pytest
import torch
import torch.nn.functional as F

L, I8 = torch.int64, torch.int8


def ones(*shape, dtype=torch.float32, device="cpu"):
    return torch.ones(*shape, dtype=dtype, device=device)


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
}

# Calls that look alike but are valid: they must still compute.
VALID = {
    "pow_positive": lambda d: torch.tensor([2, 3], device=d) ** 2,
    "pow_float_negative": lambda d: torch.tensor([2.0, 4.0], device=d) ** -1,
    "full_unsigned_wraps": lambda d: torch.full((2,), -1, dtype=torch.uint8, device=d),
    "clamp_promotes": lambda d: torch.zeros(2, dtype=I8, device=d).clamp(max=2.5),
    "randint": lambda d: torch.randint(3, 4, (3,), device=d),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_arguments_raise_like_the_cpu(case):
    with pytest.raises(RuntimeError) as cpu:
        CASES[case]("cpu")
    with pytest.raises(type(cpu.value)) as tpu:
        CASES[case]("tpu")
    assert str(tpu.value).splitlines()[0] == str(cpu.value).splitlines()[0]


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_arguments_compute_like_the_cpu(case):
    torch.testing.assert_close(VALID[case]("tpu").cpu(), VALID[case]("cpu"))
