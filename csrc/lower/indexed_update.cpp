// Indexed updates: index_add/copy/fill/reduce along a dimension,
// scatter_reduce, masked_scatter, take/put on the flattened tensor, and two
// neighbours that are updates of slices too (unfold_backward, renorm), plus
// linalg_cross. Indices are wrapped like PyTorch (-1 is the last element).
#include <limits>
#include <numeric>

#include "lower/complex_math.h"
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using Values = std::vector<Value>;

// s64 indices with negative values wrapped by `size`.

Dims iota_dims(int64_t n) {
  Dims d(n);
  std::iota(d.begin(), d.end(), 0);
  return d;
}

// Value a reduction starts from when include_self=False.
Value identity(Builder& b, const std::string& reduce, ElementType t) {
  if (reduce == "prod") return b.constant(1.0, t);
  if (reduce == "amax") return lowest_value(b, t);
  if (reduce == "amin") return highest_value(b, t);
  return b.constant(0.0, t);
}

// sum / count rounded like PyTorch's mean: true division for floating types,
// floor division for integers (count > 0).
Value mean_divide(Builder& b, const Value& sum, const Value& count) {
  if (is_complex(sum.type())) return complex_divide(b, sum, count);  // as div rounds
  Value q = b.div(sum, count);
  if (!is_integral(sum.type())) return q;
  Value inexact = b.compare(b.rem(sum, count), full_like(b, sum, 0), Comparison::NE);
  Value negative = b.compare(sum, full_like(b, sum, 0), Comparison::LT);
  return b.select(b.and_(inexact, negative), b.sub(q, full_like(b, q, 1)), q);
}

// ---------------------------------------------------------------- index_* along a dim

// Scatters whole slices of `x` along `dim`: slice index[i] combines with
// slice i of `updates` (x's shape with `dim` of the index's length).
Value slice_scatter(Builder& b, const Value& x, int64_t dim, const Value& index,
                    const Value& updates, const hlo::RegionFn& combine) {
  int64_t n = index.shape.numel();
  Value idx = b.reshape(wrap_index(b, index, x.dim(dim)), {n, 1});
  Dims window;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) window.push_back(d);
  }
  return b.scatter(x, idx, updates, hlo::ScatterDims{window, {dim}, {dim}, 1}, combine);
}

// The shape of the slices an index_* op writes: x with `dim` of length n.
Dims slices_shape(const Value& x, int64_t dim, int64_t n) {
  Dims d = x.dims();
  d[dim] = n;
  return d;
}

struct IndexOp {
  Value x;  // rank >= 1
  int64_t dim;
  Value index;
  bool scalar;  // self was 0-d
};

IndexOp index_op(Builder& b, const Args& a) {
  Value x = a.tensor(0);
  bool scalar = x.rank() == 0;
  if (scalar) x = b.reshape(x, {1});
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  return {x, dim, a.tensor(2), scalar};
}

// The CPU's check of op.index along op.dim: `message` may name the dim and
// size ("{dim}", "{size}") and has "{}" for the offending index.
void check_index(Context& c, const IndexOp& op, bool negative_ok, DataCheck::Error error,
                 std::string message) {
  int64_t size = op.x.dim(op.dim);
  for (auto [key, value] : {std::pair<std::string, int64_t>{"{dim}", op.dim}, {"{size}", size}}) {
    auto at = message.find(key);
    if (at != std::string::npos) message.replace(at, key.size(), std::to_string(value));
  }
  check_index_range(c, op.index, size, negative_ok, error, std::move(message));
}

constexpr const char* kOutOfBounds =
    "index {} is out of bounds for dimension {dim} with size {size}";

Value source_for(Builder& b, const IndexOp& op, const Value& source) {
  Dims dims = slices_shape(op.x, op.dim, op.index.shape.numel());
  return b.reshape(convert(b, source, op.x.type()), dims);
}

