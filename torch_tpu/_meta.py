"""Meta kernels for ATen operators PyTorch gives none.

The tpu kernel asks an operator's meta kernel for its results' shapes, strides and
dtypes; an operator without one runs on the CPU even when it has a lowering. These
kernels describe the results as the CUDA (or CPU) kernel makes them, and serve every
meta-tensor user in the process (FakeTensor, torch.compile) too. Each is registered
only where PyTorch has none, so a later PyTorch's own kernel wins.
"""

from __future__ import annotations

import torch

# Kept for the life of the process: destroying a Library removes its kernels.
_LIBRARY = torch.library.Library("aten", "IMPL")


def _accumulation(dtype: torch.dtype) -> torch.dtype:
    """The dtype CUDA's normalisation kernels keep statistics in."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _column_major(shape, dtype):
    """An empty tensor with LAPACK's layout: each matrix column-major."""
    return torch.empty(*shape[:-2], shape[-1], shape[-2], dtype=dtype, device="meta").mT


def _resize_out(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if out.shape != like.shape:
        out.resize_(like.shape)
    return out


class _OutVariant:
    """The meta kernel of an out= overload from its functional one's: the out= tensors
    (the schema's written keyword arguments) are resized to the results, as ATen's
    out= kernels do, and returned."""

    def __init__(self, functional):
        self.functional = functional

    def kernel(self, name: str):
        packet, _, overload = name.partition(".")
        schema = getattr(getattr(torch.ops.aten, packet), overload)._schema
        outs = [a.name for a in schema.arguments if a.kwarg_only and a.is_write]

        def kernel(*args, **kwargs):
            written = [kwargs.pop(n) for n in outs]
            results = self.functional(*args, **kwargs)
            single = isinstance(results, torch.Tensor)
            results = (results,) if single else results
            written = tuple(_resize_out(o, r) for o, r in zip(written, results))
            return written[0] if single else written

        return kernel


# ------------------------------------------------------------------ elementwise


def _add_relu(self, other, alpha=1):
    return torch.empty_like(torch.add(self, other, alpha=alpha))


def _logcumsumexp(self, dim):
    return torch.empty_like(self)


def _masked_softmax(self, mask, dim=None, mask_type=None):
    return torch.empty_like(self)


def _masked_softmax_backward(grad_output, output, mask, dim=None):
    return torch.empty_like(grad_output)


# ------------------------------------------------------------------ SyncBatchNorm


def _channels(input: torch.Tensor) -> int:
    return input.shape[1] if input.dim() > 1 else 1


def batch_norm_stats(input, eps):
    stats = input.new_empty(_channels(input), dtype=_accumulation(input.dtype))
    return stats, torch.empty_like(stats)


def batch_norm_update_stats(input, running_mean, running_var, momentum):
    dtype = running_mean.dtype if running_mean is not None else _accumulation(input.dtype)
    stats = input.new_empty(_channels(input), dtype=dtype)
    return stats, torch.empty_like(stats)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    return torch.empty_like(input)


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    return torch.empty_like(input)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    channels = _channels(input)
    stats = mean.new_empty(channels) if input_g else None
    dtype = weight.dtype if weight is not None else mean.dtype
    grad_weight = mean.new_empty(channels, dtype=dtype) if weight_g else None
    grad_bias = mean.new_empty(channels, dtype=dtype) if bias_g else None
    return stats, None if stats is None else torch.empty_like(stats), grad_weight, grad_bias


def batch_norm_gather_stats_with_counts(
    input, mean, invstd, running_mean, running_var, momentum, eps, counts
):
    torch._check(mean.dim() == 2, lambda: "batch_norm_gather_stats: mean must be (world, C)")
    stats = mean.new_empty(mean.shape[1])
    return stats, torch.empty_like(stats)


def batch_norm_gather_stats(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    return batch_norm_gather_stats_with_counts(
        input, mean, invstd, running_mean, running_var, momentum, eps, None
    )


# ------------------------------------------------------------------ recurrent cells


def _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    torch._check(
        input_gates.shape == hidden_gates.shape,
        lambda: "_thnn_fused_gru_cell: input_gates and hidden_gates differ in shape",
    )
    return torch.empty_like(hx), hx.new_empty(hx.shape[0], 5 * hx.shape[1])


def _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    batch, hidden = grad_hy.shape
    gates = grad_hy.new_empty(batch, 3 * hidden)
    bias = grad_hy.new_empty(3 * hidden) if has_bias else None
    return (
        gates,
        torch.empty_like(gates),
        torch.empty_like(grad_hy),
        bias,
        None if bias is None else torch.empty_like(bias),
    )


# ------------------------------------------------------------------ linear algebra


def geqrf(self):
    torch._check(self.dim() >= 2, lambda: "geqrf: input must have at least 2 dimensions.")
    k = min(self.shape[-2], self.shape[-1])
    return _column_major(self.shape, self.dtype), self.new_empty(*self.shape[:-2], k)


# ------------------------------------------------------------------ histogram


def histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    torch._check(bins > 0, lambda: "torch.histogram(): bins must be > 0, but got {bins}")
    return self.new_empty(bins), self.new_empty(bins + 1)


def histogram_bins_tensor(self, bins, *, weight=None, density=False):
    torch._check(bins.dim() == 1, lambda: "torch.histogram(): bins tensor must be 1D")
    return self.new_empty(bins.numel() - 1), torch.empty_like(bins, dtype=self.dtype)


# ------------------------------------------------------------------ gradients shaped like the input


def _grad_like_input(grad_output, self, *args):
    return torch.empty_like(self, memory_format=torch.contiguous_format)


KERNELS = {
    "multi_margin_loss_backward": _grad_like_input,
    "multilabel_margin_loss_backward": _grad_like_input,
    "fractional_max_pool3d_backward": _grad_like_input,
    "_ctc_loss_backward": _grad_like_input,
    "_add_relu.Tensor": _add_relu,
    "_add_relu.Scalar": _add_relu,
    "_add_relu.out": _OutVariant(_add_relu),
    "_logcumsumexp": _logcumsumexp,
    "_logcumsumexp.out": _OutVariant(_logcumsumexp),
    "_masked_softmax": _masked_softmax,
    "_masked_softmax_backward": _masked_softmax_backward,
    "batch_norm_stats": batch_norm_stats,
    "batch_norm_update_stats": batch_norm_update_stats,
    "batch_norm_elemt": batch_norm_elemt,
    "batch_norm_elemt.out": _OutVariant(batch_norm_elemt),
    "batch_norm_backward_reduce": batch_norm_backward_reduce,
    "batch_norm_backward_elemt": batch_norm_backward_elemt,
    "batch_norm_gather_stats": batch_norm_gather_stats,
    "batch_norm_gather_stats_with_counts": batch_norm_gather_stats_with_counts,
    "_thnn_fused_gru_cell": _thnn_fused_gru_cell,
    "_thnn_fused_gru_cell_backward": _thnn_fused_gru_cell_backward,
    "geqrf": geqrf,
    "geqrf.a": _OutVariant(geqrf),
    "histogram.bin_ct": histogram_bin_ct,
    "histogram.bin_ct_out": _OutVariant(histogram_bin_ct),
    "histogram.bins_tensor": histogram_bins_tensor,
    "histogram.bins_tensor_out": _OutVariant(histogram_bins_tensor),
    "adaptive_avg_pool2d.out": _OutVariant(torch.ops.aten._adaptive_avg_pool2d.default),
    "adaptive_avg_pool3d.out": _OutVariant(torch.ops.aten._adaptive_avg_pool3d.default),
    "adaptive_avg_pool3d_backward.grad_input": _OutVariant(
        torch.ops.aten._adaptive_avg_pool3d_backward.default
    ),
}


def register() -> None:
    for name, kernel in KERNELS.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
            if isinstance(kernel, _OutVariant):
                kernel = kernel.kernel(name)
            _LIBRARY.impl(name, kernel, "Meta")
