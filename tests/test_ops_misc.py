"""Assorted operators on tpu against the CPU: addr, celu, angle conversions, dist,
fused add/matmul + activation, weight norm, fused RNN cells, linear_backward, and
(with meta kernels from torch_tpu._meta) masked softmax, SyncBatchNorm's kernels and histogram."""

import pytest
import torch
from op_utils import check, fallbacks, to_tpu
from torch.testing import make_tensor

import torch_tpu

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
aten = torch.ops.aten


def make(shape, dtype=torch.float32, low=None, high=None, seed=0):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def check_grads(fn, *inputs, atol=None, rtol=None):
    """Compares fn's gradients with respect to every input with the CPU's."""
    cpu = [x.detach().clone().requires_grad_() for x in inputs]
    tpu = [x.detach().to("tpu").requires_grad_() for x in inputs]
    before = fallbacks()
    fn(*tpu).sum().backward()
    new = {op for op, n in fallbacks().items() if n != before.get(op, 0)}
    assert not new, f"ops fell back to the CPU: {new}"
    fn(*cpu).sum().backward()
    for t, c in zip(tpu, cpu):
        torch.testing.assert_close(t.grad.cpu(), c.grad, atol=atol, rtol=rtol)


# ---------------------------------------------------------------- addr


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.uint8, torch.bool, torch.complex64])
def test_addr(dtype):
    self, v1, v2 = make((3, 4), dtype), make((3,), dtype), make((4,), dtype)
    check(lambda s, a, b: torch.addr(s, a, b), self, v1, v2)
    if dtype != torch.bool:
        check(lambda s, a, b: torch.addr(s, a, b, beta=2, alpha=3), self, v1, v2)
        check(lambda s, a, b: torch.addr(s, a, b, beta=0), self, v1, v2)


def test_addr_beta_zero_ignores_nan_and_broadcasts():
    self = torch.full((4,), float("nan"))
    check(lambda s, a, b: torch.addr(s, a, b, beta=0, alpha=0.5), self, make((3,)), make((4,)))
    check(lambda s, a, b: torch.addr(s, a, b, beta=1.5), make((1, 4)), make((3,)), make((4,)))


def test_addr_noncontiguous_inplace_out():
    self = make((4, 3)).t()
    v1, v2 = make((6,))[::2], make((8,))[::2]
    check(lambda s, a, b: torch.addr(s, a, b, alpha=2), self, v1, v2)
    check(lambda s, a, b: s.addr_(a, b, beta=0.5), make((3, 4)), v1, v2)
    check(lambda s, a, b, o: torch.addr(s, a, b, out=o), make((3, 4)), v1, v2, torch.empty(3, 4))


def test_addr_grad():
    check_grads(
        lambda s, a, b: torch.addr(s, a, b, beta=0.5, alpha=2),
        *(make(s) for s in [(3, 4), (3,), (4,)]),
    )


# ---------------------------------------------------------------- celu, angles


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 2])
def test_celu(dtype, alpha):
    x = make((5, 6), dtype, low=-4, high=4)
    check(lambda t: torch.nn.functional.celu(t, alpha), x)
    check(lambda t: torch.nn.functional.celu(t, alpha, inplace=True), x)
    check(lambda t: torch.celu(t[:, ::2], alpha), x)


def test_celu_grad():
    check_grads(lambda t: torch.nn.functional.celu(t, 0.7), make((4, 5), low=-3, high=3))


@pytest.mark.parametrize("op", [torch.deg2rad, torch.rad2deg])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.uint8, torch.bool])
def test_angles(op, dtype):
    x = make((4, 6), dtype, low=-400, high=400)
    check(op, x)
    check(lambda t: op(t.t()), x)
    check(lambda t, o: op(t, out=o), x, torch.empty(4, 6, dtype=op(x).dtype))
    if dtype.is_floating_point:
        check(lambda t: t.deg2rad_() if op is torch.deg2rad else t.rad2deg_(), x)


def test_angles_grad():
    check_grads(lambda t: torch.deg2rad(t) + torch.rad2deg(t), make((3, 4)))


# ---------------------------------------------------------------- dist


@pytest.mark.parametrize("dtype", FLOATS + [torch.complex64])
@pytest.mark.parametrize("p", [2, 1, 0, 3.5, float("inf"), -float("inf")])
def test_dist(dtype, p):
    check(lambda a, b: torch.dist(a, b, p), make((3, 4), dtype), make((4,), dtype, seed=1))


def test_dist_noncontiguous_out_grad():
    a, b = make((4, 6)), make((6, 4), seed=1)
    check(lambda x, y: torch.dist(x[:, ::2], y.t()[:, 1::2]), a, b)
    check_grads(lambda x, y: torch.dist(x, y, 3), a, b.t())


