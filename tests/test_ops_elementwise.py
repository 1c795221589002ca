"""Elementwise ops on tpu against the CPU: arithmetic, math functions, comparisons,
logical and bitwise ops, selection and clamping, with PyTorch's type promotion,
broadcasting, views, in-place and out= forms."""

import math
import warnings

import numpy as np
import pytest
import torch
from op_utils import check, to_tpu
from torch.testing import make_tensor

import torch_tpu

NAN, INF = math.nan, math.inf

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
I8, I16, I32, I64, U8, BOOL = (
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
)
FLOATS = [F32, F64, BF16, F16]
ALL = FLOATS + [I8, I16, I32, I64, U8, BOOL]


def make(shape, dtype, low=None, high=None, seed=0, nonzero=False):
    torch.manual_seed(seed)
    x = make_tensor(
        shape, dtype=dtype, device="cpu", low=low, high=high, exclude_zero=nonzero and dtype != BOOL
    )
    return x


def specials(dtype=F32):
    """Zeros of both signs, infinities, NaN, tiny and huge values."""
    return torch.tensor(
        [
            0.0,
            -0.0,
            INF,
            -INF,
            NAN,
            1e-30,
            -1e-30,
            1e30,
            -1e30,
            0.5,
            -0.5,
            1.0,
            -1.0,
            2.5,
            -2.5,
            3.0,
        ],
        dtype=dtype,
    )


def check_or_raises(fn, *args, **kwargs):
    """Compares with the CPU where the CPU accepts the inputs; otherwise tpu must raise too."""
    try:
        fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    except (RuntimeError, TypeError) as e:
        # PyTorch's meta kernels and its CPU kernels may word the error differently.
        expected = RuntimeError if isinstance(e, RuntimeError) else type(e)
        # (the CPU fallback that raises it warns)
        with pytest.raises(expected), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*to_tpu(args))
        return None
    return check(fn, *args, **kwargs)


def tolerance(*dtypes):
    """float16 results may differ by one rounding: the CPU's vectorized and scalar
    loops round differently, and the tpu computes in float32 and rounds once."""
    return {"atol": 1e-3, "rtol": 2e-3} if F16 in dtypes else {}


def compiles():
    return torch_tpu.metrics()["compiles"]


# ---------------------------------------------------------------- unary math

# op -> input range (floats); integer inputs promote to float32.
UNARY_MATH = {
    "exp": (-5, 5),
    "exp2": (-5, 5),
    "expm1": (-2, 2),
    "log": (0.01, 10),
    "log2": (0.01, 10),
    "log10": (0.01, 10),
    "log1p": (-0.9, 10),
    "sqrt": (0, 10),
    "rsqrt": (0.01, 10),
    "sin": (-4, 4),
    "cos": (-4, 4),
    "tan": (-1.2, 1.2),
    "asin": (-1, 1),
    "acos": (-1, 1),
    "atan": (-5, 5),
    "sinh": (-4, 4),
    "cosh": (-4, 4),
    "tanh": (-4, 4),
    "asinh": (-5, 5),
    "acosh": (1, 5),
    "atanh": (-0.95, 0.95),
    "sigmoid": (-6, 6),
    "erf": (-3, 3),
    "erfc": (-3, 3),
    "reciprocal": (0.1, 5),
}


@pytest.mark.parametrize("op", sorted(UNARY_MATH))
@pytest.mark.parametrize("dtype", [F32, F64, BF16, I32])
def test_unary_math(op, dtype):
    low, high = UNARY_MATH[op]
    x = make((4, 6), dtype, low=low, high=high)
    check(getattr(torch, op), x)


@pytest.mark.parametrize("op", sorted(UNARY_MATH))
def test_unary_math_special_values(op):
    check(getattr(torch, op), specials(F32))


@pytest.mark.parametrize("op", sorted(UNARY_MATH))
def test_unary_math_views_and_sizes(op):
    """Strided, transposed and broadcast reads and odd sizes: XLA's CPU plugin once
    miscompiled atan for 63 elements."""
    low, high = UNARY_MATH[op]
    x = make((7, 9), F32, low=low, high=high)
    fn = getattr(torch, op)
    check(lambda t: fn(t[:, ::2]), x)
    check(fn, make((1000,), F16, low=low, high=high))


@pytest.mark.parametrize(
    "op", ["exp", "log", "sqrt", "sin", "cos", "tanh", "reciprocal", "sigmoid"]
)
def test_unary_math_complex(op):
    x = make((3, 4), torch.complex64, low=0.1, high=2)
    check(getattr(torch, op), x)


