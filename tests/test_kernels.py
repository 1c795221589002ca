"""torch_tpu.kernels: JAX functions, Pallas kernels and hand-written StableHLO as PyTorch ops
on tpu, against PyTorch on the CPU, in every eager mode and under torch.compile. (The file
runs every mode itself.)"""

import itertools
import subprocess
import sys

import pytest
import torch

import torch_tpu

jax = pytest.importorskip("jax", reason="torch_tpu.kernels needs the jax extra")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402

from torch_tpu import kernels  # noqa: E402

MODES = ["strict", "defer_and_fuse", "debug"]
_names = itertools.count()


def unique(name: str) -> str:
    return f"tpu_test::{name}_{next(_names)}"


def rmsnorm(x, w, eps: float = 1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rmsnorm_torch(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def softmax_stats(x) -> tuple[jax.Array, jax.Array]:
    m = jnp.max(x, axis=-1)
    return jax.nn.softmax(x, axis=-1), m


def grads_of(fn, *inputs):
    """The outputs, and the gradients of a fixed weighted sum of them."""
    leaves = [t.detach().clone().requires_grad_(t.dtype.is_floating_point) for t in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    weights = [torch.linspace(-1, 1, o.numel(), device=o.device).reshape(o.shape) for o in outs]
    sum((o.float() * w).sum() for o, w in zip(outs, weights)).backward()
    return [o.detach().cpu() for o in outs], [
        t.grad.cpu() if t.grad is not None else None for t in leaves
    ]


def assert_close(got, want):
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_elementwise_and_reduction_with_gradients(mode):
    op = kernels.jax_op(unique("rmsnorm"), rmsnorm, static_argnames=("eps",))
    x, w = torch.randn(5, 32), torch.randn(32)
    with torch_tpu.eager_mode(mode):
        got = grads_of(lambda a, b: op(a, b, eps=1e-5), x.to("tpu"), w.to("tpu"))
    want = grads_of(lambda a, b: rmsnorm_torch(a, b, 1e-5), x, w)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


@pytest.mark.parametrize("mode", MODES)
def test_several_outputs_and_views(mode):
    op = kernels.jax_op(unique("softmax_stats"), softmax_stats)
    base = torch.randn(9, 12)
    with torch_tpu.eager_mode(mode):
        viewed = base.to("tpu").t()[2:9:2]  # strided, offset, not contiguous
        got = grads_of(op, viewed)
    want = grads_of(lambda t: (t.softmax(-1), t.max(-1).values), base.t()[2:9:2])
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def test_static_arguments_are_part_of_the_key():
    def scale(x, factor: float, axes: list[int] = (0,)):
        return jnp.sum(x * factor, axis=tuple(axes))

    op = kernels.jax_op(unique("scale"), scale, static_argnames=("factor", "axes"))
    x = torch.randn(3, 4, 5)
    for factor, axes in [(2.0, [0]), (3.0, [0]), (2.0, [1, 2])]:
        got = op(x.to("tpu"), factor, axes).cpu()
        torch.testing.assert_close(got, (x * factor).sum(tuple(axes)))


def test_integer_inputs_get_no_gradient():
    def gather_rows(table, idx):
        return table[idx] * 2

    op = kernels.jax_op(unique("gather_rows"), gather_rows)
    table, idx = torch.randn(6, 3), torch.tensor([4, 0, 4])
    got = grads_of(op, table.to("tpu"), idx.to("tpu"))
    want = grads_of(lambda t, i: t[i] * 2, table, idx)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def test_64_bit_and_half_dtypes_keep_their_type():
    op = kernels.jax_op(unique("affine"), lambda x: x * 3 + 1)
    for dtype in (torch.float64, torch.int64, torch.bfloat16, torch.float16):
        x = torch.arange(6, dtype=dtype).reshape(2, 3)
        got = op(x.to("tpu"))
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), x * 3 + 1)
    big = torch.tensor([1 << 40])
    assert op(big.to("tpu")).item() == (1 << 40) * 3 + 1


def test_cpu_tensors_run_the_function_with_jax_on_the_host():
    op = kernels.jax_op(unique("rmsnorm"), rmsnorm, static_argnames=("eps",))
    x, w = torch.randn(4, 8), torch.randn(8)
    assert_close(grads_of(op, x, w)[0], grads_of(rmsnorm_torch, x, w)[0])


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_repeated_calls_compile_nothing(mode):
    op = kernels.jax_op(unique("rmsnorm"), rmsnorm, static_argnames=("eps",))
    x, w = torch.randn(4, 24, device="tpu"), torch.randn(24, device="tpu")
    with torch_tpu.eager_mode(mode):
        op(x * 2, w).relu().cpu()
        torch_tpu.reset_metrics()
        for _ in range(3):
            op(x * 2, w).relu().cpu()
    assert torch_tpu.metrics()["compiles"] == 0


def test_defer_and_fuse_makes_one_program_around_the_kernel():
    op = kernels.jax_op(unique("rmsnorm"), rmsnorm, static_argnames=("eps",))
    x, w = torch.randn(4, 20), torch.randn(20)
    with torch_tpu.eager_mode("defer_and_fuse"):
        xt, wt = x.to("tpu"), w.to("tpu")
        torch_tpu.reset_metrics()
        got = (op(xt * 2, wt) + 1).relu().cpu()
        assert torch_tpu.metrics()["executions"] == 1
    torch.testing.assert_close(got, (rmsnorm_torch(x * 2, w) + 1).relu())


def test_torch_compile_captures_the_op_without_a_graph_break():
    op = kernels.jax_op(unique("rmsnorm"), rmsnorm, static_argnames=("eps",))

    def block(x, w):
        return (op(x, w) @ w.unsqueeze(-1)).tanh()

    x, w = torch.randn(6, 16), torch.randn(16)
    xt, wt = x.to("tpu"), w.to("tpu")
    assert torch._dynamo.explain(block)(xt, wt).graph_break_count == 0
    compiled = torch.compile(block, backend="tpu")
    got = grads_of(compiled, xt, wt)
    want = grads_of(lambda a, b: (rmsnorm_torch(a, b) @ b.unsqueeze(-1)).tanh(), x, w)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def test_pallas_kernel_in_interpret_mode():
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) + y_ref[...] * 2

    def fused(x, y):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            interpret=kernels.pallas_interpret(),
        )(x, y)

    assert kernels.pallas_interpret() == (torch_tpu.platform() == "cpu")
    name = unique("pallas")
    op = kernels.jax_op(name, fused)
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    torch.testing.assert_close(op(x.to("tpu"), y.to("tpu")).cpu(), x.exp() + y * 2)
    # pallas_call has no derivative in JAX: the backward names the op (jax.custom_vjp gives one).
    xt = x.to("tpu").requires_grad_()
    with pytest.raises(RuntimeError, match=rf"{name}_vjp: JAX could not trace the function"):
        op(xt, y.to("tpu")).sum().backward()

    @jax.custom_vjp
    def differentiable(x, y):
        return fused(x, y)

    differentiable.defvjp(
        lambda x, y: (fused(x, y), (x,)), lambda res, g: (g * jnp.exp(res[0]), g * 2)
    )
    op = kernels.jax_op(unique("pallas_vjp"), differentiable)
    got = grads_of(op, x.to("tpu"), y.to("tpu"))
    want = grads_of(lambda a, b: a.exp() + b * 2, x, y)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def test_register_autograd_overrides_the_derived_gradient():
    op = kernels.jax_op(unique("double"), lambda x: x * 2)
    op.register_autograd(lambda ctx, g: g * 10, setup_context=lambda ctx, inputs, output: None)
    x = torch.ones(3, device="tpu", requires_grad=True)
    op(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 10.0))