// index_add(self, int dim, Tensor index, Tensor source, *, Scalar alpha=1)
Values index_add(Context& c, const Args& a) {
  Builder& b = c.b;
  IndexOp op = index_op(b, a);
  // The CPU checks the indices into a self of rank <= 1 itself; a larger one
  // goes through scatter_add's check, but not when it has no elements: the
  // CPU returns before reading an index.
  const bool vector = a.tensor(0).rank() <= 1;
  if (op.index.shape.numel() == 0 || (!vector && op.x.shape.numel() == 0)) return {a.tensor(0)};
  if (vector) {
    check_index(c, op, false, DataCheck::Error::Index, "index out of range in self");
  } else {
    check_index(c, op, false, DataCheck::Error::Runtime, kOutOfBounds);
  }
  Value src = source_for(b, op, a.tensor(3));
  src = b.mul(src, broadcast_to(b, convert(b, a.tensor(4), src.type()), src.dims()));
  Value y = slice_scatter(b, op.x, op.dim, op.index, src, scatter_combiner("sum"));
  return {b.reshape(y, c.output(0).dims)};
}

// index_copy(self, int dim, Tensor index, Tensor source)
Values index_copy(Context& c, const Args& a) {
  Builder& b = c.b;
  IndexOp op = index_op(b, a);
  if (op.index.shape.numel() == 0) return {a.tensor(0)};
  check_index(c, op, false, DataCheck::Error::Index, std::string("index_copy_(): ") + kOutOfBounds);
  Value y = slice_scatter(b, op.x, op.dim, op.index, source_for(b, op, a.tensor(3)),
                          scatter_combiner("replace"));
  return {b.reshape(y, c.output(0).dims)};
}

// index_fill.int_Scalar(self, int dim, Tensor index, Scalar value) / int_Tensor
Values index_fill(Context& c, const Args& a) {
  Builder& b = c.b;
  IndexOp op = index_op(b, a);
  if (op.index.shape.numel() == 0) return {a.tensor(0)};
  check_index(c, op, true, DataCheck::Error::Index, kOutOfBounds);
  Dims dims = slices_shape(op.x, op.dim, op.index.shape.numel());
  Value value = broadcast_to(b, convert(b, a.tensor(3), op.x.type()), dims);
  Value y = slice_scatter(b, op.x, op.dim, op.index, value, scatter_combiner("replace"));
  return {b.reshape(y, c.output(0).dims)};
}

// index_reduce(self, int dim, Tensor index, Tensor source, str reduce, *,
//   bool include_self=True). Without self, the indexed slices first take the
// reduction's identity; mean divides by the number of contributions.
Values index_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  IndexOp op = index_op(b, a);
  const std::string& reduce = a.str(4);
  bool include_self = a.boolean(5);
  if (op.index.shape.numel() == 0) return {a.tensor(0)};
  check_index(c, op, false, DataCheck::Error::Index, "index out of range in self");
  Value src = source_for(b, op, a.tensor(3));
  Value x = op.x;
  ElementType t = x.type();
  if (!include_self) {
    Value init = b.broadcast_in_dim(identity(b, reduce, t), src.dims(), {});
    x = slice_scatter(b, x, op.dim, op.index, init, scatter_combiner("replace"));
  }
  Value y = slice_scatter(b, x, op.dim, op.index, src, scatter_combiner(reduce));
  if (reduce == "mean") {
    Value count = b.full(x.shape, include_self ? 1 : 0);
    count =
        slice_scatter(b, count, op.dim, op.index, b.full(src.shape, 1), scatter_combiner("sum"));
    count = b.max(count, b.full(count.shape, 1));
    y = mean_divide(b, y, count);
  }
  return {b.reshape(y, c.output(0).dims)};
}

// ---------------------------------------------------------------- scatter_reduce

