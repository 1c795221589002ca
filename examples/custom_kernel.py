"""A transformer whose RMSNorm and rotary embedding are JAX kernels, trained on ``tpu`` beside
the same model written in PyTorch ops: same weights, same batches, losses side by side.

The kernels are ordinary JAX functions made PyTorch ops by ``torch_tpu.kernels.jax_op``;
their gradients come from ``jax.vjp``. The attention's softmax is a Pallas kernel (in
interpret mode on the CPU platform, compiled on GPU and TPU), differentiable through a
``jax.custom_vjp``.

    python examples/custom_kernel.py [--steps 20] [--mode defer_and_fuse]
"""

from __future__ import annotations

import argparse
import copy


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps (default: 20)")
    parser.add_argument(
        "--mode",
        default="defer_and_fuse",
        choices=["strict", "defer_and_fuse", "compile"],
        help="eager mode, or torch.compile(backend='tpu') (default: defer_and_fuse)",
    )
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import jax
import jax.numpy as jnp
import torch
import torch.nn.functional as F
from jax.experimental import pallas as pl
from torch import nn

import torch_tpu
from torch_tpu import kernels

# ---------------------------------------------------------------- the kernels, in JAX


def rms_norm(x, weight, eps: float = 1e-6):
    x32 = x.astype(jnp.float32)
    scale = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * scale).astype(x.dtype) * weight


def rotary(x, cos, sin):
    """Rotates pairs of features of x (batch, heads, seq, dim) by position-dependent angles."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _softmax_kernel(s_ref, o_ref):
    s = s_ref[...]
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def _pallas_softmax(scores):
    return pl.pallas_call(
        _softmax_kernel,
        out_shape=jax.ShapeDtypeStruct(scores.shape, scores.dtype),
        interpret=kernels.pallas_interpret(),
    )(scores)


@jax.custom_vjp
def softmax(scores):
    return _pallas_softmax(scores)


def _softmax_fwd(scores):
    p = _pallas_softmax(scores)
    return p, p


def _softmax_bwd(p, g):
    return (p * (g - jnp.sum(g * p, axis=-1, keepdims=True)),)


softmax.defvjp(_softmax_fwd, _softmax_bwd)

rms_norm_op = kernels.jax_op("example::rms_norm", rms_norm, static_argnames=("eps",))
rotary_op = kernels.jax_op("example::rotary", rotary)
softmax_op = kernels.jax_op("example::softmax", softmax)


def rotary_torch(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


# ---------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    def __init__(self, dim: int, jax_kernel: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.jax_kernel = jax_kernel

    def forward(self, x):
        if self.jax_kernel:
            return rms_norm_op(x, self.weight)
        return F.rms_norm(x, (x.shape[-1],), self.weight, eps=1e-6)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, jax_kernel: bool):
        super().__init__()
        self.heads, self.jax_kernel = heads, jax_kernel
        self.norm1, self.norm2 = RMSNorm(dim, jax_kernel), RMSNorm(dim, jax_kernel)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        rotate = rotary_op if self.jax_kernel else rotary_torch
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + mask
        attn = softmax_op(scores) if self.jax_kernel else scores.softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, vocab=96, dim=64, heads=4, layers=2, context=32, jax_kernel=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, jax_kernel) for _ in range(layers))
        self.norm = RMSNorm(dim, jax_kernel)
        self.head = nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        angles = torch.outer(torch.arange(context).float(), 10000 ** (-torch.arange(half) / half))
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        causal = torch.full((context, context), float("-inf")).triu(1)
        self.register_buffer("mask", causal)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))

    def set_jax_kernels(self, on: bool):
        for m in self.modules():
            if hasattr(m, "jax_kernel"):
                m.jax_kernel = on


def train(model, batches, steps, mode):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def step(tokens, targets):
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    run = torch.compile(step, backend="tpu") if mode == "compile" else step
    losses = []
    with torch_tpu.eager_mode("strict" if mode == "compile" else mode):
        for tokens, targets in batches[:steps]:
            losses.append(run(tokens.to("tpu"), targets.to("tpu")).item())
    return losses


def main(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    batches = [
        (t[:, :-1], t[:, 1:]) for t in (torch.randint(0, 96, (8, 33)) for _ in range(args.steps))
    ]
    with_kernels = Model(jax_kernel=True)
    with_torch_ops = copy.deepcopy(with_kernels)
    with_torch_ops.set_jax_kernels(False)
    a = train(with_kernels.to("tpu"), batches, args.steps, args.mode)
    b = train(with_torch_ops.to("tpu"), batches, args.steps, args.mode)
    print(f"mode: {args.mode}, platform: {torch_tpu.platform()}")
    print("step  loss (JAX kernels)  loss (PyTorch ops)")
    for i, (la, lb) in enumerate(zip(a, b)):
        if i % max(1, args.steps // 10) == 0 or i == args.steps - 1:
            print(f"{i:4d}  {la:18.6f}  {lb:18.6f}")
    diff = max(abs(x - y) for x, y in zip(a, b))
    print(f"largest loss difference over {args.steps} steps: {diff:.2e}")
    if diff > 1e-3:
        raise SystemExit("the two models diverged")


if __name__ == "__main__":
    main(ARGS)
