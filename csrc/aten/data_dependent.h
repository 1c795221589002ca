// Operators whose result sizes depend on tensor values. They synchronise once
// to learn the size, then run natively through lowered operators.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_tpu::aten {

// A host step an operator takes before it is lowered, for arguments whose
// meaning depends on their values: boolean masks among `index`'s indices
// become the coordinates of their true elements (one synchronisation), and
// CPU index tensors move to the device, as CUDA accepts them; nll_loss's
// uint8 targets become int64 (the CPU takes them, PyTorch's meta kernel not).
using ArgumentRewrite = void (*)(std::vector<c10::IValue>& stack, size_t num_args);

// The rewrite for an operator ("aten::index_put_"), or nullptr.
ArgumentRewrite find_argument_rewrite(const std::string& op_name);

}  // namespace torch_tpu::aten
