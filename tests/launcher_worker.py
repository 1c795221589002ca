"""Run by torchrun (tests/test_distributed.py): before any tpu op, each rank selects its
device by LOCAL_RANK as PyTorch's own code does, then runs a collective."""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

local_rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
assert not torch.tpu.is_initialized()
torch.accelerator.set_device_index(local_rank)
torch.tpu.set_device(local_rank)
torch.tpu.set_device(torch.device("tpu", local_rank))
mesh = init_device_mesh("tpu", (world,))
t = torch.full((3,), float(dist.get_rank() + 1), device="tpu")
dist.all_reduce(t, group=mesh.get_group())
assert t.tolist() == [world * (world + 1) / 2] * 3, t
with open(os.path.join(os.environ["RESULTS_DIR"], f"rank{dist.get_rank()}"), "w") as f:
    f.write(f"OK rank {dist.get_rank()} on tpu:{torch.tpu.current_device()}")
dist.destroy_process_group()
