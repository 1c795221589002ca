// Activation functions, their backward ops, and (log-)softmax.
//
// The formulas follow PyTorch's CPU kernels term by term, so that results
// agree to the last bit where XLA's transcendental functions allow: float16
// and bfloat16 are computed in float32 ("opmath") and rounded once at the
// end. Scalar parameters are runtime operands; where the CPU kernel converts
// one to the tensor's own dtype (`scalar.to<scalar_t>()`) the rule rounds it
// the same way before widening it to the compute type.
#include <cmath>

#include "lower/complex_math.h"
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// Kernels PyTorch only instantiates for floating types: any other dtype goes
// to the CPU, which raises PyTorch's own "not implemented for" error.
void require_floating(ElementType t) {
  if (!is_floating(t)) throw Unsupported("floating-point dtypes only");
}

void require_floating_or_complex(ElementType t) {
  if (!is_floating(t) && !is_complex(t)) throw Unsupported("floating or complex dtypes only");
}

// Kernels for every real dtype but bool.
void require_real(ElementType t) {
  if (t == ElementType::Pred || is_complex(t)) throw Unsupported("real non-bool dtypes only");
}

// The view of one elementwise op: tensors are converted to the result dtype
// (PyTorch's common dtype), widened to the compute dtype and broadcast to the
// result shape.
class Pointwise {
 public:
  Pointwise(Context& c, const Args& a, size_t result = 0)
      : b(c.b),
        out(c.output(result).type),
        ct(accumulation_type(out)),
        dims(c.output(result).dims),
        a_(a) {}

  Builder& b;
  const ElementType out;  // result dtype
  const ElementType ct;   // compute dtype
  const Dims dims;

  Value tensor(size_t i) const { return widen(a_.tensor(i)); }
  // A Scalar argument taken at compute precision (`scalar.to<opmath_t>()`).
  Value param(size_t i) const { return broadcast_to(b, convert(b, a_.tensor(i), ct), dims); }
  // A Scalar argument rounded to the result dtype first (`scalar.to<scalar_t>()`).
  Value rounded_param(size_t i) const { return widen(a_.tensor(i)); }
  Value constant(double v) const { return b.full(Shape{ct, dims}, v); }
  Value result(const Value& v) const { return convert(b, v, out); }

  Value lt(const Value& x, const Value& y) const { return b.compare(x, y, hlo::Comparison::LT); }
  Value le(const Value& x, const Value& y) const { return b.compare(x, y, hlo::Comparison::LE); }
  Value gt(const Value& x, const Value& y) const { return b.compare(x, y, hlo::Comparison::GT); }
  Value ge(const Value& x, const Value& y) const { return b.compare(x, y, hlo::Comparison::GE); }
  Value where(const Value& p, const Value& x, const Value& y) const { return b.select(p, x, y); }

  // 1 / (1 + exp(-x)), spelled like PyTorch's CPU sigmoid.
  Value sigmoid(const Value& x) const {
    Value one = b.full(x.shape, 1);
    return b.div(one, b.add(one, b.exp(b.neg(x))));
  }
  Value log1p(const Value& x) const { return b.unary("log_plus_one", x); }
  // std::min(std::max(x, lo), hi): NaN passes through, hi wins if lo > hi.
  Value clamp(const Value& x, const Value& lo, const Value& hi) const {
    Value low = where(lt(x, lo), lo, x);
    return where(gt(low, hi), hi, low);
  }

 private:
  Value widen(const Value& v) const {
    return broadcast_to(b, convert(b, convert(b, v, out), ct), dims);
  }
  const Args& a_;
};

Value conj(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return x;
  return b.complex(b.real(x), b.neg(b.imag(x)));
}

// ---------------------------------------------------------------- relu family

// relu(self): clamp_min(self, 0), which keeps NaN.
std::vector<Value> relu(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_real(p.out);
  Value x = p.tensor(0);
  return {p.result(p.where(p.le(x, p.constant(0)), p.constant(0), x))};
}

