"""torch.tpu precision of float32 matrix products and convolutions.

DEFAULT multiplies bfloat16-rounded operands (one pass of a TPU's matrix unit), HIGH
keeps three bf16 products (bf16x3), HIGHEST is float32. Off a TPU the lowering spells
this arithmetic out, so the errors below are what a TPU gives. Other dtypes ignore it.
"""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

P = torch.tpu.Precision


def rel_error(actual, exact):
    """Relative Frobenius error of a float32 (complex64) result against a float64 one."""
    return ((actual.to(exact.dtype) - exact).norm() / exact.norm()).item()


def bf16(x):
    return x.bfloat16().double()


@pytest.fixture(autouse=True)
def restore_precision():
    previous = torch.tpu.get_precision()
    yield
    torch.tpu.set_precision(previous)


@pytest.fixture(scope="module")
def matrices():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    return a, b, a.double() @ b.double()


def tpu_mm(a, b, mode):
    with torch.tpu.precision(mode):
        return (a.to("tpu") @ b.to("tpu")).cpu()


def test_errors_fall_by_an_order_of_magnitude_per_level(matrices):
    a, b, exact = matrices
    errors = {mode: rel_error(tpu_mm(a, b, mode), exact) for mode in P}
    print({mode.name: f"{e:.3g}" for mode, e in errors.items()})
    assert errors[P.DEFAULT] > 10 * errors[P.HIGH] > 100 * errors[P.HIGHEST]
    # One bf16 pass: relative error of a few bf16 ulps (2^-8); float32: a few 2^-24.
    assert 2**-12 < errors[P.DEFAULT] < 2**-7
    assert errors[P.HIGHEST] < 2**-20


def test_highest_is_float32(matrices):
    a, b, exact = matrices
    ours = tpu_mm(a, b, P.HIGHEST)
    cpu = a @ b
    # Both are float32 sums of 256 products, only ordered differently.
    torch.testing.assert_close(ours, cpu, rtol=0, atol=256 * 2**-24 * exact.abs().max().item())
    assert rel_error(ours, exact) < 2 * rel_error(cpu, exact)


def test_default_is_one_bfloat16_pass(matrices):
    a, b, _ = matrices
    ours = tpu_mm(a, b, P.DEFAULT)
    # Exact products of the bf16-rounded operands, summed in float32.
    expected = bf16(a) @ bf16(b)
    torch.testing.assert_close(
        ours.double(), expected, rtol=0, atol=256 * 2**-24 * expected.abs().max().item()
    )


def test_default_rounds_operands_exactly_like_bfloat16():
    """Each product of a 1x1 identity is the rounded operand itself: ties to even, values
    that round up to infinity, infinities and NaNs, against PyTorch's own float->bf16."""
    g = torch.Generator().manual_seed(0)
    edges = torch.tensor(
        [1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9, 1 + 3 * 2**-9, 3.3961776e38, 3.4028235e38]
        + [float("inf"), -float("inf"), float("nan"), 1.1754944e-38, 0.0, -0.0, -(1 + 2**-8)]
    )
    spread = torch.randn(20000, generator=g) * torch.exp(torch.randn(20000, generator=g) * 20)
    nan_payloads = torch.tensor([0x7FFFFFFF, -1, 0x7F80FFFF], dtype=torch.int32).view(torch.float32)
    x = torch.cat([edges, nan_payloads, spread[spread.abs() > 1.2e-38]]).reshape(-1, 1)
    expected = x.bfloat16().float()
    ours = tpu_mm(x, torch.ones(1, 1), P.DEFAULT)
    torch.testing.assert_close(ours, expected, rtol=0, atol=0, equal_nan=True)


def test_high_is_bf16x3(matrices):
    a, b, exact = matrices
    ours = tpu_mm(a, b, P.HIGH)
    a_hi, b_hi = bf16(a), bf16(b)
    a_lo, b_lo = bf16(a - a_hi.float()), bf16(b - b_hi.float())
    expected = a_hi @ b_hi + a_hi @ b_lo + a_lo @ b_hi
    torch.testing.assert_close(
        ours.double(), expected, rtol=0, atol=256 * 2**-24 * expected.abs().max().item()
    )
    # ... and better than any single bf16 pass could be.
    assert rel_error(ours, exact) < rel_error(a_hi @ b_hi, exact) / 100


def test_set_precision_and_context_manager():
    torch.tpu.set_precision(P.HIGHEST)
    assert torch.tpu.get_precision() == P.HIGHEST
    with torch.tpu.precision(P.HIGH):
        assert torch.tpu.get_precision() == P.HIGH
        with torch.tpu.precision("default"):
            assert torch.tpu.get_precision() == P.DEFAULT
        assert torch.tpu.get_precision() == P.HIGH
    assert torch.tpu.get_precision() == P.HIGHEST
    torch.tpu.set_precision("high")
    assert torch.tpu.get_precision() == P.HIGH
    with pytest.raises(ValueError):
        torch.tpu.set_precision("medium")


