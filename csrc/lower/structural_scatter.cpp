// Writing a tensor into a view of another (slice/select/diagonal scatters)
// and the backward operators of those views, which scatter into zeros.
#include <limits>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// PyTorch's slice bounds: wrapped, clamped to [0, size], end >= start.
std::pair<int64_t, int64_t> slice_bounds(std::optional<int64_t> start, std::optional<int64_t> end,
                                         int64_t size) {
  int64_t s = start.value_or(0), e = end.value_or(std::numeric_limits<int64_t>::max());
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = std::clamp<int64_t>(e, s, size);
  return {s, e};
}

// `base` with `src` written at positions start, start + step, ... of `dim`:
// src padded into place (interior padding for the step) and chosen by a mask
// padded the same way.
Value embed(Builder& b, const Value& base, const Value& src, int64_t dim, int64_t start,
            int64_t step) {
  int64_t n = src.dim(dim);
  if (n == 0 || base.shape.numel() == 0) return base;
  Value s = convert(b, src, base.type());
  Dims low(base.rank(), 0), high(base.rank(), 0), interior(base.rank(), 0);
  low[dim] = start;
  interior[dim] = step - 1;
  high[dim] = base.dim(dim) - (start + (n - 1) * step + 1);
  Value padded = b.pad(s, scalar(b, 0, base.type()), low, high, interior);
  Value ones = b.full({ElementType::Pred, s.dims()}, 1);
  Value mask = b.pad(ones, b.constant_bool(false), low, high, interior);
  return b.select(mask, padded, base);
}

Value slice_into(Builder& b, const Value& base, const Value& src, int64_t dim,
                 std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  dim = wrap_dim(dim, base.rank());
  auto [s, e] = slice_bounds(start, end, base.dim(dim));
  (void)e;
  return embed(b, base, src, dim, s, step);
}

Value select_into(Builder& b, const Value& base, const Value& src, int64_t dim, int64_t index) {
  dim = wrap_dim(dim, base.rank());
  if (index < 0) index += base.dim(dim);
  Dims with_dim = base.dims();
  with_dim[dim] = 1;
  return embed(b, base, b.reshape(src, with_dim), dim, index, 1);
}

// The diagonal's element k sits at (k, k + offset) of (dim1, dim2) for
// offset >= 0 and at (k - offset, k) otherwise: src, padded along its last
// dim to the size of the dim that counts k, is broadcast along the other one
// and chosen where column - row == offset.
Value diagonal_into(Builder& b, const Value& base, const Value& src, int64_t offset, int64_t dim1,
                    int64_t dim2) {
  int64_t rank = base.rank();
  dim1 = wrap_dim(dim1, rank);
  dim2 = wrap_dim(dim2, rank);
  if (src.shape.numel() == 0 || base.shape.numel() == 0) return base;
  int64_t along = offset >= 0 ? dim1 : dim2;
  Value s = convert(b, src, base.type());
  Dims low(s.rank(), 0), high(s.rank(), 0), interior(s.rank(), 0);
  high.back() = base.dim(along) - s.dims().back();
  s = b.pad(s, scalar(b, 0, base.type()), low, high, interior);
  Dims mapping;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim1 && d != dim2) mapping.push_back(d);
  }
  mapping.push_back(along);
  Value full = b.broadcast_in_dim(s, base.dims(), mapping);
  Shape idx{ElementType::S64, base.dims()};
  Value diff = b.sub(b.iota(idx, dim2), b.iota(idx, dim1));
  Value on_diagonal =
      b.compare(diff, b.full(idx, static_cast<double>(offset)), hlo::Comparison::EQ);
  return b.select(on_diagonal, full, base);
}

// slice_scatter(self, src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)
std::vector<Value> slice_scatter(Context& c, const Args& a) {
  return {slice_into(c.b, a.tensor(0), a.tensor(1), a.integer(2), a.optional_integer(3),
                     a.optional_integer(4), a.integer(5))};
}

// select_scatter(self, src, int dim, SymInt index)
std::vector<Value> select_scatter(Context& c, const Args& a) {
  return {select_into(c.b, a.tensor(0), a.tensor(1), a.integer(2), a.integer(3))};
}

// diagonal_scatter(self, src, int offset=0, int dim1=0, int dim2=1)
std::vector<Value> diagonal_scatter(Context& c, const Args& a) {
  return {diagonal_into(c.b, a.tensor(0), a.tensor(1), a.integer(2), a.integer(3), a.integer(4))};
}

Value zeros(Context& c) { return c.b.full(c.output(0), 0); }

// select_backward(grad_output, SymInt[] input_sizes, int dim, SymInt index)
std::vector<Value> select_backward(Context& c, const Args& a) {
  return {select_into(c.b, zeros(c), a.tensor(0), a.integer(2), a.integer(3))};
}

// slice_backward(grad_output, SymInt[] input_sizes, int dim, SymInt start, SymInt end,
// SymInt step)
std::vector<Value> slice_backward(Context& c, const Args& a) {
  return {slice_into(c.b, zeros(c), a.tensor(0), a.integer(2), a.integer(3), a.integer(4),
                     a.integer(5))};
}

// diagonal_backward(grad_output, SymInt[] input_sizes, int offset, int dim1, int dim2)
std::vector<Value> diagonal_backward(Context& c, const Args& a) {
  return {diagonal_into(c.b, zeros(c), a.tensor(0), a.integer(2), a.integer(3), a.integer(4))};
}

}  // namespace

TPU_LOWERING(slice_scatter, "slice_scatter");
TPU_LOWERING(select_scatter, "select_scatter");
TPU_LOWERING(diagonal_scatter, "diagonal_scatter");
TPU_LOWERING(select_backward, "select_backward");
TPU_LOWERING(slice_backward, "slice_backward");
TPU_LOWERING(diagonal_backward, "diagonal_backward");

}  // namespace torch_tpu::lower