// threshold(self, threshold, value): self <= threshold ? value : self. The CPU
// kernel compares bf16/f16 in float against the unrounded threshold, so a value
// equal to the rounded threshold is kept.
std::vector<Value> threshold(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_real(p.out);
  Value x = p.tensor(0);
  Value limit = is_floating(p.out) ? p.param(1) : p.rounded_param(1);
  return {p.result(p.where(p.le(x, limit), p.rounded_param(2), x))};
}

// threshold_backward(grad_output, self, threshold): relu's backward.
std::vector<Value> threshold_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_real(p.out);
  Value x = p.tensor(1);
  Value limit = is_floating(p.out) ? p.param(2) : p.rounded_param(2);
  return {p.result(p.where(p.le(x, limit), p.constant(0), p.tensor(0)))};
}

// hardtanh(self, min_val, max_val): clamp; integer tensors truncate the bounds
// (PyTorch's toLong), which converting to the result dtype does.
std::vector<Value> hardtanh(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_real(p.out);
  return {p.result(p.clamp(p.tensor(0), p.rounded_param(1), p.rounded_param(2)))};
}

// hardtanh_backward(grad_output, self, min_val, max_val)
std::vector<Value> hardtanh_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(1);
  // Written as "inside" so that NaN gets a zero gradient, like the CPU.
  Value inside = p.b.and_(p.gt(x, p.param(2)), p.lt(x, p.param(3)));
  return {p.result(p.where(inside, p.tensor(0), p.constant(0)))};
}

// leaky_relu(self, negative_slope)
std::vector<Value> leaky_relu(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(0);
  return {p.result(p.where(p.gt(x, p.constant(0)), x, p.b.mul(x, p.param(1))))};
}

// leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
// the sign of self and of the result agree for a positive slope (the only
// one allowed with self_is_result), so the flag does not change the formula.
std::vector<Value> leaky_relu_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value g = p.tensor(0);
  return {p.result(p.where(p.gt(p.tensor(1), p.constant(0)), g, p.b.mul(g, p.param(2))))};
}

// rrelu_with_noise(self, noise, lower, upper, training, generator): in eval
// mode a leaky_relu with the mean slope, leaving noise untouched. Training
// draws a random slope per element and runs on the CPU.
std::vector<Value> rrelu_with_noise(Context& c, const Args& a) {
  if (a.boolean(4)) throw Unsupported("rrelu_with_noise in training mode");
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value x = p.tensor(0);
  Value slope = b.div(b.add(p.param(2), p.param(3)), p.constant(2));
  return {p.result(p.where(p.gt(x, p.constant(0)), x, b.mul(x, slope))), a.tensor(1)};
}

// _prelu_kernel(self, weight): weight arrives shaped to broadcast with self.
std::vector<Value> prelu_kernel(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(0);
  return {p.result(p.where(p.gt(x, p.constant(0)), x, p.b.mul(p.tensor(1), x)))};
}

// _prelu_kernel_backward(grad_output, self, weight) -> (grad_self, grad_weight),
// both of the broadcast shape: autograd sums grad_weight to weight's shape.
std::vector<Value> prelu_kernel_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value g = p.tensor(0), x = p.tensor(1), w = p.tensor(2);
  Value positive = p.gt(x, p.constant(0));
  Value grad_self = p.where(positive, g, p.b.mul(w, g));
  Value grad_weight = p.where(positive, p.constant(0), p.b.mul(x, g));
  return {p.result(grad_self), convert(p.b, grad_weight, c.output(1).type)};
}

// ---------------------------------------------------------------- smooth units

constexpr double kSqrt2 = 1.41421356237309504880;       // M_SQRT2
constexpr double kSqrt1_2 = 0.70710678118654752440;     // M_SQRT1_2
constexpr double k2_SqrtPi = 1.12837916709551257390;    // M_2_SQRTPI
constexpr double kGeluBeta = kSqrt2 * k2_SqrtPi * 0.5;  // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

bool gelu_tanh(const std::string& approximate) {
  if (approximate == "tanh") return true;
  if (approximate == "none") return false;
  throw Unsupported("gelu approximate=" + approximate);
}

