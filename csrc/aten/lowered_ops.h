#pragma once

#include <string>
#include <vector>

namespace torch_tpu::aten {

// Registers the boxed lowered kernel for every operator with a lowering rule
// (and its in-place and out= variants). Returns the operators skipped: those
// with a dedicated tpu kernel, composite ones, and unknown names.
std::vector<std::string> register_lowered_ops();
// Operators that run natively through lowering rules.
std::vector<std::string> lowered_op_names();

}  // namespace torch_tpu::aten
