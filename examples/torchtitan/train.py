"""`python -m torchtitan.train`, with the one call TorchTitan 0.3.0 makes that torch 2.13 lacks,
and a per-step record of torch_tpu's counters when TORCH_TPU_STEP_REPORT names a file.

TorchTitan lowers its process groups' timeout after the first step with
`torch.distributed.set_timeout`, a function of PyTorch builds newer than 2.13; 2.13 has the
same operation as `_set_pg_timeout` (which tpu_dist honours, as Gloo and NCCL do). This is a
gap between TorchTitan and this torch, on every device: nothing here is about tpu.
"""

import json
import os
import time

import torch
import torch.distributed
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torchtitan.train import main

import torch_tpu

if not hasattr(torch.distributed, "set_timeout"):
    torch.distributed.set_timeout = torch.distributed.distributed_c10d._set_pg_timeout


def record_steps(path: str) -> None:
    """Writes, at the end of each optimizer step (PyTorch's global step hooks; TorchTitan's
    optimizer container steps the optimizers inside it), the seconds since the previous one
    (the first: since this process started) and torch_tpu's counters."""
    last = [time.perf_counter()]
    depth = [0]
    steps = []

    def before_step(optimizer, args, kwargs):
        depth[0] += 1

    def after_step(optimizer, args, kwargs):
        depth[0] -= 1
        if depth[0]:
            return
        torch.tpu.synchronize()
        now = time.perf_counter()
        m = torch_tpu.metrics()
        keys = ("executions", "compiles", "persistent_cache_hits", "compile_seconds")
        steps.append(
            {
                "seconds": now - last[0],
                **{k: m[k] for k in keys},
                "materializations": dict(m["materializations"]),
            }
        )
        last[0] = now
        with open(path, "w") as f:
            json.dump(steps, f)

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)


if __name__ == "__main__":
    if os.environ.get("TORCH_TPU_STEP_REPORT") and os.environ.get("RANK", "0") == "0":
        record_steps(os.environ["TORCH_TPU_STEP_REPORT"])
    main()
