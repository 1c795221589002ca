"""Serialisation support that PyTorch does not give a PrivateUse1 backend by itself.

``torch.save``/``torch.load`` need nothing here: PyTorch tags tpu storages ``tpu:N`` and
restores them through ``torch.tpu`` (``map_location="tpu"``, ``{"cuda:0": "tpu"}`` and the rest
work as they do for CUDA).

safetensors is different: its Rust extension parses the ``device`` argument of ``safe_open``
(and so of ``safetensors.torch.load_file``/``load_model``) against a fixed list of names
(``cpu``, ``cuda``, ``mps``, ``npu``, ``xpu``, ``xla``, ``mlu``, ``musa``, ``hpu``) and rejects
``"tpu"`` with ``SafetensorError: device tpu is invalid``; renaming the PrivateUse1 backend does
not help. It also accepts a bare integer, which it hands to ``Tensor.to(n)``: PyTorch reads an
integer device as an index of the current accelerator, and when a PrivateUse1 backend is
registered that accelerator is always it. So ``safe_open`` is wrapped to turn a tpu device
(``"tpu"``, ``"tpu:1"``, ``torch.device("tpu", 1)``) into its index; every other argument passes
through unchanged and the object returned is safetensors' own. The wrapper is installed when
safetensors is imported (or at once if it already is), so importing torch_tpu never imports
safetensors. Remove this file once safetensors accepts PrivateUse1 device names.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
from typing import Any

import torch

_MODULES = ("safetensors", "safetensors.torch")


def _tpu_index(device: Any) -> Any:
    """The index of ``device`` if it names a tpu device, else ``device`` unchanged."""
    if isinstance(device, str) and (device == "tpu" or device.startswith("tpu:")):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "tpu":
        return torch.tpu.current_device() if device.index is None else device.index
    return device


def _wrap(safe_open: Any) -> Any:
    @functools.wraps(safe_open)
    def wrapper(filename, framework, device="cpu", *args, **kwargs):
        return safe_open(filename, framework, _tpu_index(device), *args, **kwargs)

    wrapper._torch_tpu_wrapped = True
    return wrapper


def _patch_loaded() -> None:
    """Wraps ``safe_open`` in the safetensors modules imported so far (idempotent)."""
    for name in _MODULES:
        module = sys.modules.get(name)
        original = getattr(module, "safe_open", None)
        if original is not None and not getattr(original, "_torch_tpu_wrapped", False):
            module.safe_open = _wrap(original)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``safetensors`` through the other finders and patches it once it has run."""

    def find_spec(self, name, path, target=None):
        if name != "safetensors":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _patch_loaded()

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Makes safetensors accept tpu devices, now or when it is imported."""
    _patch_loaded()
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


install()
