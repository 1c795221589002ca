"""tpu_dist's collectives inside device programs against the same collectives staged
through the host (Gloo), on the CPU platform's devices.

    .venv/bin/python benchmarks/collectives.py [--world-size 4] [--rounds 3] [--steps 8]

Two worlds of ``--world-size`` ranks, each a fresh process (tree) per round, the rounds
alternating between them so that a change of the machine's speed hits both:

  program  ranks as threads of one process, each on its own device of a client of that
           many devices: tpu_dist runs each collective inside a device program
  staged   one process per device (torchrun's way on this platform, whose client cannot
           span processes): device -> host, Gloo over TCP, host -> device

Each measures ``dist.all_reduce`` of float32 tensors from 4 KB to 64 MB (the ranks start
each call together; a call ends when its result is on the device), and a compiled training
step of a small transformer whose parameters are sharded over the ranks (DTensor, as
TorchTitan's SimpleFSDP: all-gathers in the forward, reduce-scatters in the backward):
its programs per rank and step, and steps per second. Figures are medians over rounds of
each round's median; bus bandwidth is 2 (n - 1) / n * bytes / time, as nccl-tests define
it; ratios are program's over staged's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=4, help="ranks (default: 4)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per world (default: 3)")
    parser.add_argument(
        "--steps", type=int, default=8, help="timed training steps per round (default: 8)"
    )
    parser.add_argument("--run", choices=["program", "staged"], help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--store", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import Transformer, shard_parameters

SIZES = [4 << (10 + 2 * i) for i in range(8)]  # 4 KB, 16 KB, ..., 64 MB
RESULT = "RESULT "


def calls_for(nbytes: int) -> int:
    return max(3, min(30, (8 << 20) // nbytes))


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    return 2 * (world - 1) / world * nbytes / seconds


def measure(rank: int, world: int, start_together, steps: int) -> dict:
    """This rank's part of a round: all_reduce times by size, then the training step."""
    import torch_tpu

    device = torch.device("tpu", torch.tpu.current_device())
    times = {}
    for nbytes in SIZES:
        t = torch.ones(nbytes // 4, device=device)
        dist.all_reduce(t)  # warm-up: the program (or the connections and buffers)
        torch.tpu.synchronize()
        samples = []
        for _ in range(calls_for(nbytes)):
            start_together()
            start = time.perf_counter()
            dist.all_reduce(t)
            torch.tpu.synchronize()
            samples.append(time.perf_counter() - start)
        times[nbytes] = statistics.median(samples)

    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    model = Transformer(vocab=256, width=64, layers=2, heads=4, seq=32)
    model = shard_parameters(model.to(device), init_device_mesh("tpu", (world,)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    compiled = torch.compile(step, backend="tpu")
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, 256, (2, 32), generator=g).to(device)
    y = torch.randint(0, 256, (2 * 32,), generator=g).to(device)
    for _ in range(2):  # capture, then the steady program
        with _DYNAMO:
            loss = compiled(x, y)
        float(loss)
    start_together()
    before = torch_tpu.metrics()["executions"]
    start = time.perf_counter()
    for _ in range(steps):
        # Compiled already: a call looks its code up and appends the graphs' work, the
        # previous step's program launching (meeting the other ranks) as it does.
        loss = compiled(x, y)
    float(loss)
    seconds = time.perf_counter() - start
    executions = torch_tpu.metrics()["executions"] - before
    return {"times": times, "step_seconds": seconds / steps, "executions": executions}


# Dynamo's frame cache is not safe for threads compiling at once (PyTorch segfaults in
# create_cache_entry): the program world's ranks compile in turns, each call read before
# the next (no rank waits for another inside it).
_DYNAMO = threading.Lock()


def run_program(world: int, steps: int) -> dict:
    from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg

    _install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    store = dist.HashStore()
    barrier = threading.Barrier(world)
    results: list = [None] * world

    def rank_thread(rank: int) -> None:
        torch.tpu.set_device(rank)
        dist.init_process_group("tpu_dist", rank=rank, world_size=world, store=store)
        results[rank] = measure(rank, world, barrier.wait, steps)
        dist.destroy_process_group()

    threads = [threading.Thread(target=rank_thread, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Executions are the process's: every rank's programs.
    out = results[0]
    out["programs_per_step"] = out["executions"] / (world * steps)
    return out


def run_staged(rank: int, world: int, store_path: str, steps: int) -> dict:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    dist.init_process_group(
        "tpu_dist",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    gloo = dist.new_group(backend="gloo")
    out = measure(rank, world, lambda: dist.barrier(group=gloo), steps)
    out["programs_per_step"] = out["executions"] / steps
    dist.destroy_process_group()
    return out


def launch(kind: str, args: argparse.Namespace) -> dict:
    """One round of `kind` in fresh processes; rank 0's figures."""
    env = dict(os.environ, TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="bench_locks_"))
    base = [sys.executable, __file__, "--run", kind, "--world-size", str(args.world_size)]
    base += ["--steps", str(args.steps)]
    if kind == "program":
        env["TORCH_TPU_NUM_DEVICES"] = str(args.world_size)
        procs = [subprocess.Popen(base, env=env, stdout=subprocess.PIPE, text=True)]
    else:
        store = os.path.join(tempfile.mkdtemp(prefix="bench_store_"), "store")
        procs = [
            subprocess.Popen(base + ["--rank", str(r), "--store", store], env=env,
                             stdout=subprocess.PIPE, text=True)
            for r in range(args.world_size)
        ]  # fmt: skip
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"{kind} round failed: {[p.returncode for p in procs]}")
    line = next(x for x in outs[0].splitlines() if x.startswith(RESULT))
    result = json.loads(line[len(RESULT) :])
    result["times"] = {int(k): v for k, v in result["times"].items()}
    return result


def human(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def main(args: argparse.Namespace) -> None:
    if args.run == "program":
        print(RESULT + json.dumps(run_program(args.world_size, args.steps)), flush=True)
        return
    if args.run == "staged":
        result = run_staged(args.rank, args.world_size, args.store, args.steps)
        if args.rank == 0:
            print(RESULT + json.dumps(result), flush=True)
        return
    rounds = {"program": [], "staged": []}
    for r in range(args.rounds):
        for kind in ("program", "staged") if r % 2 == 0 else ("staged", "program"):
            rounds[kind].append(launch(kind, args))
            print(f"round {r + 1}: {kind} done", file=sys.stderr, flush=True)

    def median(kind: str, key) -> float:
        return statistics.median(key(x) for x in rounds[kind])

    world = args.world_size
    print(f"all_reduce float32, {world} ranks, CPU platform; bus bandwidth, GB/s (medians of "
          f"{args.rounds} rounds)")  # fmt: skip
    print(f"{'size':>8} {'staged (Gloo)':>14} {'in programs':>12} {'ratio':>7}")
    for nbytes in SIZES:
        staged = median("staged", lambda x, n=nbytes: x["times"][n])
        program = median("program", lambda x, n=nbytes: x["times"][n])
        staged_bw = bus_bandwidth(nbytes, staged, world) / 1e9
        program_bw = bus_bandwidth(nbytes, program, world) / 1e9
        print(f"{human(nbytes):>8} {staged_bw:14.3f} {program_bw:12.3f} {staged / program:7.2f}")
    print()
    print("compiled sharded training step (DTensor FSDP, small transformer)")
    print(f"{'world':>10} {'programs/step':>14} {'steps/s':>9}")
    for kind in ("staged", "program"):
        steps_per_s = 1 / median(kind, lambda x: x["step_seconds"])
        programs = median(kind, lambda x: x["programs_per_step"])
        print(f"{kind:>10} {programs:14.1f} {steps_per_s:9.2f}")
    ratio = median("staged", lambda x: x["step_seconds"]) / median(
        "program", lambda x: x["step_seconds"]
    )
    print(f"steps/s, in programs over staged: {ratio:.2f}x")


if __name__ == "__main__":
    main(ARGS)
