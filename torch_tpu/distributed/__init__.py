"""``torch.tpu.distributed``: the ``tpu_dist`` c10d backend and the launch helpers.

Run one process per device (``torchrun --nproc_per_node=N``, or ``mp.spawn``); each
sees its device as ``tpu:0``. ``dist.init_process_group("tpu_dist")`` (or
``init_process_group(device_id=torch.device("tpu"))``) then serves ``tpu`` tensors,
and CPU tensors too, so DDP, FSDP2, DTensor and ``torch.distributed.checkpoint`` run
on it unchanged. The backend is registered when ``torch_tpu`` is imported (``import
torch`` does that).
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from .. import _C
from .environment import LaunchEnv, launch_env, set_tpu_launch_env

BACKEND = "tpu_dist"

__all__ = ["BACKEND", "LaunchEnv", "create_process_group", "launch_env", "set_tpu_launch_env"]


def create_process_group(
    store: dist.Store, rank: int, world_size: int, timeout: timedelta
) -> dist.Backend:
    """The creator ``torch.distributed`` calls for each ``tpu_dist`` group.

    The collectives travel through a Gloo group made from the same store, rank, size
    and timeout; the C++ backend stages tpu tensors through host memory around it.
    """
    if not dist.is_initialized():  # the default group: check the launch variables
        launch_env(rank=rank, world_size=world_size)
    host = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return _C._tpu_dist_backend(host, rank, world_size, timeout)


def _register() -> None:
    if dist.is_available() and BACKEND not in dist.Backend.backend_list:
        # CPU tensors are served too (they go to Gloo as they are): object
        # collectives and host-side metadata (DCP's plans) then need no second
        # backend and no round trip through the device.
        dist.Backend.register_backend(BACKEND, create_process_group, devices=["tpu", "cpu"])


_register()
