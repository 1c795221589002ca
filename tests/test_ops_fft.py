"""Fourier transforms and complex helpers on tpu against the CPU: torch.fft (the
_fft_r2c/_fft_c2c/_fft_c2r kernels), complex, polar, angle and conj_physical."""

import pytest
import torch
from op_utils import check
from torch.testing import make_tensor

import torch_tpu  # noqa: F401

NORMS = [None, "forward", "ortho"]
# XLA's FFT and pocketfft round differently; errors grow like log(n) * eps * |x|.
TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.complex64: dict(atol=1e-4, rtol=1e-4),
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.complex128: dict(atol=1e-10, rtol=1e-10),
}


def make(shape, dtype, seed=0, **kwargs):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", **kwargs)


# ---------------------------------------------------------------- one-dimensional


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.float64, torch.complex128])
@pytest.mark.parametrize("norm", NORMS)
def test_fft_ifft(dtype, norm):
    x = make((3, 10), dtype)
    tol = TOL[dtype]
    check(lambda t: torch.fft.fft(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.ifft(t, norm=norm), x, **tol)  # real input: r2c then conj
    check(lambda t: torch.fft.fft(t, n=7, dim=0, norm=norm), x, **tol)  # zero-padded
    check(lambda t: torch.fft.fft(t, n=6, norm=norm), x, **tol)  # trimmed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", NORMS)
def test_rfft_irfft(dtype, norm):
    x = make((4, 9), dtype)
    tol = TOL[dtype]
    check(lambda t: torch.fft.rfft(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.rfft(t, n=12, dim=0, norm=norm), x, **tol)
    spectrum = make((4, 5), dtype.to_complex())
    check(lambda t: torch.fft.irfft(t, norm=norm), spectrum, **tol)
    check(lambda t: torch.fft.irfft(t, n=9, norm=norm), spectrum, **tol)  # odd length
    check(lambda t: torch.fft.irfft(t, n=4, dim=0, norm=norm), spectrum, **tol)  # trims


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
def test_integer_inputs_promote(dtype):
    x = make((2, 8), dtype)
    check(lambda t: torch.fft.fft(t), x, **TOL[torch.float32])
    check(lambda t: torch.fft.rfft(t), x, **TOL[torch.float32])


@pytest.mark.parametrize("norm", NORMS)
def test_hfft_ihfft(norm):
    """Hermitian transforms conjugate lazily (conj views) around the kernels."""
    tol = TOL[torch.float32]
    z = make((3, 6), torch.complex64)
    x = make((3, 4, 6), torch.float32)
    check(lambda t: torch.fft.hfft(t, n=10, norm=norm), z, **tol)
    check(lambda t: torch.fft.hfft(t.real, norm=norm), z, **tol)
    check(lambda t: torch.fft.ihfft(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.hfft2(t, norm=norm), z, **tol)
    check(lambda t: torch.fft.ihfftn(t, norm=norm), x, **tol)


# ---------------------------------------------------------------- several dimensions


@pytest.mark.parametrize("norm", NORMS)
def test_fft2_fftn(norm):
    x = make((2, 5, 6, 4), torch.complex64)
    tol = TOL[torch.complex64]
    check(lambda t: torch.fft.fft2(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.ifft2(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.fftn(t, dim=(2, 0), norm=norm), x, **tol)
    # four dimensions: more than one stablehlo.fft can do
    check(lambda t: torch.fft.fftn(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.ifftn(t, s=(3, 7), dim=(1, 3), norm=norm), x, **tol)


@pytest.mark.parametrize("norm", NORMS)
def test_rfftn_irfftn(norm):
    tol = TOL[torch.float32]
    x = make((3, 4, 5, 6), torch.float32)
    check(lambda t: torch.fft.rfft2(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.rfftn(t, norm=norm), x, **tol)
    check(lambda t: torch.fft.rfftn(t, dim=(3, 0), norm=norm), x, **tol)  # halves dim 0
    spectrum = make((3, 4, 5, 4), torch.complex64)
    check(lambda t: torch.fft.irfft2(t, norm=norm), spectrum, **tol)
    check(lambda t: torch.fft.irfftn(t, norm=norm), spectrum, **tol)
    check(lambda t: torch.fft.irfftn(t, s=(5, 5), dim=(2, 0), norm=norm), spectrum, **tol)


def test_kernels_directly():
    """The ATen kernels with arguments torch.fft does not produce: unsorted dims,
    a two-sided r2c, every normalization mode."""
    tol = TOL[torch.complex64]
    x = make((3, 4, 5, 2, 3), torch.float32)
    z = make((3, 4, 5, 2, 3), torch.complex64)
    for n in range(3):
        check(lambda t, n=n: torch._fft_r2c(t, [4, 0, 2, 1], n, True), x, **tol)
        check(lambda t, n=n: torch._fft_r2c(t, [2, 1], n, False), x, **tol)
        check(lambda t, n=n: torch._fft_c2c(t, [3, 1, 0, 4], n, False), z, **tol)
        check(lambda t, n=n: torch._fft_c2r(t, [0, 3, 2, 4, 1], n, 6), z, **tol)


def test_noncontiguous_and_out():
    tol = TOL[torch.complex64]
    x = make((6, 8), torch.complex64)
    check(lambda t: torch.fft.fft(t.t()), x, **tol)
    check(lambda t: torch.fft.fft2(t[:, ::2]), x, **tol)
    check(lambda t: torch.fft.rfft(t.real.t()), x, **tol)
    out = torch.empty(6, 8, dtype=torch.complex64)
    check(lambda t, o: torch.fft.fft(t, out=o), x, out, **tol)
    real_out = torch.empty(6, 14)
    check(lambda t, o: torch.fft.irfft(t, out=o), x, real_out, **tol)


def test_empty_dims_is_identity():
    x = make((3, 4), torch.complex64)
    check(lambda t: torch._fft_c2c(t, [], 2, True), x)


# ---------------------------------------------------------------- gradients


def grads(fn, *inputs, device):
    leaves = [t.detach().to(device).requires_grad_() for t in inputs]
    out = fn(*leaves)
    torch.manual_seed(1)
    cotangent = torch.randn(out.shape, dtype=out.dtype).to(device)
    return [g.cpu() for g in torch.autograd.grad(out, leaves, cotangent)]


@pytest.mark.parametrize(
    "fn,dtype",
    [
        (lambda t: torch.fft.fft(t, norm="ortho"), torch.complex64),
        (lambda t: torch.fft.fftn(t, dim=(0, 1)), torch.complex64),
        (lambda t: torch.fft.rfft(t), torch.float32),
        (lambda t: torch.fft.rfft2(t, norm="forward"), torch.float32),
    ],
)
def test_gradients(fn, dtype, no_fallback):
    x = make((4, 6), dtype)
    expected = grads(fn, x, device="cpu")
    actual = grads(fn, x, device="tpu")
    torch.testing.assert_close(actual, expected, **TOL[dtype])


# ---------------------------------------------------------------- complex helpers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_and_polar(dtype):
    re, im = make((3, 4), dtype, seed=0), make((4,), dtype, seed=1)
    check(lambda a, b: torch.complex(a, b), re, im)
    check(lambda a, b: torch.complex(a.t(), b[:3]), re, im)
    r = make((3, 4), dtype, low=0.1, high=3)
    check(lambda a, b: torch.polar(a, b), r, make((3, 4), dtype, seed=2), atol=1e-5, rtol=1e-5)
    out = torch.empty(3, 4, dtype=dtype.to_complex())
    check(lambda a, b, o: torch.complex(a, b, out=o), re, im, out)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64]
)
def test_angle(dtype):
    x = make((5, 6), dtype)
    if dtype.is_floating_point:
        x[0, 0] = float("nan")
    check(lambda t: torch.angle(t), x, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.float32, torch.int32])
def test_conj_physical(dtype):
    x = make((3, 4), dtype)
    check(lambda t: torch.conj_physical(t), x)
    check(lambda t: torch.conj_physical(t[:, ::2]), x)
    check(lambda t: t.conj_physical_(), x)
    check(lambda t, o: torch.conj_physical(t, out=o), x, torch.empty(3, 4, dtype=dtype))


def test_polar_gradients(no_fallback):
    r = make((3, 4), torch.float32, low=0.1, high=3)
    theta = make((3, 4), torch.float32, seed=2)
    expected = grads(torch.polar, r, theta, device="cpu")
    torch.testing.assert_close(grads(torch.polar, r, theta, device="tpu"), expected)
