// Checks the debug eager mode adds: index arguments are validated on the host
// before the op runs, as CUDA's device-side asserts do (strict and
// DeferAndFuse cannot see data: out-of-range indices there are clamped).
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

namespace torch_tpu::aten {

// Raises IndexError when an index argument of `op_name` is out of range.
void check_indices(const std::string& op_name, c10::ArrayRef<c10::IValue> args);

}  // namespace torch_tpu::aten
