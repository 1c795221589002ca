"""Custom kernels against the same computation written in PyTorch ops, in each eager mode.

Two blocks between PyTorch ops (a scale before, an activation and a residual after), one
step each: RMSNorm and a rotary embedding as one JAX kernel (``torch_tpu.kernels.jax_op``),
and RMSNorm then softmax as two Helion kernels (``@helion.kernel``, Pallas backend; skipped
without Helion); each against the same block in PyTorch ops, in the same run, alternating
rounds, medians. Also the first call of each on a new shape (Helion's code generation,
JAX's lowering, then XLA's compile; the compile cache is off for the run). Prints the
ratios kernel/PyTorch. Run: ``.venv/bin/python benchmarks/custom_kernel.py [--rounds 7]``.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default: 7)")
    parser.add_argument("--iters", type=int, default=50, help="blocks per round (default: 50)")
    parser.add_argument("--tokens", type=int, default=256, help="rows of x (default: 256)")
    parser.add_argument("--dim", type=int, default=512, help="features (default: 512)")
    parser.add_argument(
        "--modes",
        default="strict,defer_and_fuse",
        help="eager modes, comma-separated (default: strict,defer_and_fuse)",
    )
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None
# First calls must compile: a compile cache of this run only.
os.environ["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch_tpu_bench_")

import jax
import jax.numpy as jnp
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import kernels


def rms_norm_rotary(x, w, cos, sin):
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rms_norm_rotary_torch(x, w, cos, sin):
    x = F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _helion_example():
    """examples/helion_kernels.py (by its path), or None without Helion (the helion extra)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    spec = importlib.util.spec_from_file_location(
        "helion_kernels_example", os.path.join(path, "helion_kernels.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Helion reads the kernels' globals through it
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module


HELION = _helion_example()


def rms_norm_softmax_helion(x, w, cos, sin):
    return HELION.softmax_kernel(HELION.rms_norm_kernel(x, w))


def rms_norm_softmax_torch(x, w, cos, sin):
    return F.rms_norm(x, (x.shape[-1],), w, eps=HELION.EPS).softmax(-1)


def block(fn, x, w, cos, sin):
    return F.silu(fn(x * 0.5, w, cos, sin)) + x


def inputs(tokens: int, dim: int):
    x = torch.randn(tokens, dim, device="tpu")
    w = torch.randn(dim, device="tpu")
    angles = torch.randn(tokens, dim // 2, device="tpu")
    return x, w, angles.cos(), angles.sin()


def timed(fn, args, iters: int) -> float:
    """Seconds per block, each block one step (materialised: one fused program)."""
    x, rest = args[0], args[1:]
    start = time.perf_counter()
    for _ in range(iters):
        x = block(fn, x, *rest)
        torch.tpu.synchronize()
    return (time.perf_counter() - start) / iters


def first_call(fn, args) -> float:
    start = time.perf_counter()
    block(fn, *args).cpu()
    return time.perf_counter() - start


def compare(mode: str, label: str, kernel_fn, torch_fn, args: argparse.Namespace) -> None:
    variants = {label: kernel_fn, "PyTorch ops": torch_fn}
    with torch_tpu.eager_mode(mode):
        data = inputs(args.tokens, args.dim)
        torch.tpu.synchronize()
        want = block(torch_fn, *data).cpu()
        got = block(kernel_fn, *data).cpu()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        steady = {name: [] for name in variants}
        first = {name: [] for name in variants}
        for r in range(args.rounds):
            order = list(variants.items())
            if r % 2:
                order.reverse()
            for name, fn in order:
                timed(fn, data, 2)  # warm: compiled
                steady[name].append(timed(fn, data, args.iters))
                # A shape not seen yet, a multiple of Helion's default block (32): a ragged
                # one makes Helion emit a masked TPU pipeline, which the CPU platform's
                # Pallas interpreter cannot run.
                fresh = inputs(args.tokens + 32 * (r + 1), args.dim)
                first[name].append(first_call(fn, fresh))
    kernel, torch_ops = (statistics.median(steady[n]) for n in variants)
    kernel_first, torch_first = (statistics.median(first[n]) for n in variants)
    print(f"{label} ({mode}):")
    print(f"  per block, kernel:       {kernel * 1e6:9.1f} us")
    print(f"  per block, PyTorch ops:  {torch_ops * 1e6:9.1f} us")
    print(f"  ratio kernel/PyTorch:    {kernel / torch_ops:9.2f}x")
    print(f"  first call, kernel:      {kernel_first * 1e3:9.1f} ms")
    print(f"  first call, PyTorch ops: {torch_first * 1e3:9.1f} ms (XLA compile)")
    print(f"  ratio kernel/PyTorch:    {kernel_first / torch_first:9.2f}x")


def main(args: argparse.Namespace) -> None:
    pairs = [
        (
            "JAX kernel: RMSNorm + rotary",
            kernels.jax_op("bench::rms_norm_rotary", rms_norm_rotary),
            rms_norm_rotary_torch,
        )
    ]
    if HELION is not None:
        pairs.append(
            ("Helion kernels: RMSNorm, softmax", rms_norm_softmax_helion, rms_norm_softmax_torch)
        )
    else:
        print("Helion is not installed (the helion extra): its kernels are skipped")
    print(
        f"platform: {torch_tpu.platform()}, x: {args.tokens}x{args.dim}, "
        f"{args.rounds} alternating rounds of {args.iters} blocks, medians"
    )
    for mode in args.modes.split(","):
        for label, kernel_fn, torch_fn in pairs:
            compare(mode, label, kernel_fn, torch_fn, args)


if __name__ == "__main__":
    main(ARGS)