Value erf(Builder& b, const Value& x) { return b.emit("chlo.erf", {x}, "", {x.shape})[0]; }

// sqrt(2/pi) * (x + 0.044715 x^3), the argument of tanh-gelu's tanh.
Value gelu_tanh_argument(const Pointwise& p, const Value& x) {
  Value cube = p.b.mul(p.b.mul(x, x), x);
  Value inner = p.b.add(x, p.b.mul(p.constant(kGeluKappa), cube));
  return p.b.mul(p.constant(kGeluBeta), inner);
}

// gelu(self, approximate): exact uses erf, "tanh" the tanh approximation.
std::vector<Value> gelu(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value x = p.tensor(0);
  Value half = p.constant(0.5), one = p.constant(1);
  if (gelu_tanh(a.str(1))) {
    return {p.result(b.mul(b.mul(half, x), b.add(one, b.tanh(gelu_tanh_argument(p, x)))))};
  }
  Value cdf = b.add(one, erf(b, b.mul(x, p.constant(kSqrt1_2))));
  return {p.result(b.mul(b.mul(x, half), cdf))};
}

// gelu_backward(grad_output, self, approximate)
std::vector<Value> gelu_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value g = p.tensor(0), x = p.tensor(1);
  Value half = p.constant(0.5), one = p.constant(1);
  if (gelu_tanh(a.str(2))) {
    // (1 + tanh u) / 2 = sigmoid(2u) and 1 - tanh(u)^2 = 4 sigmoid(2u) sigmoid(-2u):
    // exact where tanh saturates. From tanh itself, an ulp of tanh(u) near -1
    // (XLA's approximation at optimisation level 0 gives -1 + 1.8e-7 for u = -20)
    // grows with x^3 into the gradient (8.5e-6 off at x = -7.3; the CPU 1e-6).
    Value twice = b.mul(p.constant(2), gelu_tanh_argument(p, x));
    Value rising = p.sigmoid(twice), falling = p.sigmoid(b.neg(twice));
    Value left_derivative = rising;
    Value tanh_derivative = b.mul(p.constant(4), b.mul(rising, falling));
    Value inner_derivative =
        b.mul(p.constant(kGeluBeta), b.add(one, b.mul(p.constant(3 * kGeluKappa), b.mul(x, x))));
    Value right_derivative = b.mul(b.mul(b.mul(half, x), tanh_derivative), inner_derivative);
    return {p.result(b.mul(g, b.add(left_derivative, right_derivative)))};
  }
  Value cdf = b.mul(half, b.add(one, erf(b, b.mul(x, p.constant(kSqrt1_2)))));
  Value pdf =
      b.mul(p.constant(k2_SqrtPi * kSqrt1_2 * 0.5), b.exp(b.mul(b.mul(x, x), p.constant(-0.5))));
  return {p.result(b.mul(g, b.add(cdf, b.mul(x, pdf))))};
}

// silu(self) = self / (1 + exp(-self)); complex too.
std::vector<Value> silu(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating_or_complex(p.out);
  Value x = p.tensor(0);
  Value e = is_complex(x.type()) ? complex_exp(p.b, p.b.neg(x)) : p.b.exp(p.b.neg(x));
  Value den = p.b.add(p.constant(1), e);
  // Complex: c10's division and exp, as the CPU's (x / (inf + inf i) is NaN).
  return {p.result(is_complex(x.type()) ? complex_divide(p.b, x, den) : p.b.div(x, den))};
}

// silu_backward(grad_output, self). The functional op decomposes before
// reaching us (CompositeImplicitAutograd); this serves its grad_input= form.
std::vector<Value> silu_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating_or_complex(p.out);
  Builder& b = p.b;
  Value g = p.tensor(0), x = p.tensor(1), one = p.constant(1);
  Value s = p.sigmoid(x);
  return {p.result(b.mul(b.mul(g, s), b.add(one, b.mul(x, b.sub(one, s)))))};
}

