"""_foreach_* ops on tpu against the CPU: every overload (Scalar, ScalarList, List,
Tensor), in-place forms, mixed shapes and dtypes, and the optimizers and gradient
clipping that use them."""

import math

import pytest
import torch
from op_utils import check, fallbacks, to_tpu
from torch.testing import make_tensor

import torch_tpu

F32, F64, BF16, F16, I32, I64 = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int32,
    torch.int64,
)
SHAPES = [(3, 4), (5,), (), (2, 1, 3)]


def tensors(dtype=F32, low=None, high=None, seed=0, shapes=SHAPES):
    torch.manual_seed(seed)
    return [make_tensor(s, dtype=dtype, device="cpu", low=low, high=high) for s in shapes]


def metric(name):
    return torch_tpu.metrics()[name]


# ---------------------------------------------------------------- binary

BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow"]


def foreach(name, inplace=False):
    return getattr(torch, f"_foreach_{name}{'_' if inplace else ''}")


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("dtype,inplace", [(F32, False), (BF16, True)])
def test_binary_overloads(op, dtype, inplace):
    xs = tensors(dtype, low=0.5, high=3, seed=1)
    ys = tensors(dtype, low=0.5, high=3, seed=2)
    fn = foreach(op, inplace)
    check(lambda a, b: fn(a, b), xs, ys)  # List
    check(lambda a: fn(a, 1.5), xs)  # Scalar
    check(lambda a: fn(a, [0.5, 2.0, -1.0, 3.0] if op != "pow" else [0.5, 2.0, 1.0, 3.0]), xs)
    if op in ("add", "sub"):
        check(lambda a, b: fn(a, b, alpha=-0.5), xs, ys)
    if op in ("add", "mul", "div"):
        check(lambda a, s: fn(a, s), xs, torch.tensor(1.25, dtype=dtype))  # Tensor
        check(lambda a: fn(a, torch.tensor(0.75)), xs)  # a CPU scalar tensor
    if op == "add":
        check(lambda a, s: fn(a, s, alpha=2), xs, torch.tensor(0.5, dtype=dtype))


def test_pow_scalar_and_tensor():
    steps = [torch.tensor(float(s)) for s in [1, 2, 7, 30]]
    check(lambda e: torch._foreach_pow(0.9, e), steps)
    check(lambda e: torch._foreach_pow(2, e), tensors(I64, low=0, high=6))


@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_arithmetic(dtype):
    xs, ys = tensors(dtype, low=-9, high=9, seed=1), tensors(dtype, low=1, high=9, seed=2)
    check(torch._foreach_add, xs, ys)
    check(lambda a: torch._foreach_mul(a, 3), xs)
    check(lambda a: torch._foreach_add_(a, 2), xs)
    check(lambda a: torch._foreach_div(a, 2), xs)  # true division: float results
    check(lambda a, b: torch._foreach_maximum(a, b), xs, ys)


def test_type_promotion_and_mixed_dtypes():
    xs = tensors(F32, seed=1)[:2] + tensors(BF16, seed=2)[2:] + tensors(I32, seed=3)[:0]
    check(lambda a: torch._foreach_mul(a, 0.1), xs)
    check(lambda a: torch._foreach_add(a, [1, 2.5, True, 3]), tensors(I32, low=0, high=5))
    check(lambda a: torch._foreach_mul(a, 0.5), tensors(I64, low=0, high=5))


def test_non_contiguous_inputs():
    base = tensors(F32, seed=1, shapes=[(4, 6), (6, 4)])
    check(lambda a: torch._foreach_mul([a[0].t(), a[1][:, ::2]], 2.0), base)
    check(lambda a: torch._foreach_add_([a[0][1:], a[1].t()[::2]], 1.0), base)  # in place on views


