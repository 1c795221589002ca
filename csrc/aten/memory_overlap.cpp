#include "aten/memory_overlap.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>

#include <algorithm>

namespace torch_tpu::aten {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

OverlapRule overlap_rule(const std::string& op_name) {
  OverlapRule rule;
  std::string base = op_name.substr(0, op_name.find('.', 6));
  // The CPU builds these without TensorIterator's check: each writes one
  // value to every location (fill_, threshold_ are idempotent).
  for (const char* op : {"aten::fill_", "aten::zero_", "aten::threshold_"}) {
    if (base == op) rule.shared = OverlapRule::Shared::Allowed;
  }
  // These warn and write, as the CPU's kernels do.
  for (const char* op :
       {"aten::masked_fill_", "aten::index_fill_", "aten::index_put_", "aten::_index_put_impl_"}) {
    if (base == op) {
      rule.shared = OverlapRule::Shared::Deprecated;
      rule.op = base == "aten::_index_put_impl_" ? "index_put_" : base.substr(6);
    }
  }
  for (const char* op : {"aten::index_add", "aten::index_copy", "aten::index_fill",
                         "aten::index_put", "aten::_index_put_impl", "aten::put",
                         "aten::masked_fill", "aten::masked_scatter", "aten::scatter"}) {
    rule.self_may_be_written |= starts_with(base, op);
  }
  rule.refuses_full_overlap = rule.self_may_be_written;
  for (const char* op : {"aten::gather", "aten::index_select", "aten::take", "aten::cat",
                         "aten::masked_select", "aten::kthvalue", "aten::linalg_cross"}) {
    rule.refuses_full_overlap |= starts_with(base, op);
  }
  return rule;
}

void check_memory_overlap(const OverlapRule& rule, c10::ArrayRef<c10::IValue> args,
                          const std::vector<size_t>& mutated) {
  for (size_t m : mutated) {
    // Lists (the foreach ops) are left out: pairwise checks would cost a
    // product of their lengths on every optimizer step.
    if (!args[m].isTensor()) continue;
    const at::Tensor& written = args[m].toTensor();
    if (!written.defined()) continue;
    if (at::has_internal_overlap(written) == at::MemOverlap::Yes) {
      TORCH_CHECK(rule.shared != OverlapRule::Shared::Refused,
                  "unsupported operation: more than one element of the written-to tensor "
                  "refers to a single memory location. Please clone() the tensor before "
                  "performing the operation.");
      if (rule.shared == OverlapRule::Shared::Deprecated) {
        TORCH_WARN("Use of ", rule.op,
                   " on expanded tensors is deprecated. Please clone() the tensor before "
                   "performing this operation. This also applies to advanced indexing e.g. "
                   "tensor[indices] = tensor");
      }
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (std::find(mutated.begin(), mutated.end(), i) != mutated.end()) continue;
      const bool full_refused = rule.refuses_full_overlap && !(rule.self_may_be_written && i == 0);
      auto refuse = [&](const at::Tensor& input) {
        if (!input.defined() || input.device() != written.device()) return;
        at::MemOverlapStatus status = at::get_overlap_status(written, input);
        TORCH_CHECK(status != at::MemOverlapStatus::Partial &&
                        !(full_refused && status == at::MemOverlapStatus::Full),
                    "unsupported operation: some elements of the input tensor and the "
                    "written-to tensor refer to a single memory location. Please clone() the "
                    "tensor before performing the operation.");
      };
      if (args[i].isTensor()) refuse(args[i].toTensor());
      if (args[i].isOptionalTensorList() || args[i].isTensorList()) {
        for (const c10::IValue& v : args[i].toListRef()) {
          if (v.isTensor()) refuse(v.toTensor());
        }
      }
    }
  }
}

}  // namespace torch_tpu::aten
