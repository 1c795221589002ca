"""Strict eager vs DeferAndFuse vs torch.compile on training steps.

Measures, in one run, steps/s of a training step (forward, backward, AdamW) in
``strict`` and ``defer_and_fuse`` eager mode and compiled whole with
``torch.compile(backend="tpu")`` (``compiled``, in strict eager) for a small transformer
(4 layers, width 256, sequence 128) and the MLP and CNN of the foundation tests, with
executions per step and compiles in the timed rounds, and prints the ratios. Each variant
warms up until a step needs no new program, so the rounds time execution even at small
settings (``--steps 3 --rounds 3 --only mlp`` for a quick check). All start from the same
weights and draw the same batches; the final losses are printed side by side.
``--first-steps`` times instead the first two steps of each variant, each in a fresh
process with empty compilation caches (tpu's and PyTorch's), alternating. Run:
``.venv/bin/python benchmarks/eager_modes.py [--steps 10] [--rounds 5] [--batch 1]
[--first-steps]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per round (default: 10)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds per mode, alternating (default: 5)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed steps per mode, at least; more until a step needs no new program"
        " (default: 3)",
    )
    parser.add_argument("--batch", type=int, default=1, help="transformer batch size (default: 1)")
    parser.add_argument(
        "--only", nargs="*", help="workloads to run: transformer, mlp, cnn (default: all)"
    )
    parser.add_argument(
        "--first-steps",
        action="store_true",
        help="time each variant's first two steps, cold, --rounds times (fresh processes)",
    )
    parser.add_argument("--cold-variant", help=argparse.SUPPRESS)  # one cold run, this process
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.nn.functional as F

import torch_tpu
from models import workloads


VARIANTS = ("strict", "defer_and_fuse", "compiled")


class Trainer:
    """One model and optimizer trained in one variant; all start from the same weights
    and see the same batches."""

    def __init__(self, make_model, make_batch, variant: str, batches: int):
        torch.manual_seed(0)
        self.mode = "strict" if variant == "compiled" else variant
        self.model = make_model().to("tpu")
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        self.data = [tuple(t.to("tpu") for t in make_batch(g)) for _ in range(batches)]
        self.next = 0
        self.train = (
            torch.compile(self._train, backend="tpu") if variant == "compiled" else self._train
        )

    def _train(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def step(self):
        x, y = self.data[self.next % len(self.data)]
        self.next += 1
        return self.train(x, y)

    def timed(self, steps: int):
        """Steps/s, executions and compiles of `steps` steps run back to back."""
        with torch_tpu.eager_mode(self.mode):
            torch.tpu.synchronize()
            before = torch_tpu.metrics()
            start = time.perf_counter()
            for _ in range(steps):
                loss = self.step()
            self.loss = loss.item()  # waits for the last step
            seconds = time.perf_counter() - start
            after = torch_tpu.metrics()
        return (
            steps / seconds,
            (after["executions"] - before["executions"]) / steps,
            after["compiles"] - before["compiles"],
        )


def warm_up(trainers: dict[str, Trainer], steps: int, limit: int = 50) -> int:
    """Runs `steps` steps in every mode, then more until a step of each needs no new
    program (compiled, or loaded from the persistent cache), at most `limit`: the timed
    rounds then time execution, whatever --warmup is. The modes run the same steps, so
    their losses compare. Returns the steps run."""
    for done in range(1, limit + 1):
        misses = torch_tpu.metrics()["cache_misses"]
        for t in trainers.values():
            t.timed(2)  # two steps back to back, as the rounds run them
        if done >= steps and torch_tpu.metrics()["cache_misses"] == misses:
            break
    return done


# (numerator, denominator) of the printed ratios
RATIOS = (("defer_and_fuse", "strict"), ("compiled", "strict"), ("compiled", "defer_and_fuse"))


def compare(make_model, make_batch, steps: int, warmup: int, rounds: int):
    """Rounds of `steps` steps alternate between the variants, so a slow spell of the
    machine hits all; each variant's figure is its median round, each ratio the median
    of the rounds' ratios."""
    trainers = {v: Trainer(make_model, make_batch, v, warmup + steps) for v in VARIANTS}
    warmed = warm_up(trainers, warmup)
    rounds_of = {mode: [] for mode in trainers}
    for _ in range(rounds):
        for mode, t in trainers.items():
            rounds_of[mode].append(t.timed(steps))
    ratios = {(a, b): [x[0] / y[0] for x, y in zip(rounds_of[a], rounds_of[b])] for a, b in RATIOS}
    results = {}
    for mode, t in trainers.items():
        rs = rounds_of[mode]
        results[mode] = {
            "steps_per_s": statistics.median(r[0] for r in rs),
            "executions": statistics.median(r[1] for r in rs),
            "compiles": sum(r[2] for r in rs),
            "loss": t.loss,
        }
    return results, ratios, warmed