def test_opcheck():
    def annotated(x, w, eps: float = 1e-6) -> jax.Array:
        return rmsnorm(x, w, eps)

    # Its schema is its own (typed statics, annotated result): the op is a CustomOpDef.
    op = kernels.jax_op(unique("rmsnorm"), annotated, static_argnames=("eps",))
    args = (torch.randn(3, 8, device="tpu", requires_grad=True), torch.randn(8, device="tpu"))
    # Shapes are static (aot_dispatch_dynamic traces with symbolic ones); PyTorch's
    # autograd-registration check knows only CPU, CUDA and XPU tensors.
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))


SQUARE_PLUS = """
func.func public @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.multiply %x, %x : tensor<2x3xf32>
  %1 = stablehlo.broadcast_in_dim %y, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %2 = stablehlo.add %0, %1 : tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}
"""


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_hand_written_stablehlo(mode):
    op = kernels.stablehlo_op(unique("square_plus"), SQUARE_PLUS, [((2, 3), torch.float32)])
    x, y = torch.randn(2, 3), torch.randn(3)
    with torch_tpu.eager_mode(mode):
        got = (op(x.to("tpu"), y.to("tpu")) - 1).cpu()
    torch.testing.assert_close(got, x * x + y - 1)
    compiled = torch.compile(lambda a, b: op(a, b).sum(0), backend="tpu")
    torch.testing.assert_close(compiled(x.to("tpu"), y.to("tpu")).cpu(), (x * x + y).sum(0))


