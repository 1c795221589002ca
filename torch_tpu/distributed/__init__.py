"""``torch.tpu.distributed``: the ``tpu_dist`` c10d backend and the launch helpers.

Run one process per device (``torchrun --nproc_per_node=N``, or ``mp.spawn``); each
sees its device as ``tpu:0``. ``dist.init_process_group("tpu_dist")`` (or
``init_process_group(device_id=torch.device("tpu"))``) then serves ``tpu`` tensors,
and CPU tensors too, so DDP, FSDP2, DTensor and ``torch.distributed.checkpoint`` run
on it unchanged. The backend is registered when ``torch_tpu`` is imported (``import
torch`` does that).
"""

from __future__ import annotations

import functools
import os
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import _C
from .environment import LaunchEnv, launch_env, set_tpu_launch_env

BACKEND = "tpu_dist"

__all__ = ["BACKEND", "LaunchEnv", "create_process_group", "launch_env", "set_tpu_launch_env"]


def create_process_group(
    store: dist.Store, rank: int, world_size: int, timeout: timedelta
) -> dist.Backend:
    """The creator ``torch.distributed`` calls for each ``tpu_dist`` group.

    Collectives of tpu tensors run inside device programs when one PJRT client runs
    every rank's device (ranks as threads of one process, each on its own device); the
    ranks find that out through ``store`` at the group's first tpu collective. Otherwise,
    and for CPU tensors, they travel through a Gloo group made from the same store,
    rank, size and timeout, the C++ backend staging tpu tensors through host memory.
    """
    if not dist.is_initialized():  # the default group: check the launch variables
        launch_env(rank=rank, world_size=world_size)
        _join_job(store, rank, world_size)
    host = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return _C._tpu_dist_backend(host, store, rank, world_size, timeout)


def _join_job(store: dist.Store, rank: int, world_size: int) -> None:
    """On a GPU or TPU, one process per device: each process's PJRT client becomes one
    node of the job (node id ``rank`` of ``world_size``, the peers meeting in the default
    group's store), so that XLA's collectives (NCCL, ICI) run tpu_dist's programs across
    the processes. The CPU platform's client serves one process only (its collectives
    between processes are staged through Gloo)."""
    if world_size <= 1 or _C._platform() == "cpu" or _C._is_started():
        if world_size > 1 and _C._platform() != "cpu" and _C._is_started():
            _warn_started_before_init()
        return
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if not _C._join_job(store, rank, world_size, local_rank):
        _warn_started_before_init()


@functools.cache
def _warn_started_before_init() -> None:
    warnings.warn(
        "tpu_dist: the tpu device started before init_process_group, so its PJRT client "
        "serves this process alone and collectives between the processes are staged "
        "through the host (Gloo); call init_process_group before the first tpu tensor to "
        "run them inside device programs",
        stacklevel=4,
    )


def _with_tpu_dist_timeouts(set_pg_timeout):
    """``torch.distributed``'s ``_set_pg_timeout`` (TorchTitan sets its timeouts with it)
    changes Gloo and NCCL backends only and warns for others: a ``tpu_dist`` group takes
    the timeout as a Gloo group does, the others are left to PyTorch."""

    @functools.wraps(set_pg_timeout)
    def _set_pg_timeout(timeout: timedelta, group=None) -> None:
        c10d = dist.distributed_c10d
        pg = c10d._get_default_group() if group is None else group
        if c10d._rank_not_in_group(pg) or c10d.get_backend(pg) != BACKEND:
            return set_pg_timeout(timeout, group)
        pg._get_backend(torch.device("tpu")).set_timeout(timeout)

    _set_pg_timeout.tpu_dist = True
    return _set_pg_timeout


def _register() -> None:
    if dist.is_available() and BACKEND not in dist.Backend.backend_list:
        # CPU tensors are served too (they go to Gloo as they are): object
        # collectives and host-side metadata (DCP's plans) then need no second
        # backend and no round trip through the device.
        dist.Backend.register_backend(BACKEND, create_process_group, devices=["tpu", "cpu"])
    c10d = dist.distributed_c10d if dist.is_available() else None
    if c10d is not None and not getattr(c10d._set_pg_timeout, "tpu_dist", False):
        c10d._set_pg_timeout = _with_tpu_dist_timeouts(c10d._set_pg_timeout)


_register()