# ---------------------------------------------------------------- ternary


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("dtype,inplace", [(F32, False), (F64, True), (BF16, True), (F16, False)])
def test_addcmul_addcdiv(op, dtype, inplace):
    xs, t1 = tensors(dtype, seed=1), tensors(dtype, seed=2)
    t2 = tensors(dtype, low=0.5, high=2, seed=3)
    fn = foreach(op, inplace)
    tol = {"atol": 1e-3, "rtol": 2e-3} if dtype == F16 else {}
    check(fn, xs, t1, t2, **tol)
    check(lambda a, b, c: fn(a, b, c, value=-0.3), xs, t1, t2, **tol)
    check(lambda a, b, c: fn(a, b, c, [0.1, -2.0, 3.0, 0.5]), xs, t1, t2, **tol)
    # The CPU tensor of scalars goes through PyTorch's composite kernel.
    check(lambda a, b, c: fn(a, b, c, torch.tensor([0.1, -2.0, 3.0, 0.5])), xs, t1, t2, **tol)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("inplace", [False, True])
def test_lerp(dtype, inplace):
    xs, ys = tensors(dtype, seed=1), tensors(dtype, seed=2)
    ws = tensors(dtype, low=-0.5, high=1.5, seed=3)
    fn = foreach("lerp", inplace)
    check(lambda a, b: fn(a, b, 0.1), xs, ys)
    check(lambda a, b: fn(a, b, 0.9), xs, ys)
    check(fn, xs, ys, ws)
    check(lambda a, b: fn(a, b, [0.1, 0.6, -1.0, 2.0]), xs, ys)


# ---------------------------------------------------------------- unary

