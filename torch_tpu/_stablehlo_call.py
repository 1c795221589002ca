"""``torch_tpu::stablehlo_call(Tensor[] inputs, str module) -> Tensor[]``: a StableHLO module's
entry function on tpu tensors, lowered into the calling program (``lower/stablehlo_call.cpp``).
``torch_tpu.kernels`` adds the modules and says what each returns; this file holds only
the operator, defined before the backend binds its lowered ops."""

from __future__ import annotations

import torch

from . import _C

_LIBRARY = torch.library.Library("torch_tpu", "FRAGMENT")
_LIBRARY.define("stablehlo_call(Tensor[] inputs, str module) -> Tensor[]")

# module id -> [(shape, dtype)] of its results
_RESULTS: dict[str, list[tuple[tuple[int, ...], torch.dtype]]] = {}


def add_module(module_id: str, entry: str, functions: str, results) -> None:
    """Makes ``functions`` (MLIR ``func.func`` ops, ``entry`` among them, symbols unique to
    this module) callable as ``stablehlo_call(inputs, module_id)``, returning ``results``."""
    if module_id not in _RESULTS:
        _C._add_stablehlo_module(module_id, entry, functions)
        _RESULTS[module_id] = [(tuple(shape), dtype) for shape, dtype in results]


@torch.library.impl(_LIBRARY, "stablehlo_call", "Meta")
def _stablehlo_call_meta(inputs, module):
    return [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in _RESULTS[module]]
