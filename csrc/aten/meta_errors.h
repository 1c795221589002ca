// Errors of PyTorch's Python meta kernels, as the CPU's kernels raise them.
#pragma once

#include <exception>

namespace torch_tpu::aten {

// Rethrows `error`, a failure of a meta kernel. Some of PyTorch's Python meta kernels
// check arguments with `raise AssertionError` (squareCheckInputs of linalg) where the
// CPU's kernels raise RuntimeError (TORCH_CHECK): those become RuntimeError, with the
// meta kernel's message.
[[noreturn]] void rethrow_meta_error(std::exception_ptr error);

}  // namespace torch_tpu::aten
