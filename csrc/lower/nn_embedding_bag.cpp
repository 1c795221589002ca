// embedding_bag: sums, means or maxima of weight rows grouped into bags by
// `offsets`, and the gradients. Bags are computed on the device from the
// offsets (offset2bag: the bag of every index), so nothing is data dependent.
// Result shapes follow PyTorch's meta kernel (bag_size has one entry per
// offset). The forward checks the offsets and indices as the CPU's kernel
// does (data checks); the gradients take the indices their forward checked.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

// at::native EmbeddingBag modes
enum Mode : int64_t { kSum = 0, kMean = 1, kMax = 2 };

Value index_constant(Builder& b, const Shape& like, int64_t v) {
  return b.full({kIndex, like.dims}, static_cast<double>(v));
}

// Rows of `table` ([rows, D]) at `index` ([n] s64, clamped into range): [n, D].
Value rows_at(Builder& b, const Value& table, const Value& index) {
  int64_t n = index.dim(0);
  Value lo = index_constant(b, index.shape, 0);
  Value hi = index_constant(b, index.shape, table.dim(0) - 1);
  hlo::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value where = b.reshape(b.clamp(lo, index, hi), {n, 1});
  return b.gather(table, where, g, {1, table.dim(1)});
}

// Elements of the vector `v` at `index` (any shape, clamped): index's shape.
Value elements_at(Builder& b, const Value& v, const Value& index) {
  Value lo = index_constant(b, index.shape, 0);
  Value hi = index_constant(b, index.shape, v.dim(0) - 1);
  hlo::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = index.rank();
  Dims dims = index.dims();
  dims.push_back(1);
  return b.gather(v, b.reshape(b.clamp(lo, index, hi), dims), g, {1});
}

using Combine = Value (Builder::*)(const Value&, const Value&);

// Combines `updates` ([n, ...]) into `into` at rows `index` ([n]).
Value scatter_rows(Builder& b, const Value& into, const Value& index, const Value& updates,
                   Combine op) {
  int64_t n = index.dim(0);
  hlo::ScatterDims d;
  for (int64_t i = 1; i < updates.rank(); ++i) d.update_window_dims.push_back(i);
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return b.scatter(into, b.reshape(index, {n, 1}), updates, d,
                   [op](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                     return {(r.*op)(v[0], v[1])};
                   });
}

// Inclusive prefix sum of a vector by doubling: log2(n) shifted adds.
Value prefix_sum(Builder& b, Value x) {
  int64_t n = x.dim(0);
  Value zero = b.constant(0, x.type());
  for (int64_t s = 1; s < n; s *= 2) {
    x = b.add(x, b.pad(b.slice(x, {0}, {n - s}, {1}), zero, {s}, {0}, {0}));
  }
  return x;
}

// PyTorch's make_offset2bag: the bag of index i is the number of offsets
// <= i, less one, kept within the `bags` bags (an include_last_offset
// offset equal to n marks no index).
Value offset2bag(Builder& b, const Value& offsets, int64_t n, int64_t bags) {
  Value off = convert(b, offsets, kIndex);
  Value ones = b.full({kIndex, off.dims()}, 1);
  Value marks = scatter_rows(b, b.full({kIndex, {n + 1}}, 0), off, ones, &Builder::add);
  Value bag = b.sub(prefix_sum(b, b.slice(marks, {0}, {n}, {1})), b.full({kIndex, {n}}, 1));
  return b.clamp(b.full(bag.shape, 0), bag, b.full(bag.shape, static_cast<double>(bags - 1)));
}

// The bag of every index: the offset2bag PyTorch passed along, or recomputed
// from the offsets (sum mode without padding_idx passes an empty one).
Value bags_of(Builder& b, const Args& a, size_t offsets, size_t o2b, int64_t n, int64_t bags) {
  Value given = a.tensor(o2b);
  if (given.shape.numel() == n) return convert(b, b.reshape(given, {n}), kIndex);
  return offset2bag(b, a.tensor(offsets), n, bags);
}

Value not_padding(Builder& b, const Value& indices, int64_t padding_idx) {
  return b.compare(indices, index_constant(b, indices.shape, padding_idx), hlo::Comparison::NE);
}

Value rows_mask(Builder& b, const Value& keep, const Dims& dims) {
  return b.broadcast_in_dim(keep, dims, {0});
}

