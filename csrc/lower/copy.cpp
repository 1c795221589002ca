// Copies and fills: the values written are converted and broadcast to the
// result the caller expects.
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

Value to_output(Context& c, const Value& v) {
  const Shape& out = c.output(0);
  return broadcast_to(c.b, convert(c.b, v, out.type), out.dims);
}

// _tpu_copy(src): the engine's copy_ into an arbitrary view.
std::vector<Value> tpu_copy(Context& c, const Args& a) { return {to_output(c, a.tensor(0))}; }

// copy(self, src, non_blocking)
std::vector<Value> copy(Context& c, const Args& a) { return {to_output(c, a.tensor(1))}; }

std::vector<Value> clone(Context& c, const Args& a) { return {a.tensor(0)}; }

// fill.Scalar(self, value) / fill.Tensor(self, value)
std::vector<Value> fill(Context& c, const Args& a) { return {to_output(c, a.tensor(1))}; }

std::vector<Value> zero(Context& c, const Args& a) { return {c.b.full(c.output(0), 0)}; }

}  // namespace

TPU_LOWERING(tpu_copy, "_tpu_copy");
TPU_LOWERING(copy, "copy");
TPU_LOWERING(clone, "clone");
TPU_LOWERING(fill, "fill.Scalar", "fill.Tensor");
TPU_LOWERING(zero, "zero");

}  // namespace torch_tpu::lower