// Coordinates for scattering along `dim`: for each element of `index`, its
// own position in every dim but `dim`, where it takes the index.
Value coordinates(Builder& b, const Value& index, int64_t dim, int64_t dim_size) {
  Dims with_vector = index.dims();
  with_vector.push_back(1);
  Values coords;
  for (int64_t d = 0; d < index.rank(); ++d) {
    Value coord =
        d == dim ? wrap_index(b, index, dim_size) : b.iota({ElementType::S64, index.dims()}, d);
    coords.push_back(b.reshape(coord, with_vector));
  }
  return b.concatenate(coords, index.rank());
}

Value point_scatter(Builder& b, const Value& x, const Value& coords, const Value& updates,
                    const hlo::RegionFn& combine) {
  Dims all = iota_dims(x.rank());
  return b.scatter(x, coords, updates, hlo::ScatterDims{{}, all, all, coords.rank() - 1}, combine);
}

// scatter_reduce.two(self, int dim, Tensor index, Tensor src, str reduce, *,
//   bool include_self=True)
Values scatter_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  Value index = a.tensor(2);
  const std::string& reduce = a.str(4);
  bool include_self = a.boolean(5);
  if (index.shape.numel() == 0) return {x};
  if (x.rank() == 0) x = b.reshape(x, {1});
  if (index.rank() == 0) index = b.reshape(index, {1});
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  check_index(c, {x, dim, index, false}, false, DataCheck::Error::Runtime, kOutOfBounds);
  ElementType t = x.type();
  Value src = convert(b, a.tensor(3), t);
  if (src.rank() == 0) src = b.reshape(src, {1});
  // src may be larger than index: only its leading corner is used.
  src = b.slice(src, Dims(src.rank(), 0), index.dims(), Dims(src.rank(), 1));
  Value coords = coordinates(b, index, dim, x.dim(dim));
  if (!include_self) {
    Value init = b.broadcast_in_dim(identity(b, reduce, t), index.dims(), {});
    x = point_scatter(b, x, coords, init, scatter_combiner("replace"));
  }
  Value y = point_scatter(b, x, coords, src, scatter_combiner(reduce));
  if (reduce == "mean") {
    Value count = b.full(x.shape, include_self ? 1 : 0);
    count = point_scatter(b, count, coords, b.full(src.shape, 1), scatter_combiner("sum"));
    count = b.max(count, b.full(count.shape, 1));
    y = mean_divide(b, y, count);
  }
  return {b.reshape(y, c.output(0).dims)};
}

// ---------------------------------------------------------------- masked_scatter

// Inclusive prefix sum of a 1-D s64 value by doubling (log2(n) steps).
Value prefix_sum(Builder& b, Value x) {
  int64_t n = x.dim(0);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value earlier = b.pad(x, b.constant_int(0, x.type()), {shift}, {0}, {0});
    x = b.add(x, b.slice(earlier, {0}, {n}, {1}));
  }
  return x;
}

// For each element of a flat mask, its rank among the set elements (0 for
// the first set one).
Value mask_rank(Builder& b, const Value& flat_mask) {
  Value ones = b.convert(flat_mask, ElementType::S64);
  return b.sub(prefix_sum(b, ones), b.full(ones.shape, 1));
}

Value as_mask(Builder& b, const Value& m) {
  if (m.type() == ElementType::Pred) return m;
  return b.compare(m, full_like(b, m, 0), Comparison::NE);
}

// masked_scatter(self, Tensor mask, Tensor source): the set positions of the
// (broadcast) mask take source's elements in order.
Values masked_scatter(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  Value x = broadcast_to(b, a.tensor(0), out.dims);
  Value mask = broadcast_to(b, as_mask(b, a.tensor(1)), out.dims);
  Value source = convert(b, a.tensor(2), out.type);
  int64_t n = out.numel(), s = source.shape.numel();
  if (n == 0 || s == 0) return {x};
  Value flat_mask = b.reshape(mask, {n});
  Value rank = mask_rank(b, flat_mask);
  check_none(c,
             b.and_(flat_mask,
                    b.compare(rank, b.full(rank.shape, static_cast<double>(s)), Comparison::GE)),
             DataCheck::Error::Runtime, "Number of elements of source < number of ones in mask");
  Value pos =
      b.clamp(b.constant_int(0, ElementType::S64), rank, b.constant_int(s - 1, ElementType::S64));
  Value taken = b.gather(b.reshape(source, {s}), b.reshape(pos, {n, 1}),
                         hlo::GatherDims{{}, {0}, {0}, 1}, {1});
  return {b.select(mask, b.reshape(taken, out.dims), x)};
}

