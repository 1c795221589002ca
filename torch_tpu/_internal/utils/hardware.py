"""TorchTPU's ``torch_tpu._internal.utils.hardware``: which TPU Pallas kernels target."""

from __future__ import annotations

import torch

from torch_tpu import platform

# Where no TPU runs the device, Pallas kernels run interpreted (pallas.JaxCallable);
# Helion still sizes their blocks for a TPU: the generation its interpret mode assumes.
INTERPRETED_TPU = "TPU7x"


def get_tpu_device_name(device: int | None = None) -> str:
    """The TPU generation of the device (PJRT's device kind, "TPU v5 lite"), or, on
    platforms without one, the generation interpreted kernels are sized for."""
    if platform() != "tpu":
        return INTERPRETED_TPU
    return torch.tpu.get_device_name(device)
