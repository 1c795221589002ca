// The CPU's memory-overlap checks (TensorIterator's, and the indexing ops'
// assert_no_overlap), which PyTorch's meta kernels leave out. Without them a
// tpu op writes an expanded tensor, or reads an input it is overwriting,
// where the CPU raises.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_tpu::aten {

struct OverlapRule {
  // Whether a written tensor may have elements sharing a location (an
  // expanded tensor); the engine then writes one value to each location.
  enum class Shared : uint8_t { Refused, Allowed, Deprecated } shared = Shared::Refused;
  // The indexing ops, cat, masked_select, kthvalue and cross (assert_no_overlap
  // on the CPU) refuse an input that is the written tensor itself, not only one
  // that partly overlaps it; those that write `self` (index_add, scatter, ...)
  // take an out= that is `self` (`self_may_be_written`).
  bool refuses_full_overlap = false;
  bool self_may_be_written = false;
  std::string op;  // for the deprecation warning
};

OverlapRule overlap_rule(const std::string& op_name);

// Raises (or warns) as the CPU does for a call's arguments; `mutated` are
// the indices of the arguments it writes.
void check_memory_overlap(const OverlapRule& rule, c10::ArrayRef<c10::IValue> args,
                          const std::vector<size_t>& mutated);

}  // namespace torch_tpu::aten
