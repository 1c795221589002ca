"""``torch.tpu``: the device module of the ``tpu`` backend, modelled on ``torch.cuda``."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import torch

from . import _C, _env
from .precision import Precision, get_precision, precision, set_precision

__all__ = [
    "Event",
    "Precision",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_precision",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "precision",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_precision",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]


def _index(device: Any = None) -> int:
    """Device index of ``device`` (None: the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"expected a device, an index or None, got {type(device).__name__}")


def is_available() -> bool:
    return device_count() > 0


def is_initialized() -> bool:
    return _C._is_started()


def _lazy_init() -> None:
    """PyTorch calls this before the first tpu tensor is created from Python (factory
    functions, ``.to("tpu")``) and raises what it raises, unchanged."""
    _env.check()


def init() -> None:
    """Starts the backend now (it otherwise starts on first use)."""
    _lazy_init()
    _C._start()


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: Any) -> None:
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` current, like ``torch.cuda.device``."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            set_device(self.prev_idx)
        return False


def synchronize(device: Any = None) -> None:
    """Waits for all work launched on ``device``; raises failures of asynchronous execution."""
    _C._synchronize(_index(device))


# ---------------------------------------------------------------- streams
#
# A tpu device runs its work in launch order (one queue; collectives are ordered
# with it by the tpu_dist backend), so every stream is the device's default
# stream and waiting on a stream or an event has nothing left to order. These
# stand-ins let code written for torch.cuda streams (FSDP2 overlaps its
# collectives with them) run unchanged.


_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1 (a fixed value of the enum)


class Stream(torch.Stream):
    """``torch.cuda.Stream``'s stand-in: the device's one in-order queue."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any):
        return super().__new__(
            cls, stream_id=0, device_index=_index(device), device_type=_PRIVATEUSE1
        )

    def wait_stream(self, stream: torch.Stream) -> None:
        pass  # the same queue


class Event:
    """``torch.cuda.Event``'s counterpart: a ``torch.Event`` of the tpu device. Recorded and
    waited for in queue order; with ``enable_timing=True`` it also holds when the device
    finished the work before it, so ``elapsed_time`` gives device time in milliseconds.
    (A plain ``torch.Event``: PyTorch's ``elapsed_time`` accepts no subclass.)"""

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        return torch.Event(device="tpu", enable_timing=enable_timing, blocking=blocking)


def current_stream(device: Any = None) -> Stream:
    return Stream(device)


def default_stream(device: Any = None) -> Stream:
    return Stream(device)


def set_stream(stream: torch.Stream) -> None:
    """Nothing to switch: every stream is the default one."""


class StreamContext(contextlib.AbstractContextManager):
    """``with torch.tpu.stream(s):`` runs the block on ``s``, i.e. in queue order."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream

    def __exit__(self, *exc: Any) -> bool:
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


# ---------------------------------------------------------------- properties


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    platform: str
    total_memory: int
    multi_processor_count: int = 1

    def __repr__(self) -> str:
        return (
            f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
            f"total_memory={self.total_memory // (1024 * 1024)}MB)"
        )


def _host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def get_device_properties(device: Any = None) -> DeviceProperties:
    props = _C._device_properties(_index(device))
    platform = _C._platform()
    total = props["bytes_limit"] if props["bytes_limit"] > 0 else _host_memory()
    return DeviceProperties(name=get_device_name(device), platform=platform, total_memory=total)


# libtpu's device kinds whose product name differs: frameworks match the name (TorchTitan's
# table of peak FLOPS for MFU looks for "v5e", "v5p", "v6e", "v7"), as TorchTPU names them.
_TPU_PRODUCT_NAMES = {
    "TPU v5 lite": "TPU v5e",
    "TPU v5": "TPU v5p",
    "TPU v6 lite": "TPU v6e",
    "TPU7x": "TPU v7x",
}


def _device_name(platform: str, kind: str) -> str:
    if platform == "cpu":
        return f"XLA {kind.upper()} (cpu platform)"
    if platform == "cuda":
        return f"{kind} (cuda platform)"  # e.g. "NVIDIA H200", as CUDA names it
    return _TPU_PRODUCT_NAMES.get(kind, kind)


def get_device_name(device: Any = None) -> str:
    """What actually runs the device: e.g. ``'TPU v6e'`` or ``'XLA CPU (cpu platform)'``."""
    return _device_name(_C._platform(), _C._device_properties(_index(device))["kind"])


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


# ---------------------------------------------------------------- random


def _generator(device: Any = None) -> torch.Generator:
    return _C._default_generator(_index(device))


def default_generators_tuple() -> tuple[torch.Generator, ...]:
    return tuple(_C._default_generator(i) for i in range(device_count()))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator().seed()
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = "tpu") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "tpu") -> None:
    _generator(device).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _is_in_bad_fork() -> bool:
    """True in a process forked after the backend started: it cannot use the device."""
    return _C._is_in_bad_fork()


# ---------------------------------------------------------------- memory


def memory_stats(device: Any = None) -> dict[str, int]:
    return dict(_C._memory_stats(_index(device)))


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``: the plugin's memory limit (a GPU's), else the
    host's memory, which the CPU platform's devices use."""
    return torch.accelerator.get_memory_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Allocations beyond ``fraction`` of the device's memory raise
    ``torch.OutOfMemoryError``, as with ``torch.cuda.set_per_process_memory_fraction``."""
    _C._set_memory_fraction(_index(device), float(fraction))


def memory_snapshot() -> list[dict]:
    """The live storages recorded by ``torch.tpu.memory._record_memory_history()``."""
    from .memory import memory_snapshot

    return memory_snapshot()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A readable table of ``memory_stats(device)``, like ``torch.cuda.memory_summary``."""
    stats = memory_stats(device)
    mib = 1024 * 1024

    def line(name: str, current: int, peak: int, allocated: int, freed: int) -> str:
        return f"| {name:<24} | {current:>12} | {peak:>12} | {allocated:>12} | {freed:>12} |"

    rule = "|" + "=" * 85 + "|"
    rows = [
        rule,
        f"|{'PyTorch tpu memory summary, device ID ' + str(_index(device)):^85}|",
        rule,
        line("Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"),
        "|" + "-" * 85 + "|",
        line(
            "Allocated memory (MiB)",
            stats["allocated_bytes.all.current"] // mib,
            stats["allocated_bytes.all.peak"] // mib,
            stats["allocated_bytes.all.allocated"] // mib,
            stats["allocated_bytes.all.freed"] // mib,
        ),
        line(
            "Reserved memory (MiB)",
            stats["reserved_bytes.all.current"] // mib,
            stats["reserved_bytes.all.peak"] // mib,
            "",
            "",
        ),
        line("Allocations", "", "", stats["num_device_alloc"], stats["num_device_free"]),
        rule,
    ]
    return "\n".join(rows) + "\n"


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """The device's compute capability where its platform has one (an NVIDIA GPU's, e.g.
    (9, 0) on an H200); (0, 0) on TPUs and the CPU platform."""
    value = _C._device_properties(_index(device))["attributes"].get("compute_capability", "")
    major, _, minor = value.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() else (0, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Every platform computes in bfloat16 (a TPU natively)."""
    return True


def empty_cache() -> None:
    """Nothing to release: device buffers are freed as soon as no tensor holds them."""
    synchronize()


def __getattr__(name: str):
    if name == "default_generators":
        return default_generators_tuple()
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")
