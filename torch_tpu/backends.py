"""``torch.backends.tpu``: switches of the tpu backend."""

from __future__ import annotations

import sys
import types

import torch


class _TpuBackendModule(types.ModuleType):
    # XLA may drop intermediate downcasts (bf16 -> f32 -> bf16) when True.
    allow_excess_precision = False

    @staticmethod
    def is_built() -> bool:
        return True

    @staticmethod
    def is_available() -> bool:
        return torch.tpu.is_available()


def _install() -> None:
    module = _TpuBackendModule("torch.backends.tpu")
    torch.backends.tpu = module
    sys.modules["torch.backends.tpu"] = module
