"""Special functions on tpu against the CPU: the gamma family, erfinv, modified Bessel
functions, logit, sinc, entr, xlog1py, zeta, heaviside, gcd/lcm, nextafter and frexp."""

import functools
import math

import pytest
import torch
from op_utils import check
from torch.testing import make_tensor

NAN, INF = math.nan, math.inf

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# Relative tolerance of float32 results: PyTorch's and XLA's approximations
# differ by a few ulps (float64 and the reduced types use the defaults).
RTOL = {torch.float32: 1e-5}


def make(shape, dtype, low=None, high=None, seed=0):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def tol(dtype):
    rtol = RTOL.get(dtype)
    return {} if rtol is None else {"rtol": rtol, "atol": 1e-5}


def grad_of(fn):
    """The gradient of sum(fn(x)) with respect to x."""

    def run(x, *args):
        return torch.autograd.grad(fn(x, *args).sum(), x)[0]

    return run


# name: (function, low, high, values PyTorch defines specially)
UNARY = {
    "lgamma": (torch.lgamma, -8, 8, [0.0, -0.0, -1.0, -2.0, 1.0, 2.0, INF, -INF, NAN]),
    "digamma": (torch.digamma, -8, 8, [0.0, -0.0, -1.0, -3.0, 1.0, 10.0, INF, -INF, NAN]),
    "erfinv": (torch.erfinv, -1, 1, [-1.0, 1.0, 0.0, -0.0, 1.5, -2.0, NAN]),
    "i0": (torch.i0, -12, 12, [0.0, 8.0, -8.0, INF, -INF, NAN]),
    "i0e": (torch.special.i0e, -12, 12, [0.0, 8.0, -8.0, INF, -INF, NAN]),
    "i1": (torch.special.i1, -12, 12, [0.0, 8.0, -8.0, INF, -INF, NAN]),
    "i1e": (torch.special.i1e, -12, 12, [0.0, 8.0, -8.0, INF, -INF, NAN]),
    "entr": (torch.special.entr, -1, 5, [0.0, -0.0, -1.0, 1.0, INF, -INF, NAN]),
    "sinc": (torch.sinc, -5, 5, [0.0, -0.0, 1.0, -2.0, 0.5, INF, NAN]),
    "logit": (torch.logit, 0, 1, [0.0, 1.0, -0.5, 1.5, 0.5, NAN]),
}


