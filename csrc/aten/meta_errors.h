// Errors of PyTorch's Python meta kernels, as the CPU's kernels raise them.
#pragma once

#include <ATen/core/operator_name.h>

#include <exception>
#include <memory>

namespace torch_tpu::aten {

// Rethrows `error`, a failure of a meta kernel, as the CPU's kernel raises it. Some of
// PyTorch's Python meta kernels check arguments with `raise AssertionError`
// (squareCheckInputs of linalg) where the CPU's kernels raise RuntimeError (TORCH_CHECK):
// those become RuntimeError, with the meta kernel's message. Messages the Python
// references word otherwise (an unsafe cast into out=) or give as a tuple of strings
// take the CPU's words; `op` is the operator whose meta kernel failed.
[[noreturn]] void rethrow_meta_error(std::exception_ptr error, const c10::OperatorName& op);

// Drops, while it lives, the warnings meta kernels give when they resize an out=
// tensor (PyTorch's Python references word them otherwise, and a cached meta result
// would give them once): the kernel warns at its own resize, on every call, as the
// CPU's. Other warnings pass.
class QuietMetaResizes {
 public:
  QuietMetaResizes();
  ~QuietMetaResizes();
  QuietMetaResizes(const QuietMetaResizes&) = delete;
  QuietMetaResizes& operator=(const QuietMetaResizes&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace torch_tpu::aten
