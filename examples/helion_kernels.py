"""An MLP whose RMSNorm and softmax-weighted mixing are Helion kernels, trained on ``tpu``
beside the same model in PyTorch ops on the CPU: same weights, same batches, losses side
by side.

The kernels are ordinary ``@helion.kernel`` functions with Helion's Pallas backend
(``backend="pallas"``); on tpu tensors they run inside torch_tpu's programs (in Pallas's
HLO interpreter on the CPU platform, compiled on TPU). Helion kernels have no autograd:
``RMSNormFunction`` runs a Helion forward and a Helion backward; ``SoftmaxFunction`` a
Helion forward and its gradient in PyTorch ops.

    python examples/helion_kernels.py [--steps 20] [--mode defer_and_fuse]
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
        choices=["strict", "defer_and_fuse"],
        help="eager mode (default: defer_and_fuse)",
    )
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import helion
import helion.language as hl
import torch
from torch import nn

import torch_tpu

EPS = 1e-5


@helion.kernel(backend="pallas", autotune_effort="none")
def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x * rsqrt(mean(x^2) + EPS) * weight, and the rsqrt per row (for the backward)."""
    m, _n = x.size()
    out = torch.empty_like(x)
    inv_rms = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        x_tile = x[tile_m, :].to(torch.float32)
        r = torch.rsqrt(torch.mean(x_tile * x_tile, dim=-1, keepdim=True) + EPS)
        out[tile_m, :] = (x_tile * r * weight[:].to(torch.float32)).to(out.dtype)
        inv_rms[tile_m, :] = r
    return out, inv_rms


@helion.kernel(backend="pallas", autotune_effort="none")
def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of x and weight: rows each in a tile; weight's summed over one
    partial sum a tile."""
    m, n = x.size()
    block = hl.register_block_size(m)
    grad_x = torch.empty_like(x)
    partial_w = torch.empty([helion.cdiv(m, block), n], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m, block_size=block):
        x_t = x[tile_m, :].to(torch.float32)
        g_t = grad[tile_m, :].to(torch.float32)
        r_t = inv_rms[tile_m, :]
        gw = g_t * weight[None, :].to(torch.float32)
        dot = torch.mean(gw * x_t, dim=-1, keepdim=True)
        grad_x[tile_m, :] = (gw * r_t - x_t * r_t * r_t * r_t * dot).to(x.dtype)
        partial_w[tile_m.id, :] = torch.sum(g_t * x_t * r_t, dim=0)
    return grad_x, partial_w.sum(0).to(weight.dtype)


def rms_norm_kernel(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return rms_norm_forward(x, weight)[0]


@helion.kernel(backend="pallas", autotune_effort="none")
def softmax_kernel(x: torch.Tensor) -> torch.Tensor:
    n, _m = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        out[tile_n, :] = torch.nn.functional.softmax(x[tile_n, :], dim=1)
    return out


def rms_norm_reference(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


class RMSNormFunction(torch.autograd.Function):
    """Helion kernels forward and backward."""

    @staticmethod
    def forward(ctx, x, weight):
        out, inv_rms = rms_norm_forward(x, weight)
        ctx.save_for_backward(x, weight, inv_rms)
        return out

    @staticmethod
    def backward(ctx, grad):
        return rms_norm_backward(grad.contiguous(), *ctx.saved_tensors)


class SoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = softmax_kernel(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(-1, keepdim=True))


class Block(nn.Module):
    """x + W2 (softmax(W1 rmsnorm(x)) * W1 rmsnorm(x)): kernels on tpu, ops on the CPU."""

    def __init__(self, width: int, helion_kernels: bool):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(width))
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)
        self.helion_kernels = helion_kernels

    def forward(self, x):
        if self.helion_kernels:
            h = self.up(RMSNormFunction.apply(x, self.norm))
            return x + self.down(SoftmaxFunction.apply(h) * h)
        h = self.up(rms_norm_reference(x, self.norm))
        return x + self.down(h.softmax(-1) * h)


def model(helion_kernels: bool) -> nn.Module:
    torch.manual_seed(0)
    blocks = [Block(64, helion_kernels) for _ in range(2)]
    return nn.Sequential(*blocks, nn.Linear(64, 8))


def main() -> None:
    args = ARGS
    reference, on_tpu = model(False), model(True).to("tpu")
    on_tpu.load_state_dict(copy.deepcopy(reference.state_dict()))
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (reference, on_tpu)]
    g = torch.Generator().manual_seed(1)
    print(f"{'step':>4} {'cpu (ops)':>14} {'tpu (Helion)':>14}")
    worst = 0.0
    with torch_tpu.eager_mode(args.mode):
        for step in range(args.steps):
            x, y = torch.randn(32, 64, generator=g), torch.randint(0, 8, (32,), generator=g)
            losses = []
            for m, opt, device in ((reference, opts[0], "cpu"), (on_tpu, opts[1], "tpu")):
                loss = nn.functional.cross_entropy(m(x.to(device)), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            worst = max(worst, abs(losses[0] - losses[1]))
            print(f"{step:>4} {losses[0]:>14.6f} {losses[1]:>14.6f}")
    print(f"largest loss difference over {args.steps} steps: {worst:.2e}")


if __name__ == "__main__":
    main()
