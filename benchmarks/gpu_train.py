"""A GPT training step on tpu against PyTorch's own backend on the same machine.

On a GPU machine (the tpu device on the cuda platform) the reference is PyTorch's CUDA
backend, eager and with Inductor; elsewhere (the CPU platform) it is PyTorch on the CPU,
with smaller sizes. Each variant runs in its own process (a tpu device belongs to one
process, and each first step is then a cold one), in rounds that alternate the variants;
the table gives medians and the ratios against the reference measured in the same run:

  bf16 model   ref eager, ref Inductor | tpu strict, defer_and_fuse, compiled (vs Inductor)
  f32 model    ref eager with TF32 off and on | tpu defer_and_fuse and compiled under the
               DEFAULT precision (bf16 products, f32 sums: a TPU's arithmetic)
  overhead     host time of one cache-hit op (x.add_(1.0) on 16 floats), tpu vs ref eager

Per variant: tokens/s, MFU (6 * params * tokens plus causal attention FLOPs, against
--peak TFLOP/s, 790: an H200's dense bf16 rate measured on random data), the host's share
of a step (time to issue a step without waiting, over the step's wall time: near 1 means
the host is the bottleneck), the first step's time (compiles included) and the loss.

    python benchmarks/gpu_train.py [--rounds N] [--variants a,b,...] [--budget SECONDS]
    python benchmarks/gpu_train.py --variant tpu-compile   # one variant, one RESULT line

`--xla-dump DIR` makes the tpu variants write XLA's optimised programs there (fusions,
the kernels chosen for dots and attention).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

GPU_SIZES = dict(layers=6, width=1024, heads=16, seq=1024, batch=8, vocab=32768, steps=10)
CPU_SIZES = dict(layers=2, width=128, heads=4, seq=64, batch=2, vocab=512, steps=5)
SIZE_HELP = dict(
    layers="transformer layers",
    width="model width",
    heads="attention heads",
    seq="sequence length",
    batch="sequences per step",
    vocab="vocabulary size",
    steps="timed steps per variant",
)


def parse_args() -> argparse.Namespace:
    """Sizes and rounds left unset get their defaults once torch says whether a GPU is
    there (see main)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", help="run one variant in this process (prints a RESULT line)")
    p.add_argument(
        "--variants",
        help=f"comma-separated subset (default: all): {', '.join(TRAIN_VARIANTS + OVERHEAD_VARIANTS)}",
    )
    p.add_argument(
        "--rounds", type=int, help="rounds over the variants (default: 1 on a GPU, 3 elsewhere)"
    )
    p.add_argument(
        "--budget", type=float, default=3600, help="seconds for the whole run (default: 3600)"
    )
    for key, text in SIZE_HELP.items():
        p.add_argument(
            f"--{key}",
            type=int,
            help=f"{text} (default: {GPU_SIZES[key]} on a GPU, {CPU_SIZES[key]} elsewhere)",
        )
    p.add_argument(
        "--warmup", type=int, default=3, help="untimed steps, the first one included (default: 3)"
    )
    p.add_argument(
        "--peak",
        type=float,
        default=790,
        help="TFLOP/s that MFU is measured against (default: 790)",
    )
    p.add_argument("--xla-dump", help="directory for XLA's optimised programs (tpu variants)")
    return p.parse_args()


TRAIN_VARIANTS = [
    "ref-eager",
    "ref-inductor",
    "tpu-strict",
    "tpu-defer",
    "tpu-compile",
    "f32-ref-eager",
    "f32-ref-tf32",
    "f32-tpu-defer",
    "f32-tpu-compile",
]
OVERHEAD_VARIANTS = ["overhead-ref", "overhead-tpu"]
# What each variant is compared with (same model dtype, measured in the same run).
BASELINE = {
    "ref-eager": "ref-inductor",
    "tpu-strict": "ref-eager",
    "tpu-defer": "ref-inductor",
    "tpu-compile": "ref-inductor",
    "f32-ref-tf32": "f32-ref-eager",
    "f32-tpu-defer": "f32-ref-eager",
    "f32-tpu-compile": "f32-ref-eager",
    "overhead-tpu": "overhead-ref",
}

# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, width: int, layers: int, heads: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied embedding
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.blocks(self.tok(ids) + self.pos(pos))
        return self.head(self.ln(x))


def reference_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def flops_per_step(a: argparse.Namespace, params: int) -> float:
    tokens = a.batch * a.seq
    # QK^T and PV: 2 products of 2*seq*width FLOPs per token and layer, x3 for backward,
    # half of them under the causal mask.
    attention = 3 * 2 * 2 * a.layers * a.seq * a.width * tokens // 2
    return 6 * params * tokens + attention


def setup_device(variant: str) -> str:
    """Selects the device, eager mode and numerics of `variant`; returns the device."""
    if "tpu" not in variant:
        device = reference_device()
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = variant.endswith("tf32")
            torch.backends.cudnn.allow_tf32 = variant.endswith("tf32")
        return device
    import torch_tpu

    mode = "defer_and_fuse" if variant.endswith("defer") else "strict"
    torch_tpu.set_eager_mode(mode)
    torch.tpu.set_precision(torch.tpu.Precision.DEFAULT)
    return "tpu"


def synchronize(device: str) -> None:
    {"cuda": torch.cuda.synchronize, "tpu": lambda: torch.tpu.synchronize()}.get(
        device, lambda: None
    )()


