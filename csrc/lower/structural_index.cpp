// The unchecked forms of advanced indexing that decompositions (upsampling,
// interpolation) emit: _unsafe_index is index.Tensor and _unsafe_index_put
// is index_put without bounds checks; the masked forms read or accumulate only
// where a mask holds, so their indices may be out of range elsewhere.
#include <algorithm>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// s64 indices with negative values wrapped by `size`; `clamp` first brings
// them into [-size, size - 1] (masked forms, whose masked-off indices may be
// anything).
Value wrap_index(Builder& b, const Value& index, int64_t size, bool clamp) {
  Value i = convert(b, index, ElementType::S64);
  if (clamp) {
    i = b.clamp(b.full(i.shape, static_cast<double>(-size)), i,
                b.full(i.shape, static_cast<double>(size - 1)));
  }
  Value negative = b.compare(i, b.full(i.shape, 0), hlo::Comparison::LT);
  return b.select(negative, b.add(i, b.full(i.shape, static_cast<double>(size))), i);
}

struct Advanced {
  Dims indexed;      // dims of self that are indexed
  Value indices;     // broadcast indices stacked on a last axis, s64
  Dims batch;        // broadcast shape of the index tensors
  Dims offset_dims;  // where the kept dims of self land in the result
  Dims slice_sizes;
  Dims result;  // shape of self[indices]
};

Advanced advanced(Builder& b, const Value& x, const std::vector<std::optional<Operand>>& list,
                  bool clamp) {
  Advanced adv;
  std::vector<Value> idx;
  for (size_t d = 0; d < list.size(); ++d) {
    if (!list[d]) continue;
    ElementType t = list[d]->value.type();
    if (t == ElementType::Pred || t == ElementType::U8) throw Unsupported("boolean mask indices");
    adv.indexed.push_back(static_cast<int64_t>(d));
    idx.push_back(wrap_index(b, list[d]->value, x.dim(static_cast<int64_t>(d)), clamp));
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

// _unsafe_index.Tensor(self, Tensor?[] indices)
std::vector<Value> unsafe_index(Context& c, const Args& a) {
  Value x = a.tensor(0);
  return {take(c.b, x, advanced(c.b, x, a.operand_list(1), false))};
}

// _unsafe_index_put(self, Tensor?[] indices, Tensor values, bool accumulate=False)
std::vector<Value> unsafe_index_put(Context& c, const Args& a) {
  Value x = a.tensor(0);
  bool accumulate = !a.is_none(3) && a.boolean(3);
  return {put(c.b, x, advanced(c.b, x, a.operand_list(1), false), a.tensor(2), accumulate)};
}

// _unsafe_masked_index(self, Tensor mask, Tensor?[] indices, Scalar fill):
// where(mask, self[clamped indices], fill).
std::vector<Value> unsafe_masked_index(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  Value taken = convert(c.b, take(c.b, x, advanced(c.b, x, a.operand_list(2), true)), out.type);
  taken = broadcast_to(c.b, taken, out.dims);
  Value mask = broadcast_to(c.b, convert(c.b, a.tensor(1), ElementType::Pred), out.dims);
  Value fill = c.b.broadcast_in_dim(convert(c.b, a.tensor(3), out.type), out.dims, {});
  return {c.b.select(mask, taken, fill)};
}

// _unsafe_masked_index_put_accumulate(self, Tensor mask, Tensor?[] indices, Tensor values):
// self[clamped indices] += where(mask, values, 0).
std::vector<Value> unsafe_masked_index_put_accumulate(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Advanced adv = advanced(c.b, x, a.operand_list(2), true);
  Value values = broadcast_to(c.b, convert(c.b, a.tensor(3), x.type()), adv.result);
  Value mask = broadcast_to(c.b, convert(c.b, a.tensor(1), ElementType::Pred), adv.result);
  values = c.b.select(mask, values, c.b.full(values.shape, 0));
  return {put(c.b, x, adv, values, true)};
}

}  // namespace

TPU_LOWERING(unsafe_index, "_unsafe_index.Tensor");
TPU_LOWERING(unsafe_index_put, "_unsafe_index_put");
TPU_LOWERING(unsafe_masked_index, "_unsafe_masked_index");
TPU_LOWERING(unsafe_masked_index_put_accumulate, "_unsafe_masked_index_put_accumulate");

}  // namespace torch_tpu::lower
