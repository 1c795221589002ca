"""Ranks as threads of one process, each on its own device: where tpu_dist's collectives
run inside device programs on this machine (the CPU platform's devices of one client).

``run_world(scenario, world_size)`` starts ``python thread_world.py SCENARIO ARGS`` with
``TORCH_TPU_NUM_DEVICES=world_size`` and a hard deadline (a rank stuck in a rendezvous
would otherwise hang the test session) and returns what it reported. In that process,
``ranks(world_size, fn)`` runs ``fn(rank)`` in one thread per rank, each with PyTorch's
thread-local world (``_install_threaded_pg``), a shared ``HashStore``, its device set
with ``torch.tpu.set_device(rank)`` and ``init_process_group("tpu_dist", ...)``.
Scenarios live in thread_world_checks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

RESULT_PREFIX = "RESULT "


@dataclass
class WorldOutcome:
    returncode: int | None  # None: killed at the deadline
    result: dict | None
    log: str


def run_world(
    scenario: str,
    world_size: int,
    *,
    timeout: float = 300.0,
    args: dict | None = None,
    env: dict[str, str] | None = None,
) -> WorldOutcome:
    """Runs a scenario in a fresh process of ``world_size`` devices; kills it at ``timeout``."""
    command = [sys.executable, str(Path(__file__)), scenario, json.dumps(args or {})]
    run_env = dict(
        os.environ, TORCH_TPU_NUM_DEVICES=str(world_size), PYTHONUNBUFFERED="1", **(env or {})
    )
    # Devices of its own: the test process may hold its device 0 already.
    run_env["TORCH_TPU_LOCK_DIR"] = tempfile.mkdtemp(prefix="thread_world_locks_")
    # The scenarios choose their eager modes themselves (a test tier's mode is not theirs).
    for name in ("TORCH_TPU_EAGER_MODE", "TORCH_TPU_DEFER_AND_FUSE", "TPU_LAUNCH_BLOCKING"):
        run_env.pop(name, None)
    try:
        out = subprocess.run(
            command, env=run_env, capture_output=True, text=True, timeout=timeout, check=False
        )
        returncode, log = out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        returncode = None
        log = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(
            errors="replace"
        )
    result = None
    for line in log.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
    return WorldOutcome(returncode, result, log)


def check_world(outcome: WorldOutcome) -> dict:
    """Asserts the scenario finished and no rank reported a failed check."""
    assert outcome.returncode is not None, "killed at the deadline\n" + outcome.log[-4000:]
    assert outcome.returncode == 0 and outcome.result is not None, (
        f"exited with {outcome.returncode}\n" + outcome.log[-4000:]
    )
    failures = outcome.result.get("failures", [])
    assert not failures, f"{len(failures)} failed checks:\n  " + "\n  ".join(failures[:60])
    return outcome.result


# ---------------------------------------------------------------- in the world's process


def ranks(world_size: int, fn, *, timeout: timedelta = timedelta(seconds=60), join=300.0):
    """Runs ``fn(rank)`` as each rank of a fresh tpu_dist world of threads; returns the
    values, or raises the first rank's exception (with every rank's traceback)."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg

    _install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    store = dist.HashStore()
    results: list = [None] * world_size
    errors: list = [None] * world_size

    def body(rank: int) -> None:
        try:
            torch.tpu.set_device(rank)
            dist.init_process_group(
                "tpu_dist", rank=rank, world_size=world_size, store=store, timeout=timeout
            )
            try:
                results[rank] = fn(rank)
            finally:
                dist.destroy_process_group()
        except BaseException as e:
            errors[rank] = (e, traceback.format_exc())

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        raise TimeoutError(f"ranks {stuck} did not finish within {join} s")
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        first = failed[0][1][0]
        raise RuntimeError("\n".join(f"rank {r}: {tb}" for r, (_, tb) in failed)) from first
    return results


def main() -> None:
    import thread_world_checks

    scenario, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        result = getattr(thread_world_checks, scenario)(**args)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    # Rank threads that failed may still be parked in the plugin: leave at once.
    os._exit(0)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