def with_values(x, values):
    """x flattened, followed by `values` (one program checks both)."""
    return torch.cat([x.flatten(), torch.tensor(values, dtype=x.dtype)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, dtype):
    fn, low, high, values = UNARY[name]
    x = make((4, 7), dtype, low, high)
    check(fn, with_values(x, values) if dtype != torch.bfloat16 else x, **tol(dtype))


def test_unary_float16_and_integers():
    for fn in (torch.lgamma, torch.digamma, torch.erfinv, torch.sinc, torch.special.i1):
        check(fn, make((6,), torch.float16, -0.9, 0.9))
        check(fn, make((6,), torch.int64, -3, 6), **tol(torch.float32))
    check(torch.i0, torch.tensor([True, False]))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_sinc_complex(dtype):
    x = make((10,), dtype, -2, 2)
    x[0] = 0
    check(torch.sinc, x, **tol(torch.float32))


@pytest.mark.parametrize("name", ["lgamma", "i0", "logit"])
def test_unary_non_contiguous_inplace_out(name):
    fn, low, high, _ = UNARY[name]
    x = make((6, 8), torch.float32, low, high)
    check(lambda t: fn(t.t()), x, **tol(torch.float32))
    check(lambda t: fn(t[:, ::2]), x, **tol(torch.float32))
    check(lambda t, o: fn(t, out=o), x, torch.empty(6, 8), **tol(torch.float32))
    check(lambda t: getattr(t, name + "_")(), x, **tol(torch.float32))


@pytest.mark.parametrize("name", UNARY)
def test_unary_grad(name):
    fn, low, high, _ = UNARY[name]
    if name == "entr":
        low = 0.1
    if name == "erfinv":
        low, high = -0.9, 0.9
    x = make((3, 5), torch.float32, low, high).requires_grad_()
    check(grad_of(fn), x, **tol(torch.float32))


# ---------------------------------------------------------------- polygamma, mvlgamma


@pytest.mark.parametrize(
    "n,dtype",
    [(0, torch.float32), (1, torch.float32), (3, torch.float32), (1, torch.float64)]
    + [(4, torch.float64), (2, torch.bfloat16)],
)
def test_polygamma(n, dtype):
    x = make((5, 5), dtype, -9, 9)
    values = [0.0, -0.0, -1.0, -2.5, 0.5, 1.0, INF, NAN]
    check(lambda t: torch.polygamma(n, t), with_values(x, values), **tol(dtype))


def test_polygamma_of_negative_arguments_sums_in_double():
    # At negative x zeta's terms cancel to a result far below them: the CPU sums in double.
    x = torch.tensor([-8.5, -7.5, -5.5, -3.3, -0.5, 0.5, 3.5])
    for n in (2, 3, 4):
        check(functools.partial(torch.polygamma, n), x, rtol=1e-5, atol=0)
        check(functools.partial(torch.polygamma, n), x.to(torch.bfloat16))


def test_polygamma_inplace_out_grad():
    x = make((4, 5), torch.float32, 0.5, 6)
    check(lambda t: t.polygamma_(2), x, **tol(torch.float32))
    check(lambda t, o: torch.polygamma(1, t, out=o), x, torch.empty(4, 5), **tol(torch.float32))
    x.requires_grad_()
    check(grad_of(lambda t: torch.polygamma(2, t)), x, **tol(torch.float32))


@pytest.mark.parametrize("p", [1, 3])
def test_mvlgamma(p):
    x = make((4, 5), torch.float32, p, p + 6)
    check(lambda t: torch.mvlgamma(t, p), x, **tol(torch.float32))
    x.requires_grad_()
    check(grad_of(lambda t: torch.mvlgamma(t, p)), x, **tol(torch.float32))


# ---------------------------------------------------------------- binary


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta(dtype):
    x = make((4, 6), dtype, 1, 6)
    q = make((4, 6), dtype, -3, 5, seed=1)
    # poles and domain errors: x == 1, x < 1, q a non-positive integer,
    # negative q with integer (summed) and non-integer (NaN) x
    xs = with_values(x, [1.0, 0.5, 2.0, 2.0, 3.0, 2.5, 4.0, NAN, 2.0])
    qs = with_values(q, [2.0, 2.0, 0.0, -3.0, -8.48, -1.5, -0.3, 1.0, NAN])
    check(torch.special.zeta, xs, qs, **tol(dtype))
    if dtype == torch.float32:
        check(torch.special.zeta, x[:, :1], q, **tol(dtype))  # broadcasting
        check(lambda t: torch.special.zeta(t, 2.5), x, **tol(dtype))
        check(lambda t: torch.special.zeta(3.0, t), q, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta_overflows_as_cephes(dtype):
    # The CPU's (Cephes') sum overflows: a term (-0.2)^-1e20 is inf (XLA's zeta was NaN);
    # at q = 4988429 the sum underflows to 0 and the tail's rising factorial overflows,
    # inf * 0 = NaN (XLA's 0); far negative q sums millions of terms
    x = torch.tensor([1e20, 1e20, 501.0, 1e20, 1e20, 2.0, 3.0, 1e20], dtype=dtype)
    q = torch.tensor([-1001.2, -13437.7, -1001.2, 4988429.0, 1e20, 0.8, 2e5, -4988429.2])
    check(torch.special.zeta, x, q.to(dtype), **tol(dtype))


# (a, x) pairs: each series and the continued fraction, large a near x (where the
# CPU uses an asymptotic expansion), and the domain's edges
IGAMMA_A = [0.5, 1.0, 3.0, 25.0, 25.0, 150.0, 300.0, 300.0, 1e4, 0.1, 10.0, 1e-3]
IGAMMA_X = [0.3, 2.0, 0.8, 24.0, 30.0, 170.0, 310.0, 290.0, 1.01e4, 1e-4, 1e-3, 50.0]
IGAMMA_A += [0.0, 0.0, 2.0, INF, INF, 2.0, -1.0, 2.0, NAN]
IGAMMA_X += [1.0, 0.0, 0.0, 3.0, INF, INF, 1.0, -1.0, 1.0]


def test_igamma_igammac():
    # igamma computes igammac on the way: each dtype tests the one calling the other
    a = torch.tensor(IGAMMA_A, dtype=torch.float64)
    x = torch.tensor(IGAMMA_X, dtype=torch.float64)
    check(torch.igamma, a, x)
    a, x = a.float(), x.float().requires_grad_()
    check(torch.igammac, a, x, **tol(a.dtype))
    check(lambda s, t: torch.autograd.grad(torch.igammac(s, t).sum(), t)[0], a, x, **tol(a.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_igamma_igammac_huge_a_near_x(dtype):
    # Temme's asymptotic expansion, where the series and the continued fraction lose
    # everything (P(1e20, 1e20) is 0.5; it was 8e-8, and 0.31 at a ~ 1e6)
    a = torch.tensor([4988429.0, 4988429.0, 1e8, 1e20, 1e20, 21.0, 199.0, 201.0], dtype=dtype)
    x = torch.tensor([4988429.0, 4990000.0, 0.9999e8, 1e20, 1.00000000001e20, 15.0, 250.0, 203.0])
    x = x.to(dtype)
    check(torch.igamma, a, x, **tol(dtype))
    check(torch.igammac, a, x, **tol(dtype))


def test_igamma_broadcast_reduced():
    a = make((3, 1), torch.bfloat16, 0.5, 5)
    x = make((1, 4), torch.bfloat16, 0.1, 8, seed=1)
    check(lambda s, t: s.igamma_(t), a.expand(3, 4).clone(), x)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_xlog1py(dtype):
    x = make((4, 6), dtype, -2, 2)
    y = make((4, 6), dtype, 0, 3, seed=1)
    check(torch.special.xlog1py, x, y, **tol(dtype))
    check(lambda t: torch.special.xlog1py(t, 2.0), x, **tol(dtype))
    check(lambda t: torch.special.xlog1py(3, t), y, **tol(dtype))
    zs = torch.tensor([0.0, 0.0, 1.0, 2.0, NAN])
    check(torch.special.xlog1py, zs, torch.tensor([NAN, -1.0, -1.0, INF, 1.0]))


def test_xlog1py_grad():
    x = make((3, 4), torch.float32, -2, 2).requires_grad_()
    y = make((3, 4), torch.float32, 0, 3, seed=1).requires_grad_()

    def grads(a, b):
        return torch.autograd.grad(torch.special.xlog1py(a, b).sum(), (a, b))

    check(grads, x, y, **tol(torch.float32))


@pytest.mark.parametrize("eps", [None, 0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_logit_eps(eps, dtype):
    x = torch.tensor([-0.5, 0.0, 0.05, 0.3, 0.5, 0.95, 1.0, 1.5, NAN], dtype=dtype)
    check(lambda t: torch.logit(t, eps), x, **tol(dtype))
    if dtype != torch.bfloat16:
        check(grad_of(lambda t: torch.logit(t, eps)), x.requires_grad_(), **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_heaviside(dtype):
    x = make((4, 6), dtype, -2, 2)
    x.view(-1)[::3] = 0
    v = make((4, 6), dtype, -3, 3, seed=1)
    check(torch.heaviside, x, v)
    check(torch.heaviside, x, v[:1])
    check(lambda a, b: a.heaviside_(b), x, v)
    specials = torch.tensor([NAN, -0.0, INF, -INF])
    check(torch.heaviside, specials, torch.tensor([0.5]))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int16])
def test_gcd_lcm(dtype):
    low = 0 if dtype == torch.uint8 else -60
    a = make((5, 6), dtype, low, 60)
    b = make((5, 6), dtype, low, 60, seed=1)
    a.view(-1)[::4] = 0
    b.view(-1)[::5] = 0
    check(torch.gcd, a, b)
    check(torch.lcm, a, b)
    check(torch.gcd, a, b[:1])
    check(lambda x, y: x.gcd_(y), a, b)
    check(lambda x, y, o: torch.lcm(x, y, out=o), a, b, torch.empty(5, 6, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_lcm_of_narrow_integers_wraps_like_cs(dtype):
    # C++ computes abs(a / g * b) in int and keeps the low bits: int16 lcm(-1113, -10701)
    # is -27625 on the CPU and in NumPy.
    v = torch.tensor([-1113, 1113, -10701, 10701, 97, -100, 127]).to(dtype)
    pairs = torch.cartesian_prod(v, v)
    check(torch.lcm, pairs[:, 0].contiguous(), pairs[:, 1].contiguous())
    check(torch.gcd, torch.tensor(0, dtype=dtype), torch.tensor(0, dtype=dtype))


def test_gcd_worst_case():
    # consecutive Fibonacci numbers take the most steps
    fib = [1, 1]
    while len(fib) < 90:
        fib.append(fib[-1] + fib[-2])
    check(torch.gcd, torch.tensor(fib[1:]), torch.tensor(fib[:-1]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_nextafter(dtype):
    x = make((4, 6), dtype, -3, 3)
    y = make((4, 6), dtype, -3, 3, seed=1)
    check(torch.nextafter, x, y)
    check(torch.nextafter, x, x)
    specials = torch.tensor([0.0, -0.0, 1.0, INF, -INF, NAN, 1.0], dtype=dtype)
    check(
        torch.nextafter, specials, torch.tensor([1.0, -1.0, INF, 0.0, 0.0, 1.0, NAN], dtype=dtype)
    )
    check(lambda a, b: a.nextafter_(b), x, y)


@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp(dtype):
    x = make((4, 6), dtype, -1000, 1000)
    check(torch.frexp, x)
    check(lambda t: torch.frexp(t.t()), x)
    tiny = torch.finfo(dtype).tiny
    specials = [0.0, -0.0, 1.0, 0.5, -3.0, tiny, tiny / 4, -tiny / 8, INF, -INF, NAN]
    check(torch.frexp, torch.tensor(specials, dtype=dtype))
    m, e = torch.empty(4, 6, dtype=dtype), torch.empty(4, 6, dtype=torch.int32)
    check(lambda t, a, b: torch.frexp(t, out=(a, b)), x, m, e)


# ---------------------------------------------------------------- Bessel, ndtri, erfcx


SP = torch.special
# name: (function, low, high)
SPECIAL = {
    "bessel_j0": (SP.bessel_j0, -20, 20),
    "bessel_j1": (SP.bessel_j1, -20, 20),
    "bessel_y0": (SP.bessel_y0, 0, 20),
    "bessel_y1": (SP.bessel_y1, 0, 20),
    "modified_bessel_i0": (SP.modified_bessel_i0, -15, 15),
    "modified_bessel_i1": (SP.modified_bessel_i1, -15, 15),
    "modified_bessel_k0": (SP.modified_bessel_k0, 0, 15),
    "modified_bessel_k1": (SP.modified_bessel_k1, 0, 15),
    "scaled_modified_bessel_k0": (SP.scaled_modified_bessel_k0, 0, 15),
    "scaled_modified_bessel_k1": (SP.scaled_modified_bessel_k1, 0, 15),
    "spherical_bessel_j0": (SP.spherical_bessel_j0, -20, 20),
    "airy_ai": (SP.airy_ai, -10, 10),
    "ndtri": (SP.ndtri, 0, 1),
    "log_ndtr": (SP.log_ndtr, -20, 5),
    "erfcx": (SP.erfcx, -10, 30),
}
SPECIAL_VALUES = [0.0, -0.0, 1e-6, 0.3, 1.0, -1.0, 2.0, 2.09, -2.09, 5.0, -5.5, 8.0, 8.5, -8.5]
SPECIAL_VALUES += [-30.0, 60.0, 104.0, INF, -INF, NAN]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", SPECIAL)
def test_special(name, dtype):
    fn, low, high = SPECIAL[name]
    check(fn, with_values(make((5, 8), dtype, low, high), SPECIAL_VALUES), **tol(dtype))


def test_special_integer_non_contiguous_out():
    x = make((6, 8), torch.float32, 0.05, 0.95)
    check(lambda t: SP.ndtri(t.t()), x, **tol(torch.float32))
    check(lambda t, o: SP.erfcx(t[:, ::2], out=o), x, torch.empty(6, 4), **tol(torch.float32))
    check(SP.bessel_j0, make((7,), torch.int64, -9, 9), **tol(torch.float32))


@pytest.mark.parametrize("name", ["ndtri", "log_ndtr", "erfcx"])
def test_special_grad(name):
    fn, low, high = SPECIAL[name]
    if name == "ndtri":
        low, high = 0.05, 0.95
    check(
        grad_of(fn), make((3, 5), torch.float32, low, high).requires_grad_(), **tol(torch.float32)
    )


# ---------------------------------------------------------------- orthogonal polynomials

POLYNOMIALS = [
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]


POLYNOMIAL_CASES = [(name, torch.float64) for name in POLYNOMIALS] + [
    (name, torch.float32)
    for name in POLYNOMIALS
    if name in ("chebyshev_polynomial_u", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h")
]


@pytest.mark.parametrize("name,dtype", POLYNOMIAL_CASES)
def test_polynomial(name, dtype):
    fn = getattr(SP, name)
    # (NaN x leaves the CPU's result uninitialized for most kinds)
    x = [-2.0, -1.0, -0.7, -1e-9, 0.0, 0.25, 0.5, 0.9, 1.0, 1.5]
    # float32 loses accuracy with the degree (the CPU's too): high degrees in float64
    high = 600.0 if dtype == torch.float64 else 30.0
    n = [-1.0, 0.0, 1.0, 2.0, 3.5, 5.0, 6.0, 7.0, 9.0, 12.0, high, NAN, INF]
    xs = torch.tensor(x, dtype=dtype)[:, None]
    ns = torch.tensor(n, dtype=dtype)[None, :]
    check(fn, xs, ns, **tol(dtype))


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "legendre_polynomial_p"])
def test_polynomial_scalars(name):
    fn = getattr(SP, name)
    check(lambda t: fn(t, 4), make((5,), torch.float32, -1, 1))  # n_scalar
    check(lambda t: fn(0.5, t), make((5,), torch.float32, 0, 9))  # x_scalar


def test_polynomial_integer_out():
    x = make((4, 5), torch.int64, -3, 3)
    n = make((4, 5), torch.int64, 0, 6, seed=1)
    check(SP.chebyshev_polynomial_t, x, n)
    check(lambda a, b, o: SP.legendre_polynomial_p(a, b, out=o), x, n, torch.empty(4, 5))
