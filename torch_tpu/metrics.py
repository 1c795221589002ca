"""Counters of the tpu backend: compiles, cache hits, executions, transfers, fallbacks."""

from __future__ import annotations

from . import _C


def metrics() -> dict:
    """A snapshot of the counters (a plain dict; take differences between snapshots)."""
    return _C._metrics()


def reset_metrics() -> None:
    _C._reset_metrics()


def metrics_report() -> str:
    m = metrics()
    lookups = m["cache_hits"] + m["cache_misses"]
    hit_rate = 100.0 * m["cache_hits"] / lookups if lookups else 0.0
    lines = [
        "torch_tpu metrics",
        (
            f"  compiles:           {m['compiles']} ({m['compile_seconds']:.2f} s;"
            f" {m['fast_compiles']} for fast compilation)"
        ),
        (
            f"  program cache:      {m['cache_hits']} hits, {m['cache_misses']} misses"
            f" ({hit_rate:.1f}% hits)"
        ),
        f"  executions:         {m['executions']}",
        (
            f"  host -> device:     {m['host_to_device_transfers']} transfers,"
            f" {m['host_to_device_bytes']} bytes"
        ),
        (
            f"  device -> host:     {m['device_to_host_transfers']} transfers,"
            f" {m['device_to_host_bytes']} bytes"
        ),
        (
            f"  tpu_dist:           {m['program_collectives']} collectives in programs,"
            f" {m['staged_collectives']} staged through the host"
        ),
    ]
    fallbacks = m["fallbacks"]
    if fallbacks:
        lines.append(f"  CPU fallbacks:      {sum(fallbacks.values())}")
        for op, n in sorted(fallbacks.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {op}: {n}")
    else:
        lines.append("  CPU fallbacks:      none")
    return "\n".join(lines)
