#include "aten/debug_checks.h"

#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>

#include <functional>
#include <unordered_map>

#include "aten/argument_checks.h"

namespace torch_tpu::aten {

namespace {

// `index` must lie in [-size, size) (wrapped like Python) or [0, size).
// The CPU raises IndexError for some ops, RuntimeError for others.
void check_range(const at::Tensor& index, int64_t size, bool negative_ok, const char* what,
                 int64_t dim, bool index_error = true) {
  if (!index.defined() || index.numel() == 0 || index.scalar_type() == at::kBool) return;
  at::Tensor host = index.to(at::kCPU, at::kLong);
  int64_t low = host.min().item<int64_t>(), high = host.max().item<int64_t>();
  int64_t lowest = negative_ok ? -size : 0;
  if (high < size && low >= lowest) return;
  std::string message = std::string(what) + " " + std::to_string(high >= size ? high : low) +
                        " is out of bounds for dimension " + std::to_string(dim) + " with size " +
                        std::to_string(size) + " (checked by the tpu debug eager mode)";
  TORCH_CHECK_INDEX(!index_error, message);
  TORCH_CHECK(false, message);
}

int64_t dim_size(const at::Tensor& self, int64_t dim) {
  if (self.dim() == 0) return 1;
  return self.size(at::maybe_wrap_dim(dim, self.dim()));
}

// self, dim, index, ...: index_select, index_copy/fill (IndexError on the
// CPU), gather, scatter*, index_add (RuntimeError).
void dim_index(c10::ArrayRef<c10::IValue> a, bool index_error) {
  const at::Tensor& self = a[0].toTensor();
  int64_t dim = a[1].toInt();
  check_range(a[2].toTensor(), dim_size(self, dim), true, "index", dim, index_error);
}

void dim_index_error(c10::ArrayRef<c10::IValue> a) { dim_index(a, true); }
void dim_runtime_error(c10::ArrayRef<c10::IValue> a) { dim_index(a, false); }

void embedding(c10::ArrayRef<c10::IValue> a) {
  check_range(a[1].toTensor(), a[0].toTensor().size(0), false, "index", 0);
}

void take(c10::ArrayRef<c10::IValue> a) {
  check_range(a[1].toTensor(), a[0].toTensor().numel(), true, "index", 0);
}

// self, indices[]: each integer index tensor against its dimension (boolean
// masks shift dimensions; they were turned into coordinates before).
void advanced_index(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& self = a[0].toTensor();
  int64_t dim = 0;
  for (const auto& item : a[1].toOptionalTensorList()) {
    std::optional<at::Tensor> index = item;
    if (index && index->defined()) {
      if (index->scalar_type() == at::kBool || index->scalar_type() == at::kByte) return;
      if (dim < self.dim()) check_range(*index, self.size(dim), true, "index", dim);
    }
    ++dim;
  }
}

// self, target, weight, reduction, ignore_index: classes along dim 1 (or 0).
void nll_loss(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& self = a[0].toTensor();
  at::Tensor target = a[1].toTensor();
  int64_t classes = self.dim() == 1 ? self.size(0) : self.size(1);
  at::Tensor host = target.to(at::kCPU, at::kLong);
  host = host.masked_select(host != a[4].toInt());
  check_range(host, classes, false, "Target", self.dim() == 1 ? 0 : 1);
}

using Check = void (*)(c10::ArrayRef<c10::IValue>);

const std::unordered_map<std::string, Check>& checks() {
  static const std::unordered_map<std::string, Check> table = {
      {"aten::embedding", embedding},
      {"aten::index_select", dim_index_error},
      {"aten::gather", dim_runtime_error},
      {"aten::scatter.src", dim_runtime_error},
      {"aten::scatter.value", dim_runtime_error},
      {"aten::scatter.reduce", dim_runtime_error},
      {"aten::scatter.value_reduce", dim_runtime_error},
      {"aten::scatter_add", dim_runtime_error},
      {"aten::scatter_reduce.two", dim_runtime_error},
      {"aten::index_add", dim_runtime_error},
      {"aten::index_copy", dim_index_error},
      {"aten::index_fill.int_Scalar", dim_index_error},
      {"aten::index_fill.int_Tensor", dim_index_error},
      {"aten::take", take},
      {"aten::index.Tensor", advanced_index},
      {"aten::index_put", advanced_index},
      {"aten::_index_put_impl", advanced_index},
      {"aten::nll_loss_forward", nll_loss},
      {"aten::nll_loss2d_forward", nll_loss},
  };
  return table;
}

}  // namespace

void check_indices(const std::string& op_name, c10::ArrayRef<c10::IValue> args) {
  const auto& table = checks();
  auto it = table.find(functional_name(op_name));
  if (it == table.end()) it = table.find(op_name);
  if (it != table.end()) it->second(args);
}

}  // namespace torch_tpu::aten