@pytest.mark.parametrize("op", ["sinh", "cosh"])
def test_float32_sinh_cosh_within_two_ulp_up_to_overflow(op):
    # XLA's e^(|x| + log 1/2) was 12 ulp off at 50; PyTorch's CPU kernel overflows from
    # 88.7 where NumPy, CUDA and the true value (to 89.4) do not.
    x = torch.cat([torch.linspace(-89.4, 89.4, 1789), torch.tensor([0.0, -0.0, 1e-30, -1e-7])])
    exact = getattr(torch, op)(x.double())
    got = getattr(torch, op)(x.to("tpu")).cpu().double()
    assert torch.equal(torch.signbit(got), torch.signbit(exact))
    ulp = torch.finfo(torch.float32).eps * exact.abs().clamp(min=torch.finfo(torch.float32).tiny)
    assert ((got - exact).abs() <= 2 * ulp).all()
    inf = torch.tensor([float("inf"), float("-inf"), float("nan"), 89.5, -89.5])
    torch.testing.assert_close(getattr(torch, op)(inf.to("tpu")).cpu(), getattr(torch, op)(inf),
                               equal_nan=True)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_abs_of_infinite_parts_is_infinite(dtype):
    inf, nan = math.inf, math.nan
    z = torch.tensor([complex(inf, nan), complex(nan, inf), complex(-inf, nan), complex(nan, nan),
                      complex(inf, 1), complex(3, 4)], dtype=dtype)  # fmt: skip
    expected = torch.tensor([inf, inf, inf, nan, inf, 5.0], dtype=z.real.dtype)
    torch.testing.assert_close(z.to("tpu").abs().cpu(), z.abs(), equal_nan=True)
    torch.testing.assert_close(z.abs(), expected, equal_nan=True)


@pytest.mark.parametrize("op", ["sinh", "cosh", "tan", "exp2"])
def test_unary_math_complex_from_parts(op):
    x = make((3, 4), torch.complex64, low=-3, high=3)
    check(getattr(torch, op), x)
    # Small arguments keep their precision; a zero imaginary part stays 0.
    edge = torch.tensor([1e-4 + 2e-4j, -3e-5j, float("inf") + 0j, 2 + 0j], dtype=torch.complex64)
    check(getattr(torch, op), edge[:2] if op == "tan" else edge)


def test_logaddexp_complex():
    inf = float("inf")
    x = make((3, 4), torch.complex64, low=-3, high=3)
    y = make((3, 4), torch.complex64, low=-3, high=3, seed=1)
    check(torch.logaddexp, x, y)
    a = torch.tensor([inf + 0j, -inf + 1j, 1 + 2j, -20 + 1j], dtype=torch.complex64)
    b = torch.tensor([inf + 0j, -inf + 3j, 1 - 2j, 20 + 1j], dtype=torch.complex64)
    check(torch.logaddexp, a, b)


def complex_grid(dtype, values=(0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1e20, -1e20, INF, -INF, NAN)):
    return torch.tensor([complex(a, b) for a in values for b in values], dtype=dtype)


