"""FlexAttention (``torch.nn.attention.flex_attention``) on tpu.

PyTorch's ``flex_attention`` refuses devices outside a fixed list. On tpu it runs
PyTorch's own dense implementation of the ``flex_attention`` and
``flex_attention_backward`` higher-order ops (score_mod and mask_mod vectorised with
vmap over the whole scores matrix): ordinary ATen ops, which XLA fuses when they run
as one program (``torch.compile``, defer_and_fuse). That implementation makes its fill
values (-inf, 0) as host tensors; inside a captured graph a host-to-device copy counts
as host data and runs the whole graph op by op, so on tpu they are made on the device.
"""

from __future__ import annotations

import importlib

import torch
from torch._C import DispatchKey
from torch.nn.attention import flex_attention as api
from torch.overrides import TorchFunctionMode

# The module (the package's attribute of that name is the operator).
hops = importlib.import_module("torch._higher_order_ops.flex_attention")
_SCALAR = (bool, int, float)


class _FillValuesOnDevice(TorchFunctionMode):
    """Makes ``torch.tensor(<Python number>)`` a device tensor of the same value."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.tensor and len(args) == 1 and isinstance(args[0], _SCALAR):
            # torch.full infers the dtype from the value as torch.tensor does.
            return torch.full(
                (), args[0], dtype=kwargs.get("dtype"), device=kwargs.get("device", self.device)
            )
        return func(*args, **kwargs)


def _forward(query, *args, **kwargs):
    with _FillValuesOnDevice(query.device):
        return hops.sdpa_dense(query, *args, **kwargs)


def _backward(query, *args, **kwargs):
    with _FillValuesOnDevice(query.device):
        return hops.sdpa_dense_backward(query, *args, **kwargs)


def _validate_device(query, key, value) -> None:
    if query.device.type != "tpu":
        _upstream_validate_device(query, key, value)


_upstream_validate_device = api._validate_device


def install() -> None:
    if api._validate_device is _validate_device:
        return
    hops.flex_attention.py_impl(DispatchKey.PrivateUse1)(_forward)
    hops.flex_attention_backward.py_impl(DispatchKey.PrivateUse1)(_backward)
    api._validate_device = _validate_device