# ---------------------------------------------------------------- errors


def test_shapes_the_function_cannot_take_raise_jaxs_message_naming_the_op():
    name = unique("matmul")
    op = kernels.jax_op(name, lambda a, b: a @ b)
    with pytest.raises(TypeError, match=rf"{name}: .*dot_general"):
        op(torch.randn(2, 3, device="tpu"), torch.randn(4, 5, device="tpu"))


def test_results_that_are_not_arrays():
    name = unique("not_array")
    op = kernels.jax_op(name, lambda x: "text")
    with pytest.raises(TypeError, match=rf"{name}: .* returned a value of type <class 'str'>"):
        op(torch.randn(2, device="tpu"))
    name = unique("annotated_single")

    def one(x) -> jax.Array:
        return x, x

    op = kernels.jax_op(name, one)
    with pytest.raises(TypeError, match=rf"{name}: the function returned 2 values, its return"):
        op(torch.randn(2, device="tpu"))
    name = unique("unhashable")
    op = kernels.jax_op(name, lambda x, k: x * k[0], static_argnames="k")
    with pytest.raises(TypeError, match=rf"{name}: static arguments \('k',\) must be hashable"):
        op(torch.randn(2, device="tpu"), [2.0, {}])


def test_dtypes_without_a_counterpart():
    name = unique("identity")
    op = kernels.jax_op(name, lambda x: x)
    x = torch.ones(2, dtype=torch.complex32)  # the host path: tpu tensors have JAX types
    with pytest.raises(TypeError, match=rf"{name}: tensors of dtype torch.complex32 have no JAX"):
        op(x)
    name = unique("to_int4")
    op = kernels.jax_op(name, lambda x: x.astype(jnp.int4))
    with pytest.raises(TypeError, match=rf"{name}: a result of dtype int4 has no PyTorch dtype"):
        op(torch.ones(2, device="tpu"))


def test_a_kernel_that_does_not_lower_on_the_platform_names_op_and_platform():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    name = unique("compiled_pallas")
    op = kernels.jax_op(
        name,
        lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x),
    )
    if torch_tpu.platform() != "cpu":
        pytest.skip("Pallas compiles for GPU and TPU")
    with pytest.raises(RuntimeError, match=rf"{name} does not lower on the cpu platform"):
        op(torch.randn(8, 128, device="tpu"))


