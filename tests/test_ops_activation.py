"""Activation functions, (log-)softmax and their backward ops against the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from op_utils import assert_close_tree, check, fallbacks

import torch_tpu

A = torch.ops.aten

# Operators lowered in csrc/lower/activation.cpp (fallback names are "aten::<op>[.overload]").
OURS = {
    "relu",
    "relu_",
    "threshold",
    "threshold_",
    "threshold_backward",
    "hardtanh",
    "hardtanh_",
    "hardtanh_backward",
    "leaky_relu",
    "leaky_relu_",
    "leaky_relu_backward",
    "rrelu_with_noise",
    "rrelu_with_noise_",
    "_prelu_kernel",
    "_prelu_kernel_backward",
    "gelu",
    "gelu_",
    "gelu_backward",
    "silu",
    "silu_",
    "silu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "elu",
    "elu_",
    "elu_backward",
    "softplus",
    "softplus_backward",
    "mish",
    "mish_",
    "log_sigmoid_forward",
    "log_sigmoid_backward",
    "hardsigmoid",
    "hardsigmoid_",
    "hardsigmoid_backward",
    "hardswish",
    "hardswish_",
    "hardswish_backward",
    "hardshrink",
    "hardshrink_backward",
    "softshrink",
    "softshrink_backward",
    "glu",
    "glu_backward",
    "_softmax",
    "_log_softmax",
    "_safe_softmax",
    "_softmax_backward_data",
    "_log_softmax_backward_data",
}

TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float16: {"atol": 1e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 2e-2},
}
FLOATS = list(TOL)


def _base(op: str) -> str:
    return op.removeprefix("aten::").split(".")[0]


def run(fn, *args, dtype=torch.float32, **kwargs):
    """op_utils.check that fails on a fallback of our ops or of any op that has a lowering.

    Ops other engineers have not lowered yet (e.g. elementwise helpers used by composites and
    autograd) may still run on the CPU; once lowered they are held to the strict check.
    """
    lowered = {_base(n) for n in torch_tpu._C._lowered_ops()}
    before = fallbacks()
    result = check(fn, *args, allow_fallback=True, **{**TOL.get(dtype, {}), **kwargs})
    after = fallbacks()
    new = {op for op, n in after.items() if n != before.get(op, 0)}
    bad = {op for op in new if _base(op) in OURS or _base(op) in lowered}
    assert not bad, f"ops fell back to the CPU: {sorted(bad)}"
    return result


def randn(*shape, dtype=torch.float32, scale=3.0):
    # Wide enough to reach every branch (|x| > 3 for the hard* ops, softplus thresholds).
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t(),
    "strided": lambda t: t[:, ::2],
}


def layout_input(layout, dtype):
    base = randn(6, 12, dtype=dtype)
    return LAYOUTS[layout](base)


# ---------------------------------------------------------------- forward

UNARY = {
    "relu": F.relu,
    "relu6": F.relu6,
    "threshold": lambda x: F.threshold(x, 0.1, 20.0),
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.7),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3, training=False),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "elu": lambda x: F.elu(x, 1.3),
    "celu": lambda x: F.celu(x, 0.7),
    "selu": F.selu,
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=1.5),
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "hardshrink": lambda x: F.hardshrink(x, 0.4),
    "softshrink": lambda x: F.softshrink(x, 0.4),
    "glu_last": lambda x: F.glu(x, -1),
    "glu_first": lambda x: F.glu(x, 0),
    "softmax0": lambda x: F.softmax(x, 0),
    "softmax1": lambda x: F.softmax(x, 1),
    "log_softmax0": lambda x: F.log_softmax(x, 0),
    "log_softmax1": lambda x: F.log_softmax(x, -1),
    "safe_softmax": lambda x: A._safe_softmax(x, 1),
}


# Each dtype also exercises one input layout (compiles are the cost of these tests).
DTYPE_LAYOUTS = [
    (torch.float32, "contiguous"),
    (torch.float64, "transposed"),
    (torch.float16, "strided"),
    (torch.bfloat16, "contiguous"),
]
DTYPE_LAYOUT_IDS = [f"{str(d).split('.')[1]}-{layout}" for d, layout in DTYPE_LAYOUTS]


@pytest.mark.parametrize("dtype,layout", DTYPE_LAYOUTS, ids=DTYPE_LAYOUT_IDS)
@pytest.mark.parametrize("name", list(UNARY))
def test_forward(name, dtype, layout):
    run(UNARY[name], layout_input(layout, dtype), dtype=dtype)


@pytest.mark.parametrize("name", ["relu", "gelu", "hardtanh", "softplus", "glu_first", "softmax0"])
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_forward_layouts(name, layout):
    run(UNARY[name], layout_input(layout, torch.float32))


def test_forward_float64_scalars_exact():
    # float64 ops carry their scalars as f64: a slope like 0.1 is not rounded to f32.
    x = randn(8, 8, dtype=torch.float64)
    run(lambda t: F.leaky_relu(t, 0.1), x, dtype=torch.float64, atol=0, rtol=0)
    run(lambda t: F.elu(t, 0.3), x, dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
def test_integer_inputs(dtype):
    x = torch.randint(-20 if dtype != torch.uint8 else 0, 20, (5, 7)).to(dtype)
    run(F.relu, x)
    run(lambda t: F.threshold(t, 3, 100), x)
    # Fractional bounds truncate like PyTorch's toLong().
    run(lambda t: F.hardtanh(t, 2.7, 9.6), x)
    run(lambda t: A.threshold(t, 4.5, -1), x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_threshold_compares_reduced_floats_against_the_unrounded_threshold(dtype):
    # bf16(0.1) > 0.1: the CPU keeps it, as it compares in float.
    x = torch.tensor([0.1, 0.0999, 0.5, -1.0], dtype=dtype)
    run(lambda t: F.threshold(t, 0.1, 20.0), x, dtype=dtype, atol=0, rtol=0)
    g = torch.ones(4, dtype=dtype)
    run(lambda g, t: A.threshold_backward(g, t, 0.1), g, x, dtype=dtype, atol=0, rtol=0)


NAN, INF = float("nan"), float("inf")
# Branch boundaries of the ops below (0, +-3, +-lambd, softplus thresholds) and extremes. 64
# elements: the CPU's vectorised loop handles them all (its scalar tail treats NaN differently
# in a few backward kernels; the device follows the vectorised one).
SPECIAL = torch.tensor(
    [
        NAN,
        INF,
        -INF,
        0.0,
        -0.0,
        3.0,
        -3.0,
        0.4,
        -0.4,
        0.5,
        -0.5,
        1.0,
        -1.0,
        20.0,
        -20.0,
        10.0,
        1e-30,
        -1e-30,
        2.0,
        -2.0,
        100.0,
        -100.0,
        50.0,
        -50.0,
        0.1,
        0.7,
        -0.3,
        2.9,
        -2.9,
        3.1,
        -3.1,
        1e-3,
    ]
).repeat(2)


def test_special_values():
    x = SPECIAL
    for name in [
        "relu",
        "hardtanh",
        "leaky_relu",
        "gelu_tanh",
        "silu",
        "elu",
        "softplus",
        "mish",
        "logsigmoid",
        "hardsigmoid",
        "hardswish",
        "hardshrink",
        "softshrink",
    ]:
        run(UNARY[name], x)
    # PyTorch's AVX-512 float32 gelu gives nan at +inf (its scalar path, float64 and the
    # other vector widths give inf): the reference here is float64.
    torch.testing.assert_close(
        F.gelu(x.to("tpu")).cpu(), F.gelu(x.double()).float(), equal_nan=True, rtol=1e-5, atol=1e-5
    )
    finite = x[3:]
    run(lambda t: F.softmax(t, 0), finite)
    run(lambda t: F.log_softmax(t, 0), finite)


def test_softmax_masked_rows():
    inf = float("inf")
    x = torch.tensor([[1.0, -inf, 2.0], [-inf, -inf, -inf], [inf, 0.0, 1.0]])
    run(lambda t: F.softmax(t, 1), x)  # the all -inf row is NaN, like the CPU
    run(lambda t: A._safe_softmax(t, 1), x)  # ... and zeros here
    run(lambda t: A._safe_softmax(t, 0), x)
    run(lambda t: A._safe_softmax(t, 1, dtype=torch.float64), x.half(), dtype=torch.float64)


@pytest.mark.parametrize("fn", [A._softmax, A._log_softmax], ids=["softmax", "log_softmax"])
def test_half_to_float(fn):
    # The CPU kernels refuse half_to_float (and PyTorch allows it for float16 only); the
    # reference is the float32 computation.
    x = randn(4, 9, dtype=torch.float16)
    y = fn(x.to("tpu"), 1, True)
    assert y.dtype == torch.float32
    assert_close_tree(y, fn(x.float(), 1, False), atol=1e-6, rtol=1e-6)


def test_static_arguments_change_result():
    # The same tensor with a different int / bool argument has a different result shape/dtype.
    x = randn(6, 10).to("tpu")
    assert A.glu(x, 1).shape == (6, 5)
    assert A.glu(x, 0).shape == (3, 10)
    h = x.half()
    assert A._softmax(h, 1, False).dtype == torch.float16
    assert A._softmax(h, 1, True).dtype == torch.float32


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_softmax_dims_3d(dim):
    x = randn(3, 4, 5)
    run(lambda t: F.softmax(t, dim), x)
    run(lambda t: F.log_softmax(t, dim), x)
    run(lambda t: F.softmax(t, dim, dtype=torch.float64), x, dtype=torch.float64)


def test_scalar_and_empty():
    run(lambda t: F.softmax(t, 0), torch.tensor(2.5))
    run(lambda t: F.log_softmax(t, -1), torch.tensor(2.5))
    run(F.gelu, torch.tensor(-0.7))
    run(F.relu, torch.empty(0, 3))
    run(lambda t: F.softmax(t, 1), torch.empty(0, 3))
    run(lambda t: F.softmax(t, 0), torch.empty(0, 3))


def test_prelu():
    x = randn(2, 3, 4, 5)
    run(F.prelu, x, torch.tensor([0.1, -0.2, 0.3]))
    run(F.prelu, x, torch.tensor([0.25]))
    run(F.prelu, randn(7), torch.tensor([0.25]))


def test_complex():
    z = torch.randn(4, 5, dtype=torch.complex64)
    g = torch.randn(4, 5, dtype=torch.complex64)
    run(F.silu, z)
    run(A.sigmoid_backward, g, torch.sigmoid(z))
    run(A.tanh_backward, g, torch.tanh(z))


def test_log_sigmoid_forward_buffer():
    # The buffer (exp(-|x|)) is part of the result and fed back to the backward.
    x = randn(5, 6)
    _out, buffer = run(A.log_sigmoid_forward, x)
    g = randn(5, 6)
    run(A.log_sigmoid_backward, g, x, buffer.cpu())


# ---------------------------------------------------------------- in-place and out=

INPLACE = {
    "relu": lambda x: F.relu(x, inplace=True),
    "relu6": lambda x: F.relu6(x, inplace=True),
    "threshold": lambda x: F.threshold(x, 0.5, -2.0, inplace=True),
    "hardtanh": lambda x: F.hardtanh(x, -0.3, 0.3, inplace=True),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.05, inplace=True),
    "elu": lambda x: F.elu(x, 0.8, inplace=True),
    "celu": lambda x: F.celu(x, 0.8, inplace=True),
    "selu": lambda x: F.selu(x, inplace=True),
    "silu": lambda x: F.silu(x, inplace=True),
    "mish": lambda x: F.mish(x, inplace=True),
    "hardsigmoid": lambda x: F.hardsigmoid(x, inplace=True),
    "hardswish": lambda x: F.hardswish(x, inplace=True),
    "gelu_": lambda x: A.gelu_(x, approximate="tanh"),
    "rrelu_eval": lambda x: F.rrelu(x, training=False, inplace=True),
}


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace(name):
    run(INPLACE[name], randn(6, 8))


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "hardswish", "elu"])
def test_inplace_on_view(name):
    # Writes go through the view into the base, leaving the other columns alone.
    def fn(base):
        INPLACE[name](base[:, 1::2])
        return base

    run(fn, randn(6, 8))
    run(lambda base: INPLACE[name](base.t()), randn(5, 3))


OUT = {
    "relu": lambda x, o: A.relu.out(x, out=o),
    "gelu": lambda x, o: A.gelu.out(x, approximate="none", out=o),
    "silu": lambda x, o: A.silu.out(x, out=o),
    "hardtanh": lambda x, o: A.hardtanh.out(x, -1.5, 0.5, out=o),
    "leaky_relu": lambda x, o: A.leaky_relu.out(x, 0.3, out=o),
    "elu": lambda x, o: A.elu.out(x, 1.0, 1.0, 1.0, out=o),
    "softplus": lambda x, o: A.softplus.out(x, 1.0, 20.0, out=o),
    "hardshrink": lambda x, o: A.hardshrink.out(x, 0.5, out=o),
    "softmax": lambda x, o: A._softmax.out(x, 1, False, out=o),
    "log_softmax": lambda x, o: A._log_softmax.out(x, 0, False, out=o),
}


@pytest.mark.parametrize("name", list(OUT))
def test_out(name):
    x = randn(4, 6)
    run(OUT[name], x, torch.empty(4, 6))
    # A wrongly sized out is resized, and a strided view is written through.
    run(OUT[name], x, torch.empty(0))


@pytest.mark.parametrize("name", list(OUT))
def test_out_strided_view(name):
    # The CPU kernels of gelu and _softmax mishandle a strided out= (they leave it unwritten
    # or write it as if contiguous), so the reference is the functional result copied in.
    x = randn(4, 6)
    base = torch.zeros(4, 8).to("tpu")
    before = fallbacks()
    OUT[name](x.to("tpu"), base[:, 1:7])
    assert fallbacks() == before
    expected = torch.zeros(4, 8)
    expected[:, 1:7] = OUT[name](x, torch.empty(4, 6))
    assert_close_tree(base, expected, **TOL[torch.float32])


def test_out_multiple_results():
    x = randn(3, 4)
    out, buffer = torch.empty(3, 4), torch.empty(3, 4)
    run(lambda t, o, b: A.log_sigmoid_forward.output(t, output=o, buffer=b), x, out, buffer)
    run(lambda t, o: A.glu.out(t, 1, out=o), x, torch.empty(3, 2))


def test_scalars_are_runtime_operands():
    x = randn(16, 16).to("tpu")
    # The first round compiles (in every eager mode); new values must not.
    for i, v in enumerate((0.1, 0.2, 0.35)):
        if i == 1:
            compiles = torch_tpu.metrics()["compiles"]
        for got, want in [
            (F.leaky_relu(x, v), F.leaky_relu(x.cpu(), v)),
            (F.elu(x, v), F.elu(x.cpu(), v)),
            (F.softplus(x, beta=v, threshold=3 * v), F.softplus(x.cpu(), beta=v, threshold=3 * v)),
            (F.hardtanh(x, -v, 2 * v), F.hardtanh(x.cpu(), -v, 2 * v)),
            (F.threshold(x, v, 10 * v), F.threshold(x.cpu(), v, 10 * v)),
        ]:
            assert_close_tree(got, want, **TOL[torch.float32])
    assert torch_tpu.metrics()["compiles"] == compiles


def test_float_only_ops_reject_integers_like_cpu():
    x = torch.arange(6).to("tpu")
    for fn in (F.gelu, F.silu, F.softplus, lambda t: F.softmax(t, 0)):
        with pytest.raises(RuntimeError):
            fn(x)


# ---------------------------------------------------------------- backward

BACKWARD_OPS = {
    "threshold_backward": lambda g, x: A.threshold_backward(g, x, 0.5),
    "gelu_backward": lambda g, x: A.gelu_backward(g, x),
    "gelu_backward_tanh": lambda g, x: A.gelu_backward(g, x, approximate="tanh"),
    "silu_backward": lambda g, x: A.silu_backward(g, x),
    "sigmoid_backward": lambda g, y: A.sigmoid_backward(g, y),
    "tanh_backward": lambda g, y: A.tanh_backward(g, y),
    "hardtanh_backward": lambda g, x: A.hardtanh_backward(g, x, -1.0, 3.0),
    "leaky_relu_backward": lambda g, x: A.leaky_relu_backward(g, x, 0.1, False),
    "elu_backward": lambda g, x: A.elu_backward(g, 1.2, 1.1, 0.9, False, x),
    "elu_backward_result": lambda g, y: A.elu_backward(g, 1.2, 1.1, 0.9, True, y),
    "softplus_backward": lambda g, x: A.softplus_backward(g, x, 2.0, 1.0),
    "hardsigmoid_backward": lambda g, x: A.hardsigmoid_backward(g, x),
    "hardswish_backward": lambda g, x: A.hardswish_backward(g, x),
    "log_sigmoid_backward": lambda g, x: A.log_sigmoid_backward(g, x, A.log_sigmoid_forward(x)[1]),
    "prelu_backward": lambda g, x: A._prelu_kernel_backward(g, x, x * 0 + 0.25),
    "softshrink_backward": lambda g, x: A.softshrink_backward(g, x, 0.4),
    "hardshrink_backward": lambda g, x: A.hardshrink_backward(g, x, 0.4),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(BACKWARD_OPS))
def test_backward_ops_special_values(name, dtype):
    x = SPECIAL.to(dtype)
    g = torch.linspace(0.5, 2.0, x.numel()).to(dtype)
    run(BACKWARD_OPS[name], g, x, dtype=dtype)


def grad_of(fn, *inputs, grad=None):
    """Gradients of fn(*inputs) w.r.t. its floating inputs, for an upstream `grad`."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    y = fn(*leaves)
    y.backward(grad)
    return [t.grad for t in leaves if t.requires_grad]


