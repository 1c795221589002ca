"""Helion kernels (`@helion.kernel`, its Pallas backend) on tpu tensors, through the
`torch_tpu._internal` names Helion's launcher imports: against PyTorch on the CPU, in
each eager mode and under torch.compile, with no copy to the host."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest
import torch

import torch_tpu

helion = pytest.importorskip("helion", reason="Helion kernels need the helion extra")
import helion.language as hl  # noqa: E402

MODES = ["strict", "defer_and_fuse"]
EXAMPLE = pathlib.Path(__file__).parents[1] / "examples" / "helion_kernels.py"


def _example():
    # By its path: examples/ on sys.path would make its folders packages (torchtitan).
    spec = importlib.util.spec_from_file_location("helion_kernels_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Helion reads the kernels' globals through it
    spec.loader.exec_module(module)
    return module


_kernels = _example()
RMSNormFunction = _kernels.RMSNormFunction
rms_norm, softmax = _kernels.rms_norm_kernel, _kernels.softmax_kernel


@helion.kernel(backend="pallas", autotune_effort="none")
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@helion.kernel(backend="pallas", autotune_effort="none")
def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _k, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


@helion.kernel(backend="pallas", autotune_effort="none")
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    m, _n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        acc = x[tile_m, :].to(torch.float32)
        mean = torch.mean(acc, dim=-1, keepdim=True)
        centered = acc - mean
        var = torch.mean(centered * centered, dim=-1, keepdim=True)
        normalized = centered * torch.rsqrt(var + eps)
        out[tile_m, :] = (normalized * weight[:].to(torch.float32) + bias[:]).to(out.dtype)
    return out


@helion.kernel(backend="pallas", autotune_effort="none")
def layer_norm_forward(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, _n = x.size()
    out = torch.empty_like(x)
    mean = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    rstd = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        acc = x[tile_m, :].to(torch.float32)
        mu = torch.mean(acc, dim=-1, keepdim=True)
        centered = acc - mu
        r = torch.rsqrt(torch.mean(centered * centered, dim=-1, keepdim=True) + 1e-5)
        out[tile_m, :] = (centered * r * weight[:].to(torch.float32) + bias[:]).to(out.dtype)
        mean[tile_m, :] = mu
        rstd[tile_m, :] = r
    return out, mean, rstd


@helion.kernel(backend="pallas", autotune_effort="none")
def layer_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    block = hl.register_block_size(m)
    grad_x = torch.empty_like(x)
    partial_w = torch.empty([helion.cdiv(m, block), n], dtype=torch.float32, device=x.device)
    partial_b = torch.empty([helion.cdiv(m, block), n], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m, block_size=block):
        g_t = grad[tile_m, :].to(torch.float32)
        x_hat = (x[tile_m, :].to(torch.float32) - mean[tile_m, :]) * rstd[tile_m, :]
        gw = g_t * weight[None, :].to(torch.float32)
        c1 = torch.mean(gw * x_hat, dim=-1, keepdim=True)
        c2 = torch.mean(gw, dim=-1, keepdim=True)
        grad_x[tile_m, :] = ((gw - x_hat * c1 - c2) * rstd[tile_m, :]).to(x.dtype)
        partial_w[tile_m.id, :] = torch.sum(g_t * x_hat, dim=0)
        partial_b[tile_m.id, :] = torch.sum(g_t, dim=0)
    return grad_x, partial_w.sum(0).to(weight.dtype), partial_b.sum(0).to(weight.dtype)


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        out, mean, rstd = layer_norm_forward(x, weight, bias)
        ctx.save_for_backward(x, weight, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        return layer_norm_backward(grad.contiguous(), *ctx.saved_tensors)


def _inputs():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 128, generator=g), torch.randn(64, 128, generator=g)
    w, b, m = torch.randn(128, generator=g), torch.randn(128, generator=g), torch.randn(128, 96)
    return x, y, w, b, m


X, Y, W, B, M = _inputs()
CASES = {
    "add": (add, (X, Y), lambda: X + Y),
    "softmax": (softmax, (X,), lambda: X.softmax(1)),
    "matmul": (matmul, (X, M), lambda: X @ M),
    "rms_norm": (
        rms_norm,
        (X, W),
        lambda: X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-5) * W,
    ),
    "layer_norm": (
        layer_norm,
        (X, W, B),
        lambda: torch.nn.functional.layer_norm(X, (128,), W, B, 1e-5),
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CASES)
def test_kernel_equals_pytorch_on_the_device(name, mode):
    kernel, args, want = CASES[name]
    tpu_args = [a.to("tpu") for a in args]
    with torch_tpu.eager_mode(mode):
        first = kernel(*tpu_args)
        first.add_(0)  # used: a dead result would not run
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        out = kernel(*tpu_args)
        out.add_(0)
        torch.tpu.synchronize()
        after = torch_tpu.metrics()
    assert out.device.type == "tpu"
    # The kernel runs in our program: nothing comes back to the host, nothing compiles
    # on a second call; in strict mode the kernel, the copy into a buffer it writes
    # through (matmul's) and the add are programs of their own, in defer_and_fuse one.
    assert after["device_to_host_transfers"] == before["device_to_host_transfers"]
    programs = {"strict": 2 + (name == "matmul"), "defer_and_fuse": 1}[mode]
    assert after["executions"] - before["executions"] == programs
    assert after["cache_misses"] == before["cache_misses"]
    torch.testing.assert_close(out.cpu(), want(), rtol=1e-4, atol=1e-4)


BACKWARD_CASES = {
    "rms_norm": (
        RMSNormFunction.apply,
        (X, W),
        lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w,
    ),
    "layer_norm": (
        LayerNormFunction.apply,
        (X, W, B),
        lambda x, w, b: torch.nn.functional.layer_norm(x, (128,), w, b, 1e-5),
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", BACKWARD_CASES)
def test_forward_and_backward_kernels_equal_autograd(name, mode):
    fn, args, reference = BACKWARD_CASES[name]
    grad = torch.randn(64, 128, generator=torch.Generator().manual_seed(2))
    leaves = [a.clone().requires_grad_() for a in args]
    reference(*leaves).backward(grad)
    with torch_tpu.eager_mode(mode):
        tpu_leaves = [a.to("tpu").requires_grad_() for a in args]
        out = fn(*tpu_leaves)
        out.backward(grad.to("tpu"))
        torch.testing.assert_close(out.detach().cpu(), reference(*args), rtol=1e-4, atol=1e-4)
        for got, want in zip(tpu_leaves, leaves):
            torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-4)


def test_kernels_in_a_compiled_function():
    def block(x, y, w, b, m):
        h = layer_norm(softmax(add(x, y)), w, b)
        return matmul(rms_norm(h, w), m).relu()

    args = [a.to("tpu") for a in (X, Y, W, B, M)]
    assert torch._dynamo.explain(block)(*args).graph_break_count == 0
    compiled = torch.compile(block, backend="tpu", fullgraph=True)
    with warnings.catch_warnings():
        # The matmul writes its result through a buffer of its own that the graph
        # neither takes nor returns: that graph runs op by op (a warning says so).
        warnings.filterwarnings("ignore", message=".*runs op by op")
        got = compiled(*args).cpu()
    h = torch.nn.functional.layer_norm((X + Y).softmax(1), (128,), W, B, 1e-5)
    ref = ((h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * W) @ M).relu()
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_example_trains_like_the_cpu(tmp_path):
    env = dict(os.environ, TORCH_TPU_LOCK_DIR=str(tmp_path / "locks"))
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    worst = float(re.search(r"largest loss difference over 4 steps: (\S+)", out.stdout)[1])
    assert worst < 2e-3, out.stdout