def test_precision_is_part_of_the_program_cache_key(matrices):
    a, b, _ = matrices
    a_t, b_t = a[:64, :64].to("tpu"), b[:64, :64].to("tpu")
    results = {}
    for mode in list(P) * 2:  # the second round reuses each mode's program
        with torch.tpu.precision(mode):
            before = torch_tpu.metrics()["cache_misses"]
            r = (a_t @ b_t).cpu()
            missed = torch_tpu.metrics()["cache_misses"] - before
        if mode in results:
            assert missed == 0
            assert torch.equal(r, results[mode])
        results[mode] = r
    assert not torch.equal(results[P.DEFAULT], results[P.HIGH])
    assert not torch.equal(results[P.HIGH], results[P.HIGHEST])


@pytest.mark.parametrize("op", ["bmm", "mv", "dot", "addmm", "baddbmm", "addbmm", "addmv"])
def test_every_matmul_op_follows_precision(op):
    g = torch.Generator().manual_seed(1)
    n = 64

    def r(*shape):
        return torch.randn(*shape, generator=g)

    args = {
        "bmm": (r(2, n, n), r(2, n, n)),
        "mv": (r(n, n), r(n)),
        "dot": (r(n * n), r(n * n)),
        "addmm": (r(n, n), r(n, n), r(n, n)),
        "baddbmm": (r(2, n, n), r(2, n, n), r(2, n, n)),
        "addbmm": (r(n, n), r(2, n, n), r(2, n, n)),
        "addmv": (r(n), r(n, n), r(n)),
    }[op]
    fn = getattr(torch, op)
    exact = fn(*(t.double() for t in args))
    errors = {}
    for mode in P:
        with torch.tpu.precision(mode):
            errors[mode] = rel_error(fn(*(t.to("tpu") for t in args)).cpu(), exact)
    # A single dot product is one noisy sample: HIGH and HIGHEST are only ordered.
    assert errors[P.DEFAULT] > 10 * errors[P.HIGH] > 10 * errors[P.HIGHEST], errors
    assert errors[P.HIGHEST] < 2**-20, errors


def test_complex64_follows_precision():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(64, 64, dtype=torch.complex64, generator=g)
    b = torch.randn(64, 64, dtype=torch.complex64, generator=g)
    exact = a.to(torch.complex128) @ b.to(torch.complex128)
    errors = {mode: rel_error(tpu_mm(a, b, mode), exact) for mode in P}
    assert errors[P.DEFAULT] > 10 * errors[P.HIGH] > 100 * errors[P.HIGHEST], errors


def test_convolution_and_its_gradients_follow_precision():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 32, 12, 12, generator=g)
    w = torch.randn(16, 32, 3, 3, generator=g)
    grad = torch.randn(2, 16, 10, 10, generator=g)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    exact_y = F.conv2d(xd, wd)
    exact_y.backward(grad.double())
    exact = {"output": exact_y.detach(), "grad_input": xd.grad, "grad_weight": wd.grad}
    errors = {name: {} for name in exact}
    for mode in P:
        xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
        with torch.tpu.precision(mode):
            y = F.conv2d(xt, wt)
            y.backward(grad.to("tpu"))
        for name, ours in [
            ("output", y.detach()),
            ("grad_input", xt.grad),
            ("grad_weight", wt.grad),
        ]:
            errors[name][mode] = rel_error(ours.cpu(), exact[name])
    for e in errors.values():
        assert e[P.DEFAULT] > 10 * e[P.HIGH] > 100 * e[P.HIGHEST], errors


def test_linear_backward_follows_precision(matrices):
    a, b, _ = matrices
    w = b[:32]
    exact = torch.ones(32, 256, dtype=torch.float64) @ a.double()  # grad of w for ones
    errors = {}
    for mode in (P.DEFAULT, P.HIGHEST):
        wt = w.to("tpu").requires_grad_()
        with torch.tpu.precision(mode):
            F.linear(a.to("tpu"), wt).backward(torch.ones(256, 32, device="tpu"))
        errors[mode] = rel_error(wt.grad.cpu(), exact)
    assert errors[P.DEFAULT] > 100 * errors[P.HIGHEST], errors


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.bfloat16, torch.float16, torch.int32], ids=str
)
def test_other_dtypes_ignore_precision(dtype):
    g = torch.Generator().manual_seed(4)
    a = torch.randn(32, 32, generator=g).mul(4).to(dtype)
    b = torch.randn(32, 32, generator=g).mul(4).to(dtype)
    results = [tpu_mm(a, b, mode) for mode in P]
    assert all(torch.equal(r, results[0]) for r in results)
    tol = {"atol": 0.1, "rtol": 0.02} if dtype in (torch.bfloat16, torch.float16) else {}
    torch.testing.assert_close(results[0], a @ b, **tol)