# C99 Annex G's values at infinities, NaNs and signed zeros, which NumPy (the reference of
# PyTorch's own extremal-value tests) returns, and the CPU mostly (its vectorized log2 of
# complex128 divides by a complex ln 2); XLA's complex ops differ there.
NUMPY_COMPLEX = {
    "exp": np.exp, "exp2": np.exp2, "sqrt": np.sqrt, "rsqrt": lambda z: 1 / np.sqrt(z),
    "log": np.log, "log2": np.log2, "log10": np.log10, "atan": np.arctan,
    "atanh": np.arctanh, "asinh": np.arcsinh, "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("op", sorted(NUMPY_COMPLEX))
def test_complex_special_values(op, dtype):
    z = complex_grid(dtype)
    with np.errstate(all="ignore"):
        expected = torch.from_numpy(NUMPY_COMPLEX[op](z.numpy()).astype(z.numpy().dtype))
    torch.testing.assert_close(getattr(torch, op)(z.to("tpu")).cpu(), expected, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_divide_and_pow_special_values(dtype):
    z = complex_grid(dtype, (0.0, -0.0, 1.0, -1.0, 3.0, 1e20, INF, -INF, NAN))
    x, y = z.repeat_interleave(len(z)), z.repeat(len(z))
    # c10::complex's (NumPy's) division: Smith's algorithm, not XLA's scaling.
    check(torch.div, x, y)
    extremal = complex_grid(dtype, (INF, -INF, NAN))
    base, exponent = extremal.repeat_interleave(len(extremal)), extremal.repeat(len(extremal))
    check(torch.pow, base, exponent)  # glibc's cpow: exp(y log x), C's product
    check(
        torch.pow, make((4, 5), dtype, low=-3, high=3), make((4, 5), dtype, low=-2, high=2, seed=1)
    )
    for scalar in (2, 3, -2, 0.5, -0.5, 0, 1, 2.5, 1j):
        check(torch.pow, make((4, 5), dtype, low=-3, high=3), scalar)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_divide_by_huge_denominators(dtype):
    # Smith's scale 1 / denominator is subnormal for denominators from 2^126 (float32):
    # XLA flushes it to zero, so those parts are divided instead (max/2 by max/2 is 1).
    info = torch.finfo(torch.float32 if dtype == torch.complex64 else torch.float64)
    big, tiny = info.max / 2, info.tiny
    x = torch.tensor(
        [complex(-big, -big), complex(big, big), complex(tiny, tiny), 3 + 4j], dtype=dtype
    )
    y = torch.tensor(
        [complex(-big, -big), complex(big, big), complex(tiny, tiny), 1 - 2j], dtype=dtype
    )
    check(torch.div, x, y)
    check(torch.div, x, y.flip(0))


def test_abs_of_complex_into_complex_out():
    # ATen casts |z| into any out= it can take; PyTorch's reference abs wants a real one.
    z = make((3, 4), torch.complex64)
    check(lambda t, o: torch.abs(t, out=o), z, torch.empty(3, 4, dtype=torch.complex64))
    check(lambda t, o: torch.abs(t, out=o), z, torch.empty(1, dtype=torch.float64))


def test_pow_uint8_exponents_from_128():
    values = torch.tensor([0, 1, 2, 55, 127, 128, 190, 254, 255], dtype=U8)
    check(torch.pow, values.repeat_interleave(9), values.repeat(9))


@pytest.mark.parametrize("dtype", [I8, I16, I32, I64, U8])  # the CPU has no wider unsigned pow
def test_integer_pow_wraps_for_every_exponent(dtype):
    # By squaring over every exponent bit, wrapping as the CPU's multiplications do
    # (XLA's power squares six times: int64 55 ** 127 came out wrong).
    info = torch.iinfo(dtype)
    values = [0, 1, 2, 3, 55, 63, 64, 65, 127, info.max, info.max - 1]
    if info.min < 0:
        values += [-1, -2, -3, -55, -127, info.min, info.min + 1]
    v = torch.tensor(values, dtype=dtype)
    check(torch.pow, v.repeat_interleave(len(values)), v.repeat(len(values)))
    for exponent in (e for e in (2, 3, 63, 64, 127, 128, 255) if e <= info.max):
        check(lambda t, e=exponent: t**e, v)
    for base in (3, 55, -1) if info.min < 0 else (3, 55):
        check(lambda t, x=base: torch.pow(x, t), v.clamp(min=0))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_reciprocal_silu_and_bool_special_values(dtype):
    # 1 / z and silu's z / (1 + exp(-z)) divide as c10's complex (Smith's algorithm):
    # reciprocal(inf + inf i) and silu(-501 - 501i) are NaN, not XLA's 0; a complex
    # number is true where either part is nonzero.
    z = complex_grid(dtype, (0.0, -0.0, 1.0, -1e-3, 3.0, 1e20, -501.0, INF, -INF, NAN))
    check(torch.reciprocal, z)
    check(torch.nn.functional.silu, z)
    check(lambda t: t.bool(), z)
    check(lambda t: t.to(torch.bool), z)


@pytest.mark.parametrize("op", ["exp", "sqrt", "sigmoid", "atan"])
def test_unary_math_views_inplace_out(op):
    x = make((6, 8), F32, low=0.1, high=3)
    fn = getattr(torch, op)
    check(fn, x.t())
    check(lambda t: fn(t[:, ::2]), x)
    check(lambda t: getattr(t[1:, ::3], op + "_")(), x)  # in-place on a view
    check(lambda t, o: fn(t, out=o), x, torch.empty(0, dtype=F64))  # resized, cast


# ---------------------------------------------------------------- unary, dtype-preserving

UNARY = [
    "neg",
    "abs",
    "sign",
    "sgn",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "bitwise_not",
    "logical_not",
    "isnan",
    "isinf",
    "isposinf",
    "isneginf",
    "signbit",
    "nan_to_num",
]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("dtype", [F32, BF16, I8, I64, U8, BOOL])
def test_unary(op, dtype):
    if dtype.is_floating_point:
        x = torch.cat([specials(dtype), make((8,), dtype, low=-4, high=4)])
    else:
        x = make((12,), dtype, low=-50, high=50)
    check_or_raises(getattr(torch, op), x)


def test_round_half_to_even_and_decimals():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 1.2345, 125.0, 135.0, -1.005, NAN, INF])
    check(torch.round, x)
    for decimals in [-2, -1, 0, 1, 2, 3]:
        check(lambda t, d=decimals: torch.round(t, decimals=d), x)
    check(lambda t: torch.round(t, decimals=2), x.to(BF16))


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_nan_to_num_replacements(dtype):
    # (complex inputs: PyTorch's meta kernel for nan_to_num rejects them.)
    x = torch.tensor([NAN, INF, -INF, 1.0, -2.0], dtype=dtype)
    check(torch.nan_to_num, x)
    check(lambda t: torch.nan_to_num(t, nan=1.5, posinf=100.0, neginf=-7.0), x)
    check(lambda t: t.nan_to_num_(posinf=1e30), x)  # overflows to inf in float16


