// Indexing by tensors: gather/scatter along a dimension and advanced
// indexing (x[idx], x[idx] = v). Indices are wrapped like PyTorch (-1 is the
// last element). The unchecked forms decompositions emit (_unsafe_index,
// _unsafe_index_put) share the rules; the masked forms read or accumulate only
// where a mask holds, so their indices may be out of range elsewhere.
#include <algorithm>
#include <numeric>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// s64 indices with negative values wrapped by `size`; `clamp` first brings
// them into [-size, size - 1] (masked forms, whose masked-off indices may be
// anything).

// "index 5 is out of bounds for dimension 1 with size 3": the CPU's message
// for an index outside [-size, size) of gather, scatter and x[idx].
std::string out_of_bounds(int64_t dim, const std::string& size) {
  return "index {} is out of bounds for dimension " + std::to_string(dim) + " with size " + size;
}

std::string out_of_bounds(int64_t dim, int64_t size) {
  return out_of_bounds(dim, std::to_string(size));
}

// Full coordinates for gather/scatter along `dim`: for every element of
// `index`, its own position in all dims but `dim`, where it takes the index.
Value coordinates(Builder& b, const Value& index, int64_t dim, int64_t dim_size) {
  Dims with_vector = index.dims();
  with_vector.push_back(1);
  std::vector<Value> coords;
  for (int64_t d = 0; d < index.rank(); ++d) {
    Value coord =
        d == dim ? wrap_index(b, index, dim_size) : b.iota({ElementType::S64, index.dims()}, d);
    coords.push_back(b.reshape(coord, with_vector));
  }
  return b.concatenate(coords, index.rank());
}

Value point_gather(Builder& b, const Value& operand, const Value& coords) {
  int64_t rank = operand.rank();
  Dims all(rank);
  std::iota(all.begin(), all.end(), 0);
  return b.gather(operand, coords, hlo::GatherDims{{}, all, all, coords.rank() - 1}, Dims(rank, 1));
}

Value point_scatter(Builder& b, const Value& operand, const Value& coords, const Value& updates,
                    const hlo::RegionFn& combine) {
  int64_t rank = operand.rank();
  Dims all(rank);
  std::iota(all.begin(), all.end(), 0);
  return b.scatter(operand, coords, updates, hlo::ScatterDims{{}, all, all, coords.rank() - 1},
                   combine);
}

// gather(self, int dim, Tensor index, *, bool sparse_grad=False)
std::vector<Value> gather(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Value index = a.tensor(2);
  if (x.rank() == 0) x = c.b.reshape(x, {1});
  if (index.rank() == 0) index = c.b.reshape(index, {1});
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  if (index.shape.numel() == 0) return {c.b.full(c.output(0), 0)};
  check_index_range(c, index, x.dim(dim), false, DataCheck::Error::Runtime,
                    out_of_bounds(dim, x.dim(dim)));
  // Every index into an empty self fails the check; XLA refuses a gather of
  // a slice (1 element) larger than the operand.
  if (x.shape.numel() == 0) return {c.b.full(c.output(0), 0)};
  Value out = point_gather(c.b, x, coordinates(c.b, index, dim, x.dim(dim)));
  return {c.b.reshape(out, c.output(0).dims)};
}

// The part of `src` that index covers (src may be larger).
Value updates_for(Builder& b, const Value& src, const Value& index, ElementType type) {
  Value v = convert(b, src, type);
  if (v.rank() == 0) return b.broadcast_in_dim(v, index.dims(), {});
  return b.slice(v, Dims(v.rank(), 0), index.dims(), Dims(v.rank(), 1));
}

Value scatter_with(Context& c, const Args& a, const Value& src, const hlo::RegionFn& combine) {
  Value x = a.tensor(0);
  Value index = a.tensor(2);
  const Shape& out = c.output(0);
  if (index.shape.numel() == 0) return x;
  bool scalar = x.rank() == 0;
  if (scalar) x = c.b.reshape(x, {1});
  if (index.rank() == 0) index = c.b.reshape(index, {1});
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  check_index_range(c, index, x.dim(dim), false, DataCheck::Error::Runtime,
                    out_of_bounds(dim, x.dim(dim)));
  Value s =
      src.rank() == 0 ? src : (src.rank() == index.rank() ? src : c.b.reshape(src, index.dims()));
  Value y = point_scatter(c.b, x, coordinates(c.b, index, dim, x.dim(dim)),
                          updates_for(c.b, s, index, x.type()), combine);
  return c.b.reshape(y, out.dims);
}