// sigmoid_backward(grad_output, output) = grad * conj((1 - y) y)
std::vector<Value> sigmoid_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating_or_complex(p.out);
  Value g = p.tensor(0), y = p.tensor(1);
  return {p.result(p.b.mul(g, conj(p.b, p.b.mul(p.b.sub(p.constant(1), y), y))))};
}

// tanh_backward(grad_output, output) = grad * conj(1 - y^2)
std::vector<Value> tanh_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating_or_complex(p.out);
  Value g = p.tensor(0), y = p.tensor(1);
  return {p.result(p.b.mul(g, conj(p.b, p.b.sub(p.constant(1), p.b.mul(y, y)))))};
}

// elu(self, alpha, scale, input_scale); celu and selu are compositions of it.
std::vector<Value> elu(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value x = p.tensor(0);
  Value negcoef = b.mul(p.param(1), p.param(2)), poscoef = p.param(2);
  Value negative = b.mul(b.unary("exponential_minus_one", b.mul(x, p.param(3))), negcoef);
  return {p.result(p.where(p.gt(x, p.constant(0)), b.mul(x, poscoef), negative))};
}

// elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
std::vector<Value> elu_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value g = p.tensor(0), x = p.tensor(5);
  Value negcoef = b.mul(p.param(1), p.param(2)), poscoef = p.param(2);
  Value negiptcoef = p.param(3);
  // With is_result, x is the output: its negative branch is (exp - 1) * negcoef.
  Value negative = a.boolean(4)
                       ? b.mul(b.mul(g, negiptcoef), b.add(x, negcoef))
                       : b.mul(b.mul(b.mul(g, negiptcoef), negcoef), b.exp(b.mul(x, negiptcoef)));
  // NaN takes the negative branch (and stays NaN), like the CPU.
  return {p.result(p.where(p.gt(x, p.constant(0)), b.mul(g, poscoef), negative))};
}

// softplus(self, beta, threshold): linear above threshold.
std::vector<Value> softplus(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value x = p.tensor(0), beta = p.param(1);
  Value xb = b.mul(x, beta);
  Value smooth = b.div(p.log1p(b.exp(xb)), beta);
  return {p.result(p.where(p.gt(xb, p.param(2)), x, smooth))};
}

// softplus_backward(grad_output, self, beta, threshold)
std::vector<Value> softplus_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value g = p.tensor(0), xb = b.mul(p.tensor(1), p.param(2));
  Value z = b.exp(xb);
  Value smooth = b.div(b.mul(g, z), b.add(z, p.constant(1)));
  return {p.result(p.where(p.gt(xb, p.param(3)), g, smooth))};
}

// mish(self) = self * tanh(softplus(self)). Its backward is a composite.
std::vector<Value> mish(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(0);
  return {p.result(p.b.mul(x, p.b.tanh(p.log1p(p.b.exp(x)))))};
}

// log_sigmoid_forward(self) -> (output, buffer): buffer = exp(-|x|), which
// the backward reads back like PyTorch's CPU kernel does.
std::vector<Value> log_sigmoid_forward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value x = p.tensor(0);
  Value buffer = b.exp(b.neg(b.abs(x)));
  Value output = b.sub(b.min(x, p.constant(0)), p.log1p(buffer));
  return {p.result(output), convert(b, buffer, c.output(1).type)};
}

// log_sigmoid_backward(grad_output, self, buffer)
std::vector<Value> log_sigmoid_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value g = p.tensor(0), buffer = p.tensor(2);
  Value negative = p.lt(p.tensor(1), p.constant(0));
  Value max_deriv = p.where(negative, p.constant(1), p.constant(0));
  Value sign = p.where(negative, p.constant(1), p.constant(-1));
  Value ratio = b.div(buffer, b.add(p.constant(1), buffer));
  return {p.result(b.mul(b.sub(max_deriv, b.mul(sign, ratio)), g))};
}

// ---------------------------------------------------------------- piecewise linear

// hardsigmoid(self) = clamp(x + 3, 0, 6) / 6
std::vector<Value> hardsigmoid(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value shifted = p.b.add(p.tensor(0), p.constant(3));
  return {p.result(p.b.div(p.clamp(shifted, p.constant(0), p.constant(6)), p.constant(6)))};
}