# ---------------------------------------------------------------- fused add/matmul + activation


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_add_relu(dtype):
    # PyTorch's kernel has no half, bool or uint8 version: those fall back and raise.
    x, y = make((4, 5), dtype, low=-5, high=5), make((5,), dtype, low=-5, high=5, seed=1)
    check(lambda a, b: aten._add_relu(a, b), x, y)
    check(lambda a, b: aten._add_relu(a, b, alpha=2), x, y)
    check(lambda a, b: aten._add_relu_(a, b), x, y)
    check(lambda a, b: aten._add_relu(a, b, out=torch.empty(0, dtype=dtype, device=a.device)), x, y)


@pytest.mark.parametrize("use_gelu", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_addmm_activation(use_gelu, dtype):
    s, m1, m2 = make((5,), dtype), make((3, 4), dtype, seed=1), make((4, 5), dtype, seed=2)
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype == torch.bfloat16 else {}
    check(lambda a, b, c: aten._addmm_activation(a, b, c, use_gelu=use_gelu), s, m1, m2, **tol)
    check(
        lambda a, b, c: aten._addmm_activation(a, b.t(), c, beta=0.5, alpha=2, use_gelu=use_gelu),
        s,
        make((4, 3), dtype),
        m2,
        **tol,
    )


def test_int_mm():
    a = make((17, 8), torch.int8, low=-128, high=127)
    b = make((8, 24), torch.int8, low=-128, high=127, seed=1)
    check(aten._int_mm, a, b)
    check(lambda x, y: aten._int_mm(x, y.t().contiguous().t()), a, b)


# ---------------------------------------------------------------- foreach


def test_foreach_lgamma_and_clone():
    xs = [make((3, 4), low=0.1, high=5), make((5,), torch.float64, low=-3, high=3, seed=1)]
    check(lambda ts: torch._foreach_lgamma(ts), xs)
    check(lambda ts: torch._foreach_lgamma_(ts), xs)
    check(lambda ts: aten._foreach_clone(ts), xs + [make((2, 2), torch.int32)])


# ---------------------------------------------------------------- weight norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_interface(dtype, dim):
    v = make((4, 3, 5), dtype)
    g_shape = (4, 1, 1) if dim == 0 else (1, 1, 5)
    g = make(g_shape, dtype, seed=1)
    check(lambda a, b: aten._weight_norm_interface(a, b, dim), v, g)
    norms = aten._weight_norm_interface(v, g, dim)[1]
    grad_w = make(v.shape, dtype, seed=2)
    check(
        lambda gw, a, b, n: aten._weight_norm_interface_backward(gw, a, b, n, dim),
        grad_w,
        v,
        g,
        norms,
    )


def test_weight_norm_interface_grad():
    check_grads(lambda v, g: aten._weight_norm_interface(v, g, 0)[0], make((4, 6)), make((4, 1)))


# ---------------------------------------------------------------- linear_backward


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", [[True, True, True], [False, True, False], [True, False, True]])
def test_linear_backward(dtype, mask):
    x, g, w = make((2, 3, 4), dtype), make((2, 3, 5), dtype, seed=1), make((5, 4), dtype, seed=2)
    expected = (g @ w, g.reshape(-1, 5).t() @ x.reshape(-1, 4), g.sum((0, 1)))
    got = aten.linear_backward(*to_tpu((x, g, w)), mask)
    for want, e, r in zip(mask, expected, got):
        if want:
            torch.testing.assert_close(r.cpu(), e)


# ---------------------------------------------------------------- fused LSTM cell


def lstm_cell_reference(ig, hg, cx, ib, hb):
    i, f, c, o = (ig + hg + ib + hb).chunk(4, 1)
    i, f, c, o = i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()
    cy = f * cx + i * c
    return o * cy.tanh(), cy, torch.cat([i, f, c, o], 1)


def test_fused_lstm_cell_and_backward():
    ig, hg = make((3, 8)), make((3, 8), seed=1)
    cx, ib, hb = make((3, 2), seed=2), make((8,), seed=3), make((8,), seed=4)
    got = aten._thnn_fused_lstm_cell(*to_tpu((ig, hg, cx, ib, hb)))
    want = lstm_cell_reference(ig, hg, cx, ib, hb)
    for r, e in zip(got, want):
        torch.testing.assert_close(r.cpu(), e)

    inputs = [t.clone().requires_grad_() for t in (ig, hg, cx, ib, hb)]
    hy, cy, _ = lstm_cell_reference(*inputs)
    ghy, gcy = make((3, 2), seed=5), make((3, 2), seed=6)
    torch.autograd.backward([hy, cy], [ghy, gcy])
    ws = want[2]
    grads = aten._thnn_fused_lstm_cell_backward_impl(*to_tpu((ghy, gcy, cx, want[1], ws)), True)
    torch.testing.assert_close(grads[0].cpu(), inputs[0].grad)
    torch.testing.assert_close(grads[1].cpu(), inputs[2].grad)
    torch.testing.assert_close(grads[2].cpu(), inputs[3].grad)


def test_lstm_cell_module():
    # nn.LSTMCell on tpu calls the fused cell (with biases: PyTorch's meta
    # kernel rejects None ones) and its backward.
    torch.manual_seed(0)
    cpu = torch.nn.LSTMCell(4, 3)
    tpu = torch.nn.LSTMCell(4, 3)
    tpu.load_state_dict(cpu.state_dict())
    tpu = tpu.to("tpu")
    x = make((2, 4))
    before = fallbacks()
    h, c = tpu(to_tpu(x))
    (h.sum() + 2 * c.sum()).backward()
    assert fallbacks() == before
    hc, cc = cpu(x)
    (hc.sum() + 2 * cc.sum()).backward()
    torch.testing.assert_close(h.cpu(), hc)
    torch.testing.assert_close(c.cpu(), cc)
    for p_tpu, p_cpu in zip(tpu.parameters(), cpu.parameters()):
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad)