def test_bad_definitions():
    with pytest.raises(TypeError, match="static_argnames names no parameter"):
        kernels.jax_op(unique("unknown"), lambda x: x, static_argnames=("y",))
    with pytest.raises(ValueError, match=r"@main takes \[\(\(2, 3\), torch.float32\)"):
        op = kernels.stablehlo_op(unique("square_plus"), SQUARE_PLUS)
        op(torch.randn(3, 3, device="tpu"), torch.randn(3, device="tpu"))
    with pytest.raises(ValueError, match="out_shapes"):
        kernels.stablehlo_op(unique("square_plus"), SQUARE_PLUS, [((3,), torch.float32)])
    with pytest.raises(ValueError, match="does not parse"):
        kernels.stablehlo_op(unique("garbage"), "func.func @main(")


def test_without_jax_the_module_names_the_extra():
    code = "import sys; sys.modules['jax'] = None\nimport torch_tpu.kernels"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "ImportError: torch_tpu.kernels needs JAX" in out.stderr
    assert "pip install 'torch_tpu[jax]'" in out.stderr


# JAX code as JAX users write it: static arguments without types (any hashable value,
# as jax.jit takes them) and results without a return annotation.
def top2(x, scale, axis=-1):
    values, indices = jax.lax.top_k(jnp.moveaxis(x, axis, -1) * scale[0] + scale[1], 2)
    return values, indices


def top2_torch(x, scale, axis=-1):
    out = (x.movedim(axis, -1) * scale[0] + scale[1]).topk(2)
    return out.values, out.indices.int()  # JAX's default integer


@pytest.mark.parametrize("mode", MODES)
def test_unannotated_statics_and_results(mode):
    op = kernels.jax_op(unique("top2"), top2, static_argnames=("scale", "axis"))
    x = torch.randn(4, 6)
    with torch_tpu.eager_mode(mode):
        for scale, axis in [((2.0, 1), -1), ((2.0, 1), 0), ((-1.0, 0), -1)]:
            got = grads_of(lambda t, s=scale, a=axis: op(t, s, axis=a), x.to("tpu"))
            want = grads_of(lambda t, s=scale, a=axis: top2_torch(t, s, a), x)
            assert_close(got[0], want[0])
            assert_close(got[1], want[1])
    # One array, not a tuple of one: the op returns what the function returns.
    double = kernels.jax_op(unique("double"), lambda t: t * 2)
    assert isinstance(double(x.to("tpu")), torch.Tensor)
    single = kernels.jax_op(unique("single"), lambda t: (t * 2,))
    (out,) = single(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), x * 2)


def test_unannotated_op_compiles_once_per_signature_and_without_graph_breaks():
    op = kernels.jax_op(unique("top2"), top2, static_argnames=("scale", "axis"))

    def block(x):
        values, _ = op(x, (0.5, 0.0))
        return values.sum(-1) + op(x, (1.0, 2.0), axis=0)[0].sum()

    x = torch.randn(5, 5)
    xt = x.to("tpu")
    assert torch._dynamo.explain(block)(xt).graph_break_count == 0
    compiled = torch.compile(block, backend="tpu")
    want = top2_torch(x, (0.5, 0.0))[0].sum(-1) + top2_torch(x, (1.0, 2.0), 0)[0].sum()
    torch.testing.assert_close(compiled(xt).cpu(), want)
    torch_tpu.reset_metrics()
    for _ in range(2):
        torch.testing.assert_close(op(xt, (0.5, 0.0))[0].cpu(), top2_torch(x, (0.5, 0.0))[0])
    assert torch_tpu.metrics()["compiles"] <= 1  # the first eager call's program, once


def test_register_autograd_on_an_op_with_untyped_statics():
    op = kernels.jax_op(unique("shift"), lambda x, by: x + by[0], static_argnames="by")
    op.register_autograd(
        lambda ctx, g: g * ctx.by[1],
        setup_context=lambda ctx, inputs, output: setattr(ctx, "by", inputs[1]),
    )
    x = torch.ones(3, device="tpu", requires_grad=True)
    op(x, (1.0, 7.0)).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 7.0))
