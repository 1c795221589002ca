"""Eager execution modes of the ``tpu`` device.

``strict`` (default) runs every op as its own cached program, asynchronously, like CUDA
eager. ``debug`` is strict with every launch waited for (so a failure surfaces at the op
that caused it); ``TPU_LAUNCH_BLOCKING=1`` selects it. ``defer_and_fuse`` records ops into
a graph of pending values and runs the graph as one fused, cached program when a value is
needed on the host (``.item()``, ``.cpu()``, printing, ``torch.save``), on
``torch.tpu.synchronize()``, at the start and end of ``optimizer.step()``, on a mode switch, or when
the graph reaches ``TORCH_TPU_DEFER_MAX_OPS`` ops; ``TORCH_TPU_DEFER_AND_FUSE=1`` selects
it. Results are the same in every mode.
"""

from __future__ import annotations

import contextlib
import enum
import os
import weakref

import torch

from . import _C, _env


class EagerMode(enum.StrEnum):
    STRICT = "strict"
    DEBUG = "debug"
    DEFER_AND_FUSE = "defer_and_fuse"
    # TorchTPU's names.
    DEFER_NEVER = "strict"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "debug"


_ORDER = (EagerMode.STRICT, EagerMode.DEBUG, EagerMode.DEFER_AND_FUSE)


def _parse(mode: EagerMode | str) -> EagerMode:
    try:
        return EagerMode(mode.lower() if isinstance(mode, str) else mode)
    except ValueError:
        names = ", ".join(m.value for m in _ORDER)
        raise ValueError(f"unknown eager mode {mode!r}: use one of {names}") from None


def set_eager_mode(mode: EagerMode | str) -> None:
    """Selects the eager mode for the whole process; pending work runs first."""
    _C._set_eager_mode(_ORDER.index(_parse(mode)))


def get_eager_mode() -> EagerMode:
    return _ORDER[_C._get_eager_mode()]


@contextlib.contextmanager
def eager_mode(mode: EagerMode | str):
    """Uses ``mode`` inside the block and restores the previous mode after it."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() not in ("", "0", "false", "no", "off")


def _init_from_env() -> None:
    explicit = _env.choice("TORCH_TPU_EAGER_MODE", [m.value for m in _ORDER])
    if explicit:
        set_eager_mode(explicit)
    elif _flag("TORCH_TPU_DEFER_AND_FUSE"):
        set_eager_mode(EagerMode.DEFER_AND_FUSE)
    elif _flag("TPU_LAUNCH_BLOCKING"):
        set_eager_mode(EagerMode.DEBUG)
    # The end of an optimizer step is where a training step repeats: cutting the
    # pending graph there makes every step yield the same (cached) graphs. Its start
    # too: the first step creates the optimizer's state and the second does not, so
    # a step cut only at its end is two graphs to compile, each the whole step; cut
    # at both, the second step compiles only the optimizer's steady update.
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(_cut_at_step)
    register_optimizer_step_post_hook(_cut_at_step)


def _cut_at_step(optimizer, *_) -> None:
    # Inside torch.compile the step is part of a compiled graph: no cut (and
    # Dynamo folds this branch away instead of breaking the graph at _C).
    if not torch.compiler.is_compiling():
        _C._mark_step(_step_devices(optimizer))


_DEVICES_OF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _step_devices(optimizer) -> list[int]:
    """The tpu devices of the optimizer's parameters: a step cuts their graphs only (the
    ranks of a process, threads each on its own device, step on their own)."""
    groups = optimizer.param_groups
    known = _DEVICES_OF.get(optimizer)
    if known is None or known[0] != len(groups):
        devices = {p.device.index for g in groups for p in g["params"] if p.device.type == "tpu"}
        known = (len(groups), sorted(devices))
        _DEVICES_OF[optimizer] = known
    return known[1]