// scatter.src(self, dim, index, src) / scatter.value(self, dim, index, value)
std::vector<Value> scatter(Context& c, const Args& a) {
  return {scatter_with(c, a, a.tensor(3), scatter_combiner("replace"))};
}

// scatter.reduce(self, dim, index, src, *, str reduce) / scatter.value_reduce
std::vector<Value> scatter_reduce_legacy(Context& c, const Args& a) {
  return {scatter_with(c, a, a.tensor(3), scatter_combiner(a.str(4)))};
}

// scatter_add(self, dim, index, src)
std::vector<Value> scatter_add(Context& c, const Args& a) {
  return {scatter_with(c, a, a.tensor(3), scatter_combiner("sum"))};
}

// ---------------------------------------------------------------- advanced

struct Advanced {
  Dims indexed;      // dims of self that are indexed
  Value indices;     // broadcast indices stacked on a last axis, s64
  Dims batch;        // broadcast shape of the index tensors
  Dims offset_dims;  // where the kept dims of self land in the result
  Dims slice_sizes;
  Dims result;  // shape of self[indices]
};

// `checked`: the indices are the user's (x[idx]), checked like the CPU does;
// the _unsafe forms of decompositions and the masked ones (`clamp`) are not.
Advanced advanced(Context& c, const Value& x, const std::vector<std::optional<Operand>>& list,
                  bool clamp, bool checked) {
  Builder& b = c.b;
  Advanced adv;
  std::vector<Value> idx;
  for (size_t d = 0; d < list.size(); ++d) {
    if (!list[d]) continue;
    ElementType t = list[d]->value.type();
    if (t == ElementType::Pred || t == ElementType::U8) throw Unsupported("boolean mask indices");
    int64_t dim = static_cast<int64_t>(d);
    // The CPU's message numbers the indexed dimensions only (x[:, [7]] of a [2, 5]
    // tensor: "for dimension 0 with size 5").
    const int64_t nth = static_cast<int64_t>(adv.indexed.size());
    adv.indexed.push_back(dim);
    // At the bounds, a negative index counts from the valid size, not the bound.
    Value size = runtime_size(b, x, dim);
    if (checked) {
      check_index_range(c, list[d]->value, size, true, DataCheck::Error::Index,
                        b.has_dynamic_sizes() ? out_of_bounds(nth, kSizePlaceholder)
                                              : out_of_bounds(nth, x.dim(dim)));
    }
    idx.push_back(wrap_index(b, list[d]->value, size, clamp));
  }
  if (idx.empty()) throw Unsupported("no index tensors");
  idx = broadcast_all(b, idx);
  adv.batch = idx[0].dims();
  Dims with_vector = adv.batch;
  with_vector.push_back(1);
  for (Value& v : idx) v = b.reshape(v, with_vector);
  adv.indices = b.concatenate(idx, static_cast<int64_t>(adv.batch.size()));
  // Adjacent indexed dims keep their place; otherwise the batch dims lead.
  bool adjacent =
      adv.indexed.back() - adv.indexed.front() + 1 == static_cast<int64_t>(adv.indexed.size());
  int64_t batch_at = adjacent ? adv.indexed.front() : 0;
  int64_t pos = 0;
  Dims kept;
  for (int64_t d = 0; d < x.rank(); ++d) {
    bool is_indexed = std::find(adv.indexed.begin(), adv.indexed.end(), d) != adv.indexed.end();
    adv.slice_sizes.push_back(is_indexed ? 1 : x.dim(d));
    if (is_indexed) continue;
    kept.push_back(x.dim(d));
    if (pos == batch_at) pos += static_cast<int64_t>(adv.batch.size());
    adv.offset_dims.push_back(pos++);
  }
  size_t next_batch = 0, next_kept = 0;
  adv.result.resize(adv.offset_dims.size() + adv.batch.size());
  for (size_t i = 0; i < adv.result.size(); ++i) {
    bool is_offset = std::find(adv.offset_dims.begin(), adv.offset_dims.end(),
                               static_cast<int64_t>(i)) != adv.offset_dims.end();
    adv.result[i] = is_offset ? kept[next_kept++] : adv.batch[next_batch++];
  }
  return adv;
}

