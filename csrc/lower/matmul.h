// Matrix products and convolutions with torch.tpu precision.
//
// float32 (and complex64) operands multiply the way a TPU's matrix unit does
// under Context::precision(): DEFAULT rounds both operands to bfloat16 (one
// pass), HIGH splits each into two bfloat16 terms and keeps three products
// (bf16x3), HIGHEST is float32. On a TPU the StableHLO precision_config asks
// the hardware for it; elsewhere the same arithmetic is spelled out, so every
// platform computes a TPU's numbers. Other types compute as PyTorch does:
// bf16/f16 accumulate in float32, f64 and integers exactly.
#pragma once

#include "lower/lowering.h"

namespace torch_tpu::lower {

// dot_general of `lhs` and `rhs` (same element type) returning `result`
// elements. For bf16/f16 operands pass the accumulation type (f32) to keep the
// sum unrounded, or the operand type to round it.
Value dot(Context& c, const Value& lhs, const Value& rhs, const hlo::DotDims& dims,
          ElementType result);

// The convolution counterpart of `dot`. Negative padding removes elements.
Value conv(Context& c, const Value& lhs, const Value& rhs, const hlo::ConvDims& dims,
           const hlo::ConvConfig& config, ElementType result);

}  // namespace torch_tpu::lower