def cold_steps(args: argparse.Namespace) -> None:
    """The first two steps of one variant (this process's caches are empty): prints
    their seconds and programs as a JSON line."""
    (name,) = args.only
    make_model, make_batch = workloads(args.batch)[name]
    trainer = Trainer(make_model, make_batch, args.cold_variant, 2)
    steps = []
    for _ in range(2):
        compiles = torch_tpu.metrics()["compiles"]
        start = time.perf_counter()
        with torch_tpu.eager_mode(trainer.mode):
            trainer.step().item()
        steps.append([time.perf_counter() - start, torch_tpu.metrics()["compiles"] - compiles])
    print(json.dumps(steps))


def first_steps(args: argparse.Namespace) -> None:
    """Each variant's first two steps in a fresh process with empty caches, the
    variants alternating in each round; medians of the rounds."""
    names = args.only or list(workloads(args.batch))
    print(f"first two steps, cold (fresh process, empty caches), median of {args.rounds} rounds")
    print(
        f"{'workload':<12} {'variant':<15} {'step 1 s':>9} {'programs':>9} {'step 2 s':>9} {'programs':>9}"
    )
    for name in names:
        runs = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for v in VARIANTS:
                with tempfile.TemporaryDirectory() as cache:
                    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
                    command = [sys.executable, __file__, f"--cold-variant={v}", "--only", name]
                    command.append(f"--batch={args.batch}")
                    out = subprocess.run(
                        command, env=env, capture_output=True, text=True, check=True
                    )
                runs[v].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for v, rs in runs.items():
            (s1, p1), (s2, p2) = (
                [statistics.median(r[k][j] for r in rs) for j in range(2)] for k in range(2)
            )
            print(f"{name:<12} {v:<15} {s1:9.2f} {p1:9.0f} {s2:9.2f} {p2:9.0f}")


def main(args: argparse.Namespace) -> None:
    if args.cold_variant:
        return cold_steps(args)
    if args.first_steps:
        return first_steps(args)
    print(
        f"platform: {torch_tpu.platform()}, precision: {torch_tpu.precision.get_precision().name},"
        f" transformer batch {args.batch}, {args.rounds} alternating rounds of {args.steps} steps"
    )
    print(
        f"{'workload':<12} {'mode':<15} {'steps/s':>9} {'exec/step':>10} {'compiles':>9} {'loss':>10}"
    )
    for name, (make_model, make_batch) in workloads(args.batch).items():
        if args.only and name not in args.only:
            continue
        results, ratios, warmed = compare(
            make_model, make_batch, args.steps, args.warmup, args.rounds
        )
        for mode, r in results.items():
            print(
                f"{name:<12} {mode:<15} {r['steps_per_s']:9.2f} {r['executions']:10.1f}"
                f" {r['compiles']:9d} {r['loss']:10.5f}"
            )
        for (a, b), rs in ratios.items():
            print(
                f"{name:<12} {a}/{b}: {statistics.median(rs):.2f}x steps/s (rounds:"
                f" {' '.join(f'{r:.2f}' for r in rs)}), executions per step"
                f" {results[a]['executions']:.0f} vs {results[b]['executions']:.0f}"
            )
        print(f"{name:<12} after {warmed} warm-up steps")


if __name__ == "__main__":
    main(ARGS)