Value take(Builder& b, const Value& x, const Advanced& adv) {
  int64_t ivd = static_cast<int64_t>(adv.batch.size());
  return b.gather(x, adv.indices, hlo::GatherDims{adv.offset_dims, adv.indexed, adv.indexed, ivd},
                  adv.slice_sizes);
}

Value put(Builder& b, const Value& x, const Advanced& adv, const Value& values, bool accumulate) {
  int64_t ivd = static_cast<int64_t>(adv.batch.size());
  Value v = broadcast_to(b, convert(b, values, x.type()), adv.result);
  hlo::RegionFn combine = [accumulate](Builder& r, const std::vector<Value>& p) {
    return std::vector<Value>{accumulate ? r.add(p[0], p[1]) : p[1]};
  };
  return b.scatter(x, adv.indices, v,
                   hlo::ScatterDims{adv.offset_dims, adv.indexed, adv.indexed, ivd}, combine);
}

bool unsafe(const Context& c) { return c.op_name().rfind("aten::_unsafe", 0) == 0; }

// index.Tensor(self, Tensor?[] indices) / _unsafe_index.Tensor
std::vector<Value> index(Context& c, const Args& a) {
  Value x = a.tensor(0);
  // An empty result reads nothing, and the CPU then checks no index either.
  // (XLA refuses the gather when an indexed dimension has size 0.)
  if (c.output(0).numel() == 0) return {c.b.full(c.output(0), 0)};
  return {take(c.b, x, advanced(c, x, a.operand_list(1), false, !unsafe(c)))};
}

// x[mask] = value (or += value) for a single boolean mask over dims
// [at, at + mask rank) and a single value: a select.
std::optional<Value> masked_fill_put(Builder& b, const Value& x,
                                     const std::vector<std::optional<Operand>>& list,
                                     const Value& value, bool accumulate) {
  std::optional<Value> mask;
  int64_t at = 0;
  for (size_t d = 0; d < list.size(); ++d) {
    if (!list[d]) continue;
    if (mask) return std::nullopt;
    mask = list[d]->value;
    at = static_cast<int64_t>(d);
  }
  ElementType t = mask ? mask->type() : ElementType::Pred;
  if (!mask || (t != ElementType::Pred && t != ElementType::U8) || value.shape.numel() != 1) {
    return std::nullopt;
  }
  Dims mapping(mask->rank());
  for (int64_t k = 0; k < mask->rank(); ++k) mapping[k] = at + k;
  Value spread = b.broadcast_in_dim(convert(b, *mask, ElementType::Pred), x.dims(), mapping);
  Value v = b.broadcast_in_dim(b.reshape(convert(b, value, x.type()), {}), x.dims(), {});
  return b.select(spread, accumulate ? b.add(x, v) : v, x);
}

// index_put(self, Tensor?[] indices, Tensor values, bool accumulate=False) /
// _index_put_impl_ / _unsafe_index_put
std::vector<Value> index_put(Context& c, const Args& a) {
  Value x = a.tensor(0);
  bool accumulate = !a.is_none(3) && a.boolean(3);
  if (auto filled = masked_fill_put(c.b, x, a.operand_list(1), a.tensor(2), accumulate)) {
    return {*filled};
  }
  return {
      put(c.b, x, advanced(c, x, a.operand_list(1), false, !unsafe(c)), a.tensor(2), accumulate)};
}

// _unsafe_masked_index(self, Tensor mask, Tensor?[] indices, Scalar fill):
// where(mask, self[clamped indices], fill).
std::vector<Value> unsafe_masked_index(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  Value fill = c.b.broadcast_in_dim(convert(c.b, a.tensor(3), out.type), out.dims, {});
  // An empty self has nothing to read: the CPU fills the whole result.
  if (x.shape.numel() == 0) return {fill};
  Value taken =
      convert(c.b, take(c.b, x, advanced(c, x, a.operand_list(2), true, false)), out.type);
  taken = broadcast_to(c.b, taken, out.dims);
  Value mask = broadcast_to(c.b, convert(c.b, a.tensor(1), ElementType::Pred), out.dims);
  return {c.b.select(mask, taken, fill)};
}

