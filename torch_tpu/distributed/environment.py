"""The launch environment of ``tpu_dist``: one process per device.

TorchTPU's launchers describe the job to each process with two variables besides
torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``:

- ``TORCH_TPU_TOPOLOGY``: the device grid, 3 or 4 comma-separated sizes (``2,2,1``)
  whose product is ``WORLD_SIZE``;
- ``TORCH_TPU_SLICEBUILDER_ADDRESSES``: one ``host:port`` per rank, comma-separated.

``set_tpu_launch_env(nproc_per_node=N)`` sets them for a single-host job before
``torchrun`` or ``mp.spawn``; ``python -m torch.tpu.distributed.environment
--nproc_per_node=N`` prints them as ``export`` lines for a shell. Without them (plain
``torchrun``) ``launch_env()`` derives them from torchrun's variables. Inconsistent
values raise ``ValueError`` naming the variable and both values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

TOPOLOGY = "TORCH_TPU_TOPOLOGY"
ADDRESSES = "TORCH_TPU_SLICEBUILDER_ADDRESSES"

__all__ = ["ADDRESSES", "TOPOLOGY", "LaunchEnv", "launch_env", "set_tpu_launch_env"]


@dataclass(frozen=True)
class LaunchEnv:
    """What one process of a distributed job knows about the job."""

    rank: int
    world_size: int
    local_rank: int
    topology: tuple[int, ...]
    addresses: tuple[str, ...]  # host:port of each rank
    derived: bool  # topology and addresses came from torchrun's variables


def grid_topology(devices: int) -> tuple[int, int, int]:
    """The most square 2-D grid of ``devices`` (4 -> 2,2,1 and 8 -> 2,4,1, as on TPUs)."""
    rows = max(d for d in range(1, math.isqrt(devices) + 1) if devices % d == 0)
    return rows, devices // rows, 1


def _free_ports(count: int, host: str) -> list[int]:
    import socket  # here: `import torch` imports this module

    # Held open together so that the ports differ; the kernel does not hand a
    # port just released to the next bind(0) immediately.
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def set_tpu_launch_env(
    nproc_per_node: int,
    *,
    host: str = "localhost",
    environ: MutableMapping[str, str] | None = None,
) -> dict[str, str]:
    """Sets the topology variables of a single-host job of ``nproc_per_node`` processes.

    Call it in the parent process before ``torchrun`` or ``mp.spawn``: the children
    inherit the variables. Returns what it set.
    """
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int):
        raise TypeError(f"nproc_per_node must be an int, got {nproc_per_node!r}")
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be at least 1, got {nproc_per_node}")
    ports = _free_ports(nproc_per_node, "127.0.0.1" if host == "localhost" else host)
    values = {
        TOPOLOGY: ",".join(map(str, grid_topology(nproc_per_node))),
        ADDRESSES: ",".join(f"{host}:{port}" for port in ports),
    }
    (os.environ if environ is None else environ).update(values)
    return values


def _int_var(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def _parse_topology(raw: str, world_size: int) -> tuple[int, ...]:
    fields = raw.split(",")
    try:
        sizes = tuple(int(f) for f in fields)
    except ValueError:
        sizes = ()
    if len(sizes) not in (3, 4) or any(s < 1 for s in sizes):
        raise ValueError(
            f"{TOPOLOGY}={raw!r} is not 3 or 4 comma-separated positive integers (e.g. '2,2,1')"
        )
    if math.prod(sizes) != world_size:
        raise ValueError(
            f"{TOPOLOGY}={raw!r} describes {math.prod(sizes)} devices but WORLD_SIZE={world_size}"
        )
    return sizes


def _parse_addresses(raw: str, world_size: int) -> tuple[str, ...]:
    addresses = tuple(a.strip() for a in raw.split(","))
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{ADDRESSES}={raw!r}: {address!r} is not host:port")
    if len(addresses) != world_size:
        raise ValueError(
            f"{ADDRESSES}={raw!r} has {len(addresses)} addresses but WORLD_SIZE={world_size} "
            "(one host:port per rank)"
        )
    return addresses


def launch_env(
    *,
    rank: int | None = None,
    world_size: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> LaunchEnv:
    """Reads and checks the launch variables.

    ``rank`` and ``world_size`` (what ``init_process_group`` was given) must agree with
    ``RANK`` and ``WORLD_SIZE`` where those are set, and stand for them where not.
    """
    environ = os.environ if environ is None else environ
    env_world = _int_var(environ, "WORLD_SIZE", world_size if world_size is not None else 1)
    env_rank = _int_var(environ, "RANK", rank if rank is not None else 0)
    if world_size is not None and world_size != env_world:
        raise ValueError(
            f"init_process_group got world_size={world_size} but WORLD_SIZE={env_world}"
        )
    if rank is not None and rank != env_rank:
        raise ValueError(f"init_process_group got rank={rank} but RANK={env_rank}")
    if env_world < 1:
        raise ValueError(f"WORLD_SIZE={env_world} must be at least 1")
    if not 0 <= env_rank < env_world:
        raise ValueError(f"RANK={env_rank} is not below WORLD_SIZE={env_world}")
    local_rank = _int_var(environ, "LOCAL_RANK", 0)
    if not 0 <= local_rank <= env_rank:
        raise ValueError(f"LOCAL_RANK={local_rank} must be between 0 and RANK={env_rank}")

    derived = TOPOLOGY not in environ and ADDRESSES not in environ
    if TOPOLOGY in environ:
        topology = _parse_topology(environ[TOPOLOGY], env_world)
    else:
        topology = grid_topology(env_world)
    if ADDRESSES in environ:
        addresses = _parse_addresses(environ[ADDRESSES], env_world)
    else:
        # A single host: every rank at MASTER_ADDR, on ports after MASTER_PORT.
        host = environ.get("MASTER_ADDR") or "localhost"
        base = _int_var(environ, "MASTER_PORT", 29500) + 1
        addresses = tuple(f"{host}:{base + r}" for r in range(env_world))
    return LaunchEnv(env_rank, env_world, local_rank, topology, addresses, derived)


def _main(argv: list[str] | None = None) -> None:
    import argparse
    import shlex

    parser = argparse.ArgumentParser(
        prog="python -m torch.tpu.distributed.environment",
        description="Prints the launch variables of a single-host tpu_dist job as export "
        "lines: eval $(python -m torch.tpu.distributed.environment --nproc_per_node=4)",
    )
    parser.add_argument(
        "--nproc_per_node",
        "--nproc-per-node",
        type=int,
        required=True,
        help="processes of the job, one device each",
    )
    parser.add_argument(
        "--host",
        default="localhost",
        help="host name in the ranks' host:port addresses (default: localhost)",
    )
    args = parser.parse_args(argv)
    try:
        values = set_tpu_launch_env(args.nproc_per_node, host=args.host, environ={})
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    for name, value in values.items():
        print(f"export {name}={shlex.quote(value)}")


if __name__ == "__main__":
    _main()
