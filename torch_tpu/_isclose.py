"""``torch.isclose`` (and so ``allclose`` and ``torch.testing.assert_close``) of tpu
tensors in one program: PyTorch's composite runs a dozen ops, each a program to compile
for every new shape. Floating and complex inputs of one dtype take
``torch_tpu::isclose``, the same steps lowered together (``lower/elementwise.cpp``);
the others, and invalid calls, take PyTorch's composite, with its errors."""

from __future__ import annotations

import torch

_LIBRARY = torch.library.Library("torch_tpu", "FRAGMENT")
_LIBRARY.define(
    "isclose(Tensor self, Tensor other, float rtol, float atol, bool equal_nan) -> Tensor"
)
_ATEN = torch.library.Library("aten", "IMPL")


@torch.library.impl(_LIBRARY, "isclose", "Meta")
def _isclose_meta(self, other, rtol, atol, equal_nan):
    shape = torch.broadcast_shapes(self.shape, other.shape)
    return torch.empty(shape, dtype=torch.bool, device="meta")


def _lowered(self, other, rtol, atol, equal_nan) -> bool:
    return (
        self.dtype == other.dtype
        and (self.dtype.is_floating_point or (self.dtype.is_complex and not equal_nan))
        and self.device == other.device
        and rtol >= 0
        and atol >= 0
    )


def _isclose_tpu(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    # Plain tpu tensors only: under tracing (functional or fake tensor subclasses) the
    # composite decomposes here, as it would without this kernel.
    plain = type(self) is torch.Tensor and type(other) is torch.Tensor
    if plain and _lowered(self, other, rtol, atol, equal_nan):
        return torch.ops.torch_tpu.isclose(self, other, rtol, atol, equal_nan)
    return torch.ops.aten.isclose.default.decompose(self, other, rtol, atol, equal_nan)


# At tpu's autograd key, where PyTorch runs the composite (which has no gradient: the
# result is bool): the backend key keeps the composite for what reaches it otherwise.
_ATEN.impl("isclose", _isclose_tpu, "AutogradPrivateUse1")