// Per bag and column, the first position holding the bag's maximum (n when
// the bag is empty), as PyTorch's scan `if (first || v > max)` keeps it.
Value first_max_positions(Builder& b, const Value& rows, const Value& kept, const Value& bag,
                          int64_t bags) {
  int64_t n = rows.dim(0), width = rows.dim(1);
  Value lowest = b.broadcast_in_dim(lowest_value(b, rows.type()), rows.dims(), {});
  Value mask = rows_mask(b, kept, rows.dims());
  Value values = b.select(mask, rows, lowest);
  Value init = b.broadcast_in_dim(lowest_value(b, rows.type()), {bags, width}, {});
  Value maxima = scatter_rows(b, init, bag, values, &Builder::max);
  Value mine = rows_at(b, maxima, bag);
  Value hit = b.and_(mask, b.compare(values, mine, hlo::Comparison::EQ));
  Value position = b.iota({kIndex, rows.dims()}, 0);
  Value none = index_constant(b, rows.shape, n);
  return scatter_rows(b, b.full({kIndex, {bags, width}}, static_cast<double>(n)), bag,
                      b.select(hit, position, none), &Builder::min);
}

// The CPU's checks of embedding_bag's data, in its order: the first offset is
// 0 and the last at most the number of indices, then every index names a row.
// (The CPU's fbgemm kernels, for float sums and means without padding_idx,
// word a bad index otherwise, and by where they meet it; this is the words of
// its other kernels.)
void check_offsets_and_indices(Context& c, const Value& offsets, const Value& indices,
                               int64_t rows) {
  Builder& b = c.b;
  const int64_t count = offsets.shape.numel();
  if (count > 0) {
    Value off = b.reshape(convert(b, offsets, kIndex), {count});
    Value first = b.reshape(b.slice(off, {0}, {1}, {1}), {});
    Value last = b.reshape(b.slice(off, {count - 1}, {count}, {1}), {});
    c.check({b.compare(first, b.constant(0, kIndex), hlo::Comparison::NE), first,
             DataCheck::Error::Runtime,
             "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
             "from position 0. However, got {}"});
    const int64_t n = indices.shape.numel();
    c.check({b.compare(last, b.constant(static_cast<double>(n), kIndex), hlo::Comparison::GT), last,
             DataCheck::Error::Runtime,
             "offsets[-1] can not be greater than input's length " + std::to_string(n) +
                 " but got offsets[-1] of {}"});
  }
  check_index_range(c, indices, rows, false, DataCheck::Error::Runtime,
                    "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to "
                    "be {}");
}