def test_sgn_and_abs_complex():
    x = torch.tensor([3 + 4j, 0j, -1j, 2 - 0j], dtype=torch.complex64)
    check(torch.sgn, x)
    check(torch.abs, x)
    check(torch.neg, x)


# ---------------------------------------------------------------- binary

ARITHMETIC_PAIRS = [
    (F32, F32),
    (F64, F32),
    (BF16, BF16),
    (F16, F16),
    (I32, I32),
    (U8, I8),
    (BOOL, BOOL),
    (I64, F16),
]
COMPARISON_PAIRS = [(F32, F32), (BF16, BF16), (I32, F32), (U8, I8), (BOOL, I16)]

BINARY = {
    "add": lambda a, b: torch.add(a, b, alpha=2),
    "sub": lambda a, b: torch.sub(a, b, alpha=3),
    "rsub": lambda a, b: torch.rsub(a, b),
    "mul": torch.mul,
    "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "atan2": torch.atan2,
    "hypot": torch.hypot,
    "copysign": torch.copysign,
    "xlogy": torch.xlogy,
    "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
}
COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]
LOGICAL = ["logical_and", "logical_or", "logical_xor"]
BITWISE = ["bitwise_and", "bitwise_or", "bitwise_xor"]


def binary_inputs(da, db, op):
    a = make((4, 5), da, low=-9, high=9, seed=1)
    # No integer division by zero (the CPU raises; a device cannot).
    b = make((4, 5), db, low=-9, high=9, seed=2, nonzero=True)
    if op == "pow":  # small exponents, some negative: integer pow wraps and truncates
        b = make((4, 5), db, low=-3, high=4, seed=2)
        if db in (U8,):
            b = make((4, 5), db, low=0, high=4, seed=2)
    return a, b


BINARY_CASES = (
    [(op, da, db) for op in sorted(BINARY) for da, db in ARITHMETIC_PAIRS]
    + [(op, da, db) for op in COMPARISONS for da, db in COMPARISON_PAIRS]
    + [(op, da, db) for op in LOGICAL for da, db in [(F32, I32), (BOOL, BOOL)]]
    + [(op, da, db) for op in BITWISE for da, db in [(I32, I32), (U8, I8), (BOOL, BOOL)]]
)


@pytest.mark.parametrize("op,da,db", BINARY_CASES)
def test_binary(op, da, db):
    a, b = binary_inputs(da, db, op)
    fn = BINARY.get(op) or getattr(torch, op)
    check_or_raises(fn, a, b, **tolerance(da, db))


@pytest.mark.parametrize("op", sorted(BINARY) + COMPARISONS)
def test_binary_special_values(op):
    a = specials()
    b = specials().roll(3)
    if op in ("fmod", "remainder"):
        # The CPU's vectorized fmod loses 1e30 % 1e-30 (NaN); the tpu's is exact.
        a, b = a[a.abs() != 1e30], b[b.abs() != 1e30]
    fn = BINARY.get(op) or getattr(torch, op)
    check(fn, a[:, None], b[None, :])  # every pair, by broadcasting


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_fmod_remainder_of_quotients_beyond_float32(dtype):
    # Exact, as float64 computes them: the CPU's vectorized float32 kernels divide
    # first, and 6.15625 / 2^-126 overflows to NaN results (the CPU's scalar path gives 0).
    tiny = torch.finfo(torch.float32).tiny
    a = torch.tensor([6.15625, -6.15625, 5.0625, tiny, 3 * tiny], dtype=dtype).repeat(8)
    b = torch.tensor([tiny, tiny, -tiny, 5.0625, 2 * tiny], dtype=dtype).repeat(8)
    for op in (torch.fmod, torch.remainder):
        expected = op(a.double(), b.double()).to(dtype)
        torch.testing.assert_close(op(a.to("tpu"), b.to("tpu")).cpu(), expected, rtol=0, atol=0)


