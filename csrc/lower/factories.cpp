// Tensor factories that compute values: arange, linspace, eye. Their out=
// forms are the real operators (the functional ones are composite). An out
// with as many elements as arange's or linspace's result keeps its shape, as
// on the CPU: the values fill it in row-major order.
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// Floating factories compute in double like PyTorch's CPU kernels, except on
// TPU, which has no f64.
ElementType compute_type(Context& c, ElementType out) {
  if (!is_floating(out)) return out;
  return c.platform() == "tpu" ? ElementType::F32 : ElementType::F64;
}

// arange.start_out(Scalar start, Scalar end, Scalar step, *, Tensor(a!) out)
std::vector<Value> arange(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType t = compute_type(c, out.type);
  Builder& b = c.b;
  const Dims flat{out.numel()};
  Value start = b.broadcast_in_dim(convert(b, a.tensor(0), t), flat, {});
  Value step = b.broadcast_in_dim(convert(b, a.tensor(2), t), flat, {});
  Value i = b.convert(b.iota({ElementType::S64, flat}, 0), t);
  return {b.reshape(b.add(start, b.mul(i, step)), out.dims)};
}

// linspace.out(Scalar start, Scalar end, int steps, *, Tensor(a!) out):
// the first half counts up from start, the second half down from end (as
// PyTorch does, so both ends are exact).
std::vector<Value> linspace(Context& c, const Args& a) {
  const Shape out{c.output(0).type, {c.output(0).numel()}};
  int64_t steps = a.integer(2);
  Builder& b = c.b;
  ElementType t =
      is_floating(out.type) || is_complex(out.type) ? compute_type(c, out.type) : ElementType::F64;
  if (c.platform() == "tpu" && t == ElementType::F64) t = ElementType::F32;
  Value start = convert(b, a.tensor(0), t);
  Value end = convert(b, a.tensor(1), t);
  if (steps <= 1) return {b.broadcast_in_dim(start, c.output(0).dims, {})};
  // Behind a barrier XLA cannot turn the division into a product with the
  // reciprocal, which rounds otherwise than PyTorch's step.
  Value intervals = b.optimization_barrier({b.constant(static_cast<double>(steps - 1), t)})[0];
  Value step = b.div(b.sub(end, start), intervals);
  Value i = b.convert(b.iota({ElementType::S64, out.dims}, 0), t);
  Value up = b.add(b.broadcast_in_dim(start, out.dims, {}),
                   b.mul(i, b.broadcast_in_dim(step, out.dims, {})));
  Value back = b.sub(b.full({t, out.dims}, static_cast<double>(steps - 1)), i);
  Value down = b.sub(b.broadcast_in_dim(end, out.dims, {}),
                     b.mul(back, b.broadcast_in_dim(step, out.dims, {})));
  Value first_half =
      b.compare(i, b.full({t, out.dims}, static_cast<double>(steps / 2)), hlo::Comparison::LT);
  Value v = b.select(first_half, up, down);
  return {b.reshape(v, c.output(0).dims)};  // integers truncate toward zero, as on the CPU
}

// eye.out(int n, *, out) / eye.m_out(int n, int m, *, out)
std::vector<Value> eye(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Builder& b = c.b;
  Shape idx{ElementType::S64, out.dims};
  Value diag = b.compare(b.iota(idx, 0), b.iota(idx, 1), hlo::Comparison::EQ);
  return {b.convert(diag, out.type)};
}

}  // namespace

TPU_LOWERING(arange, "arange.start_out");
TPU_LOWERING(linspace, "linspace.out");
TPU_LOWERING(eye, "eye.out", "eye.m_out");

}  // namespace torch_tpu::lower
