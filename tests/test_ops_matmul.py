"""Matrix products (mm, bmm, mv, dot, vdot, addmm, baddbmm, addbmm, addmv) against the CPU.

float32 runs at Precision.HIGHEST (tests/conftest.py); the tpu default is tested in
test_precision.py.
"""

import pytest
import torch
import torch.nn.functional as F
from op_utils import check, fallbacks

import torch_tpu

MATMUL_OPS = {"mm", "bmm", "mv", "dot", "vdot", "addmm", "baddbmm", "addbmm", "addmv"}

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
COMPLEX = [torch.complex64, torch.complex128]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
ALL = FLOATS + COMPLEX + INTS


def make(*shape, dtype=torch.float32):
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(*shape, dtype=dtype)
    # Small values keep int8 products readable; wrapping is tested separately.
    return torch.randint(-4 if dtype != torch.uint8 else 0, 5, shape, dtype=dtype)


def scalars(dtype):
    """(beta, alpha) of the dtype's kind: PyTorch rejects float scalars for ints."""
    if dtype.is_floating_point:
        return 0.5, -1.5
    if dtype.is_complex:
        return 0.5 - 1j, 2 + 0.5j
    return 2, 3


def tolerances(dtype):
    # CPU bf16/f16 kernels also accumulate in float32 but round differently inside.
    if dtype == torch.bfloat16:
        return {"atol": 1e-2, "rtol": 1e-2}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    return {}


def mine_fell_back(before):
    after = fallbacks()
    return {
        op: n
        for op, n in after.items()
        if n != before.get(op, 0) and op.removeprefix("aten::").split(".")[0] in MATMUL_OPS
    }


@pytest.fixture
def matmul_no_fallback():
    """Fails if one of this file's ops fell back (helper ops of other families may)."""
    before = fallbacks()
    yield
    assert not mine_fell_back(before)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_mm_dtypes(dtype):
    check(torch.mm, make(5, 7, dtype=dtype), make(7, 3, dtype=dtype), **tolerances(dtype))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_bmm_dtypes(dtype):
    check(torch.bmm, make(3, 5, 7, dtype=dtype), make(3, 7, 4, dtype=dtype), **tolerances(dtype))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_mv_dot_vdot_dtypes(dtype):
    tol = tolerances(dtype)
    check(torch.mv, make(6, 9, dtype=dtype), make(9, dtype=dtype), **tol)
    check(torch.dot, make(9, dtype=dtype), make(9, dtype=dtype), **tol)
    check(torch.vdot, make(9, dtype=dtype), make(9, dtype=dtype), **tol)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_add_products_dtypes(dtype):
    beta, alpha = scalars(dtype)
    tol = tolerances(dtype)
    check(
        lambda s, x, y: torch.addmm(s, x, y, beta=beta, alpha=alpha),
        make(5, 3, dtype=dtype),
        make(5, 7, dtype=dtype),
        make(7, 3, dtype=dtype),
        **tol,
    )
    check(
        lambda s, x, y: torch.baddbmm(s, x, y, beta=beta, alpha=alpha),
        make(2, 5, 3, dtype=dtype),
        make(2, 5, 7, dtype=dtype),
        make(2, 7, 3, dtype=dtype),
        **tol,
    )
    check(
        lambda s, x, y: torch.addbmm(s, x, y, beta=beta, alpha=alpha),
        make(5, 3, dtype=dtype),
        make(4, 5, 7, dtype=dtype),
        make(4, 7, 3, dtype=dtype),
        **tol,
    )
    check(
        lambda s, x, y: torch.addmv(s, x, y, beta=beta, alpha=alpha),
        make(5, dtype=dtype),
        make(5, 7, dtype=dtype),
        make(7, dtype=dtype),
        **tol,
    )