def test_floor_and_trunc_division_edge_cases():
    a = torch.tensor([7.0, -7.0, 7.0, -7.0, 0.0, -0.0, 1.0, -1.0, 5.0, INF, NAN, 1e30])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 0.0, 0.1, 2.0, 1.0, 7.0])
    for mode in ["floor", "trunc"]:
        check(lambda x, y, m=mode: torch.div(x, y, rounding_mode=m), a, b)
    check(torch.remainder, a, b)
    check(torch.fmod, a, b)
    ia = torch.tensor([7, -7, 7, -7, 0, -1, 1, 127, -128], dtype=I8)
    ib = torch.tensor([2, 2, -2, -2, 3, 3, -3, -1, 3], dtype=I8)
    for fn in [
        torch.floor_divide,
        torch.remainder,
        torch.fmod,
        lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    ]:
        check(fn, ia, ib)


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_reduced_float_rounding_division(dtype):
    """Reduced-float floor/trunc division rounds like PyTorch's Vectorized kernels."""
    a = make((64,), dtype, low=-20, high=20, seed=3)
    b = make((64,), dtype, low=-3, high=3, seed=4, nonzero=True)
    for mode in ["floor", "trunc"]:
        check(lambda x, y, m=mode: torch.div(x, y, rounding_mode=m), a, b)
        check(lambda x, m=mode: torch.div(x, 0.3, rounding_mode=m), a)
    check(lambda x: x / 0.3, a)
    check(lambda x: x * 0.1, a)


def test_integer_overflow_wraps():
    check(
        lambda a, b: a + b, torch.tensor([120, -120], dtype=I8), torch.tensor([10, -10], dtype=I8)
    )
    check(lambda a, b: a - b, torch.tensor([5, 0], dtype=U8), torch.tensor([6, 255], dtype=U8))
    check(lambda a: a * 100000, torch.tensor([100000, -70000], dtype=I32))
    check(lambda a: a.neg(), torch.tensor([1, 200], dtype=U8))
    check(lambda a: a.abs(), torch.tensor([-128, 5], dtype=I8))
    check(lambda a: a**31, torch.tensor([2, 3, -2], dtype=I32))
    check(lambda a: a + 300, torch.tensor([1, 2], dtype=U8))  # the scalar wraps to uint8


def test_integer_pow_negative_exponent():
    a = torch.tensor([-3, -2, -1, 0, 1, 2, 3, -1, -1], dtype=I64)
    b = torch.tensor([-1, -2, -3, -1, -5, -1, 2, -4, 0], dtype=I64)
    check(torch.pow, a, b)
    check(lambda e: torch.pow(-1, e), b)
    check(lambda e: torch.pow(2, e), b.abs())


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
def test_pow_scalar_exponents(dtype):
    """Every exponent runs the same program: the special cases are selected at run time."""
    x = torch.cat([specials(dtype), make((8,), dtype, low=0.1, high=4)])
    for exponent in [2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 0.0, 1.0, 2.5, -3.0]:
        check(lambda t, e=exponent: t**e, x)
        check(lambda t, e=exponent: torch.pow(e, t), x)
    check(lambda t: t**2, x)  # an integer exponent
    check(lambda t: torch.pow(t, t), x)


def test_pow_scalar_exponent_is_a_runtime_operand():
    x = make((5,), F32, low=0.5, high=2).to("tpu")
    for i, e in enumerate([1.7, 0.5, 2.0, 3.0, -1.0, 1.25]):
        if i == 1:
            before = compiles()
        torch.testing.assert_close((x**e).cpu(), x.cpu() ** e)
    assert compiles() == before


@pytest.mark.parametrize("dtype", [I8, I32, I64, U8])
def test_shifts(dtype):
    bits = torch.iinfo(dtype).bits
    a = make((bits + 4,), dtype, low=-100 if dtype != U8 else 0, high=100)
    low = 0 if dtype == U8 else -2
    b = torch.arange(low, low + a.numel(), dtype=dtype)
    check(torch.bitwise_left_shift, a, b)
    check(torch.bitwise_right_shift, a, b)
    check(lambda x: x << 3, a)
    check(lambda x: x >> 2, a)
    check(lambda x: x.__ilshift__(1), a)
    check(lambda x, y: x.__irshift__(y), a, b)
    check(lambda x: torch.bitwise_left_shift(1, x), b.clamp(0, bits - 2))


