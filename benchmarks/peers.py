"""torch_tpu against PyTorch/XLA and torchax on the same training step.

The transformer step of ``eager_modes.py`` (batch 1, sequence 128, AdamW, the same
weights and batches) in torch_tpu's strict and defer_and_fuse eager modes and compiled
whole (``torch.compile(backend="tpu")``); in PyTorch/XLA lazily (``torch_xla.sync()``
after each step) and compiled (``torch.compile(backend="openxla")``); as a torchax step
under ``jax.jit`` (optax's AdamW); and in PyTorch's CPU eager (one thread), plain and
through Dynamo and AOTAutograd alone (``aot_eager``: the tracing that every
torch.compile backend's first step pays). Every XLA variant runs on XLA's CPU backend;
torch_tpu's matmuls run at HIGHEST precision (float32 products, the peers' arithmetic on
the CPU) unless ``--precision`` says otherwise.

Each variant runs in a fresh process with empty compilation caches; the rounds alternate
the variants, so a slow spell of the machine hits all of them. A process times its first
step (and the seconds XLA compiled in it, where the variant counts them: torch_tpu,
PyTorch/XLA) and its second, runs three more, then times ``--steps`` steps;
the figures are medians over the rounds, each ratio the median of the rounds' ratios.
PyTorch/XLA and torchax need their own torch (torch_xla 2.9 requires torch 2.9): install
``benchmarks/requirements-peers.txt`` into a separate virtual environment and pass its
interpreter with ``--peer-python``; without it those variants are left out. Run:
``.venv/bin/python benchmarks/peers.py [--rounds 3] [--steps 20]
[--peer-python /path/to/peers/bin/python]`` (``--steps 3 --rounds 1`` for a quick check).
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

OURS = ("tpu_strict", "tpu_defer_and_fuse", "tpu_compiled")
PEERS = ("xla_lazy", "xla_openxla", "torchax_jit")
# cpu_aot_eager: PyTorch's own tracing of the step (Dynamo, AOTAutograd) with no
# compiler, what any torch.compile backend's first step pays before its own work
VARIANTS = (*OURS, *PEERS, "cpu_eager", "cpu_aot_eager")
WARM_STEPS = 3  # after the first two, before the timed ones

# (numerator, denominator) of the printed steady-state ratios
RATIOS = (
    ("tpu_defer_and_fuse", "tpu_strict"),
    ("tpu_compiled", "tpu_defer_and_fuse"),
    ("tpu_compiled", "xla_openxla"),
    ("tpu_defer_and_fuse", "xla_lazy"),
    ("tpu_compiled", "torchax_jit"),
    ("tpu_defer_and_fuse", "torchax_jit"),
    ("tpu_strict", "cpu_eager"),
    ("tpu_compiled", "cpu_aot_eager"),
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default: 20)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default: 3)")
    parser.add_argument(
        "--peer-python",
        help="interpreter of a virtual environment with benchmarks/requirements-peers.txt",
    )
    parser.add_argument(
        "--precision",
        default="HIGHEST",
        choices=("DEFAULT", "HIGH", "HIGHEST"),
        help="torch_tpu's float32 matmul precision (default: HIGHEST, float32 products as"
        " the peers compute on the CPU; DEFAULT rounds operands to bfloat16 as a TPU does)",
    )
    parser.add_argument("--only", nargs="*", choices=VARIANTS, help="variants to run")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # this process
    return parser.parse_args()


def batches(count: int):
    """The same batches in every process: eager_modes' seeded token factory."""
    import torch

    from models import workloads

    _, make_batch = workloads(1)["transformer"]
    g = torch.Generator().manual_seed(1)
    return [make_batch(g) for _ in range(count)]


def fresh_model():
    import torch

    from models import Transformer

    torch.manual_seed(0)
    return Transformer()


def torch_step(model, device, sync, compile_backend=None):
    """A PyTorch training step on `device`: returns step(x, y) -> loss and the batches moved
    there."""
    import torch
    import torch.nn.functional as F

    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if compile_backend:
        train = torch.compile(train, backend=compile_backend)

    def step(x, y):
        loss = train(x, y)
        sync()
        return loss

    return step, [(x.to(device), y.to(device)) for x, y in batches(8)]


def tpu_variant():
    import torch_tpu  # the eager mode comes from the environment (spawn)

    backend = "tpu" if ARGS.variant == "tpu_compiled" else None
    step, data = torch_step(fresh_model(), "tpu", lambda: None, backend)

    def counters():
        m = torch_tpu.metrics()
        return m["executions"], m["compile_seconds"]

    return step, data, counters


def xla_variant():
    import torch_xla
    import torch_xla.debug.metrics as met

    lazy = ARGS.variant == "xla_lazy"
    step, data = torch_step(
        fresh_model(),
        torch_xla.device(),
        torch_xla.sync if lazy else lambda: None,
        None if lazy else "openxla",
    )

    def counters():
        executed, compiled = met.metric_data("ExecuteTime"), met.metric_data("CompileTime")
        return executed[0] if executed else 0, compiled[1] / 1e9 if compiled else 0.0

    return step, data, counters