// _unsafe_masked_index_put_accumulate(self, Tensor mask, Tensor?[] indices, Tensor values):
// self[clamped indices] += where(mask, values, 0).
std::vector<Value> unsafe_masked_index_put_accumulate(Context& c, const Args& a) {
  Value x = a.tensor(0);
  if (x.shape.numel() == 0) return {x};  // as the CPU: nothing to add to
  Advanced adv = advanced(c, x, a.operand_list(2), true, false);
  Value values = broadcast_to(c.b, convert(c.b, a.tensor(3), x.type()), adv.result);
  Value mask = broadcast_to(c.b, convert(c.b, a.tensor(1), ElementType::Pred), adv.result);
  values = c.b.select(mask, values, c.b.full(values.shape, 0));
  return {put(c.b, x, adv, values, true)};
}

// nonzero_static(self, *, int size, int fill_value=-1): the coordinates of the
// first `size` nonzero elements in row-major order, padded with fill_value. A
// stable sort of the flat positions, nonzero ones first, puts them in order.
std::vector<Value> nonzero_static(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  const double fill = static_cast<double>(a.integer(2));
  int64_t size = out.dims[0], n = x.shape.numel(), rank = x.rank();
  int64_t kept = std::min(size, n);
  if (kept == 0 || rank == 0) return {c.b.full(out, fill)};  // nothing to locate
  Value flat = c.b.reshape(x, {n});
  Value is_zero = c.b.compare(flat, c.b.full({flat.type(), {n}}, 0), hlo::Comparison::EQ);
  Value position = c.b.iota({ElementType::S64, {n}}, 0);
  auto sorted = c.b.sort({convert(c.b, is_zero, ElementType::S32), position}, 0, true,
                         [](Builder& b, const std::vector<Value>& v) {
                           return std::vector<Value>{b.compare(v[0], v[1], hlo::Comparison::LT)};
                         });
  // The first min(size, n) positions; slots past the nonzero ones take fill_value.
  Value first = c.b.slice(sorted[1], {0}, {kept}, {1});
  Value valid = c.b.compare(c.b.slice(sorted[0], {0}, {kept}, {1}),
                            c.b.full({ElementType::S32, {kept}}, 0), hlo::Comparison::EQ);
  std::vector<Value> coords;
  int64_t stride = n;
  for (int64_t d = 0; d < rank; ++d) {
    stride /= x.dim(d);
    Value coord = c.b.div(first, c.b.full({ElementType::S64, {kept}}, static_cast<double>(stride)));
    coord = c.b.rem(coord, c.b.full({ElementType::S64, {kept}}, static_cast<double>(x.dim(d))));
    coords.push_back(c.b.reshape(coord, {kept, 1}));
  }
  Value result =
      c.b.select(c.b.broadcast_in_dim(valid, {kept, rank}, {0}), c.b.concatenate(coords, 1),
                 c.b.full({ElementType::S64, {kept, rank}}, fill));
  if (kept == size) return {result};
  return {c.b.concatenate({result, c.b.full({ElementType::S64, {size - kept, rank}}, fill)}, 0)};
}

}  // namespace

TPU_LOWERING(nonzero_static, "nonzero_static");
TPU_LOWERING(gather, "gather");
TPU_LOWERING(scatter, "scatter.src", "scatter.value");
TPU_LOWERING(scatter_reduce_legacy, "scatter.reduce", "scatter.value_reduce");
TPU_LOWERING(scatter_add, "scatter_add");
TPU_LOWERING(index, "index.Tensor", "_unsafe_index.Tensor");
TPU_LOWERING(index_put, "index_put", "_index_put_impl_", "_unsafe_index_put");
TPU_LOWERING(unsafe_masked_index, "_unsafe_masked_index");
TPU_LOWERING(unsafe_masked_index_put_accumulate, "_unsafe_masked_index_put_accumulate");

}  // namespace torch_tpu::lower
