"""torch.compile(backend="tpu") on the small transformer's training step.

Prints, in one run: steps/s of the step (forward, backward, AdamW) compiled for tpu,
in strict eager on tpu, in PyTorch CPU eager and compiled by Inductor on the CPU, with
the ratios against compiled tpu; then the first compiled step's latency in a fresh
process with a cold and with a warm persistent compilation cache. Run:
``.venv/bin/python benchmarks/compile.py [--steps 20] [--batch 1]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_modes import Transformer

import torch_tpu


def make(device: str, batch: int, capturable: bool):
    torch.manual_seed(0)
    model = Transformer().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (batch, 128), generator=g).to(device)
    y = torch.randint(0, 256, (batch * 128,), generator=g).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def steps_per_s(step, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        step().item()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    return steps / (time.perf_counter() - start)


def first_step(batch: int) -> None:
    """Child process: the first compiled step's latency."""
    step = torch.compile(make("tpu", batch, capturable=True), backend="tpu")
    start = time.perf_counter()
    step().item()
    seconds = time.perf_counter() - start
    print(f"{seconds} {torch_tpu.metrics()['compiles']}")


def first_step_latency(batch: int) -> None:
    """Fresh processes (run before this one opens the device, which one process holds)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        # Both persistent caches: our executables and AOTAutograd's traced graphs.
        env["TORCH_TPU_CACHE_DIR"] = os.path.join(cache, "xla")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "torch")
        latency = {}
        for run in ("cold", "warm"):
            child = subprocess.run(
                [sys.executable, __file__, "--first-step", "--batch", str(batch)],
                env=env,
                capture_output=True,
                text=True,
            )
            if child.returncode:
                sys.exit(f"first-step child failed:\n{child.stderr}")
            seconds, compiles = child.stdout.split()[-2:]
            latency[run] = float(seconds)
            print(f"first compiled step, {run} cache: {latency[run]:6.2f} s ({compiles} compiles)")
    print(f"warm cache first step is {latency['cold'] / latency['warm']:.2f}x faster than cold")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--first-step", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_step:
        first_step(args.batch)
        return

    print(
        f"platform: {torch_tpu.platform()}, precision: {torch_tpu.precision.get_precision().name},"
        f" transformer (4 layers, width 256, sequence 128) batch {args.batch}"
    )
    first_step_latency(args.batch)
    results = {}
    compiled = torch.compile(make("tpu", args.batch, capturable=True), backend="tpu")
    results["compiled tpu"] = steps_per_s(compiled, args.steps, args.warmup)
    with torch_tpu.eager_mode("strict"):
        results["strict eager tpu"] = steps_per_s(
            make("tpu", args.batch, False), args.steps, args.warmup
        )
    results["CPU eager"] = steps_per_s(make("cpu", args.batch, False), args.steps, args.warmup)
    inductor = torch.compile(make("cpu", args.batch, capturable=False))
    results["Inductor CPU"] = steps_per_s(inductor, args.steps, args.warmup)
    base = results["compiled tpu"]
    for name, value in results.items():
        print(f"{name:<18} {value:8.2f} steps/s   compiled tpu / this: {base / value:5.2f}x")


if __name__ == "__main__":
    main()
