// Row lookups and their gradients: index_select, embedding and
// embedding_dense_backward. Indices are int32 or int64; out-of-range indices
// fail a data check (PyTorch's error) and are clamped by gather and dropped
// by scatter.
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

// Rows of `x` along `dim` at `index` (any shape): the result has index's dims
// in place of `dim`.
Value take_along(Builder& b, const Value& x, int64_t dim, const Value& index) {
  int64_t k = index.rank();
  hlo::GatherDims g;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) g.offset_dims.push_back(i < dim ? i : i + k - 1);
  }
  g.collapsed_slice_dims = {dim};
  g.start_index_map = {dim};
  g.index_vector_dim = k;
  Dims sizes = x.dims();
  sizes[dim] = 1;
  Dims index_dims = index.dims();
  index_dims.push_back(1);
  return b.gather(x, b.reshape(index, index_dims), g, sizes);
}

// index_select(self, dim, index): index is a vector or a scalar.
std::vector<Value> index_select(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  if (x.rank() == 0) return {c.b.reshape(x, out.dims)};
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  Value index = a.tensor(2);
  index = c.b.reshape(index, {index.shape.numel()});
  check_index_range(c, index, runtime_size(c.b, x, dim), false, DataCheck::Error::Index,
                    "index out of range in self");
  // Every index into an empty dimension fails the check; XLA refuses the
  // gather. (A larger self is refused on the host: argument_checks.cpp.)
  if (x.dim(dim) == 0) return {c.b.full(out, 0)};
  return {take_along(c.b, x, dim, index)};
}

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse):
// weight rows at indices; the other arguments only matter to the gradient.
std::vector<Value> embedding(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  check_index_range(c, a.tensor(1), a.tensor(0).dim(0), false, DataCheck::Error::Index,
                    "index out of range in self");
  return {take_along(c.b, a.tensor(0), 0, a.tensor(1))};
}

Value scatter_add_rows(Builder& b, const Value& zeros, const Value& rows, const Value& index) {
  hlo::ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return b.scatter(zeros, index, rows, d,
                   [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                     return {r.add(v[0], v[1])};
                   });
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
//     scale_grad_by_freq): sums each index's gradient rows, skipping
//     padding_idx, each row scaled by 1 / (occurrences of its index).
std::vector<Value> embedding_dense_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType acc = accumulation_type(out.type);
  Value indices = a.tensor(1);
  int64_t n = indices.shape.numel(), width = out.dims[1];
  if (n == 0 || out.numel() == 0) return {c.b.full(out, 0)};
  Value index = c.b.reshape(convert(c.b, indices, kIndex), {n, 1});
  Value rows = c.b.reshape(convert(c.b, a.tensor(0), acc), {n, width});
  Dims row_dims{n, width};
  if (a.boolean(4)) {
    Value counts = scatter_add_rows(c.b, c.b.full({acc, {out.dims[0], 1}}, 0),
                                    c.b.full({acc, {n, 1}}, 1), index);
    Value mine = take_along(c.b, c.b.reshape(counts, {out.dims[0]}), 0, c.b.reshape(index, {n}));
    Value scale = c.b.div(c.b.full(mine.shape, 1), mine);
    rows = c.b.mul(rows, c.b.broadcast_in_dim(scale, row_dims, {0}));
  }
  Value padding = c.b.full({kIndex, {n, 1}}, static_cast<double>(a.integer(3)));
  Value is_padding = c.b.broadcast_in_dim(
      c.b.reshape(c.b.compare(index, padding, hlo::Comparison::EQ), {n}), row_dims, {0});
  rows = c.b.select(is_padding, c.b.full(rows.shape, 0), rows);
  return {scatter_add_rows(c.b, c.b.full({acc, out.dims}, 0), rows, index)};
}

}  // namespace

TPU_LOWERING(index_select, "index_select");
TPU_LOWERING(embedding, "embedding");
TPU_LOWERING(embedding_dense_backward, "embedding_dense_backward");

}  // namespace torch_tpu::lower
