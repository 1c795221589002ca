"""torch.compile(backend="tpu") on the small transformer's training step.

Prints, in one run: steps/s of the step (forward, backward, AdamW) compiled for tpu,
in strict eager on tpu, in PyTorch CPU eager and compiled by Inductor on the CPU, with
the ratios against compiled tpu; then the first compiled step's latency in a fresh
process with a cold and with a warm persistent compilation cache. Run:
``.venv/bin/python benchmarks/compile.py [--steps 20] [--batch 1]``.

Every part compiles the step first (the Inductor part and the cold first step take
minutes on a busy machine): a quick run shrinks the model and picks parts, e.g.
``--layers 1 --width 64 --seq 32 --steps 2 --warmup 1 --only compiled strict``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

PARTS = ("first-step", "compiled", "strict", "cpu", "inductor")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per part (default: 20)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed steps before them (default: 3)"
    )
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default: 1)")
    parser.add_argument("--layers", type=int, default=4, help="transformer layers (default: 4)")
    parser.add_argument(
        "--width", type=int, default=256, help="model width, a multiple of 4 (default: 256)"
    )
    parser.add_argument("--seq", type=int, default=128, help="sequence length (default: 128)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="parts to run: first-step (cold and warm cache, fresh processes), compiled"
        " (tpu), strict (tpu eager), cpu (eager), inductor (CPU) (default: all)",
    )
    parser.add_argument("--first-step", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import Transformer

import torch_tpu


def make(device: str, a: argparse.Namespace, capturable: bool):
    torch.manual_seed(0)
    model = Transformer(width=a.width, layers=a.layers, seq=a.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=capturable)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (a.batch, a.seq), generator=g).to(device)
    y = torch.randint(0, 256, (a.batch * a.seq,), generator=g).to(device)

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


def first_step(a: argparse.Namespace) -> None:
    """Child process: the first compiled step's latency."""
    step = torch.compile(make("tpu", a, capturable=True), backend="tpu")
    start = time.perf_counter()
    step().item()
    seconds = time.perf_counter() - start
    print(f"{seconds} {torch_tpu.metrics()['compiles']}")


def first_step_latency(a: argparse.Namespace) -> None:
    """Fresh processes (run before this one opens the device, which one process holds)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        # Both persistent caches: our executables and AOTAutograd's traced graphs.
        env["TORCH_TPU_CACHE_DIR"] = os.path.join(cache, "xla")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "torch")
        latency = {}
        for run in ("cold", "warm"):
            sizes = [f"--{k}={getattr(a, k)}" for k in ("batch", "layers", "width", "seq")]
            child = subprocess.run(
                [sys.executable, __file__, "--first-step", *sizes],
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


def main(a: argparse.Namespace) -> None:
    if a.first_step:
        first_step(a)
        return

    print(
        f"platform: {torch_tpu.platform()}, precision: {torch_tpu.precision.get_precision().name},"
        f" transformer ({a.layers} layers, width {a.width}, sequence {a.seq}) batch {a.batch}"
    )
    if "first-step" in a.only:
        first_step_latency(a)
    runs = {
        "compiled": ("compiled tpu", lambda: torch.compile(make("tpu", a, True), backend="tpu")),
        "strict": ("strict eager tpu", lambda: make("tpu", a, False)),
        "cpu": ("CPU eager", lambda: make("cpu", a, False)),
        "inductor": ("Inductor CPU", lambda: torch.compile(make("cpu", a, False))),
    }
    results = {}
    for part, (name, step) in runs.items():
        if part in a.only:
            mode = torch_tpu.eager_mode("strict") if part == "strict" else contextlib.nullcontext()
            with mode:
                results[name] = steps_per_s(step(), a.steps, a.warmup)
    base = results.get("compiled tpu")
    for name, value in results.items():
        ratio = f"   compiled tpu / this: {base / value:5.2f}x" if base else ""
        print(f"{name:<18} {value:8.2f} steps/s{ratio}")


if __name__ == "__main__":
    main(ARGS)