// hardsigmoid_backward(grad_output, self): the CPU multiplies by a rounded 1/6.
std::vector<Value> hardsigmoid_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(1);
  Value inside = p.b.and_(p.gt(x, p.constant(-3)), p.lt(x, p.constant(3)));
  Value one_sixth = p.b.full(Shape{p.ct, p.dims}, static_cast<double>(1.0f / 6.0f));
  return {p.result(p.where(inside, p.b.mul(p.tensor(0), one_sixth), p.constant(0)))};
}

// hardswish(self) = x * clamp(x + 3, 0, 6) / 6
std::vector<Value> hardswish(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(0);
  Value gate = p.clamp(p.b.add(x, p.constant(3)), p.constant(0), p.constant(6));
  return {p.result(p.b.div(p.b.mul(x, gate), p.constant(6)))};
}

// hardswish_backward(grad_output, self)
std::vector<Value> hardswish_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value g = p.tensor(0), x = p.tensor(1);
  Value ramp = b.mul(g, b.add(b.div(x, p.constant(3)), p.constant(0.5)));
  // NaN falls through to the ramp and stays NaN.
  Value upper = p.where(p.ge(x, p.constant(3)), g, ramp);
  return {p.result(p.where(p.le(x, p.constant(-3)), p.constant(0), upper))};
}

// |x| <= lambd, with lambd rounded to the tensor's dtype like the CPU kernel.
Value in_dead_zone(const Pointwise& p, const Value& x, const Value& lambd) {
  return p.b.and_(p.ge(x, p.b.neg(lambd)), p.le(x, lambd));
}

// |x| > lambd; false for NaN.
Value outside_dead_zone(const Pointwise& p, const Value& x, const Value& lambd) {
  return p.b.or_(p.lt(x, p.b.neg(lambd)), p.gt(x, lambd));
}

// hardshrink(self, lambd)
std::vector<Value> hardshrink(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = p.tensor(0);
  return {p.result(p.where(in_dead_zone(p, x, p.rounded_param(1)), p.constant(0), x))};
}

// softshrink(self, lambd): shifts toward zero by lambd; NaN passes through.
std::vector<Value> softshrink(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value x = p.tensor(0), lambd = p.param(1);
  Value shrunk = p.where(p.gt(x, lambd), b.sub(x, lambd),
                         p.where(p.lt(x, b.neg(lambd)), b.add(x, lambd), p.constant(0)));
  Value is_nan = b.compare(x, x, hlo::Comparison::NE);
  return {p.result(p.where(is_nan, x, shrunk))};
}

// hardshrink_backward / softshrink_backward(grad_output, self, lambd)
std::vector<Value> shrink_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  // NaN inputs get a zero gradient, like the CPU's vectorised kernel.
  Value outside = outside_dead_zone(p, p.tensor(1), p.rounded_param(2));
  return {p.result(p.where(outside, p.tensor(0), p.constant(0)))};
}

// ---------------------------------------------------------------- glu

// The two halves of `x` along `dim`.
std::pair<Value, Value> halves(Builder& b, const Value& x, int64_t dim) {
  Dims start(x.rank(), 0), mid = x.dims(), end = x.dims(), strides(x.rank(), 1);
  mid[dim] = x.dim(dim) / 2;
  Dims second_start = start;
  second_start[dim] = mid[dim];
  return {b.slice(x, start, mid, strides), b.slice(x, second_start, end, strides)};
}

// glu(self, dim) = a * sigmoid(b) for the halves a, b of self.
std::vector<Value> glu(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Value x = convert(p.b, a.tensor(0), p.ct);
  auto [first, second] = halves(p.b, x, wrap_dim(a.integer(1), x.rank()));
  return {p.result(p.b.mul(first, p.sigmoid(second)))};
}