def test_integer_products_wrap_like_pytorch():
    a = torch.randint(-128, 127, (6, 40), dtype=torch.int8)
    b = torch.randint(-128, 127, (40, 5), dtype=torch.int8)
    check(torch.mm, a, b)
    check(torch.mm, a.to(torch.uint8), b.to(torch.uint8))
    big = torch.randint(-(2**40), 2**40, (4, 8), dtype=torch.int64)
    check(torch.mm, big, big.t().contiguous())


def test_bool_matches_cpu_error():
    # The CPU's kernel has no bool branch: tpu raises its error, learnt from that
    # kernel (csrc/aten/meta_errors.cpp), without running the op on the CPU.
    a = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError) as cpu:
        torch.mm(a, a)
    before = fallbacks()
    with pytest.raises(type(cpu.value)) as tpu:
        torch.mm(a.to("tpu"), a.to("tpu")).cpu()
    assert str(tpu.value) == str(cpu.value)
    assert not mine_fell_back(before)


def test_vdot_conjugates_first_argument():
    a, b = make(8, dtype=torch.complex64), make(8, dtype=torch.complex64)
    r = check(torch.vdot, a, b)
    assert not torch.allclose(r.cpu(), torch.dot(a, b))


# ---------------------------------------------------------------- layouts


def test_non_contiguous_operands():
    a, b = torch.randn(7, 5), torch.randn(3, 7)
    check(torch.mm, a.t(), b.t())
    wide = torch.randn(5, 14)
    check(torch.mm, wide[:, ::2], torch.randn(7, 3))
    check(torch.mv, wide[:, 1::2], torch.randn(14)[::2])
    check(torch.dot, torch.randn(20)[::2], torch.randn(10))
    check(torch.bmm, torch.randn(4, 3, 2).transpose(0, 2), torch.randn(2, 4, 6))
    check(torch.bmm, torch.randn(1, 5, 7).expand(3, 5, 7), torch.randn(3, 7, 2))
    check(lambda s, x, y: torch.addmm(s, x, y), torch.randn(3, 5).t(), a.t()[:, :7], b.t())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_products_of_transposed_operands_at_batch_one(dtype):
    # XLA's CPU runtime refused these (no mixed BF16 x BF16 = F32 library product).
    lhs = torch.randn(1, 15, 23, dtype=dtype).mT
    check(torch.bmm, lhs, torch.randn(1, 15, 12, dtype=dtype))
    check(torch.mm, lhs[0], torch.randn(15, 12, dtype=dtype))