def torchax_variant():
    import jax
    import jax.numpy as jnp
    import optax
    import torch
    import torch.nn.functional as F
    from torchax import interop, train

    model = fresh_model()
    weights = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    # torch.optim.AdamW's defaults
    opt = optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)

    def model_fn(weights, buffers, args):
        return torch.func.functional_call(model, weights, args)

    # make_train_step's function takes and returns torch views of jax arrays
    train_step = jax.jit(interop.jax_view(train.make_train_step(model_fn, F.cross_entropy, opt)))
    state = {"weights": weights, "opt": opt.init(weights), "launches": 0}

    def step(x, y):
        loss, state["weights"], state["opt"] = train_step(
            state["weights"], {}, state["opt"], (x,), y
        )
        state["launches"] += 1  # the whole step is one jitted program
        return loss

    data = [(jnp.asarray(x.numpy()), jnp.asarray(y.numpy())) for x, y in batches(8)]
    return step, data, lambda: (state["launches"], None)


def cpu_variant():
    import torch

    torch.set_num_threads(1)
    backend = "aot_eager" if ARGS.variant == "cpu_aot_eager" else None
    step, data = torch_step(fresh_model(), "cpu", lambda: None, backend)
    return step, data, lambda: (0, None)


def run_variant(args: argparse.Namespace) -> dict:
    """One variant in this process: its first two steps, `WARM_STEPS` more, then
    `--steps` timed ones; every variant runs the same steps on the same batches."""
    make = {"tpu": tpu_variant, "xla": xla_variant, "torchax": torchax_variant}
    step, data, counters = make.get(args.variant.split("_")[0], cpu_variant)()
    done = 0

    def timed(steps: int) -> tuple[float, float]:
        nonlocal done
        start = time.perf_counter()
        for _ in range(steps):
            loss = step(*data[done % len(data)])
            done += 1
        loss = loss.item()  # waits for the last step
        return time.perf_counter() - start, loss

    first = timed(1)[0]
    compile_seconds = counters()[1]  # XLA's, where the variant counts it
    second = timed(1)[0]
    timed(WARM_STEPS)
    before = counters()[0]
    elapsed, loss = timed(args.steps)
    return {
        "first": first,
        "first_compile": compile_seconds,
        "second": second,
        "steps_per_s": args.steps / elapsed,
        "programs_per_step": (counters()[0] - before) / args.steps,
        "loss": loss,
    }


def spawn(variant: str, args: argparse.Namespace) -> dict | None:
    python = args.peer_python if variant in PEERS else sys.executable
    with tempfile.TemporaryDirectory() as cache:
        env = dict(
            os.environ,
            TORCH_TPU_CACHE_DIR=cache,
            TORCHINDUCTOR_CACHE_DIR=cache,
            PJRT_DEVICE="CPU",
            JAX_PLATFORMS="cpu",
            TORCH_TPU_PRECISION=args.precision,
            TORCH_TPU_EAGER_MODE="defer_and_fuse" if variant == "tpu_defer_and_fuse" else "strict",
        )
        command = [python, __file__, f"--variant={variant}", f"--steps={args.steps}"]
        out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{variant}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    variants = [v for v in VARIANTS if not args.only or v in args.only]
    if not args.peer_python:
        print("no --peer-python: PyTorch/XLA and torchax are left out", file=sys.stderr)
        variants = [v for v in variants if v not in PEERS]
    runs = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            result = spawn(v, args)
            if result:
                runs[v].append(result)
                print(f"round {r + 1} {v}: {json.dumps(result)}", file=sys.stderr)
    print(
        f"transformer step, batch 1, AdamW, torch_tpu at precision {args.precision}; a fresh"
        f" process each, cold caches; medians of {args.rounds} alternating rounds of"
        f" {args.steps} timed steps"
    )
    print(
        f"{'variant':<20} {'steps/s':>9} {'programs/step':>14} {'step 1 s':>9}"
        f" {'compiling':>9} {'step 2 s':>9} {'loss':>9}"
    )
    for v, rs in runs.items():
        if not rs:
            print(f"{v:<20} {'failed':>9}")
            continue
        med = {
            k: statistics.median(r[k] for r in rs) if rs[0][k] is not None else None for k in rs[0]
        }
        programs = f"{med['programs_per_step']:.1f}" if med["programs_per_step"] else "-"
        compiling = f"{med['first_compile']:.2f}" if med["first_compile"] is not None else "-"
        print(
            f"{v:<20} {med['steps_per_s']:9.2f} {programs:>14} {med['first']:9.2f}"
            f" {compiling:>9} {med['second']:9.2f} {med['loss']:9.5f}"
        )
    for a, b in RATIOS:
        if runs.get(a) and runs.get(b):
            pairs = list(zip(runs[a], runs[b]))
            speed = statistics.median(x["steps_per_s"] / y["steps_per_s"] for x, y in pairs)
            first = statistics.median(x["first"] / y["first"] for x, y in pairs)
            print(f"{a}/{b}: {speed:.2f}x steps/s, {first:.2f}x first-step time")


if __name__ == "__main__":
    ARGS = parse_args()
    main(ARGS)
