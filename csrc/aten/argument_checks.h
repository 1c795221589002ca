// Checks the CPU's kernels make on argument values, dtypes and shapes before
// they compute, which PyTorch's meta kernels leave out (or raise as another
// exception type). Without them a tpu op computes something where the CPU
// raises: an int64 product of a float matrix, random numbers from an empty
// range, a fill value that overflows, the median over an empty dimension.
// Only what the host knows is checked here (dtypes, shapes, Python scalars);
// checks on tensor data are the programs' (engine/data_checks.h).
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

namespace torch_tpu::aten {

// Raises the CPU's error for `args`, a call's arguments. Runs before the meta
// kernel, as the CPU's kernel checks before PyTorch's meta functions would.
using ArgumentCheck = void (*)(c10::ArrayRef<c10::IValue> args);

// The check of operator `op_name` ("aten::fill_.Scalar"), found under its
// functional name; nullptr when it has none.
ArgumentCheck find_argument_check(const std::string& op_name);

// "aten::scatter_.src", "aten::gather.out" -> "aten::scatter.src", "aten::gather".
std::string functional_name(const std::string& op_name);

}  // namespace torch_tpu::aten
