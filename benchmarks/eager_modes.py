"""Strict eager vs DeferAndFuse on training steps.

Measures, in one run, steps/s of a training step (forward, backward, AdamW) in
``strict`` and ``defer_and_fuse`` mode for a small transformer (4 layers, width 256,
sequence 128) and the MLP and CNN of the foundation tests, with executions and compiles
per step after warm-up, and prints the ratios. Both modes start from the same weights
and draw the same batches; the final losses are printed side by side. Run:
``.venv/bin/python benchmarks/eager_modes.py [--steps 10] [--batch 8]``.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, vocab=256, width=256, layers=4, heads=4, seq=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        seq = idx.shape[1]
        mask = torch.full((seq, seq), float("-inf"), device=idx.device).triu(1)
        x = self.emb(idx) + self.pos[:seq]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x)).flatten(0, 1)


def mlp():
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10)
    )


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.SiLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


def workloads(batch: int):
    """name -> (model factory, batch factory); batches are drawn from a seeded CPU
    generator so both modes see the same data."""

    def tokens(g):
        idx = torch.randint(0, 256, (batch, 128), generator=g)
        return idx, torch.randint(0, 256, (batch * 128,), generator=g)

    return {
        "transformer": (Transformer, tokens),
        "mlp": (
            mlp,
            lambda g: (torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)),
        ),
        "cnn": (
            cnn,
            lambda g: (
                torch.randn(8, 3, 16, 16, generator=g),
                torch.randint(0, 10, (8,), generator=g),
            ),
        ),
    }


def run(make_model, make_batch, mode: str, steps: int, warmup: int):
    torch.manual_seed(0)
    model = make_model().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [tuple(t.to("tpu") for t in make_batch(g)) for _ in range(warmup + steps)]
    with torch_tpu.eager_mode(mode):

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        for x, y in data[:warmup]:
            step(x, y).item()
        torch.tpu.synchronize()
        before = torch_tpu.metrics()
        start = time.perf_counter()
        for x, y in data[warmup:]:
            loss = step(x, y)
        final = loss.item()  # waits for the last step
        seconds = time.perf_counter() - start
        after = torch_tpu.metrics()
    return {
        "steps_per_s": steps / seconds,
        "executions": (after["executions"] - before["executions"]) / steps,
        "compiles": after["compiles"] - before["compiles"],
        "loss": final,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="transformer batch size")
    parser.add_argument("--only", nargs="*", help="workloads to run (default: all)")
    args = parser.parse_args()

    print(
        f"platform: {torch_tpu.platform()}, precision: {torch_tpu.precision.get_precision().name}"
    )
    print(
        f"{'workload':<12} {'mode':<15} {'steps/s':>9} {'exec/step':>10} {'compiles':>9} {'loss':>10}"
    )
    for name, (make_model, make_batch) in workloads(args.batch).items():
        if args.only and name not in args.only:
            continue
        results = {}
        for mode in ("strict", "defer_and_fuse"):
            r = run(make_model, make_batch, mode, args.steps, args.warmup)
            results[mode] = r
            print(
                f"{name:<12} {mode:<15} {r['steps_per_s']:9.2f} {r['executions']:10.1f}"
                f" {r['compiles']:9d} {r['loss']:10.5f}"
            )
        strict, fused = results["strict"], results["defer_and_fuse"]
        print(
            f"{name:<12} defer_and_fuse/strict: {fused['steps_per_s'] / strict['steps_per_s']:.2f}x"
            f" steps/s, {strict['executions'] / max(fused['executions'], 1e-9):.0f}x fewer"
            " executions per step"
        )


if __name__ == "__main__":
    main()