def train(a: argparse.Namespace, variant: str) -> dict:
    device = setup_device(variant)
    dtype = torch.float32 if variant.startswith("f32") else torch.bfloat16
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.width, a.layers, a.heads).to(device=device, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    compiled = variant.endswith(("inductor", "compile"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=compiled, foreach=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    target = torch.randint(0, a.vocab, (a.batch * a.seq,), generator=g).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(ids).flatten(0, 1).float(), target)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="inductor" if variant.endswith("inductor") else "tpu")
    began = time.perf_counter()
    first_loss = step().item()
    first_step = time.perf_counter() - began
    for _ in range(a.warmup - 1):
        step()
    synchronize(device)
    issue, began = 0.0, time.perf_counter()
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step()
        issue += time.perf_counter() - t
    last_loss = loss.item()
    synchronize(device)
    step_s = (time.perf_counter() - began) / a.steps
    result = dict(
        params_m=params / 1e6,
        step_ms=step_s * 1e3,
        tokens_per_s=a.batch * a.seq / step_s,
        mfu=flops_per_step(a, params) / step_s / (a.peak * 1e12),
        host_share=issue / a.steps / step_s,
        first_step_s=first_step,
        first_loss=first_loss,
        last_loss=last_loss,
    )
    if device == "tpu":
        import torch_tpu

        m = torch_tpu.metrics()
        result.update(compiles=m["compiles"], fallbacks=sum(m["fallbacks"].values()))
    return result


def overhead(a: argparse.Namespace, variant: str) -> dict:
    device = "tpu" if variant.endswith("tpu") else reference_device()
    if device == "tpu":
        setup_device("tpu")
    x = torch.zeros(16, device=device)
    for _ in range(100):
        x.add_(1.0)
    synchronize(device)
    n = 5000
    began = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    synchronize(device)
    us = (time.perf_counter() - began) / n * 1e6
    assert x.cpu()[0].item() == 5100.0, "wrong result"
    return dict(us_per_op=us)


def run_variant(a: argparse.Namespace) -> None:
    fn = overhead if a.variant.startswith("overhead") else train
    print("RESULT " + json.dumps(dict(variant=a.variant, **fn(a, a.variant))), flush=True)


def child_args(a: argparse.Namespace, variant: str) -> list[str]:
    keys = ("layers", "width", "heads", "seq", "batch", "vocab", "steps", "warmup", "peak")
    return [sys.executable, __file__, "--variant", variant] + [
        f"--{k}={getattr(a, k)}" for k in keys
    ]


def drive(a: argparse.Namespace) -> None:
    variants = a.variants.split(",") if a.variants else TRAIN_VARIANTS + OVERHEAD_VARIANTS
    if reference_device() != "cuda":  # TF32 is a GPU mode
        variants = [v for v in variants if not v.endswith("tf32")]
    env = dict(os.environ)
    if a.xla_dump:
        env["XLA_FLAGS"] = f"--xla_dump_to={a.xla_dump} --xla_dump_hlo_as_text"
    print(
        f"reference: PyTorch {torch.__version__} on {reference_device()}; sizes: "
        + " ".join(
            f"{k}={getattr(a, k)}" for k in ("layers", "width", "heads", "seq", "batch", "vocab")
        )
    )
    deadline = time.monotonic() + a.budget
    results: dict[str, list[dict]] = {v: [] for v in variants}
    for round_ in range(a.rounds):
        for v in variants:
            left = deadline - time.monotonic()
            if left < 30:
                print(f"skipped {v} in round {round_ + 1}: budget spent", flush=True)
                continue
            try:
                out = subprocess.run(
                    child_args(a, v), capture_output=True, text=True, env=env, timeout=left
                )
            except subprocess.TimeoutExpired:
                print(f"{v}: timed out", flush=True)
                continue
            lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            if out.returncode or not lines:
                tail = (out.stdout + out.stderr).strip().splitlines()[-6:]
                print(f"{v}: failed (rc={out.returncode})\n    " + "\n    ".join(tail), flush=True)
                continue
            results[v].append(json.loads(lines[-1][7:]))
            print(lines[-1], flush=True)
    report(results)


def report(results: dict[str, list[dict]]) -> None:
    def med(v: str, key: str) -> float | None:
        values = [r[key] for r in results.get(v, []) if key in r]
        return statistics.median(values) if values else None

    print(
        "\nvariant            tokens/s   step ms   MFU   host share  first step   loss      ratio"
    )
    for v, rs in results.items():
        if not rs or v.startswith("overhead"):
            continue
        base = BASELINE.get(v)
        ratio = ""
        if base and med(base, "tokens_per_s"):
            ratio = f"{med(v, 'tokens_per_s') / med(base, 'tokens_per_s'):.2f}x {base}"
        print(
            f"{v:17s} {med(v, 'tokens_per_s'):10.0f} {med(v, 'step_ms'):9.1f} "
            f"{med(v, 'mfu') * 100:5.1f}% {med(v, 'host_share'):8.2f} "
            f"{rs[0]['first_step_s']:9.1f} s  {med(v, 'last_loss'):.4f}  {ratio}"
        )
    ref, tpu = med("overhead-ref", "us_per_op"), med("overhead-tpu", "us_per_op")
    if ref and tpu:
        print(f"\nper-op host overhead: tpu {tpu:.2f} us, ref {ref:.2f} us: {tpu / ref:.2f}x")


def main(a: argparse.Namespace) -> None:
    cpu = reference_device() != "cuda"
    defaults = dict(CPU_SIZES if cpu else GPU_SIZES, rounds=3 if cpu else 1)
    for key, value in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    run_variant(a) if a.variant else drive(a)


if __name__ == "__main__":
    main(ARGS)