// _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets,
//     scale_grad_by_freq, mode, sparse, per_sample_weights,
//     include_last_offset, padding_idx)
//     -> (output, offset2bag, bag_size, max_indices)
std::vector<Value> embedding_bag(Context& c, const Args& a) {
  const Shape &out = c.output(0), &o2b_shape = c.output(1), &size_shape = c.output(2),
              &max_shape = c.output(3);
  int64_t mode = a.integer(4), padding_idx = a.integer(8);
  Value indices = convert(c.b, a.tensor(1), kIndex);
  int64_t n = indices.shape.numel(), bags = out.dims[0], width = out.dims[1];
  indices = c.b.reshape(indices, {n});
  std::vector<Value> zeros{c.b.full(out, 0), c.b.full(o2b_shape, 0), c.b.full(size_shape, 0),
                           c.b.full(max_shape, 0)};
  check_offsets_and_indices(c, a.tensor(2), indices, a.tensor(0).dim(0));
  if (n == 0 || bags == 0 || width == 0) return zeros;
  ElementType acc = accumulation_type(out.type);
  Value bag = offset2bag(c.b, a.tensor(2), n, bags);
  Value kept = not_padding(c.b, indices, padding_idx);
  Value rows = convert(c.b, rows_at(c.b, a.tensor(0), indices), acc);
  Value counts = scatter_rows(c.b, c.b.full({kIndex, size_shape.dims}, 0), bag,
                              convert(c.b, kept, kIndex), &Builder::add);
  Value o2b = o2b_shape.numel() == n ? c.b.reshape(bag, o2b_shape.dims) : zeros[1];
  Value bag_size = mode == kSum ? zeros[2] : counts;
  Value bag_counts = c.b.slice(counts, {0}, {bags}, {1});
  Dims out_dims{bags, width};

  if (mode == kMax) {
    Value first = first_max_positions(c.b, rows, kept, bag, bags);
    Value nonempty = c.b.compare(first, index_constant(c.b, first.shape, n), hlo::Comparison::LT);
    Value row = elements_at(c.b, indices, first);
    Value max_indices = c.b.select(nonempty, row, c.b.full(row.shape, 0));
    Value columns = c.b.broadcast_in_dim(c.b.iota({kIndex, {width}}, 0), out_dims, {1});
    Value flat = c.b.add(c.b.mul(c.b.clamp(index_constant(c.b, first.shape, 0), first,
                                           index_constant(c.b, first.shape, n - 1)),
                                 index_constant(c.b, first.shape, width)),
                         columns);
    Value picked = elements_at(c.b, c.b.reshape(rows, {n * width}), flat);
    Value output = c.b.select(nonempty, picked, c.b.full(picked.shape, 0));
    return {output, o2b, bag_size, max_indices};
  }

  if (!a.is_none(6)) {
    Value w = convert(c.b, c.b.reshape(a.tensor(6), {n}), acc);
    rows = c.b.mul(rows, c.b.broadcast_in_dim(w, rows.dims(), {0}));
  }
  rows = c.b.select(rows_mask(c.b, kept, rows.dims()), rows, c.b.full(rows.shape, 0));
  Value output = scatter_rows(c.b, c.b.full({acc, out_dims}, 0), bag, rows, &Builder::add);
  if (mode == kMean) {
    Value count = convert(c.b, bag_counts, acc);
    count = c.b.max(count, c.b.full(count.shape, 1));
    output = c.b.div(output, c.b.broadcast_in_dim(count, out_dims, {0}));
  }
  return {output, o2b, bag_size, zeros[3]};
}

Value like(Builder& b, const Value& x, double v) { return b.full(x.shape, v); }

// The count scale_grad_by_freq divides index i's gradient by, as PyTorch's
// CPU kernel reads it: counts[sorted[r]], with r the number of distinct
// indices smaller than indices[i] (its loop reads `indices_data[i]` with the
// unique-group number i), which is indices[i]'s own count only when the
// indices are 0..k-1.
Value frequency_as_cpu(Builder& b, const Value& indices, int64_t rows, ElementType t) {
  int64_t n = indices.dim(0);
  Value counts = scatter_rows(b, b.full({kIndex, {rows}}, 0), indices, b.full({kIndex, {n}}, 1),
                              &Builder::add);
  Value present = b.convert(b.compare(counts, like(b, counts, 0), hlo::Comparison::GT), kIndex);
  Value below = b.sub(prefix_sum(b, present), present);
  Value rank = elements_at(b, below, indices);
  Value sorted =
      b.sort({indices}, 0, true, [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
        return {r.compare(v[0], v[1], hlo::Comparison::LT)};
      })[0];
  return convert(b, elements_at(b, counts, elements_at(b, sorted, rank)), t);
}