def test_bitwise_with_scalars():
    a = make((6,), I32, low=-100, high=100)
    check(lambda x: x & 6, a)
    check(lambda x: x | 0x30, a)
    check(lambda x: x ^ -1, a)
    check(lambda x: torch.bitwise_and(5, x), a)
    m = torch.tensor([True, False, True])
    check(lambda x: x & True, m)
    check(lambda x: x ^ True, m)


# ---------------------------------------------------------------- scalars and promotion

SCALAR_OPS = {
    "add_alpha": lambda t, s: torch.add(t, s, alpha=2),
    "radd": lambda t, s: s + t,
    "sub": lambda t, s: t - s,
    "rsub": lambda t, s: s - t,
    "mul": lambda t, s: t * s,
    "div": lambda t, s: t / s,
    "rdiv": lambda t, s: s / t,
    "floordiv": lambda t, s: t // s,
    "mod": lambda t, s: t % s,
    "rmod": lambda t, s: torch.remainder(s, t),
    "pow": lambda t, s: t**s,
    "rpow": lambda t, s: s**t,
    "eq": lambda t, s: t == s,
    "lt": lambda t, s: t < s,
    "maximum": lambda t, s: torch.clamp_min(t, s),
    "xlogy": lambda t, s: torch.xlogy(t, s),
}


@pytest.mark.parametrize("op", sorted(SCALAR_OPS))
@pytest.mark.parametrize("dtype", [F32, BF16, I32, BOOL])
@pytest.mark.parametrize("scalar", [3, 2.5, True])
def test_python_scalars(op, dtype, scalar):
    if op == "pow" and dtype == BOOL and scalar is True:
        pytest.skip("PyTorch's meta kernel says int64 for bool ** True, its CPU kernel bool")
    x = make((3, 4), dtype, low=1, high=5, seed=5)
    check_or_raises(lambda t: SCALAR_OPS[op](t, scalar), x, **tolerance(dtype))


@pytest.mark.parametrize(
    "other", [torch.tensor(2.5, dtype=F64), torch.tensor(3), torch.tensor(True)]
)
@pytest.mark.parametrize("dtype", [F32, BF16, I32])
def test_cpu_zero_dim_tensors(other, dtype):
    x = make((3, 4), dtype, low=1, high=5)
    check(lambda t: t * other, x)
    check(lambda t: torch.div(t, other), x)
    check(lambda t: t < other, x)


def test_zero_dim_device_tensor_promotion():
    x = make((3, 4), BF16, low=1, high=5)
    check(lambda t, s: t * s, x, torch.tensor(0.1, dtype=F32))  # 0-dim: bfloat16 result
    check(lambda t, s: t + s, make((3,), I32, low=1, high=5), torch.tensor(2.5, dtype=F64))
    check(lambda t, s: t + s, make((3,), I32, low=1, high=5), torch.tensor([2.5], dtype=F64))


def test_scalars_are_runtime_operands():
    x = make((4,), F32).to("tpu")
    # A float scalar travels as float32: the first round compiles, new values must not.
    for i, s in enumerate([1.5, 0.25, -7.0, 1e3]):
        if i == 1:
            before = compiles()
        torch.testing.assert_close((x + s).cpu(), x.cpu() + s)
        torch.testing.assert_close((x * s).cpu(), x.cpu() * s)
        torch.testing.assert_close(
            torch.add(x, x, alpha=s).cpu(), torch.add(x.cpu(), x.cpu(), alpha=s)
        )
    assert compiles() == before


# ---------------------------------------------------------------- shapes, views, in-place, out=


def test_broadcasting():
    check(torch.add, make((4, 1, 3), F32), make((5, 1), F32))
    check(torch.mul, make((), F32), make((2, 3), F32))
    check(torch.maximum, make((2, 3), F32), make((), F32))
    check(torch.where, make((3, 1), BOOL), make((1, 4), F32), make((), F64))
    check(torch.add, make((0, 3), F32), make((3,), F32))


def test_non_contiguous_inputs():
    x, y = make((6, 8), F32, seed=1), make((8, 6), F32, seed=2)
    check(lambda a, b: a.t() + b, x, y)
    check(lambda a, b: a[:, ::2] * b.t()[:, 1::2], x, y)
    check(lambda a: a[1:, 2:5].exp(), x)
    check(lambda a: a.expand(3, 6, 8) - a, x)