// masked_scatter_backward(grad_output, Tensor mask, SymInt[] sizes): the
// gradient at the set positions, packed in order, then zeros.
Values masked_scatter_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  Value grad = a.tensor(0);
  Value mask = as_mask(b, a.tensor(1));
  Dims dims = broadcast_shapes(grad.dims(), mask.dims());
  grad = broadcast_to(b, convert(b, grad, out.type), dims);
  mask = broadcast_to(b, mask, dims);
  int64_t n = grad.shape.numel(), total = out.numel();
  if (n == 0 || total == 0) return {b.full(out, 0)};
  Value flat_mask = b.reshape(mask, {n});
  // Unset positions go out of bounds, which the scatter drops.
  Value target = b.select(flat_mask, mask_rank(b, flat_mask),
                          b.full({ElementType::S64, {n}}, static_cast<double>(total)));
  Value packed =
      b.scatter(b.full({out.type, {total}}, 0), b.reshape(target, {n, 1}), b.reshape(grad, {n}),
                hlo::ScatterDims{{}, {0}, {0}, 1}, scatter_combiner("replace"));
  return {b.reshape(packed, out.dims)};
}

// ---------------------------------------------------------------- take, put

std::string out_of_range(int64_t n) {
  return "out of range: tried to access index {} on a tensor of " + std::to_string(n) +
         " elements.";
}

// take(self, Tensor index): self flattened, indexed.
Values take(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  Value index = a.tensor(1);
  int64_t n = x.shape.numel(), k = index.shape.numel();
  if (k == 0 || n == 0) return {b.full(c.output(0), 0)};
  check_index_range(c, index, n, true, DataCheck::Error::Index, out_of_range(n));
  Value idx = b.reshape(wrap_index(b, index, n), {k, 1});
  Value y = b.gather(b.reshape(x, {n}), idx, hlo::GatherDims{{}, {0}, {0}, 1}, {1});
  return {b.reshape(y, c.output(0).dims)};
}

// put(self, Tensor index, Tensor source, bool accumulate=False)
Values put(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  Value index = a.tensor(1);
  int64_t n = x.shape.numel(), k = index.shape.numel();
  if (k == 0 || n == 0) return {x};
  check_index_range(c, index, n, true, DataCheck::Error::Index, out_of_range(n));
  Value idx = b.reshape(wrap_index(b, index, n), {k, 1});
  Value src = b.reshape(convert(b, a.tensor(2), x.type()), {k});
  Value y = b.scatter(b.reshape(x, {n}), idx, src, hlo::ScatterDims{{}, {0}, {0}, 1},
                      scatter_combiner(a.boolean(3) ? "sum" : "replace"));
  return {b.reshape(y, x.dims())};
}

// ---------------------------------------------------------------- unfold_backward, renorm, cross

// unfold_backward(grad_in, SymInt[] input_sizes, int dim, int size, int step):
// window w's element k adds into position w * step + k along dim.
Values unfold_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  Value grad = convert(b, a.tensor(0), out.type);
  if (out.rank() == 0) return {b.reshape(grad, {})};
  int64_t rank = out.rank();
  int64_t dim = wrap_dim(a.integer(2), rank);
  int64_t size = a.integer(3), step = a.integer(4);
  int64_t windows = grad.dim(dim);
  if (out.numel() == 0 || grad.shape.numel() == 0) return {b.full(out, 0)};
  // grad is [..., windows (at dim), ..., size]; put windows and size last.
  Dims perm;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) perm.push_back(d);
  }
  perm.push_back(dim);
  perm.push_back(rank);
  Value updates = b.transpose(grad, perm);
  Shape pos_shape{ElementType::S64, {windows, size}};
  Value pos = b.add(b.mul(b.iota(pos_shape, 0), b.full(pos_shape, static_cast<double>(step))),
                    b.iota(pos_shape, 1));
  Value indices = b.reshape(pos, {windows, size, 1});
  Value y =
      b.scatter(b.full(out, 0), indices, updates,
                hlo::ScatterDims{iota_dims(rank - 1), {dim}, {dim}, 2}, scatter_combiner("sum"));
  return {y};
}