GRAD = {k: UNARY[k] for k in UNARY if k not in ("safe_softmax", "rrelu_eval")}
GRAD.update(
    {
        "leaky_relu_negslope_inplace": lambda x: F.leaky_relu(x * 1.0, 0.1, inplace=True),
        "elu_inplace": lambda x: F.elu(x * 1.0, 0.9, inplace=True),  # backward from the result
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }
)


BACKWARD_CASES = [(torch.float32, False), (torch.float64, True), (torch.bfloat16, True)]


def _backward(name, dtype, transposed):
    # Transposed cases make both the input and the upstream gradient non-contiguous.
    x = randn(10, 6, dtype=dtype).t() if transposed else randn(6, 10, dtype=dtype)
    shape = GRAD[name](x).shape
    g = (
        randn(*shape[::-1], dtype=dtype, scale=1.0).t()
        if transposed
        else randn(*shape, dtype=dtype, scale=1.0)
    )
    run(lambda t, u: grad_of(GRAD[name], t, grad=u), x, g, dtype=dtype)


@pytest.mark.parametrize(
    "dtype,transposed",
    BACKWARD_CASES,
    ids=[f"{str(d).split('.')[1]}{'-t' if t else ''}" for d, t in BACKWARD_CASES],
)
@pytest.mark.parametrize("name", list(GRAD))
def test_backward(name, dtype, transposed):
    _backward(name, dtype, transposed)


