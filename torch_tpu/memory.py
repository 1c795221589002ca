"""``torch.tpu.memory``: what ``torch.cuda.memory`` offers to find where memory goes.

``_record_memory_history()`` makes the allocator remember each storage it hands out with
the Python stack that asked for it, and a trace of allocations and frees;
``_snapshot()`` returns them in ``torch.cuda.memory._snapshot()``'s format and
``_dump_snapshot(path)`` pickles that, which PyTorch's memory viewer
(https://pytorch.org/memory_viz) draws. A tpu storage takes device memory of its own (no
caching allocator), so each is a segment of one block.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import torch

from . import _C


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "python",
    max_entries: int = sys.maxsize,
    device: Any = None,
) -> None:
    """Starts recording (``enabled="all"``) or stops it and forgets what was recorded
    (``enabled=None``). Stacks are Python stacks; ``context`` and ``device`` are accepted
    for ``torch.cuda.memory``'s signature (every device is recorded)."""
    if enabled not in (None, "all", "state"):
        raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
    _C._record_memory_history(enabled is not None, max_entries if enabled == "all" else 0)


def _snapshot(device: Any = None) -> dict:
    """The recorded storages and trace in ``torch.cuda.memory._snapshot()``'s format."""
    live, events = _C._memory_history()
    segments = []
    for dev, address, size, frames in live:
        block = {
            "address": address,
            "size": size,
            "requested_size": size,
            "state": "active_allocated",
            "frames": frames,
        }
        segments.append(
            {
                "device": dev,
                "address": address,
                "total_size": size,
                "allocated_size": size,
                "active_size": size,
                "requested_size": size,
                "stream": 0,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [block],
            }
        )
    traces: list[list[dict]] = [[] for _ in range(max(1, torch.tpu.device_count()))]
    for alloc, dev, address, size, time_us, frames in events:
        traces[dev].append(
            {
                "action": "alloc" if alloc else "free_completed",
                "addr": address,
                "size": size,
                "stream": 0,
                "time_us": time_us,
                "frames": frames,
            }
        )
    return {"segments": segments, "device_traces": traces, "allocator_settings": {}}


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot() -> list[dict]:
    """The recorded live storages (``torch.cuda.memory_snapshot()``'s segments)."""
    return _snapshot()["segments"]
