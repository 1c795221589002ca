"""all_reduce bus bandwidth of tpu_dist on tpu tensors against Gloo on CPU tensors.

    .venv/bin/python benchmarks/collectives.py [--world-size 4] [--rounds 3]

Starts one process per device (the CPU platform's devices, as torchrun would) and
in each measures ``dist.all_reduce`` of float32 tensors from 4 KB to 64 MB: on tpu
tensors through the default ``tpu_dist`` group (device -> host, Gloo, host -> device)
and on CPU tensors through a plain Gloo group of the same processes. The two
alternate call by call, so a change of the machine's speed hits both; each figure
is the median of its timed calls. Bus bandwidth is 2 (n - 1) / n * bytes / time, as
nccl-tests define it; the ratio is tpu_dist's over Gloo's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--world-size", type=int, default=4, help="processes, one device each (default: 4)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of timed calls per size; a round is 30 calls at 4 KB down to 2 at 64 MB"
        " (default: 3)",
    )
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4 << (10 + 2 * i) for i in range(8)]  # 4 KB, 16 KB, ..., 64 MB


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    return 2 * (world - 1) / world * nbytes / seconds


def timed_call(tensor: torch.Tensor, group) -> float:
    dist.barrier(group=group)
    start = time.perf_counter()
    dist.all_reduce(tensor, group=group)  # synchronous: the result is in `tensor`
    return time.perf_counter() - start


def calls_for(nbytes: int) -> int:
    return max(2, min(30, (8 << 20) // nbytes))


def worker(rank: int, world: int, store_path: str, rounds: int, results) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import torch_tpu  # noqa: F401  (registers tpu_dist; autoload does too)

    dist.init_process_group(
        "tpu_dist", init_method=f"file://{store_path}", rank=rank, world_size=world
    )
    gloo = dist.new_group(backend="gloo")
    rows = []
    for nbytes in SIZES:
        numel = nbytes // 4
        host = torch.ones(numel)
        device = torch.ones(numel, device="tpu")
        timed_call(host, gloo)  # warm-up: connections, buffers
        timed_call(device, None)
        gloo_times, tpu_times = [], []
        for _ in range(rounds * calls_for(nbytes)):  # call by call, so drift hits both
            gloo_times.append(timed_call(host, gloo))
            tpu_times.append(timed_call(device, None))
        rows.append((nbytes, statistics.median(gloo_times), statistics.median(tpu_times)))
    if rank == 0:
        results.put(rows)
    dist.destroy_process_group()


def human(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("TORCH_TPU_LOCK_DIR", tempfile.mkdtemp(prefix="bench_locks_"))
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    store_path = os.path.join(tempfile.mkdtemp(prefix="bench_store_"), "store")
    mp.start_processes(
        worker,
        args=(args.world_size, store_path, args.rounds, results),
        nprocs=args.world_size,
        start_method="spawn",
    )
    rows = results.get()
    world = args.world_size
    print(f"all_reduce float32, world size {world}, bus bandwidth (median of calls)")
    print(f"{'size':>8} {'gloo cpu GB/s':>14} {'tpu_dist GB/s':>14} {'ratio':>7}")
    for nbytes, gloo_s, tpu_s in rows:
        gloo_bw = bus_bandwidth(nbytes, gloo_s, world) / 1e9
        tpu_bw = bus_bandwidth(nbytes, tpu_s, world) / 1e9
        print(f"{human(nbytes):>8} {gloo_bw:14.3f} {tpu_bw:14.3f} {tpu_bw / gloo_bw:7.2f}")
    nbytes, gloo_s, tpu_s = rows[-1]  # the same bytes: the ratio of times is the ratio
    print(
        f"at {human(nbytes)}, tpu_dist on tpu tensors reaches {gloo_s / tpu_s:.2f}x the bus"
        " bandwidth of Gloo on CPU tensors (it adds the copies device -> host -> device)"
    )


if __name__ == "__main__":
    main(ARGS)