def test_lstm_without_bias_and_its_double_backward():
    # PyTorch's meta kernel of the fused cell reads None biases' devices: zero biases
    # stand in for them.
    torch.manual_seed(0)
    cpu = torch.nn.LSTM(3, 4, bias=False).double()
    tpu = torch.nn.LSTM(3, 4, bias=False).double()
    tpu.load_state_dict(cpu.state_dict())
    tpu = tpu.to("tpu")
    x = make((2, 1, 3)).double()
    results = []
    for module, inp in ((cpu, x.clone().requires_grad_()), (tpu, to_tpu(x).requires_grad_())):
        out, _ = module(inp)
        (g,) = torch.autograd.grad(out.sum(), inp, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), inp)
        results.append([out.detach().cpu(), g.detach().cpu(), gg.cpu()])
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------- others


def test_efficientzerotensor():
    z = aten._efficientzerotensor([2, 3], dtype=torch.float32, device="tpu")
    assert z.device.type == "tpu" and z.shape == (2, 3)
    assert not z.cpu().any()


@pytest.mark.parametrize("name", ["_cummax_helper", "_cummin_helper"])
def test_cumulative_helpers(name):
    x = make((4, 5), low=-3, high=3)
    x[1, 2] = float("nan")

    def fn(t):
        values, indices = torch.empty_like(t), torch.empty(t.shape, dtype=torch.long)
        values, indices = values.to(t.device), indices.to(t.device)
        getattr(aten, name)(t, values, indices, 1)
        return values, indices

    check(fn, x)


# ---------------------------------------------------------------- ops PyTorch has no meta kernel for
#
# torch_tpu._meta gives them one (without it they would run on the CPU); these
# tests assert they run natively.


def test_meta_kernels_registered():
    import torch_tpu._meta as meta

    for name in meta.KERNELS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_masked_softmax(dtype):
    torch.manual_seed(0)
    x = make((2, 3, 5, 5), dtype)
    full = torch.rand(2, 3, 5, 5) > 0.6
    full[0, 0, 1] = True  # a fully masked row is NaN
    for mask_type, mask in [(2, full), (0, torch.rand(5, 5) > 0.5), (1, torch.rand(2, 5) > 0.5)]:
        for dim in [3, 1] if mask_type == 2 else [3, -1]:
            check(lambda t, m, d=dim, k=mask_type: aten._masked_softmax(t, m, d, k), x, mask)
    y = aten._masked_softmax(x, full, 1, 2)
    check(lambda g, o, m: aten._masked_softmax_backward(g, o, m, 1), make(x.shape, dtype), y, full)