@pytest.mark.parametrize("mode", ["default", "high"])
def test_float32_products_of_transposed_operands_at_batch_one(mode):
    # DEFAULT and HIGH multiply bfloat16 parts summed in float32, which XLA's CPU runtime
    # refused for these dots; the parts are exact in float32, so DEFAULT equals a float32
    # product of the operands rounded to bfloat16.
    lhs, rhs = torch.randn(1, 15, 23).mT, torch.randn(1, 15, 12)
    from torch_tpu.precision import precision

    with precision(mode):
        got = torch.bmm(lhs.to("tpu"), rhs.to("tpu")).cpu()
    if mode == "default":
        rounded = torch.bmm(lhs.bfloat16().double(), rhs.bfloat16().double()).float()
        torch.testing.assert_close(got, rounded, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got, torch.bmm(lhs, rhs), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("self_shape", [(5, 3), (3,), (1, 3), (5, 1), (1,), ()], ids=str)
def test_addmm_broadcasts_self(self_shape):
    check(torch.addmm, torch.randn(self_shape), torch.randn(5, 7), torch.randn(7, 3))


def test_addmv_and_baddbmm_broadcast_self():
    check(torch.addmv, torch.randn(1), torch.randn(5, 7), torch.randn(7))
    check(torch.baddbmm, torch.randn(5, 1), torch.randn(2, 5, 7), torch.randn(2, 7, 3))
    check(torch.addbmm, torch.randn(3), torch.randn(2, 5, 7), torch.randn(2, 7, 3))


def test_empty_products():
    check(torch.mm, torch.randn(4, 0), torch.randn(0, 3))  # sums of nothing: zeros
    check(torch.mm, torch.randn(0, 5), torch.randn(5, 3))
    check(torch.bmm, torch.randn(0, 2, 5), torch.randn(0, 5, 3))
    check(
        lambda s, x, y: torch.addmm(s, x, y, beta=2.0),
        torch.randn(4, 3),
        torch.randn(4, 0),
        torch.randn(0, 3),
    )
    check(torch.dot, torch.randn(0), torch.randn(0))


# ---------------------------------------------------------------- in-place and out=


def test_in_place_forms():
    check(
        lambda s, x, y: s.addmm_(x, y, beta=0.5, alpha=2.0),
        torch.randn(5, 3),
        torch.randn(5, 7),
        torch.randn(7, 3),
    )
    check(
        lambda s, x, y: s.baddbmm_(x, y),
        torch.randn(2, 5, 3),
        torch.randn(2, 5, 7),
        torch.randn(2, 7, 3),
    )
    check(
        lambda s, x, y: s.addbmm_(x, y),
        torch.randn(5, 3),
        torch.randn(2, 5, 7),
        torch.randn(2, 7, 3),
    )
    check(lambda s, x, y: s.addmv_(x, y), torch.randn(5), torch.randn(5, 7), torch.randn(7))
    # Into a view: the rest of the base is kept.
    check(
        lambda s, x, y: s[1:, ::2].addmm_(x, y),
        torch.randn(6, 6),
        torch.randn(5, 2),
        torch.randn(2, 3),
    )


def test_out_forms():
    def mm_out(out, x, y):
        return torch.mm(x, y, out=out)

    check(mm_out, torch.empty(5, 3), torch.randn(5, 7), torch.randn(7, 3))
    check(mm_out, torch.empty(0), torch.randn(5, 7), torch.randn(7, 3))  # resized
    check(
        lambda out, x, y: torch.bmm(x, y, out=out),
        torch.empty(2, 5, 3),
        torch.randn(2, 5, 7),
        torch.randn(2, 7, 3),
    )
    check(
        lambda out, s, x, y: torch.addmm(s, x, y, out=out),
        torch.empty(5, 3),
        torch.randn(3),
        torch.randn(5, 7),
        torch.randn(7, 3),
    )
    check(
        lambda out, x, y: torch.mv(x, y, out=out), torch.empty(5), torch.randn(5, 7), torch.randn(7)
    )
    check(
        lambda out, x, y: torch.dot(x, y, out=out), torch.empty(()), torch.randn(7), torch.randn(7)
    )


# ---------------------------------------------------------------- beta and alpha


NAN = float("nan")


@pytest.mark.parametrize("op", ["addmm", "addmv", "baddbmm", "addbmm"])
def test_beta_zero_ignores_nan_and_inf_in_self(op):
    shapes = {
        "addmm": ((5, 3), (5, 7), (7, 3)),
        "addmv": ((5,), (5, 7), (7,)),
        "baddbmm": ((2, 5, 3), (2, 5, 7), (2, 7, 3)),
        "addbmm": ((5, 3), (2, 5, 7), (2, 7, 3)),
    }[op]
    s = torch.randn(shapes[0])
    s.view(-1)[0], s.view(-1)[-1] = NAN, float("inf")
    fn = getattr(torch, op)
    r = check(
        lambda s, x, y: fn(s, x, y, beta=0), s, torch.randn(shapes[1]), torch.randn(shapes[2])
    )
    assert r.isfinite().all()


def test_alpha_zero_ignores_nan_in_matrices_like_blas():
    x = torch.randn(5, 7)
    x[2, 3] = NAN
    r = check(
        lambda s, x, y: torch.addmm(s, x, y, alpha=0), torch.randn(5, 3), x, torch.randn(7, 3)
    )
    assert r.isfinite().all()
    # beta != 0 still propagates NaN from self.
    s = torch.randn(5, 3)
    s[0, 0] = NAN
    check(lambda s, x, y: torch.addmm(s, x, y, beta=1e-3), s, torch.randn(5, 7), torch.randn(7, 3))


def test_new_scalars_do_not_recompile():
    s, x, y = (t.to("tpu") for t in (torch.randn(5, 3), torch.randn(5, 7), torch.randn(7, 3)))
    torch.addmm(s, x, y, beta=0.25, alpha=3.0).cpu()
    before = torch_tpu.metrics()["cache_misses"]
    for beta, alpha in [(0.5, 2.0), (0.0, 1.0), (1.0, 0.0), (-3.0, 7.5)]:
        r = torch.addmm(s, x, y, beta=beta, alpha=alpha).cpu()
        expected = torch.addmm(s.cpu(), x.cpu(), y.cpu(), beta=beta, alpha=alpha)
        torch.testing.assert_close(r, expected)
    assert torch_tpu.metrics()["cache_misses"] == before


# ---------------------------------------------------------------- autograd


def compare_grads(fn, *inputs, atol=None, rtol=None):
    """Forward and backward of ``fn`` on tpu against the CPU; helper ops may fall back."""
    cpu = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    tpu = [t.to("tpu").requires_grad_(t.is_floating_point()) for t in inputs]
    before = fallbacks()
    out_tpu = fn(*tpu)
    out_tpu.backward(torch.ones_like(out_tpu))
    assert not mine_fell_back(before)
    out_cpu = fn(*cpu)
    out_cpu.backward(torch.ones_like(out_cpu))
    torch.testing.assert_close(out_tpu.detach().cpu(), out_cpu.detach(), atol=atol, rtol=rtol)
    for a, e in zip(tpu, cpu):
        if e.requires_grad:
            torch.testing.assert_close(a.grad.cpu(), e.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [(), (1,), (4,), (2, 3)], ids=str)
def test_linear_grad(batch, bias):
    x, w, b = torch.randn(*batch, 6), torch.randn(5, 6), torch.randn(5)
    if bias:
        compare_grads(F.linear, x, w, b)
    else:
        compare_grads(F.linear, x, w)


@pytest.mark.parametrize(
    "shapes",
    [
        ((7,), (7,)),
        ((7,), (7, 3)),
        ((4, 7), (7,)),
        ((4, 7), (7, 3)),
        ((2, 4, 7), (7, 3)),
        ((2, 4, 7), (2, 7, 3)),
        ((2, 1, 4, 7), (3, 7, 5)),
        ((7,), (2, 7, 3)),
    ],
    ids=str,
)
def test_matmul_grad(shapes):
    a, b = (torch.randn(s) for s in shapes)
    compare_grads(torch.matmul, a, b)


def test_matmul_grad_non_contiguous():
    compare_grads(lambda a, b: a.t() @ b[:, ::2], torch.randn(7, 4), torch.randn(7, 6))


def test_add_products_grad():
    compare_grads(
        lambda s, x, y: torch.addmm(s, x, y, beta=0.5, alpha=2.0),
        torch.randn(5, 3),
        torch.randn(5, 7),
        torch.randn(7, 3),
    )
    compare_grads(
        lambda s, x, y: torch.baddbmm(s, x, y, beta=0.5, alpha=2.0),
        torch.randn(2, 5, 3),
        torch.randn(2, 5, 7),
        torch.randn(2, 7, 3),
    )
    compare_grads(
        lambda s, x, y: torch.addbmm(s, x, y),
        torch.randn(5, 3),
        torch.randn(2, 5, 7),
        torch.randn(2, 7, 3),
    )
    compare_grads(
        lambda s, x, y: torch.addmv(s, x, y), torch.randn(5), torch.randn(5, 7), torch.randn(7)
    )
    compare_grads(torch.dot, torch.randn(7), torch.randn(7))


def test_mlp_training_step_matches_cpu(matmul_no_fallback):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    x = torch.randn(10, 8)
    model_tpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)).to("tpu")
    model_tpu.load_state_dict(model.state_dict())
    model(x).square().mean().backward()
    model_tpu(x.to("tpu")).square().mean().backward()
    for p, q in zip(model.parameters(), model_tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad)