// renorm(self, Scalar p, int dim, Scalar maxnorm): each slice along dim whose
// p-norm exceeds maxnorm is scaled by maxnorm / (norm + 1e-7), the factor
// computed in the accumulation type like PyTorch.
Values renorm(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  if (x.shape.numel() == 0) return {x};
  int64_t dim = wrap_dim(a.integer(2), x.rank());
  ElementType real = is_complex(x.type()) ? complex_component(x.type()) : x.type();
  ElementType acc = accumulation_type(real);
  Value mag = convert(b, b.abs(x), acc);
  Dims reduce;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) reduce.push_back(d);
  }
  Value p = convert(b, a.tensor(1), acc);
  Value powered = b.pow(mag, broadcast_to(b, p, mag.dims()));
  Value sum = reduce_sum(b, powered, reduce);
  Value norm = b.pow(sum, broadcast_to(b, b.div(b.constant(1.0, acc), p), sum.dims()));
  Value is_inf =
      b.compare(p, b.constant(std::numeric_limits<double>::infinity(), acc), Comparison::EQ);
  norm = b.select(broadcast_to(b, is_inf, norm.dims()), reduce_max(b, mag, reduce), norm);
  Value maxnorm = broadcast_to(b, convert(b, a.tensor(3), acc), norm.dims());
  Value scale = b.div(maxnorm, b.add(norm, b.full(norm.shape, 1e-7)));
  Value factor = b.select(b.compare(norm, maxnorm, Comparison::GT), scale, b.full(norm.shape, 1));
  factor = convert(b, convert(b, factor, real), x.type());
  return {b.mul(x, b.broadcast_in_dim(factor, x.dims(), {dim}))};
}

// linalg_cross(self, Tensor other, *, int dim=-1)
Values linalg_cross(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  auto v = promote(b, {&a.operand(0), &a.operand(1)}, out.type);
  Value x = broadcast_to(b, v[0], out.dims), y = broadcast_to(b, v[1], out.dims);
  int64_t dim = wrap_dim(a.integer(2), out.rank());
  auto part = [&](const Value& t, int64_t i) {
    Dims start(out.rank(), 0), limit = out.dims, strides(out.rank(), 1);
    start[dim] = i;
    limit[dim] = i + 1;
    return b.slice(t, start, limit, strides);
  };
  auto term = [&](int64_t i, int64_t j) {
    return b.sub(b.mul(part(x, i), part(y, j)), b.mul(part(x, j), part(y, i)));
  };
  return {b.concatenate({term(1, 2), term(2, 0), term(0, 1)}, dim)};
}

}  // namespace

TPU_LOWERING(index_add, "index_add");
TPU_LOWERING(index_copy, "index_copy");
TPU_LOWERING(index_fill, "index_fill.int_Scalar", "index_fill.int_Tensor");
TPU_LOWERING(index_reduce, "index_reduce");
TPU_LOWERING(scatter_reduce, "scatter_reduce.two");
TPU_LOWERING(masked_scatter, "masked_scatter");
TPU_LOWERING(masked_scatter_backward, "masked_scatter_backward");
TPU_LOWERING(take, "take");
TPU_LOWERING(put, "put");
TPU_LOWERING(unfold_backward, "unfold_backward");
TPU_LOWERING(renorm, "renorm");
TPU_LOWERING(linalg_cross, "linalg_cross");

}  // namespace torch_tpu::lower