// glu_backward(grad_output, self, dim): the CPU stores sigmoid(b) in the
// result dtype before using it, so the rule rounds it the same way.
std::vector<Value> glu_backward(Context& c, const Args& a) {
  Pointwise p(c, a);
  require_floating(p.out);
  Builder& b = p.b;
  Value g = convert(b, convert(b, a.tensor(0), p.out), p.ct);
  Value x = convert(b, a.tensor(1), p.ct);
  int64_t dim = wrap_dim(a.integer(2), x.rank());
  auto [first, second] = halves(b, x, dim);
  Value s = convert(b, p.result(p.sigmoid(second)), p.ct);
  Value one = b.full(s.shape, 1);
  Value grad_first = b.mul(s, g);
  Value grad_second = b.mul(b.mul(b.mul(b.sub(one, s), s), first), g);
  // Round each half on its own, as the CPU writes them into the result.
  return {b.concatenate({p.result(grad_first), p.result(grad_second)}, dim)};
}

// ---------------------------------------------------------------- softmax

// The reduction dims of a softmax over `dim` (none for a scalar).
Dims softmax_dims(const Value& x, int64_t dim) {
  int64_t d = wrap_dim(dim, x.rank());
  return x.rank() == 0 ? Dims{} : Dims{d};
}

// Broadcasts a reduction result back over the reduced dims.
Value expand_back(Builder& b, const Value& reduced, const Value& like, const Dims& dims) {
  Dims mapping;
  for (int64_t i = 0; i < like.rank(); ++i) {
    if (dims.empty() || dims[0] != i) mapping.push_back(i);
  }
  return b.broadcast_in_dim(reduced, like.dims(), mapping);
}

// x - max(x): keeps exp() in range.
Value shifted(Builder& b, const Value& x, const Dims& dims) {
  return b.sub(x, expand_back(b, reduce_max(b, x, dims), x, dims));
}

Value softmax_of(Builder& b, const Value& x, const Dims& dims) {
  Value e = b.exp(shifted(b, x, dims));
  return b.div(e, expand_back(b, reduce_sum(b, e, dims), e, dims));
}

Value log_softmax_of(Builder& b, const Value& x, const Dims& dims) {
  Value s = shifted(b, x, dims);
  Value log_sum = b.log(reduce_sum(b, b.exp(s), dims));
  return b.sub(s, expand_back(b, log_sum, s, dims));
}

// The input of a softmax at compute precision (float32 for half types, which
// also covers half_to_float).
Value softmax_input(Context& c, const Value& x) {
  ElementType t = c.output(0).type;
  require_floating(t);
  return convert(c.b, x, accumulation_type(promote_types(x.type(), t)));
}

// _softmax(self, dim, half_to_float)
std::vector<Value> softmax(Context& c, const Args& a) {
  Value x = softmax_input(c, a.tensor(0));
  return {convert(c.b, softmax_of(c.b, x, softmax_dims(x, a.integer(1))), c.output(0).type)};
}

// _log_softmax(self, dim, half_to_float)
std::vector<Value> log_softmax(Context& c, const Args& a) {
  Value x = softmax_input(c, a.tensor(0));
  return {convert(c.b, log_softmax_of(c.b, x, softmax_dims(x, a.integer(1))), c.output(0).type)};
}

// _safe_softmax(self, dim, dtype): zero rather than NaN for rows that are
// entirely -inf (fully masked attention rows).
std::vector<Value> safe_softmax(Context& c, const Args& a) {
  Builder& b = c.b;
  Value self = a.tensor(0);
  ElementType t = c.output(0).type;
  Value x = softmax_input(c, convert(b, self, t));
  Dims dims = softmax_dims(x, a.integer(1));
  Value y = softmax_of(b, x, dims);
  // Masked means -inf in self itself, before any dtype conversion.
  Value masked = is_floating(self.type())
                     ? b.compare(self, b.full(self.shape, -INFINITY), hlo::Comparison::EQ)
                     : b.full(Shape{ElementType::Pred, self.dims()}, 0);
  Value all_masked = b.reduce({masked}, {b.constant_bool(true)}, dims,
                              [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                                return {r.and_(v[0], v[1])};
                              })[0];
  Value zero = b.full(y.shape, 0);
  return {convert(b, b.select(expand_back(b, all_masked, y, dims), zero, y), t)};
}