# float16 shares the float32 compute path of bfloat16; a few ops check its rounding.
@pytest.mark.parametrize(
    "name", ["gelu", "silu", "softplus", "softmax1", "log_softmax0", "glu_last"]
)
def test_backward_float16(name):
    _backward(name, torch.float16, False)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_softmax_backward_dims(dim):
    x = randn(3, 4, 5)
    g = randn(3, 4, 5, scale=1.0)
    run(lambda t, u: grad_of(lambda v: F.softmax(v, dim), t, grad=u), x, g)
    run(lambda t, u: grad_of(lambda v: F.log_softmax(v, dim), t, grad=u), x, g)


@pytest.mark.parametrize(
    "fn", [A._softmax_backward_data, A._log_softmax_backward_data], ids=["softmax", "log_softmax"]
)
def test_softmax_backward_half_to_float(fn):
    # float32 gradients of a half_to_float softmax come back as float16.
    y = torch.softmax(randn(4, 7), 1)
    y = y.log() if fn is A._log_softmax_backward_data else y
    g = randn(4, 7, scale=1.0)
    got = fn(g.to("tpu"), y.to("tpu"), 1, torch.float16)
    assert got.dtype == torch.float16
    assert_close_tree(got, fn(g, y, 1, torch.float32).half(), **TOL[torch.float16])


def test_prelu_backward():
    x = randn(2, 3, 4)
    g = randn(2, 3, 4, scale=1.0)
    for w in (torch.tensor([0.1, -0.2, 0.3]), torch.tensor([0.25])):
        run(lambda t, ww, u: grad_of(F.prelu, t, ww, grad=u), x, w, g)


def test_cross_entropy_backward():
    logits = randn(8, 5)
    target = torch.randint(0, 5, (8,))
    run(lambda t, y: grad_of(lambda v: F.cross_entropy(v, y), t), logits, target)
    run(lambda t, y: F.cross_entropy(t, y, label_smoothing=0.1), logits, target)


def test_double_backward_tanh_gelu():
    # create_graph: the backward ops themselves are differentiated.
    def fn(x):
        x = x.detach().clone().requires_grad_()
        (gx,) = torch.autograd.grad(F.gelu(x).sum(), x, create_graph=True)
        gx.sum().backward()
        return x.grad

    run(fn, randn(5, 5))
