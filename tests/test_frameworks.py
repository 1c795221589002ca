"""The ecosystem's frameworks, run unchanged through the examples (optional: each test is
skipped where its framework is not installed; `pip install -r examples/requirements.txt`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"step:\s+(\d+)\s+\S*loss:\s+([0-9.]+)")


def _run(args: list[str], timeout: int) -> str:
    # Locks of their own: this test process may hold its device.
    env = dict(os.environ, TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="frameworks_"))
    env.pop("TORCH_TPU_EAGER_MODE", None)  # the examples choose the mode
    out = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    return out.stdout + out.stderr


def _titan(tmp_path, nproc: int, mode: str) -> tuple[list[float], dict]:
    text = _run(
        [
            "examples/torchtitan/run.py",
            f"--nproc={nproc}",
            f"--mode={mode}",
            "--steps=4",
            f"--workdir={tmp_path}",
            "--",
            "--debug.seed",
            "0",
        ],
        timeout=1800,
    )
    # Each rank logs its steps: rank 0's are the first of each.
    losses = {}
    for step, loss in STEP.findall(re.sub(r"\x1b\[[0-9;]*m", "", text)):
        losses.setdefault(int(step), float(loss))
    summary = json.loads(text.split("torch_tpu: ", 1)[1].splitlines()[0])
    return [losses[s] for s in sorted(losses)], summary


@pytest.mark.parametrize("nproc", [1, 2])
def test_torchtitan_llama3_trains_alike_in_each_mode(tmp_path, nproc):
    pytest.importorskip("torchtitan", reason="TorchTitan is not installed")
    runs = {mode: _titan(tmp_path, nproc, mode) for mode in ("eager", "compile", "defer_and_fuse")}
    eager, _ = runs["eager"]
    assert len(eager) == 4 and eager[-1] < eager[0], eager
    for mode, (losses, summary) in runs.items():
        assert summary["steps"] == 4, (mode, summary)
        assert losses == pytest.approx(eager, abs=2e-3), (mode, losses, eager)


def test_ray_torch_trainer_ddp_over_tpu_dist():
    pytest.importorskip("ray.train", reason="Ray Train is not installed")
    assert "tpu_dist losses match the CPU" in _run(["examples/ray_ddp.py"], timeout=900)
