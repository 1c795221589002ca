#pragma once

#include "aten/torch_headers.h"

namespace torch_tpu::aten {

// Runs `op` on the CPU: inputs copied to the host, PyTorch's CPU kernel, the
// results copied back (mutated arguments into their tpu storage). Counted per
// op and warned about once; TORCH_TPU_FALLBACK=error makes it an error,
// =silent hides the warning.
// `reason` says why (default: the op has no lowering).
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason = "");

enum class FallbackMode { Warn, Silent, Error };
void set_fallback_mode(FallbackMode mode);
FallbackMode fallback_mode();

}  // namespace torch_tpu::aten
