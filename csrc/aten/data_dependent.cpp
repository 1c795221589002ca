// Data-dependent operators: each learns its result size with one
// synchronisation (a count or a maximum computed on the device), then runs
// natively through lowered operators (nonzero_static, index_put, cumsum, ...).
#include "aten/data_dependent.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>

#include <algorithm>

#include "aten/meta_errors.h"

namespace torch_tpu::aten {

namespace {

bool is_mask(const at::Tensor& t) {
  return t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
}

// The mask indexing `self` from dimension `dim` on covers those dimensions exactly.
void check_mask_shape(const at::Tensor& self, const at::Tensor& mask, int64_t dim) {
  for (int64_t k = 0; k < mask.dim(); ++k) {
    TORCH_CHECK_INDEX(dim + k < self.dim() && mask.size(k) == self.size(dim + k),
                      "The shape of the mask ", mask.sizes(), " at index ", k,
                      " does not match the shape of the indexed tensor ", self.sizes(),
                      " at index ", dim + k);
  }
}

// index.Tensor / index_put / _index_put_impl_: (self, Tensor?[] indices, ...).
void masks_to_indices(std::vector<c10::IValue>& stack, size_t num_args) {
  const size_t first = stack.size() - num_args;
  const at::Tensor self = stack[first].toTensor();
  c10::List<std::optional<at::Tensor>> indices = stack[first + 1].toOptionalTensorList();
  c10::List<std::optional<at::Tensor>> rewritten;
  bool changed = false;
  int64_t dim = 0;
  for (std::optional<at::Tensor> index : indices) {
    if (!index || !index->defined()) {
      rewritten.push_back(index);
      ++dim;
      continue;
    }
    // CPU indices of a tpu tensor are allowed (as CUDA allows them); a tpu index of
    // a CPU tensor is not, and the argument check says so.
    if (index->device().is_cpu() && index->device() != self.device()) {
      index = index->to(self.device());
      changed = true;
    }
    if (!is_mask(*index)) {
      rewritten.push_back(index);
      ++dim;
      continue;
    }
    if (index->scalar_type() == at::kByte) {
      TORCH_WARN(
          "indexing with dtype torch.uint8 is now deprecated, please use a dtype "
          "torch.bool instead.");
    }
    check_mask_shape(self, *index, dim);
    at::Tensor coordinates = at::nonzero(*index);
    for (int64_t k = 0; k < index->dim(); ++k) rewritten.push_back(coordinates.select(1, k));
    dim += index->dim();
    changed = true;
  }
  if (changed) stack[first + 1] = rewritten;
}

// index_put / _index_put_impl_ with one mask and one value (`x[x > 0] = 0`,
// Rprop's sign updates) is a select: the lowering takes the mask as it is, with
// no synchronisation and one program for every mask.
void masks_to_indices_unless_masked_fill(std::vector<c10::IValue>& stack, size_t num_args) {
  const size_t first = stack.size() - num_args;
  c10::List<std::optional<at::Tensor>> indices = stack[first + 1].toOptionalTensorList();
  const at::Tensor self = stack[first].toTensor();
  std::optional<at::Tensor> mask;
  int64_t defined = 0, dim = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(indices.size()); ++d) {
    std::optional<at::Tensor> index = indices.get(d);
    if (!index || !index->defined()) continue;
    ++defined;
    mask = index;
    dim = d;
  }
  bool fill = defined == 1 && is_mask(*mask) && mask->device() == self.device() &&
              stack[first + 2].toTensor().numel() == 1;
  if (!fill) return masks_to_indices(stack, num_args);
  check_mask_shape(self, *mask, dim);
}

// ---------------------------------------------------------------- kernels

at::Tensor nonzero_tpu(const at::Tensor& self) {
  int64_t count = at::count_nonzero(self).item<int64_t>();
  return at::nonzero_static(self, count, -1);
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  TORCH_CHECK(out.device() == self.device(),
              "expected self and out to be on the same device, but got out on ", out.device(),
              " and self on ", self.device());
  at::Tensor result = nonzero_tpu(self);
  out.resize_(result.sizes());
  return out.copy_(result);
}

at::Tensor masked_select_tpu(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto [s, m] = at::expand_outplace(self, mask);
  at::Tensor values = s->dim() == 0 ? s->reshape({1}) : *s;
  at::Tensor where = m->dim() == 0 ? m->reshape({1}) : *m;
  return at::index(values, c10::List<std::optional<at::Tensor>>({where}));
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  // The CPU's kernel refuses an out it would read while writing.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  at::Tensor result = masked_select_tpu(self, mask);
  out.resize_(result.sizes());
  return out.copy_(result);
}

bool equal_tpu(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(),
              "Cannot compare two tensors on different devices. Got: ", self.device(), " and ",
              other.device());
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

at::Tensor bincount_tpu(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt,
                        int64_t minlength) {
  // The CPU's and CUDA's order: their kernels dispatch on integral types first.
  TORCH_CHECK_NOT_IMPLEMENTED(at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
                              "\"bincount_tpu\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  const at::Tensor weights = weights_opt.value_or(at::Tensor());
  TORCH_CHECK(!weights.defined() || (weights.dim() == 1 && weights.size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  at::ScalarType dtype = !weights.defined()                    ? at::kLong
                         : weights.scalar_type() == at::kFloat ? at::kFloat
                                                               : at::kDouble;
  int64_t size = minlength;
  if (self.numel() > 0) {
    at::Tensor range = at::stack({self.min(), self.max()}).cpu();
    TORCH_CHECK(range[0].item<int64_t>() >= 0,
                "bincount only supports 1-d non-negative integral inputs.");
    size = std::max(size, range[1].item<int64_t>() + 1);
  }
  at::Tensor counts = at::zeros({size}, self.options().dtype(dtype));
  at::Tensor values = weights.defined() ? weights.to(dtype) : at::ones_like(self, dtype);
  return counts.index_put_({self.to(at::kLong)}, values, /*accumulate=*/true);
}

// repeat_interleave.Tensor(repeats, *, output_size=None): element i of the
// result is the j whose segment [start_j, end_j) holds i; marking each start
// with a 1 and summing gives it.
at::Tensor repeat_interleave_tpu(const at::Tensor& repeats,
                                 std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  at::Tensor ends = repeats.cumsum(0, at::kLong);
  int64_t total = 0;
  if (output_size) {
    total = output_size->expect_int();
  } else if (repeats.numel() > 0) {
    at::Tensor facts = at::stack({ends[-1], repeats.min().to(at::kLong)}).cpu();
    TORCH_CHECK(facts[1].item<int64_t>() >= 0, "repeats can not be negative");
    total = facts[0].item<int64_t>();
  }
  at::Tensor starts = ends - repeats;
  at::Tensor marks = at::zeros({total + 1}, repeats.options().dtype(at::kLong));
  marks.index_put_({starts}, at::ones_like(starts, at::kLong), /*accumulate=*/true);
  return (marks.slice(0, 0, total).cumsum(0) - 1).to(repeats.scalar_type());
}

// torch._assert_async: CUDA checks on the device; here the check reads the
// value back (one synchronisation).
void assert_async_msg(const at::Tensor& self, c10::string_view message) {
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  TORCH_CHECK(self.item().toBool(), message);
}

void assert_async(const at::Tensor& self) {
  assert_async_msg(self, "Expected Tensor with single nonzero value, but got zero");
}

at::Tensor functional_assert_async(const at::Tensor& self, c10::string_view message,
                                   const at::Tensor& dep_token) {
  assert_async_msg(self, message);
  return dep_token.clone();
}

// ---------------------------------------------------------------- unique

using UniqueResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Collapses runs of equal rows of `keys` (n x k, equal rows adjacent; `order`
// gives each row's original position) into unique entries taken from `source`
// along `dim`: the entries, each original row's entry, and the run lengths.
UniqueResult collapse_runs(const at::Tensor& keys, const at::Tensor& order,
                           const at::Tensor& source, int64_t dim, bool return_inverse,
                           bool return_counts) {
  const int64_t n = keys.size(0);
  at::TensorOptions longs = keys.options().dtype(at::kLong);
  if (n == 0) {
    return {source, at::empty({0}, longs), at::empty({0}, longs)};
  }
  at::Tensor differs = at::ne(keys.slice(0, 1), keys.slice(0, 0, n - 1));
  differs = differs.dim() > 1 ? differs.any(1) : differs;
  at::Tensor starts = at::cat({at::ones({1}, keys.options().dtype(at::kBool)), differs});
  at::Tensor group = starts.cumsum(0, at::kLong) - 1;
  int64_t count = group[-1].item<int64_t>() + 1;
  at::Tensor positions = at::nonzero_static(starts, count, -1).select(1, 0);
  at::Tensor entries = source.index_select(dim, order.index_select(0, positions));
  at::Tensor inverse = at::empty({0}, longs), counts = at::empty({0}, longs);
  if (return_inverse) inverse = at::empty({n}, longs).index_put_({order}, group);
  if (return_counts) {
    at::Tensor ends = at::cat({positions.slice(0, 1), at::full({1}, n, longs)});
    counts = ends - positions;
  }
  return {entries, inverse, counts};
}

// The permutation that sorts the rows of `rows` (n x k) lexicographically:
// stable sorts by each column, last column first.
at::Tensor lexicographic_order(const at::Tensor& rows) {
  at::Tensor order = at::arange(rows.size(0), rows.options().dtype(at::kLong));
  for (int64_t col = rows.size(1) - 1; col >= 0; --col) {
    at::Tensor keys = rows.select(1, col).index_select(0, order);
    order = order.index_select(0, std::get<1>(keys.sort(/*stable=*/true, 0, false)));
  }
  return order;
}

UniqueResult unique2_tpu(const at::Tensor& self, bool sorted, bool return_inverse,
                         bool return_counts) {
  refuse_as_cpu("aten::_unique2", "", {self, sorted, return_inverse, return_counts});
  // Always sorted, like CUDA.
  at::Tensor flat = self.reshape({-1});
  auto [keys, order] = flat.sort(/*stable=*/true, 0, false);
  auto [entries, inverse, counts] =
      collapse_runs(keys, order, flat, 0, return_inverse, return_counts);
  if (return_inverse) inverse = inverse.reshape(self.sizes());
  return {entries, inverse, counts};
}

std::tuple<at::Tensor, at::Tensor> unique_tpu(const at::Tensor& self, bool sorted,
                                              bool return_inverse) {
  auto [entries, inverse, counts] = unique2_tpu(self, sorted, return_inverse, false);
  return {entries, inverse};
}

UniqueResult unique_rows(const at::Tensor& self, int64_t dim, bool sort, bool return_inverse,
                         bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  // The CPU's rules for empty tensors.
  const auto zero_dims = std::count(self.sizes().begin(), self.sizes().end(), 0);
  if (self.size(dim) == 0) {
    TORCH_CHECK(zero_dims == 1,
                "Number of zero sized dimensions is more than one, so unique cannot be applied ");
    at::TensorOptions longs = self.options().dtype(at::kLong);
    return {at::empty(self.sizes(), self.options()), at::empty({0}, longs), at::empty({0}, longs)};
  }
  TORCH_CHECK(zero_dims == 0,
              "There are 0 sized dimensions, and they aren't selected, so unique cannot be "
              "applied");
  at::Tensor rows = self.movedim(dim, 0).reshape({self.size(dim), -1});
  at::Tensor order = sort && rows.size(1) > 0
                         ? lexicographic_order(rows)
                         : at::arange(rows.size(0), rows.options().dtype(at::kLong));
  return collapse_runs(rows.index_select(0, order), order, self, dim, return_inverse,
                       return_counts);
}

UniqueResult unique_dim_tpu(const at::Tensor& self, int64_t dim, bool sorted, bool return_inverse,
                            bool return_counts) {
  refuse_as_cpu("aten::unique_dim", "", {self, dim, sorted, return_inverse, return_counts});
  return unique_rows(self, dim, true, return_inverse, return_counts);
}

UniqueResult unique_dim_consecutive_tpu(const at::Tensor& self, int64_t dim, bool return_inverse,
                                        bool return_counts) {
  refuse_as_cpu("aten::unique_dim_consecutive", "", {self, dim, return_inverse, return_counts});
  return unique_rows(self, dim, false, return_inverse, return_counts);
}

UniqueResult unique_consecutive_tpu(const at::Tensor& self, bool return_inverse, bool return_counts,
                                    std::optional<int64_t> dim) {
  refuse_as_cpu("aten::unique_consecutive", "", {self, return_inverse, return_counts, dim});
  if (dim) return unique_rows(self, *dim, false, return_inverse, return_counts);
  at::Tensor flat = self.reshape({-1});
  at::Tensor order = at::arange(flat.numel(), flat.options().dtype(at::kLong));
  auto [entries, inverse, counts] =
      collapse_runs(flat, order, flat, 0, return_inverse, return_counts);
  if (return_inverse) inverse = inverse.reshape(self.sizes());
  return {entries, inverse, counts};
}

// nll_loss's uint8 targets, which the CPU's kernel takes and PyTorch's
// decomposition (the meta kernel) does not: widened to int64.
template <size_t target>
void byte_target_to_long(std::vector<c10::IValue>& stack, size_t num_args) {
  c10::IValue& arg = stack[stack.size() - num_args + target];
  if (arg.isTensor() && arg.toTensor().scalar_type() == at::kByte) {
    arg = arg.toTensor().to(at::kLong);
  }
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?):
// PyTorch's meta kernel reads the biases' devices even when they are None (an
// LSTM without bias); zero biases compute the same.
void lstm_cell_zero_biases(std::vector<c10::IValue>& stack, size_t num_args) {
  const size_t first = stack.size() - num_args;
  const at::Tensor gates = stack[first].toTensor();
  for (size_t i : {first + 3, first + 4}) {
    const bool absent = stack[i].isNone() || !stack[i].toTensor().defined();
    if (absent) stack[i] = at::zeros({gates.size(1)}, gates.options());
  }
}

}  // namespace

ArgumentRewrite find_argument_rewrite(const std::string& op_name) {
  if (op_name == "aten::_thnn_fused_lstm_cell") return &lstm_cell_zero_biases;
  if (op_name.rfind("aten::nll_loss_forward", 0) == 0 ||
      op_name.rfind("aten::nll_loss2d_forward", 0) == 0) {
    return &byte_target_to_long<1>;
  }
  if (op_name.rfind("aten::nll_loss_backward", 0) == 0 ||
      op_name.rfind("aten::nll_loss2d_backward", 0) == 0) {
    return &byte_target_to_long<2>;
  }
  if (op_name.rfind("aten::index.", 0) == 0) return &masks_to_indices;
  for (const char* name : {"aten::index_put", "aten::_index_put_impl_"}) {
    if (op_name.rfind(name, 0) == 0) return &masks_to_indices_unless_masked_fill;
  }
  return nullptr;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", nonzero_tpu);
  m.impl("nonzero.out", nonzero_out);
  m.impl("masked_select", masked_select_tpu);
  m.impl("masked_select.out", masked_select_out);
  m.impl("equal", equal_tpu);
  m.impl("_assert_async", assert_async);
  m.impl("_assert_async.msg", assert_async_msg);
  m.impl("_functional_assert_async.msg", functional_assert_async);
  m.impl("bincount", bincount_tpu);
  m.impl("repeat_interleave.Tensor", repeat_interleave_tpu);
  m.impl("_unique", unique_tpu);
  m.impl("_unique2", unique2_tpu);
  m.impl("unique_dim", unique_dim_tpu);
  m.impl("unique_consecutive", unique_consecutive_tpu);
  m.impl("unique_dim_consecutive", unique_dim_consecutive_tpu);
}

}  // namespace torch_tpu::aten
