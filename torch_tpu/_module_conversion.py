"""``module.to("tpu")`` keeps shared parameters shared.

On CUDA, ``Module._apply`` moves a parameter by assigning ``param.data``, which keeps the
Parameter object and with it every tie (an embedding and a language-model head sharing one
weight). PyTorch allows that shallow copy only between its in-tree dense backends
(``TensorImpl::has_compatible_shallow_copy_type``), so a move to or from ``tpu`` makes a new
Parameter for each owning module and the tie breaks silently: the copies train apart. The
outermost ``_apply`` here notes which slots held one Parameter and points them all at the
first slot's replacement afterwards.
"""

from __future__ import annotations

import threading

import torch

_original_apply = torch.nn.Module._apply
_state = threading.local()


def _shared_parameter_slots(root: torch.nn.Module) -> list[list[tuple[torch.nn.Module, str]]]:
    owners: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in root.modules():
        for name, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((module, name))
    return [slots for slots in owners.values() if len(slots) > 1]


def _apply(self, fn, recurse=True):
    if getattr(_state, "active", False):
        return _original_apply(self, fn, recurse)
    shared = _shared_parameter_slots(self) if recurse else []
    _state.active = True
    try:
        result = _original_apply(self, fn, recurse)
    finally:
        _state.active = False
    for (module, name), *others in shared:
        kept = module._parameters[name]
        for other, other_name in others:
            other._parameters[other_name] = kept
    return result


def install() -> None:
    torch.nn.Module._apply = _apply