def test_sync_batch_norm_kernels(no_fallback):
    x = make((4, 3, 5), torch.float64)
    eps = 1e-5
    mean, var = x.mean((0, 2)), x.var((0, 2), unbiased=False)
    invstd = (var + eps).rsqrt()
    tpu = to_tpu
    for got, want in zip(aten.batch_norm_stats(tpu(x), eps), (mean, invstd)):
        torch.testing.assert_close(got.cpu(), want)
    w, b = make((3,), torch.float64, seed=1), make((3,), torch.float64, seed=2)

    def ch(v):
        return v[None, :, None]

    got = aten.batch_norm_elemt(*tpu((x, w, b, mean, invstd)), eps)
    torch.testing.assert_close(got.cpu(), (x - ch(mean)) * ch(invstd) * ch(w) + ch(b))

    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    out = torch.nn.functional.batch_norm(xr, None, None, wr, br, training=True, eps=eps)
    go = make(out.shape, torch.float64, seed=3)
    out.backward(go)
    sum_dy, sum_dy_xmu = go.sum((0, 2)), (go * (x - ch(mean))).sum((0, 2))
    got = aten.batch_norm_backward_reduce(*tpu((go, x, mean, invstd, w)), True, True, True)
    for g, e in zip(got, (sum_dy, sum_dy_xmu, wr.grad, br.grad)):
        torch.testing.assert_close(g.cpu(), e)
    counts = torch.tensor([8, 12], dtype=torch.int32)  # replicas of 8 + 12 elements
    got = aten.batch_norm_backward_elemt(*tpu((go, x, mean, invstd, w, sum_dy, sum_dy_xmu, counts)))
    torch.testing.assert_close(got.cpu(), xr.grad)

    parts = [make((2, 3, 4), torch.float64, seed=4), make((3, 3, 4), torch.float64, seed=5)]
    means = torch.stack([p.mean((0, 2)) for p in parts])
    invstds = torch.stack([(p.var((0, 2), unbiased=False) + eps).rsqrt() for p in parts])
    whole = torch.cat(parts)
    want = (whole.mean((0, 2)), (whole.var((0, 2), unbiased=False) + eps).rsqrt())
    counts = torch.tensor([8.0, 12.0], dtype=torch.float64)
    got = aten.batch_norm_gather_stats_with_counts(
        *tpu((x, means, invstds)), None, None, 0.1, eps, tpu(counts)
    )
    for g, e in zip(got, want):
        torch.testing.assert_close(g.cpu(), e)
    got = aten.batch_norm_update_stats(tpu(x), None, None, 0.1)
    for g, e in zip(got, aten.batch_norm_update_stats(x, None, None, 0.1)):
        torch.testing.assert_close(g.cpu(), e)


def test_sync_batch_norm_running_stats(no_fallback):
    """The running statistics are written although the schemas do not mark them."""
    eps, momentum = 1e-5, 0.1
    parts = [make((2, 3, 4), torch.float64, seed=4), make((2, 3, 4), torch.float64, seed=5)]
    whole = torch.cat(parts)
    means = torch.stack([p.mean((0, 2)) for p in parts])
    invstds = torch.stack([(p.var((0, 2), unbiased=False) + eps).rsqrt() for p in parts])
    rm0, rv0 = make((3,), torch.float64, seed=6), make((3,), torch.float64, low=1, high=2, seed=7)
    want_rm = (1 - momentum) * rm0 + momentum * whole.mean((0, 2))
    want_rv = (1 - momentum) * rv0 + momentum * whole.var((0, 2), unbiased=True)
    for counted in [True, False]:
        rm, rv = to_tpu(rm0), to_tpu(rv0)
        args = (*to_tpu((whole, means, invstds)), rm, rv, momentum, eps)
        if counted:
            aten.batch_norm_gather_stats_with_counts(*args, to_tpu(torch.tensor([8.0, 8.0])))
        else:
            aten.batch_norm_gather_stats(*args, 8)
        torch.testing.assert_close(rm.cpu(), want_rm)
        torch.testing.assert_close(rv.cpu(), want_rv)
    rm, rv, rm_cpu, rv_cpu = to_tpu(rm0), to_tpu(rv0), rm0.clone(), rv0.clone()
    got = aten.batch_norm_update_stats(to_tpu(whole), rm, rv, momentum)
    want = aten.batch_norm_update_stats(whole, rm_cpu, rv_cpu, momentum)
    for g, e in zip((*got, rm, rv), (*want, rm_cpu, rv_cpu)):
        torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram(dtype):
    x = make((7, 9), dtype, low=-6, high=6)
    w = make((7, 9), dtype, low=0, high=1, seed=1)
    for bins in [1, 13]:
        check(lambda t, n=bins: torch.histogram(t, n), x)
        check(lambda t, u, n=bins: torch.histogram(t, n, weight=u, density=True), x, w)
    edges = torch.tensor([-2.0, -0.5, 0.0, 1.0, 4.0], dtype=dtype)
    check(lambda t, e: torch.histogram(t, e), x, edges)
    check(lambda t, e, u: torch.histogram(t, e, weight=u, density=True), x, edges, w)
    on_edges = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 4.0, 0.5], dtype=dtype)
    check(lambda t: torch.histogram(t, 4), on_edges)
    check(lambda t: torch.histogram(t, 3), torch.full((4,), 2.0, dtype=dtype))


