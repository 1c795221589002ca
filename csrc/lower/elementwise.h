// Elementwise lowering rules, for rules that apply them to each tensor of
// their lists (the _foreach_* family).
#pragma once

#include <string_view>

#include "lower/lowering.h"

namespace torch_tpu::lower::elementwise {

// The rule elementwise.cpp registers for `op` ("add.Tensor", "exp"). Throws
// std::invalid_argument for an operator it does not lower.
RuleFn rule(std::string_view op);

}  // namespace torch_tpu::lower::elementwise
