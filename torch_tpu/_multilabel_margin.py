"""``multilabel_margin_loss`` of one sample (a 0-d or 1-d input) as on the CPU and CUDA:
a 0-d loss with every reduction, and any target of as many entries. tpu's kernel takes its
results' shapes and checks from PyTorch's meta kernel for ``multilabel_margin_loss_forward``,
PyTorch's decomposition, which sums ``"none"`` over the batch dimension ``atleast_2d`` adds
(a loss of shape ``[1]``) and wants the target's shape equal to the input's. One sample is
run here as a batch of one, at tpu's autograd key, where PyTorch runs the composite."""

from __future__ import annotations

import torch

_ATEN = torch.library.Library("aten", "IMPL")


def _multilabel_margin_loss_tpu(self, target, reduction=1):
    forward = torch.ops.aten.multilabel_margin_loss_forward
    if self.dim() > 1:
        return forward(self, target, reduction)[0]
    classes = self.numel()
    torch._check(
        classes != 0,
        lambda: (
            "Expected non-empty vector or matrix with optional 0-dim batch size, "
            f"but got: {list(self.shape)}"
        ),
    )
    torch._check(
        target.dim() <= 1 and target.numel() == classes,
        lambda: (
            f"inconsistent target size: {list(target.shape)} for input of size: {list(self.shape)}"
        ),
    )
    output = forward(self.reshape(1, classes), target.reshape(1, classes), reduction)[0]
    return output.reshape(())


_ATEN.impl("multilabel_margin_loss", _multilabel_margin_loss_tpu, "AutogradPrivateUse1")
