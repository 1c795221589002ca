"""Starts a torchrun-like group of worker processes for the distributed tests.

Like torchrun's agent, the launcher hosts the TCPStore itself (on a port the kernel
picks) and tells the workers to join it as clients (``TORCHELASTIC_USE_AGENT_STORE``),
so concurrent test sessions never race for a port. Each group gets its own device
lock directory, and every process is killed when the group overruns its time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

WORKER = Path(__file__).with_name("dist_worker.py")
RESULT_PREFIX = "RESULT "


@dataclass
class RankOutcome:
    returncode: int | None  # None: killed at the deadline
    result: dict | None
    log: str


def run_group(
    scenario: str,
    world_size: int,
    *,
    timeout: float = 120.0,
    args: dict | None = None,
    env: dict[str, str] | None = None,
) -> list[RankOutcome]:
    """Runs ``dist_worker.py scenario`` as ranks 0..world_size-1 and collects their results."""
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timedelta(seconds=timeout), wait_for_workers=False
    )
    logs = tempfile.mkdtemp(prefix=f"dist_{scenario}_")
    base_env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(store.port),
        TORCHELASTIC_USE_AGENT_STORE="True",
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        TORCH_TPU_LOCK_DIR=os.path.join(logs, "locks"),
        PYTHONUNBUFFERED="1",
        **(env or {}),
    )
    procs = []
    for rank in range(world_size):
        log = open(os.path.join(logs, f"rank{rank}.log"), "w+")
        rank_env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(rank))
        command = [sys.executable, str(WORKER), scenario, json.dumps(args or {})]
        procs.append((subprocess.Popen(command, env=rank_env, stdout=log, stderr=log), log))
    deadline = time.monotonic() + timeout
    outcomes = []
    for proc, _log in procs:
        try:
            returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            returncode = None
        outcomes.append(returncode)
    for proc, _ in procs:  # whatever overran
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    results = []
    for (_proc, log), returncode in zip(procs, outcomes):
        log.seek(0)
        text = log.read()
        log.close()
        result = None
        for line in text.splitlines():
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX) :])
        results.append(RankOutcome(returncode, result, text))
    del store
    return results


def check_group(outcomes: list[RankOutcome]) -> list[dict]:
    """Asserts every rank finished and reported no failed check; returns their results."""
    problems = []
    for rank, outcome in enumerate(outcomes):
        if outcome.returncode is None:
            problems.append(f"rank {rank} was killed at the deadline\n{outcome.log[-3000:]}")
        elif outcome.returncode != 0 or outcome.result is None:
            problems.append(f"rank {rank} exited with {outcome.returncode}\n{outcome.log[-3000:]}")
        elif outcome.result.get("failures"):
            failures = "\n  ".join(outcome.result["failures"])
            problems.append(
                f"rank {rank}: {len(outcome.result['failures'])} failed checks\n  {failures}"
            )
    assert not problems, "\n".join(problems)
    return [o.result for o in outcomes]
