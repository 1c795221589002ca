"""TorchTPU's loader entry points, which integrations written for TorchTPU call (Ray
Train's TPU backend calls ``load()``; TorchTPU's own tools call ``_init_device("tpu")``).

Importing this module imports ``torch_tpu``, which registers everything (the ``tpu``
device, ``torch.tpu``, the ``tpu_dist`` backend): both calls only make sure of that, and
neither starts the device.
"""

from __future__ import annotations

import torch

import torch_tpu  # noqa: F401  (registers the backend)


def load() -> None:
    """Makes sure the ``tpu`` device, ``torch.tpu`` and ``tpu_dist`` are registered."""
    if not hasattr(torch, "tpu"):
        raise RuntimeError(
            "torch_tpu is imported but torch.tpu is missing: the registration failed"
        )


def _init_device(device_type: str = "tpu") -> None:
    """TorchTPU's name for registering a device type: ``"tpu"`` is the only one."""
    if device_type != "tpu":
        raise ValueError(f"torch_tpu registers the 'tpu' device type, not {device_type!r}")
    load()