// The backward inputs at compute precision.
std::pair<Value, Value> softmax_backward_inputs(Context& c, const Args& a) {
  Value g = a.tensor(0), y = a.tensor(1);
  ElementType t = accumulation_type(promote_types(g.type(), y.type()));
  require_floating(t);
  return {convert(c.b, g, t), convert(c.b, y, t)};
}

// _softmax_backward_data(grad_output, output, dim, input_dtype):
// y * (g - sum(g * y))
std::vector<Value> softmax_backward_data(Context& c, const Args& a) {
  Builder& b = c.b;
  auto [g, y] = softmax_backward_inputs(c, a);
  Dims dims = softmax_dims(y, a.integer(2));
  Value dot = expand_back(b, reduce_sum(b, b.mul(g, y), dims), y, dims);
  return {convert(b, b.mul(y, b.sub(g, dot)), c.output(0).type)};
}

// _log_softmax_backward_data(grad_output, output, dim, input_dtype):
// g - exp(y) * sum(g)
std::vector<Value> log_softmax_backward_data(Context& c, const Args& a) {
  Builder& b = c.b;
  auto [g, y] = softmax_backward_inputs(c, a);
  Dims dims = softmax_dims(y, a.integer(2));
  Value sum = expand_back(b, reduce_sum(b, g, dims), y, dims);
  return {convert(b, b.sub(g, b.mul(b.exp(y), sum)), c.output(0).type)};
}

}  // namespace

TPU_LOWERING(relu, "relu");
TPU_LOWERING(threshold, "threshold");
TPU_LOWERING(threshold_backward, "threshold_backward");
TPU_LOWERING(hardtanh, "hardtanh");
TPU_LOWERING(hardtanh_backward, "hardtanh_backward");
TPU_LOWERING(leaky_relu, "leaky_relu");
TPU_LOWERING(leaky_relu_backward, "leaky_relu_backward");
TPU_LOWERING(rrelu_with_noise, "rrelu_with_noise");
TPU_LOWERING(prelu_kernel, "_prelu_kernel");
TPU_LOWERING(prelu_kernel_backward, "_prelu_kernel_backward");
TPU_LOWERING(gelu, "gelu");
TPU_LOWERING(gelu_backward, "gelu_backward");
TPU_LOWERING(silu, "silu");
TPU_LOWERING(silu_backward, "silu_backward");
TPU_LOWERING(sigmoid_backward, "sigmoid_backward");
TPU_LOWERING(tanh_backward, "tanh_backward");
TPU_LOWERING(elu, "elu");
TPU_LOWERING(elu_backward, "elu_backward");
TPU_LOWERING(softplus, "softplus");
TPU_LOWERING(softplus_backward, "softplus_backward");
TPU_LOWERING(mish, "mish");
TPU_LOWERING(log_sigmoid_forward, "log_sigmoid_forward");
TPU_LOWERING(log_sigmoid_backward, "log_sigmoid_backward");
TPU_LOWERING(hardsigmoid, "hardsigmoid");
TPU_LOWERING(hardsigmoid_backward, "hardsigmoid_backward");
TPU_LOWERING(hardswish, "hardswish");
TPU_LOWERING(hardswish_backward, "hardswish_backward");
TPU_LOWERING(hardshrink, "hardshrink");
TPU_LOWERING(softshrink, "softshrink");
TPU_LOWERING(shrink_backward, "hardshrink_backward", "softshrink_backward");
TPU_LOWERING(glu, "glu");
TPU_LOWERING(glu_backward, "glu_backward");
TPU_LOWERING(softmax, "_softmax");
TPU_LOWERING(log_softmax, "_log_softmax");
TPU_LOWERING(safe_softmax, "_safe_softmax");
TPU_LOWERING(softmax_backward_data, "_softmax_backward_data");
TPU_LOWERING(log_softmax_backward_data, "_log_softmax_backward_data");

}  // namespace torch_tpu::lower
