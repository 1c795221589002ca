"""torch_tpu: a native PyTorch backend for XLA devices (TPU, GPU, CPU) through PJRT.

``import torch`` loads it (backend autoload); ``import torch_tpu`` does too. Tensors on
``torch.device("tpu")`` run eagerly as cached XLA programs.
"""

from __future__ import annotations

import atexit
import os
import sys


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing this module is the work.

    Defined before ``import torch``: when ``import torch_tpu`` comes first, torch's
    autoload calls this while this module is still initialising."""


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import torch  # noqa: E402

from . import _C, _env, _platform  # noqa: E402

__version__ = "0.1.0"


# Devices the CPU platform may be asked for (PyTorch's device index is 8 bits).
_MAX_CPU_DEVICES = 64


def _configure_backend() -> _platform.Selection:
    selection = _platform.select()
    problem = "" if selection.plugin else selection.reason
    raw = os.environ.get("TORCH_TPU_NUM_DEVICES", "1")
    devices = int(raw) if raw.isdigit() and 0 < int(raw) <= _MAX_CPU_DEVICES else 1
    if devices != (int(raw) if raw.isdigit() else None):
        problem = f"TORCH_TPU_NUM_DEVICES={raw!r} is not an integer from 1 to {_MAX_CPU_DEVICES}"
    plugin = "" if problem else selection.plugin
    libraries = _platform.cuda_libraries() if selection.platform == "cuda" else []
    _C._configure(selection.platform, plugin, devices, problem, libraries)
    return selection


def _register() -> None:
    torch.utils.rename_privateuse1_backend("tpu")
    from . import device_module

    torch._register_device_module("tpu", device_module)
    # torch.tpu.distributed (and, through its __path__, `python -m
    # torch.tpu.distributed.environment`), as in TorchTPU. torch.distributed is
    # already imported by `import torch`, so this registers tpu_dist for free.
    from . import distributed

    device_module.distributed = distributed
    sys.modules["torch.tpu.distributed"] = distributed
    from . import memory

    device_module.memory = memory
    sys.modules["torch.tpu.memory"] = memory
    from . import legacy_storage

    legacy_storage.install(device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    from . import _isclose, _meta, _module_conversion, _multilabel_margin, _stablehlo_call  # noqa: F401
    from . import backends, dynamism  # noqa: F401
    from . import _flex_attention

    backends._install()
    _module_conversion.install()
    _flex_attention.install()
    # TPUs compute in bfloat16: torch.autocast("tpu") without a dtype uses it, as TorchTPU
    # does (PyTorch's default for a PrivateUse1 device is float16). Thread-local in PyTorch:
    # this sets it for the importing thread.
    torch.set_autocast_dtype("tpu", torch.bfloat16)
    _meta.register()
    _C._register_ops()
    fallback = _env.choice("TORCH_TPU_FALLBACK", ("warn", "silent", "error"))
    if fallback:
        _C._set_fallback_mode(fallback)


platform_selection = _configure_backend()
_register()

from .metrics import metrics, metrics_report, reset_metrics  # noqa: E402
from .precision import Precision  # noqa: E402
from .precision import _init_from_env as _init_precision  # noqa: E402
from .eager import EagerMode, eager_mode, get_eager_mode, set_eager_mode  # noqa: E402
from .eager import _init_from_env as _init_eager_mode  # noqa: E402

_init_precision()
_init_eager_mode()

from . import serialization  # noqa: E402, F401
from .dynamism import get_dynamism_info, mark_dynamic  # noqa: E402
from ._compile import install_capturable_optimizers, install_default_backend  # noqa: E402

install_default_backend()
install_capturable_optimizers()


def _freeze_objects_at_exit() -> None:
    """Spares the interpreter's last garbage collection the objects alive at exit.

    A process's first tpu op runs PyTorch's Python meta kernels, which import
    torch._dynamo (800 modules, 120,000 more objects): the collection at interpreter
    shutdown then took ~0.4 s more (exit 0.9 s against 0.44 s for plain torch, 2 cores).
    Frozen, those objects are freed by reference counting as modules are cleared, as
    before, but no longer traced (exit 0.19 s). Only in processes that used the device;
    objects in reference cycles are not finalized at exit, which Python never promised."""
    if _C._is_started():
        import gc

        gc.freeze()


atexit.register(_freeze_objects_at_exit)


def _drain_autograd_device_threads() -> None:
    """Lets the autograd engine's tpu thread let go of its last backward before the
    interpreter finalizes.

    PyTorch keeps a Python object (the caller's ``contextvars`` context) in the state each
    backward carries, and the device thread that ran it drops its reference just after the
    caller's ``backward()`` returned. At exit the thread then takes the GIL of a finalizing
    interpreter, which ends the thread by unwinding it through a ``noexcept`` frame:
    ``terminate called without an active exception`` (one process in five, here). A
    backward queued on each device is taken by the thread after it let go of the previous
    one. It is started without that context and returns nothing (its gradient accumulates
    into a leaf the caller holds), so its task holds nothing that needs the GIL to drop; of
    a zero-size view, it runs no program."""
    if not _C._is_started():
        return
    engine = torch.autograd.Variable._execution_engine
    try:
        for index in range(torch.tpu.device_count()):
            leaf = torch.empty(0, device=torch.device("tpu", index), requires_grad=True)
            grad = torch.empty_like(leaf)
            engine.run_backward((leaf.view(0),), (grad,), False, False, (), False, True)
    except Exception:  # exiting: never raise from here
        pass


atexit.register(_drain_autograd_device_threads)


def platform() -> str:
    """The platform that runs the ``tpu`` device: ``'tpu'``, ``'cuda'`` or ``'cpu'``."""
    return platform_selection.platform


__all__ = [
    "EagerMode",
    "Precision",
    "eager_mode",
    "get_dynamism_info",
    "get_eager_mode",
    "mark_dynamic",
    "metrics",
    "metrics_report",
    "platform",
    "reset_metrics",
    "set_eager_mode",
]
