"""Trains a small GPT from scratch on ``tpu``: a character-level language model of
Python's own standard-library source (read from this machine; nothing is downloaded).

Prints the loss every few steps, tokens per second, validation loss against the untrained
model, a greedy sample, and the backend's compile metrics (the programs compiled in the first
steps are reused for the rest of the run).

    python examples/train_gpt.py [--steps 200] [--bf16]
"""

from __future__ import annotations

import argparse
import inspect
import math
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps (default: 200)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step (default: 16)")
    parser.add_argument(
        "--context", type=int, default=64, help="characters per sequence (default: 64)"
    )
    parser.add_argument(
        "--lr", type=float, default=3e-3, help="peak learning rate, cosine schedule (default: 3e-3)"
    )
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16")
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.nn.functional as F
from torch import nn

import torch_tpu


def corpus() -> str:
    import collections
    import dataclasses
    import functools
    import json

    return "\n".join(inspect.getsource(m) for m in (collections, dataclasses, functools, json))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, width: int = 128, layers: int = 4, heads: int = 4):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2
        for module in self.modules():  # GPT-2's initialisation
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.ln(self.blocks(self.tokens(ids) + self.positions(pos))))


@torch.no_grad()
def generate(model, ids, steps: int, context: int):
    for _ in range(steps):
        logits = model(ids[:, -context:])[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


def main(args: argparse.Namespace) -> None:
    device = torch.device("tpu")
    text = corpus()
    chars = sorted(set(text))
    lookup = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([lookup[ch] for ch in text])
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    print(
        f"platform {torch_tpu.platform()}: {len(text):,} characters, vocabulary {len(chars)}, "
        f"context {args.context}, batch {args.batch}"
    )

    torch.manual_seed(0)
    model = GPT(len(chars), args.context).to(device)
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, fused=True)
    warmup = max(1, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warmup)
            * 0.5
            * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
        ),
    )
    g = torch.Generator().manual_seed(0)

    def batch(source):
        starts = torch.randint(0, len(source) - args.context - 1, (args.batch,), generator=g)
        x = torch.stack([source[s : s + args.context] for s in starts])
        y = torch.stack([source[s + 1 : s + args.context + 1] for s in starts])
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    @torch.no_grad()
    def val_loss():
        model.eval()
        losses = [
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()) for x, y in (batch(val),) * 4
        ]
        model.train()
        return torch.stack(losses).mean().item()

    autocast = torch.autocast("tpu", dtype=torch.bfloat16, enabled=args.bf16)
    initial_val = val_loss()
    torch_tpu.reset_metrics()
    first_loss = None
    start = time.perf_counter()
    # Tokens/s are measured from step 4 on: the first steps compile the programs.
    steady_start, steady_tokens, compiles_after_warmup = None, 0, None
    for step in range(1, args.steps + 1):
        x, y = batch(train)
        with autocast:
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        schedule.step()
        if step == 3:  # compilation done: time the steady state from here
            torch.tpu.synchronize()
            steady_start, compiles_after_warmup = (
                time.perf_counter(),
                torch_tpu.metrics()["compiles"],
            )
        elif steady_start is not None:
            steady_tokens += x.numel()
        if step == 1 or step % 25 == 0 or step == args.steps:
            value = loss.item()
            first_loss = first_loss if first_loss is not None else value
            rate = "(compiling: tokens/s from step 4 on)"
            if steady_tokens:
                rate = f"{steady_tokens / (time.perf_counter() - steady_start):,.0f} tokens/s"
            print(f"step {step:4d}  loss {value:.3f}  lr {schedule.get_last_lr()[0]:.2e}  {rate}")
    torch.tpu.synchronize()
    total = time.perf_counter() - start
    steady_rate = "not measured (fewer than 4 steps)"
    if steady_tokens:
        steady_rate = f"{steady_tokens / (time.perf_counter() - steady_start):,.0f} tokens/s"
    final_val = val_loss()
    metrics = torch_tpu.metrics()

    prompt = torch.tensor([[lookup[ch] for ch in "def __init__(self"]], device=device)
    model.eval()
    sample = generate(model, prompt, 60, args.context)[0].cpu().tolist()
    print("sample:", repr("".join(chars[i] for i in sample)))
    print(
        f"validation loss {initial_val:.3f} (untrained) -> {final_val:.3f}; "
        f"train loss {first_loss:.3f} -> {loss.item():.3f}"
    )
    print(f"{args.steps} steps in {total:.1f} s; steady state {steady_rate}")
    after_warmup = ""
    if compiles_after_warmup is not None:
        after_warmup = f", {metrics['compiles'] - compiles_after_warmup} after step 3"
    print(
        f"compiles: {metrics['compiles']} total{after_warmup}; "
        f"compile time {metrics['compile_seconds']:.1f} s; "
        f"CPU fallbacks: {sum(metrics['fallbacks'].values())}"
    )
    if not final_val < initial_val:
        raise SystemExit("validation loss did not go down")


if __name__ == "__main__":
    main(ARGS)
