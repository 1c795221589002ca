"""A training loop over batches of varying sequence length on tpu: the sequence dimension
marked with its bound (torch_tpu.mark_dynamic: one program per op for every length), eager
and under torch.compile, against the same loop padded by the user to the bound (a key mask in
attention, a mask on the loss), and against the plain loop (each length its own programs), in
the same run.

Each variant trains a small attention model (embedding, two blocks of linear layers and
attention, batch 4) with AdamW on the same lengths (random in [8, 64]) for warm-up steps,
then is timed over `--steps` steps in alternating rounds (median of the rounds); programs
compiled during the timed steps are counted. Run:
``.venv/bin/python benchmarks/variable_length.py [--steps 20] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round (default: 20)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default: 3)")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up steps (default: 30)")
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.nn as nn

import torch_tpu

BOUND, BATCH, WIDTH, VOCAB = 64, 4, 64, 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH)
        )
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, h, key_mask=None):
        q, k, v = self.qkv(self.norm(h)).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / WIDTH**0.5
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))
        h = h + self.out(scores.softmax(-1) @ v)
        return h + self.mlp(h)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(WIDTH, WIDTH)

    def forward(self, ids, key_mask=None):
        h = self.emb(ids)
        for block in self.blocks:
            h = block(h, key_mask)
        return self.head(h)


def batches(count: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(count):
        n = int(torch.randint(8, BOUND + 1, (), generator=gen))
        ids = torch.randint(0, VOCAB, (BATCH, n), generator=gen)
        yield ids, torch.randn(BATCH, n, WIDTH, generator=gen)


def step_bounded(model, opt, ids, target):
    ids, target = ids.to("tpu"), target.to("tpu")
    torch_tpu.mark_dynamic(ids, 1, 1, BOUND)
    torch_tpu.mark_dynamic(target, 1, 1, BOUND)
    loss = ((model(ids) - target) ** 2).sum() / ids.numel()
    return loss


def step_plain(model, opt, ids, target):
    return ((model(ids.to("tpu")) - target.to("tpu")) ** 2).sum() / ids.numel()


def step_padded(model, opt, ids, target):
    n = ids.shape[1]
    padded_ids = torch.zeros(BATCH, BOUND, dtype=ids.dtype)
    padded_ids[:, :n] = ids
    padded_target = torch.zeros(BATCH, BOUND, WIDTH)
    padded_target[:, :n] = target
    mask = torch.zeros(BATCH, BOUND, dtype=torch.bool)
    mask[:, :n] = True
    mask = mask.to("tpu")
    out = model(padded_ids.to("tpu"), key_mask=mask)
    return ((out - padded_target.to("tpu")) ** 2 * mask[..., None]).sum() / ids.numel()


VARIANTS = {
    "bounded": step_bounded,
    "compiled": step_bounded,  # the model under torch.compile(backend="tpu")
    "padded": step_padded,
    "plain": step_plain,
}


def run(name: str, model, opt, data) -> tuple[float, int]:
    step = VARIANTS[name]
    metrics = torch_tpu.metrics()
    before = metrics["compiles"] + metrics["persistent_cache_hits"]
    start = time.perf_counter()
    for ids, target in data:
        opt.zero_grad()
        loss = step(model, opt, ids, target)
        loss.backward()
        opt.step()
    loss.item()
    seconds = time.perf_counter() - start
    metrics = torch_tpu.metrics()
    return len(data) / seconds, metrics["compiles"] + metrics["persistent_cache_hits"] - before


def main(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    models = {name: Model().to("tpu") for name in VARIANTS}
    for m in list(models.values())[1:]:
        m.load_state_dict(next(iter(models.values())).state_dict())
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-3) for name, m in models.items()}
    models["compiled"] = torch.compile(models["compiled"], backend="tpu")
    warm = list(batches(args.warmup, seed=1))
    for name in VARIANTS:
        run(name, models[name], opts[name], warm)
    rates = {name: [] for name in VARIANTS}
    programs = dict.fromkeys(VARIANTS, 0)
    for r in range(args.rounds):
        data = list(batches(args.steps, seed=100 + r))  # the same lengths for every variant
        for name in VARIANTS:
            rate, made = run(name, models[name], opts[name], data)
            rates[name].append(rate)
            programs[name] += made
    print(
        f"variable-length training ({BATCH} x [8, {BOUND}] tokens, AdamW), "
        f"{torch_tpu._C._platform()} platform, eager mode {torch_tpu.eager.get_eager_mode().value}:"
    )
    base = statistics.median(rates["padded"])
    for name in VARIANTS:
        rate = statistics.median(rates[name])
        print(
            f"  {name:8} {rate:6.2f} steps/s ({rate / base:.2f}x padded to the bound),"
            f" {programs[name]} programs compiled in {args.rounds * args.steps} timed steps"
        )


if __name__ == "__main__":
    main(ARGS)
