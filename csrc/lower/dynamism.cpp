// Bounded dynamism: a tensor computed at the upper bound of a dimension whose
// logical size is known only at run time.
#include <numeric>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// torch_tpu::set_dimension_size(self, dim, size): `self` with only the first `size`
// entries of dimension `dim` valid. XLA's dynamic padder carries the size
// through the ops that follow and masks what lies beyond it in reductions and
// products, so one program serves every size up to the bound. `size` is a
// tensor (a runtime operand), not an argument that would shape the program.
std::vector<Value> set_dimension_size(Context& c, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim = a.integer(1);
  if (dim < 0) dim += x.rank();
  Value size = convert(c.b, c.b.reshape(a.tensor(2), {}), ElementType::S32);
  return {c.b.set_dimension_size(x, size, dim)};
}

// `x` with every dimension at its static size (the padded layout kept): a
// gather's result has the static shape of its indices.
Value padded(Builder& b, const Value& x) {
  if (!b.has_dynamic_sizes() || x.rank() == 0) return x;
  Dims with_vector = x.dims();
  with_vector.push_back(1);
  std::vector<Value> coords;
  for (int64_t d = 0; d < x.rank(); ++d) {
    coords.push_back(b.reshape(b.iota({ElementType::S32, x.dims()}, d), with_vector));
  }
  Dims all(x.rank());
  std::iota(all.begin(), all.end(), 0);
  return b.gather(x, b.concatenate(coords, x.rank()), hlo::GatherDims{{}, all, all, x.rank()},
                  Dims(x.rank(), 1));
}

// cat along a dimension whose size varies, into a result as long as its
// bound: each operand is written after the valid entries of those before it
// (their sizes counted where XLA masks them), so the valid entries lead. The
// caller picks a bound every operand fits in at its offset.
std::vector<Value> cat_at_bounds(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  const int64_t dim = wrap_dim(a.integer(1), out.rank());
  Builder& b = c.b;
  Value result = b.full(out, 0);
  Value offset = b.constant(0, ElementType::S32);
  for (const Value& v : a.tensors(0)) {
    if (v.rank() != out.rank() || v.shape.numel() == 0) continue;  // a legacy empty operand
    Value x = convert(b, v, out.type);
    Value counts = reduced_count(b, x, {dim}, ElementType::S32);
    Value size = b.reshape(b.slice(b.reshape(counts, {counts.shape.numel()}), {0}, {1}, {1}), {});
    std::vector<Value> starts(out.rank(), b.constant(0, ElementType::S32));
    starts[dim] = offset;
    result = b.dynamic_update_slice(result, padded(b, x), starts);
    offset = b.add(offset, size);
  }
  return {result};
}

}  // namespace

TPU_LOWERING(set_dimension_size, "torch_tpu::set_dimension_size");
TPU_LOWERING(cat_at_bounds, "_tpu_cat_at_bounds");

}  // namespace torch_tpu::lower