UNARY = {
    "abs": (-3, 3),
    "acos": (-1, 1),
    "asin": (-1, 1),
    "atan": (-3, 3),
    "ceil": (-3, 3),
    "cos": (-3, 3),
    "cosh": (-3, 3),
    "erf": (-3, 3),
    "erfc": (-3, 3),
    "exp": (-3, 3),
    "expm1": (-3, 3),
    "floor": (-3, 3),
    "frac": (-3, 3),
    "log": (0.1, 5),
    "log10": (0.1, 5),
    "log1p": (-0.5, 5),
    "log2": (0.1, 5),
    "neg": (-3, 3),
    "reciprocal": (0.5, 3),
    "round": (-3, 3),
    "rsqrt": (0.1, 5),
    "sigmoid": (-3, 3),
    "sign": (-3, 3),
    "sin": (-3, 3),
    "sinh": (-3, 3),
    "sqrt": (0, 5),
    "tan": (-1, 1),
    "tanh": (-3, 3),
    "trunc": (-3, 3),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    low, high = UNARY[op]
    check(foreach(op), tensors(F32, low=low, high=high))
    check(foreach(op, inplace=True), tensors(BF16, low=low, high=high))


# ---------------------------------------------------------------- others


@pytest.mark.parametrize("dtype", [F32, BF16, F64])
def test_norm(dtype):
    xs = tensors(dtype, seed=1)
    xs[0][0, 0] = 0  # ord 0 counts non-zeros
    for ord in [2, 1, 3.0, 0, math.inf, -math.inf, 2.5, -1.0]:
        check(lambda a, o=ord: torch._foreach_norm(a, o), xs)


def test_norm_dtype_and_runtime_ord():
    xs = tensors(BF16, seed=1)
    check(lambda a: torch._foreach_norm(a, 2, dtype=F32), xs)
    check(lambda a: torch._foreach_norm(a, 2, dtype=F64), tensors(F32, seed=2))
    check(torch._foreach_norm, [make_tensor((3,), dtype=torch.complex64, device="cpu")])
    txs = to_tpu(tensors(F32, seed=3))
    for i, ord in enumerate([2.0, 1.0, 3.0, math.inf, 0.5]):
        if i == 1:
            before = metric("compiles")
        for a, e in zip(
            torch._foreach_norm(txs, ord), torch._foreach_norm([t.cpu() for t in txs], ord)
        ):
            torch.testing.assert_close(a.cpu(), e)
    assert metric("compiles") == before


def test_max():
    xs = tensors(F32, seed=1)
    check(torch._foreach_max, xs)
    xs[1][2] = math.nan
    check(torch._foreach_max, xs)
    check(torch._foreach_max, tensors(I32, seed=2))


def test_copy_and_zero():
    xs, ys = tensors(F32, seed=1), tensors(F64, seed=2)
    check(torch._foreach_copy_, xs, ys)  # converts
    check(lambda a, b: torch._foreach_copy_(a, [b[0][0], b[1], b[2], b[3]]), xs, ys)  # broadcasts
    check(torch._foreach_zero_, xs)


def test_out_variant():
    xs, outs = tensors(F32, seed=1), [torch.empty(s) for s in SHAPES]
    check(lambda a, o: torch.ops.aten._foreach_mul.Scalar_out(a, 2.5, out=o), xs, outs)


@torch_tpu.eager_mode("strict")  # how strict eager runs a foreach op
def test_one_program_per_call():
    xs, ys = to_tpu(tensors(F32, seed=1)), to_tpu(tensors(F32, seed=2))
    torch._foreach_add_(xs, ys, alpha=0.5)
    executions, compiles = metric("executions"), metric("compiles")
    for alpha in [0.25, -1.0, 3.0]:
        torch._foreach_add_(xs, ys, alpha=alpha)
    assert metric("executions") == executions + 3
    assert metric("compiles") == compiles


# ---------------------------------------------------------------- optimizers


def params_and_grads(dtype=F32, steps=3):
    shapes = [(4, 3), (3,), (2, 2, 2)]
    params = tensors(dtype, seed=10, shapes=shapes)
    grads = [tensors(dtype, seed=11 + i, shapes=shapes) for i in range(steps)]
    return params, grads


def run_optimizer(make, params, grads):
    ps = [torch.nn.Parameter(p.clone()) for p in params]
    opt = make(ps)
    for step in grads:
        for p, g in zip(ps, step):
            p.grad = g.clone()
        opt.step()
    # (step counters live on the CPU unless capturable)
    states = [t for p in ps for k, t in sorted(opt.state[p].items()) if k != "step"]
    return [p.detach() for p in ps], states


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=True),
    "sgd_momentum": lambda ps: torch.optim.SGD(
        ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=True
    ),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True),
    "adam_amsgrad": lambda ps: torch.optim.Adam(
        ps, lr=0.01, amsgrad=True, weight_decay=0.1, foreach=True
    ),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=True),
    "adamw_maximize": lambda ps: torch.optim.AdamW(ps, lr=0.01, maximize=True, foreach=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(
        ps, lr=0.01, momentum=0.5, centered=True, foreach=True
    ),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_step(name):
    params, grads = params_and_grads()
    check(lambda p, g: run_optimizer(OPTIMIZERS[name], p, g), params, grads, atol=1e-5, rtol=1e-5)


def test_adam_capturable_matches_cpu():
    """capturable=True keeps the step counters on the device (_foreach_pow(beta, steps), ...);
    the CPU reference runs the same math with host steps."""
    params, grads = params_and_grads()
    expected = run_optimizer(OPTIMIZERS["adam"], params, grads)
    before = fallbacks()
    actual = run_optimizer(
        lambda ps: torch.optim.Adam(ps, lr=0.01, capturable=True, foreach=True),
        to_tpu(params),
        to_tpu(grads),
    )
    assert fallbacks() == before
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        torch.testing.assert_close(a.cpu(), e, atol=1e-5, rtol=1e-5)


def test_adamw_bfloat16():
    params, grads = params_and_grads(BF16)
    check(lambda p, g: run_optimizer(OPTIMIZERS["adamw"], p, g), params, grads)


def test_optimizer_steps_do_not_recompile():
    params, grads = params_and_grads(steps=2)
    ps = [torch.nn.Parameter(p.to("tpu")) for p in params]
    opt = torch.optim.AdamW(ps, lr=0.01, foreach=True)
    for step in grads:
        for p, g in zip(ps, step):
            p.grad = g.to("tpu")
        opt.step()
    compiles = metric("compiles")
    for lr in [0.02, 0.005]:  # new learning rates and bias corrections are runtime operands
        opt.param_groups[0]["lr"] = lr
        opt.step()
    assert metric("compiles") == compiles


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_clip_grad_norm(norm_type):
    _, grads = params_and_grads(steps=1)

    def clip(gs):
        ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in gs]
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm=0.5, norm_type=norm_type, foreach=True)
        return total, [p.grad for p in ps]

    before = fallbacks()
    check(clip, grads[0], allow_fallback=True)
    new = {op: n - before.get(op, 0) for op, n in fallbacks().items() if n != before.get(op, 0)}
    assert not [op for op in new if "_foreach" in op], new
