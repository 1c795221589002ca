"""Bounded dynamism: a dimension whose size varies from call to call up to a known bound.

``torch_tpu.mark_dynamic(x, dim, min, max)`` marks a dimension for ``torch.compile``;
with ``options={"bounded_dynamism": True}`` a graph whose sizes have upper bounds runs
as one program computed at the bounds, whatever the sizes of a call: its inputs are
padded to the bounds and tagged with their sizes (``torch_tpu::set_dimension_size``,
XLA's ``set_dimension_size``), XLA masks the padding in reductions and products, and
the outputs are the valid part of the padded results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

_LIBRARY = torch.library.Library("torch_tpu", "DEF")
_LIBRARY.define("set_dimension_size(Tensor self, int dim, Tensor size) -> Tensor")


@torch.library.impl(_LIBRARY, "set_dimension_size", "Meta")
def _set_dimension_size_meta(self, dim, size):
    return torch.empty_like(self)


@torch.library.impl(_LIBRARY, "set_dimension_size", "CPU")
def _set_dimension_size_cpu(self, dim, size):
    # Off the tpu there is no padding to mask: the entries past `size` are the caller's.
    return self.clone()


@dataclass(frozen=True)
class BoundedDynamicDimension:
    dimension: int
    lower_bound: int
    upper_bound: int


def mark_dynamic(tensor: torch.Tensor, dim: int, min: int, max: int) -> None:
    """Marks dimension ``dim`` of ``tensor`` as varying between ``min`` and ``max``.

    A tpu tensor's values move into a storage sized for its bounds, and ops on it run
    programs computed at the bounds (one for every size), whose results carry the bounds
    on; see docs/design.md for the ops that do. Dynamo sees the same bounds
    (``torch._dynamo.mark_dynamic``): a compiled graph of it is symbolic, and each size
    is recorded from those ops into the first size's programs. On a CPU tensor the mark
    is Dynamo's only, for ``torch.compile(..., options={"bounded_dynamism": True})``."""
    import torch._dynamo

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"mark_dynamic expects a tensor, got {type(tensor).__name__}")
    rank = tensor.dim()
    if not -rank <= dim < rank:
        raise IndexError(f"mark_dynamic: dimension {dim} is out of range for a {rank}-d tensor")
    dim %= rank
    if not 0 <= min <= tensor.shape[dim] <= max:
        raise ValueError(
            f"mark_dynamic: dimension {dim} has size {tensor.shape[dim]}, outside its bounds"
            f" [{min}, {max}]"
        )
    torch._dynamo.mark_dynamic(tensor, dim, min=min, max=max)
    infos = {d.dimension: d for d in get_dynamism_info(tensor)}
    infos[dim] = BoundedDynamicDimension(dim, min, max)
    tensor._tpu_dynamism = tuple(sorted(infos.values(), key=lambda d: d.dimension))
    if tensor.device.type == "tpu":
        _store_at_bounds(tensor, tensor._tpu_dynamism)


def _store_at_bounds(tensor: torch.Tensor, infos) -> None:
    """Moves ``tensor``'s values into a storage of its bounds' elements, the values first
    (through the host: a copy on the device would be a program per size)."""
    from . import _C

    bounds, varies = list(tensor.shape), [False] * tensor.dim()
    for info in infos:
        bounds[info.dimension] = info.upper_bound
        varies[info.dimension] = True
    host = tensor.detach().cpu().contiguous()
    flat = torch.zeros(math.prod(bounds), dtype=tensor.dtype)
    flat[: host.numel()] = host.reshape(-1)
    tensor.data = flat.to(tensor.device).as_strided(host.shape, host.stride(), 0)
    _C._set_bounds(tensor, bounds, varies)


def get_dynamism_info(tensor: torch.Tensor) -> tuple[BoundedDynamicDimension, ...]:
    """The bounded dynamic dimensions ``mark_dynamic`` gave ``tensor``."""
    return getattr(tensor, "_tpu_dynamism", ())