// Gradient of the weight for every mode. `bag` gives each index's bag.
Value dense_backward(Context& c, const Args& a, const Value& indices, const Value& bag,
                     size_t bag_size_arg, size_t max_arg, size_t sgbf_arg, size_t mode_arg,
                     size_t psw_arg, size_t padding_arg) {
  const Shape& out = c.output(0);
  ElementType acc = accumulation_type(out.type);
  int64_t n = indices.dim(0), mode = a.integer(mode_arg);
  Value grad = convert(c.b, a.tensor(0), acc);
  int64_t bags = grad.dim(0), width = grad.dim(1);
  Value zeros = c.b.full({acc, out.dims}, 0);
  if (out.numel() == 0 || bags == 0) return zeros;
  Value bag_size = convert(c.b, a.tensor(bag_size_arg), kIndex);
  bag_size = c.b.slice(bag_size, {0}, {bags}, {1});

  if (mode == kMax) {
    // grad_weight[max_indices[b, d], d] += grad[b, d] over non-empty bags.
    Value nonempty =
        c.b.compare(bag_size, index_constant(c.b, bag_size.shape, 0), hlo::Comparison::GT);
    Value g = c.b.select(rows_mask(c.b, nonempty, grad.dims()), grad, c.b.full(grad.shape, 0));
    Value rows = convert(c.b, a.tensor(max_arg), kIndex);
    Value columns = c.b.iota({kIndex, grad.dims()}, 1);
    Dims where_dims{bags * width, 1};
    Value where =
        c.b.concatenate({c.b.reshape(rows, where_dims), c.b.reshape(columns, where_dims)}, 1);
    hlo::ScatterDims d;
    d.inserted_window_dims = {0, 1};
    d.scatter_dims_to_operand_dims = {0, 1};
    d.index_vector_dim = 1;
    return c.b.scatter(zeros, where, c.b.reshape(g, {bags * width}), d,
                       [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                         return {r.add(v[0], v[1])};
                       });
  }
  if (n == 0) return zeros;

  Value rows = rows_at(c.b, grad, bag);
  Value scale = c.b.full({acc, {n}}, 1);
  if (!a.is_none(psw_arg)) scale = convert(c.b, c.b.reshape(a.tensor(psw_arg), {n}), acc);
  if (a.boolean(sgbf_arg)) scale = c.b.div(scale, frequency_as_cpu(c.b, indices, out.dims[0], acc));
  if (mode == kMean) {
    Value size = convert(c.b, elements_at(c.b, bag_size, bag), acc);
    Value empty = c.b.compare(size, like(c.b, size, 0), hlo::Comparison::EQ);
    scale = c.b.div(scale, c.b.select(empty, like(c.b, size, 1), size));
  }
  Value kept = not_padding(c.b, indices, a.integer(padding_arg));
  scale = c.b.select(kept, scale, c.b.full(scale.shape, 0));
  rows = c.b.mul(rows, c.b.broadcast_in_dim(scale, rows.dims(), {0}));
  return scatter_rows(c.b, zeros, indices, rows, &Builder::add);
}