def test_in_place():
    x, y = make((4, 6), F32, seed=1), make((4, 6), F32, seed=2)
    check(lambda a, b: a.add_(b, alpha=0.5), x, y)
    check(lambda a, b: a.mul_(b), x, y)
    check(lambda a, b: a.div_(b, rounding_mode="floor"), x, y)
    check(lambda a, b: a[:, ::2].sub_(b[:, 1::2]), x, y)  # through a view
    check(lambda a: a.t().clamp_(-0.5, 0.5), x)
    check(lambda a, b: a.add_(b), x.to(F16), y)  # f16 += f32: computed in f32
    check(lambda a: a.mul_(3), make((5,), I32))
    check(lambda a: a.pow_(2), make((5,), I64, low=-5, high=5))
    check(lambda a: a.abs().pow_(0.5), x)  # pow_.Scalar: the exponent is the Python number
    check(lambda a, b: a.abs().pow_(b), x, y)
    check(lambda a, b: a.floor_divide_(b), x, y)
    check(lambda a, b: a.copysign_(b), x, y)
    check_or_raises(lambda a: a.div_(2), make((5,), I32))  # float result into int: error


def test_out_variants():
    x, y = make((4, 6), F32, seed=1), make((4, 6), F32, seed=2)
    check(lambda a, b, o: torch.add(a, b, out=o), x, y, torch.empty(0))
    check(lambda a, b, o: torch.mul(a, b, out=o), x, y, torch.empty(4, 6, dtype=F64))
    check(lambda a, b, o: torch.lt(a, b, out=o), x, y, torch.empty(4, 6, dtype=F32))
    ia, ib = make((5,), I32, seed=1), make((5,), I32, seed=2, nonzero=True)
    check(lambda a, b, o: torch.add(a, b, out=o), ia, ib, torch.empty(5, dtype=F32))
    check(lambda a, b, o: torch.div(a, b, out=o), ia, ib, torch.empty(5, dtype=F64))
    check(lambda a, o: torch.exp(a, out=o[:, ::2]), x[:, :3], torch.zeros(4, 6))


# ---------------------------------------------------------------- selection and clamping


@pytest.mark.parametrize("dtype", [F32, BF16, I64, BOOL])
def test_where(dtype):
    c = make((4, 5), BOOL, seed=3)
    a, b = make((4, 5), dtype, seed=1), make((5,), dtype, seed=2)
    check(torch.where, c, a, b)
    check(lambda c, a: torch.where(c, a, 0), c, a)
    check(lambda c, b: torch.where(c, 1.5, b), c, b)
    check(lambda c: torch.where(c, 2, 3), c)
    check(torch.where, c, a, make((4, 5), I32, seed=2))  # promotion


@pytest.mark.parametrize("dtype", [F32, F16, I32, BOOL])
def test_masked_fill(dtype):
    x, m = make((4, 5), dtype, seed=1), make((4, 5), BOOL, seed=2)
    check(lambda t, m: t.masked_fill(m, 3), x, m)
    check(lambda t, m: t.masked_fill(m, -1.5), x, m)
    check(lambda t, m, v: t.masked_fill(m[0], v), x, m, torch.tensor(7))  # broadcast mask
    check(lambda t, m, v: t.masked_fill_(m, v), x, m, torch.tensor(True))
    check(lambda t, m: t.t().masked_fill_(m.t(), 0), x, m)


@pytest.mark.parametrize("dtype", [F32, BF16, I32])
def test_clamp(dtype):
    x = (
        torch.cat([make((10,), dtype, low=-8, high=8), specials(dtype)])
        if dtype.is_floating_point
        else make((10,), dtype, low=0, high=20)
    )
    check(lambda t: t.clamp(2, 5), x)
    check(lambda t: t.clamp(min=3), x)
    check(lambda t: t.clamp(max=4), x)
    check(lambda t: t.clamp(5, 2), x)  # min > max: max
    check(lambda t: torch.clamp_min(t, 1), x)
    check(lambda t: torch.clamp_max(t, 1), x)
    check(lambda t: t.clamp(0.5, 4.5), x)  # a float bound promotes integer inputs
    lo, hi = (
        make(x.shape, dtype, low=0, high=3, seed=7),
        make(x.shape, dtype, low=4, high=9, seed=8),
    )
    check(torch.clamp, x, lo, hi)
    check(lambda t, lo: torch.clamp(t, min=lo), x, lo)
    check(lambda t, hi: torch.clamp(t, max=hi[:1]), x, hi)
    check(torch.clamp_min, x, lo)
    check(torch.clamp_max, x, hi)
    check(lambda t: t.clamp_(1, 3), x)


