// Building and taking apart complex numbers: complex, polar, angle,
// conj_physical. (real, imag and view_as_real are views, not programs.)
#include <cmath>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// complex(Tensor real, Tensor imag) -> Tensor
std::vector<Value> complex(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType part = complex_component(out.type);
  auto v = promote(c.b, {&a.operand(0), &a.operand(1)}, part);
  return {c.b.complex(v[0], v[1])};
}

// polar(Tensor abs, Tensor angle) -> Tensor
std::vector<Value> polar(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  ElementType part = complex_component(out.type);
  auto v = promote(b, {&a.operand(0), &a.operand(1)}, part);
  Value re = b.mul(v[0], b.unary("cosine", v[1]));
  Value im = b.mul(v[0], b.unary("sine", v[1]));
  return {b.complex(re, im)};
}

// angle(Tensor self) -> Tensor: for real numbers pi below zero, 0 otherwise,
// and NaN stays NaN (as PyTorch's kernel).
std::vector<Value> angle(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  Value x = a.tensor(0);
  if (is_complex(x.type())) return {b.atan2(b.imag(x), b.real(x))};
  ElementType t = out.type;
  Value v = convert(b, x, t);
  Value negative = b.compare(v, b.full(v.shape, 0.0), hlo::Comparison::LT);
  Value result = b.select(negative, b.full(v.shape, M_PI), b.full(v.shape, 0.0));
  if (is_floating(x.type())) {
    Value nan = b.compare(v, v, hlo::Comparison::NE);
    result = b.select(nan, v, result);
  }
  return {result};
}

// _conj_physical(Tensor self) / conj_physical.out / conj_physical_
std::vector<Value> conj_physical(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  if (!is_complex(x.type())) return {x};
  return {b.complex(b.real(x), b.neg(b.imag(x)))};
}

}  // namespace

TPU_LOWERING(complex, "complex");
TPU_LOWERING(polar, "polar");
TPU_LOWERING(angle, "angle");
TPU_LOWERING(conj_physical, "_conj_physical", "conj_physical.out", "conj_physical_");

}  // namespace torch_tpu::lower
