"""Float32 matmul/convolution precision of the ``tpu`` device.

TPU matrix units multiply in bfloat16: ``DEFAULT`` is one bfloat16 pass, ``HIGH`` three
(bf16x3), ``HIGHEST`` six (about float32). Every platform computes the same numerics.
"""

from __future__ import annotations

import contextlib
import enum

from . import _C, _env


class Precision(enum.IntEnum):
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


def set_precision(mode: Precision | str) -> None:
    if isinstance(mode, str):
        try:
            mode = Precision[mode.upper()]
        except KeyError:
            raise ValueError(f"unknown precision {mode!r}: use DEFAULT, HIGH or HIGHEST") from None
    _C._set_precision(int(Precision(mode)))


def get_precision() -> Precision:
    return Precision(_C._get_precision())


@contextlib.contextmanager
def precision(mode: Precision | str):
    """Uses ``mode`` for float32 matmuls and convolutions inside the block."""
    previous = get_precision()
    set_precision(mode)
    try:
        yield
    finally:
        set_precision(previous)


def _init_from_env() -> None:
    mode = _env.choice("TORCH_TPU_PRECISION", list(Precision.__members__))
    if mode:
        set_precision(mode)