def test_fused_gru_cell_and_backward(no_fallback):
    ig, hg, hx = make((3, 12)), make((3, 12), seed=1), make((3, 4), seed=2)
    ib, hb = make((12,), seed=3), make((12,), seed=4)

    def reference(ig, hg, hx, ib, hb):
        ir, ii, inn = (ig + ib).chunk(3, 1)
        hr, hi, hn = (hg + hb).chunk(3, 1)
        r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
        n = (inn + r * hn).tanh()
        return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)

    want = reference(ig, hg, hx, ib, hb)
    got = aten._thnn_fused_gru_cell(*to_tpu((ig, hg, hx, ib, hb)))
    for r, e in zip(got, want):
        torch.testing.assert_close(r.cpu(), e)
    inputs = [t.clone().requires_grad_() for t in (ig, hg, hx, ib, hb)]
    go = make((3, 4), seed=5)
    reference(*inputs)[0].backward(go)
    got = aten._thnn_fused_gru_cell_backward(to_tpu(go), to_tpu(want[1]), True)
    for r, t in zip(got, inputs):
        torch.testing.assert_close(r.cpu(), t.grad)


def test_logcumsumexp_kernel(no_fallback):
    check(lambda t: aten._logcumsumexp(t, 1), make((3, 7)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc(dtype):
    x = make((7, 9), dtype, low=-6, high=6)
    check(lambda t: torch.histc(t, 13), x)
    check(lambda t: torch.histc(t, 5, min=-2, max=3), x)
    check(lambda t: torch.histc(t, 4), torch.full((5,), 2.0, dtype=dtype))  # empty range widens


def test_histc_integers_count_like_cuda():
    # MoE routers count tokens per expert with histc on integer ids off the CPU, where the
    # CPU kernel refuses integers; CUDA bins them with integer arithmetic.
    ids = torch.randint(0, 8, (64,), generator=torch.Generator().manual_seed(0))
    got = torch.histc(ids.to("tpu"), bins=8, min=0, max=7).cpu()
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.bincount(ids, minlength=8))
    got = torch.histc(ids.int().to("tpu"), bins=3, min=1, max=6).cpu()
    want = torch.bincount(((ids[(ids >= 1) & (ids <= 6)] - 1) * 3 // 5).clamp(max=2), minlength=3)
    assert torch.equal(got, want.int())


# ---------------------------------------------------------------- isclose

NAN, INF = float("nan"), float("inf")
CLOSENESS_VALUES = {
    "real": [0.0, 1.0, -1.0, 1e-8, 1e-3, 1e5, NAN, INF, -INF, 3.0, 1 + 1e-5, 2**-20],
    "complex": [0, 1, 1j, complex(NAN, 0), complex(INF, 1), complex(1, -INF), 1 + 1e-6j, 3 - 2j],
    "int": [0, 1, -1, 5, 100, -128, 127],
}


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
     torch.complex128, torch.int64, torch.int8, torch.bool],
    ids=str,
)  # fmt: skip
@pytest.mark.parametrize("rtol,atol", [(0, 0), (1e-5, 1e-8), (1.3e-6, 1e-5), (0.1, 2.0)])
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_is_exactly_the_cpus(dtype, rtol, atol, equal_nan):
    kind = "complex" if dtype.is_complex else "real" if dtype.is_floating_point else "int"
    values = torch.tensor(CLOSENESS_VALUES[kind]).to(dtype)
    pairs = torch.cartesian_prod(torch.arange(len(values)), torch.arange(len(values)))
    x, y = values[pairs[:, 0]], values[pairs[:, 1]]
    if dtype.is_floating_point:  # neighbours just inside and outside the tolerances
        y = torch.cat([y, (x.double() * (1 + 1e-6)).to(dtype), (x.double() + 1e-8).to(dtype)])
        x = torch.cat([x, x, x])
    expected = torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
    got = torch.isclose(x.to("tpu"), y.to("tpu"), rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert torch.equal(got.cpu(), expected)


def test_assert_close_of_tpu_tensors_compiles_two_programs():
    # PyTorch's composite isclose ran a dozen ops, each a program per new shape.
    a = torch.randn(3, 11, device="tpu")
    before = torch_tpu.metrics()["cache_misses"]
    torch.testing.assert_close(a, a.clone())
    assert torch_tpu.metrics()["cache_misses"] - before <= 3  # clone, isclose, all
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        torch.isclose(a, a.double())