Value flat_indices(Builder& b, const Value& indices) {
  return b.reshape(convert(b, indices, kIndex), {indices.shape.numel()});
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
//     maximum_indices, num_weights, scale_grad_by_freq, mode, sparse,
//     per_sample_weights, padding_idx)
std::vector<Value> embedding_bag_backward(Context& c, const Args& a) {
  if (a.boolean(9)) throw Unsupported("sparse embedding_bag gradient");
  Value indices = flat_indices(c.b, a.tensor(1));
  Value bag = bags_of(c.b, a, 2, 3, indices.dim(0), std::max<int64_t>(a.tensor(0).dim(0), 1));
  return {dense_backward(c, a, indices, bag, 4, 5, 7, 8, 10, 11)};
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size,
//     maximum_indices, num_weights, scale_grad_by_freq, mode,
//     per_sample_weights, padding_idx)
std::vector<Value> embedding_bag_dense_backward(Context& c, const Args& a) {
  Value indices = flat_indices(c.b, a.tensor(1));
  int64_t n = indices.dim(0);
  Value given = a.tensor(2);
  if (a.integer(7) != kMax && given.shape.numel() != n) {
    throw Unsupported("embedding_bag gradient without offset2bag");
  }
  Value bag = given.shape.numel() == n ? flat_indices(c.b, given) : indices;
  return {dense_backward(c, a, indices, bag, 3, 4, 6, 7, 8, 9)};
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
//     offset2bag, mode, padding_idx): dot(grad[bag(i)], weight[indices[i]]).
std::vector<Value> embedding_bag_per_sample_weights_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  if (a.integer(5) != kSum) throw Unsupported("per_sample_weights need mode='sum'");
  ElementType acc = accumulation_type(out.type);
  Value indices = flat_indices(c.b, a.tensor(2));
  int64_t n = indices.dim(0);
  Value grad = convert(c.b, a.tensor(0), acc);
  if (n == 0 || grad.dim(0) == 0) return {c.b.full(out, 0)};
  Value bag = bags_of(c.b, a, 3, 4, n, grad.dim(0));
  Value g = rows_at(c.b, grad, bag);
  Value w = convert(c.b, rows_at(c.b, a.tensor(1), indices), acc);
  Value dot = reduce_sum(c.b, c.b.mul(g, w), {1});
  Value kept = not_padding(c.b, indices, a.integer(6));
  return {c.b.select(kept, dot, c.b.full(dot.shape, 0))};
}

// embedding_renorm(self, indices, max_norm, norm_type): the rows `indices`
// name whose norm exceeds max_norm are scaled by max_norm / (norm + 1e-7)
// (the scale in double, as PyTorch computes it); each row once.
std::vector<Value> embedding_renorm(Context& c, const Args& a) {
  Value w = a.tensor(0);
  int64_t rows = w.dim(0);
  if (w.shape.numel() == 0) return {w};
  Value indices = flat_indices(c.b, a.tensor(1));
  // The CPU selects each distinct index's row, in ascending order: select()
  // takes negative indices from the end and refuses the first out of range.
  if (indices.dim(0) > 0) {
    Builder& b = c.b;
    Value limit = index_constant(b, indices.shape, rows);
    Value below = b.compare(indices, b.neg(limit), hlo::Comparison::LT);
    Value above = b.compare(indices, limit, hlo::Comparison::GE);
    Value most = b.broadcast_in_dim(b.constant_int(std::numeric_limits<int64_t>::max(), kIndex),
                                    indices.dims(), {});
    Value lowest_below = reduce_min(b, b.select(below, indices, most), {0});
    Value lowest_above = reduce_min(b, b.select(above, indices, most), {0});
    Value any_below = reduce_max(b, b.convert(below, kIndex), {0});
    Value any_above = reduce_max(b, b.convert(above, kIndex), {0});
    Value zero = b.constant(0, kIndex);
    Value has_below = b.compare(any_below, zero, hlo::Comparison::NE);
    c.check({b.or_(has_below, b.compare(any_above, zero, hlo::Comparison::NE)),
             b.select(has_below, lowest_below, lowest_above), DataCheck::Error::Index,
             "select(): index {} out of range for tensor of size [" + std::to_string(rows) + ", " +
                 std::to_string(w.dim(1)) + "] at dimension 0"});
    indices = b.select(b.compare(indices, index_constant(b, indices.shape, 0), hlo::Comparison::LT),
                       b.add(indices, limit), indices);
  }
  double max_norm = a.real(2), p = a.real(3);
  ElementType acc = accumulation_type(w.type());
  Value x = c.b.abs(convert(c.b, w, acc));
  Value norm;
  if (p == 1) {
    norm = reduce_sum(c.b, x, {1});
  } else if (p == 2) {
    norm = c.b.sqrt(reduce_sum(c.b, c.b.mul(x, x), {1}));
  } else if (std::isinf(p)) {
    norm = reduce_max(c.b, x, {1});
  } else {
    Value sum = reduce_sum(c.b, c.b.pow(x, c.b.full(x.shape, p)), {1});
    norm = c.b.pow(sum, c.b.full(sum.shape, 1.0 / p));
  }
  Value hits = scatter_rows(c.b, c.b.full({kIndex, {rows}}, 0), indices,
                            c.b.full({kIndex, indices.dims()}, 1), &Builder::add);
  Value named = c.b.compare(hits, c.b.full(hits.shape, 0), hlo::Comparison::GT);
  Value big = c.b.compare(norm, c.b.full(norm.shape, max_norm), hlo::Comparison::GT);
  Value n64 = convert(c.b, norm, ElementType::F64);
  Value scale = c.b.div(c.b.full(n64.shape, max_norm), c.b.add(n64, c.b.full(n64.shape, 1e-7)));
  scale = convert(c.b, scale, acc);
  scale = c.b.select(c.b.and_(named, big), scale, c.b.full(scale.shape, 1));
  Value scaled = c.b.mul(convert(c.b, w, acc), c.b.broadcast_in_dim(scale, w.dims(), {0}));
  return {scaled};
}

}  // namespace

TPU_LOWERING(embedding_renorm, "embedding_renorm");
TPU_LOWERING(embedding_bag, "_embedding_bag", "_embedding_bag_forward_only");
TPU_LOWERING(embedding_bag_backward, "_embedding_bag_backward");
TPU_LOWERING(embedding_bag_dense_backward, "_embedding_bag_dense_backward");
TPU_LOWERING(embedding_bag_per_sample_weights_backward,
             "_embedding_bag_per_sample_weights_backward");

}  // namespace torch_tpu::lower
