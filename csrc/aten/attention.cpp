// scaled_dot_product_attention asks the backend which implementation to run.
// The math implementation decomposes into lowered operators (matmul, softmax,
// dropout), so attention runs natively with PyTorch's own semantics for masks,
// causal masking, scale, grouped-query attention and fully masked rows.
#include <ATen/SDPBackend.h>

namespace torch_tpu::aten {

namespace {

int64_t fused_sdp_choice(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, double, bool, std::optional<double>,
                         bool) {
  return static_cast<int64_t>(at::SDPBackend::math);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", fused_sdp_choice); }

}  // namespace torch_tpu::aten