def test_clamp_nan_bounds():
    x = torch.tensor([1.0, -1.0, NAN, 5.0])
    check(lambda t: t.clamp(min=NAN), x)
    check(lambda t: t.clamp(0.0, NAN), x)
    check(lambda t, b: t.clamp(min=b), x, torch.tensor([NAN, 0.0, 0.0, 0.0]))
    check(lambda t, b: t.clamp(max=b), x, torch.tensor([NAN, 0.0, 0.0, NAN]))


# ---------------------------------------------------------------- pointwise ternary


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16])
def test_lerp(dtype):
    a, b = make((4, 5), dtype, seed=1), make((4, 5), dtype, seed=2)
    for w in [0.0, 0.25, 0.5, 0.75, 1.0, -1.5, 2.0]:
        check(lambda x, y, w=w: torch.lerp(x, y, w), a, b)
    check(torch.lerp, a, b, make((4, 5), dtype, low=-1, high=2, seed=3))
    check(torch.lerp, a, b[0], make((5,), dtype, seed=3))  # broadcasting
    check(lambda x, y: x.lerp_(y, 0.1), a, b)


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16, I32])
@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv(dtype, op):
    s, t1 = make((4, 5), dtype, seed=1), make((4, 5), dtype, seed=2)
    t2 = make((5,), dtype, seed=3, nonzero=True)
    fn = getattr(torch, op)
    check_or_raises(fn, s, t1, t2)
    check_or_raises(
        lambda a, b, c: fn(a, b, c, value=0.3 if dtype.is_floating_point else 3), s, t1, t2
    )
    check_or_raises(lambda a, b, c: getattr(a, op + "_")(b, c, value=-2), s, t1, t2)


def test_addcmul_promotion_and_complex():
    check(torch.addcmul, make((3,), F32), make((3,), I32), make((3,), F64))
    z = make((3,), torch.complex64, seed=1)
    check(lambda a, b, c: torch.addcmul(a, b, c, value=0.5), z, z, z)


# ---------------------------------------------------------------- complex arithmetic


def test_complex_arithmetic():
    a, b = (
        make((3, 4), torch.complex64, seed=1),
        make((3, 4), torch.complex64, seed=2, nonzero=True),
    )
    check(torch.add, a, b)
    check(torch.mul, a, b)
    check(torch.div, a, b)
    check(lambda x: x * 2.5, a)
    check(torch.eq, a, b)
    check(lambda x: x**2, a)
    check(lambda x, y: torch.lerp(x, y, 0.3), a, b)


# ---------------------------------------------------------------- autograd


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: (a * b).exp(),
        lambda a, b: a / b + b.sqrt(),
        lambda a, b: torch.atan2(a, b) * torch.hypot(a, b),
        lambda a, b: torch.lerp(a, b, 0.3) ** 3,
        lambda a, b: torch.maximum(a, b).sin() + torch.clamp(a, -0.5, 0.5),
        lambda a, b: torch.where(a > 0, a, b).tanh() - b.log1p(),
        lambda a, b: torch.addcdiv(a, a, b, value=0.5).sigmoid(),
    ],
    ids=[
        "mul_exp",
        "div_sqrt",
        "atan2_hypot",
        "lerp_pow",
        "maximum_clamp",
        "where_tanh",
        "addcdiv",
    ],
)
def test_backward(fn):
    a = make((4, 5), F32, low=0.1, high=2, seed=1)
    b = make((4, 5), F32, low=0.5, high=3, seed=2)

    def grads(x, y):
        x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
        fn(x, y).sum().backward()
        return x.grad, y.grad

    check(grads, a, b)


@pytest.mark.parametrize(
    "op", [torch.div, torch.atan2, lambda x, y: torch.exp(x % 7), lambda x, y: torch.sigmoid(y)]
)
def test_integers_compute_in_the_default_dtype(op):
    # Under set_default_dtype(float64) integer inputs give float64 results computed in
    # float64, as on the CPU (they were computed in float32 and widened).
    x = torch.tensor([-1539066660, 255357750, 7, -3], dtype=torch.int32)
    y = torch.tensor([-550211168, 1774280610, 3, 5], dtype=torch.int32)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        expected, got = op(x, y), op(x.to("tpu"), y.to("tpu"))
    finally:
        torch.set_default_dtype(previous)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-15, atol=0)
