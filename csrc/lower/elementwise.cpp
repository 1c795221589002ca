// Elementwise operators: arithmetic, math functions, comparisons, logical and
// bitwise operators, selection and clamping.
//
// Results match PyTorch's CPU kernels. Operands are converted to PyTorch's
// common dtype (result_type of the inputs, not the output: `out=` and in-place
// results are converted afterwards, as TensorIterator does), and float16 /
// bfloat16 compute in float32 (PyTorch's "opmath" type) with one rounding at
// the end. Where a CPU kernel rounds intermediate results to the reduced type,
// or reads a scalar at float32 precision, the rule does the same.
//
// Integer division and remainder by zero raise ZeroDivisionError on the CPU;
// a device program cannot raise, so they yield XLA's values instead.
#include "lower/elementwise.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "lower/complex_math.h"
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using ET = ElementType;

// ---------------------------------------------------------------- dtypes

bool is_reduced(ET t) { return t == ET::F16 || t == ET::BF16; }
bool is_signed_integral(ET t) { return is_integral(t) && !is_unsigned(t); }
bool is_inexact(ET t) { return is_floating(t) || is_complex(t); }

// The type PyTorch's CPU kernels do arithmetic in.
ET opmath(ET t) { return accumulation_type(t); }

[[noreturn]] void unsupported(const Context& c, ET t) {
  // The CPU fallback then raises PyTorch's own error for this dtype.
  throw Unsupported(c.op_name() + " is not implemented for " + short_name(t));
}

void require(bool ok, const Context& c, ET t) {
  if (!ok) unsupported(c, t);
}

// ---------------------------------------------------------------- operands

std::vector<const Operand*> present(const Args& a, std::initializer_list<size_t> indices) {
  std::vector<const Operand*> out;
  for (size_t i : indices) {
    if (!a.is_none(i)) out.push_back(&a.operand(i));
  }
  return out;
}

ET common_type(const Args& a, std::initializer_list<size_t> indices) {
  return result_type(present(a, indices));
}

// An operand as a CPU kernel computes with it: converted to the common dtype
// `t` (rounding like TensorIterator), then widened to the opmath type.
Value lift(Builder& b, const Operand& o, ET t) {
  return convert(b, convert(b, o.value, t), opmath(t));
}

// PyTorch's CPU mul/div kernels (and the `value`/`weight` scalars of
// addcmul, addcdiv and lerp) read a one-element operand straight into float32
// when the common dtype is a reduced float, without rounding it to that dtype.
Value lift_scalar(Builder& b, const Operand& o, ET t) {
  if (is_reduced(t) && o.value.shape.numel() == 1 && !is_complex(o.value.type())) {
    return convert(b, o.value, opmath(t));
  }
  return lift(b, o, t);
}

std::vector<Value> lift_all(Builder& b, const std::vector<const Operand*>& ops, ET t) {
  std::vector<Value> values;
  for (const Operand* o : ops) values.push_back(lift(b, *o, t));
  return broadcast_all(b, std::move(values));
}

// Converted to `t` without widening: for exact operations (comparisons,
// selection, min/max) that PyTorch does in the common dtype itself.
std::vector<Value> exact_all(Builder& b, const std::vector<const Operand*>& ops, ET t) {
  std::vector<Value> values;
  for (const Operand* o : ops) values.push_back(convert(b, o->value, t));
  return broadcast_all(b, std::move(values));
}

// ---------------------------------------------------------------- building blocks

// A constant shaped and typed like `like`.
Value k(Builder& b, const Value& like, double v) { return b.full(like.shape, v); }

// The type integer and bool inputs compute in: the result's, which PyTorch makes
// the default dtype (float64 under torch.set_default_dtype(torch.float64)).
ET floating_type(const Context& c, ET t) {
  if (is_floating(t) || is_complex(t)) return t;
  ET result = c.output(0).type;
  return is_floating(result) ? result : ET::F32;
}

Value cmp(Builder& b, const Value& x, const Value& y, Comparison d) { return b.compare(x, y, d); }
Value cmp(Builder& b, const Value& x, double y, Comparison d) { return cmp(b, x, k(b, x, y), d); }

Value none_like(Builder& b, const Value& x) { return b.full({ET::Pred, x.dims()}, 0); }

// Truthiness (C++'s bool(x)): non-zero, NaN included.
Value truthy(Builder& b, const Value& x) {
  if (x.type() == ET::Pred) return x;
  return cmp(b, x, 0, Comparison::NE);
}

Value trunc_of(Builder& b, const Value& x) {
  return b.select(cmp(b, x, 0, Comparison::LT), b.ceil(x), b.floor(x));
}

// max/min that return NaN when either operand is NaN (torch.maximum, clamp).
Value nan_max(Builder& b, const Value& x, const Value& y) {
  if (x.type() == ET::Pred) return b.or_(x, y);
  Value r = b.max(x, y);
  if (!is_floating(x.type())) return r;
  r = b.select(is_nan(b, y), y, r);
  return b.select(is_nan(b, x), x, r);
}

Value nan_min(Builder& b, const Value& x, const Value& y) {
  if (x.type() == ET::Pred) return b.and_(x, y);
  Value r = b.min(x, y);
  if (!is_floating(x.type())) return r;
  r = b.select(is_nan(b, y), y, r);
  return b.select(is_nan(b, x), x, r);
}

Value negate(Builder& b, const Value& x) {
  if (is_unsigned(x.type())) return b.sub(k(b, x, 0), x);  // wraps like C++
  return b.neg(x);
}

Value chlo(Builder& b, const char* op, const Value& x) {
  return b.emit(std::string("chlo.") + op, {x}, "", {x.shape})[0];
}

// x / y correctly rounded. XLA's CPU plugin divides by a broadcast divisor
// with its reciprocal (one ulp off; TPUs always approximate), which changes
// trunc(x / y) where the quotient is near an integer (5 / 0.1 is 50 in
// PyTorch). One Newton step with the exact residual x - q*y (Dekker's
// product, which needs no FMA) restores the rounding.
Value exact_divide(Builder& b, const Value& x, const Value& y) {
  Value q = b.div(x, y);
  // Veltkamp's splitting constant 2^ceil(p/2) + 1 for a p-bit significand.
  Value splitter = k(b, q, q.type() == ET::F64 ? 134217729.0 : 4097.0);
  auto split = [&](const Value& v) {
    Value scaled = b.mul(splitter, v);
    Value high = b.sub(scaled, b.sub(scaled, v));
    return std::pair{high, b.sub(v, high)};
  };
  auto [qh, ql] = split(q);
  auto [yh, yl] = split(y);
  Value p = b.mul(q, y);
  Value error =
      b.add(b.add(b.add(b.sub(b.mul(qh, yh), p), b.mul(qh, yl)), b.mul(ql, yh)), b.mul(ql, yl));
  Value residual = b.sub(b.sub(x, p), error);
  Value corrected = b.add(q, b.div(residual, y));
  // Huge quotients overflow the split; they are integers already.
  return b.select(b.is_finite(corrected), corrected, q);
}

// Rounds to the reduced dtype `t` and back, emulating PyTorch's Vectorized
// Half/BFloat16 arithmetic, which rounds after every operation.
struct Rounding {
  Builder& b;
  ET t;
  bool on;
  Value operator()(const Value& v) const { return on ? convert(b, convert(b, v, t), v.type()) : v; }
};

// ---------------------------------------------------------------- rule registry

std::map<std::string, RuleFn, std::less<>>& own_rules() {
  static std::map<std::string, RuleFn, std::less<>> rules;
  return rules;
}

bool remember(RuleFn fn, std::initializer_list<const char*> names) {
  for (const char* name : names) own_rules()[name] = fn;
  return true;
}

// ================================================================ unary

using UnaryFn = Value (*)(Builder&, const Value&);

// Math functions of floating inputs: integers and bools compute in float32.
Value exp_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_exp(b, x) : b.exp(x);
}
// Complex functions from real parts: f(x + iy) = p(x) q(y) + i r(x) s(y), with
// the imaginary part exactly 0 where y is (C99's cexp(inf + 0i) = inf + 0i,
// where inf * sin(0) would make it NaN).
Value complex_from_parts(Builder& b, const Value& real, const Value& imag_factor,
                         const Value& sin_y, const Value& y) {
  Value imag = b.select(cmp(b, y, 0, Comparison::EQ), y, b.mul(imag_factor, sin_y));
  return b.complex(real, imag);
}

// 2^z = exp(z ln 2), as ATen's exp2 of complex numbers.
Value exp2_of(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return b.pow(k(b, x, 2), x);
  return complex_exp(b, complex_scale(b, x, M_LN2));
}
Value expm1_of(Builder& b, const Value& x) { return b.unary("exponential_minus_one", x); }
Value log_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_log(b, x) : b.log(x);
}
// log z / ln 2, each part divided (a complex product with (1/ln 2 + 0i) makes
// NaN of 0 * inf).
Value log2_of(Builder& b, const Value& x) {
  if (is_complex(x.type())) return complex_scale(b, complex_log(b, x), 1 / M_LN2);
  return b.mul(b.log(x), k(b, x, 1 / M_LN2));
}
Value log10_of(Builder& b, const Value& x) {
  if (is_complex(x.type())) return complex_scale(b, complex_log(b, x), 1 / M_LN10);
  return b.mul(b.log(x), k(b, x, 1 / M_LN10));
}
Value log1p_of(Builder& b, const Value& x) { return b.unary("log_plus_one", x); }
Value sqrt_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_sqrt(b, x) : b.sqrt(x);
}
// 1 / sqrt z for complex z, as ATen computes it.
Value rsqrt_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_divide(b, k(b, x, 1), complex_sqrt(b, x)) : b.rsqrt(x);
}
Value sin_of(Builder& b, const Value& x) { return b.unary("sine", x); }
Value cos_of(Builder& b, const Value& x) { return b.unary("cosine", x); }
Value tan_of(Builder& b, const Value& x) { return chlo(b, "tan", x); }
Value asin_of(Builder& b, const Value& x) { return chlo(b, "asin", x); }
Value acos_of(Builder& b, const Value& x) { return chlo(b, "acos", x); }
// atan2(2x, 2): XLA's CPU plugin rewrites atan2(x, 1) (and chlo.atan) into an
// atan that is wrong for some shapes (63 elements, for one). Doubling is
// exact, and where it overflows atan2(+-inf, 2) is still +-pi/2.
Value atan_of(Builder& b, const Value& x) {
  if (is_complex(x.type())) return complex_atan(b, x);
  Value two = k(b, x, 2);
  return b.atan2(b.mul(x, two), two);
}
// Complex sinh and cosh from real ones: chlo's complex sinh, (e^z - e^-z) / 2,
// loses all precision near 0.
//   sinh(x + iy) = sinh x cos y + i cosh x sin y
//   cosh(x + iy) = cosh x cos y + i sinh x sin y
//
// Real ones: chlo's e^(|x| + log 1/2) rounds |x| + log 1/2 (float32 sinh(50) was
// 12 ulp off). (e^|x| -+ e^-|x|) / 2 is within an ulp or two; where e^|x|
// overflows but the result need not, e^(|x|/2) / 2 * e^(|x|/2). Below 1, sinh
// keeps chlo's expm1 form (no cancellation).
template <bool Sinh>
Value real_hyperbolic(Builder& b, const Value& x) {
  if (x.type() == ET::F16 || x.type() == ET::BF16) {  // in float32, as the CPU's
    return convert(b, real_hyperbolic<Sinh>(b, convert(b, x, ET::F32)), x.type());
  }
  Value ax = b.abs(x);
  Value half_e = b.exp(b.mul(ax, k(b, ax, 0.5)));
  Value huge = b.mul(b.mul(half_e, k(b, ax, 0.5)), half_e);
  Value e = b.exp(ax), inv = b.div(k(b, ax, 1), e);
  Value moderate = b.mul(Sinh ? b.sub(e, inv) : b.add(e, inv), k(b, ax, 0.5));
  const double overflow = x.type() == ET::F64 ? 709.0 : 88.0;
  Value r = b.select(cmp(b, ax, overflow, Comparison::LT), moderate, huge);
  if (!Sinh) return r;
  r = b.select(cmp(b, x, 0, Comparison::LT), b.neg(r), r);
  return b.select(cmp(b, ax, 1, Comparison::LT), chlo(b, "sinh", x), r);
}

template <bool Sinh>
Value hyperbolic_of(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return real_hyperbolic<Sinh>(b, x);
  Value re = b.real(x), im = b.imag(x);
  Value sh = real_hyperbolic<true>(b, re), ch = real_hyperbolic<false>(b, re);
  Value cos_y = b.unary("cosine", im), sin_y = b.unary("sine", im);
  return complex_from_parts(b, b.mul(Sinh ? sh : ch, cos_y), Sinh ? ch : sh, sin_y, im);
}
Value sinh_of(Builder& b, const Value& x) { return hyperbolic_of<true>(b, x); }
Value cosh_of(Builder& b, const Value& x) { return hyperbolic_of<false>(b, x); }
Value tanh_of(Builder& b, const Value& x) { return b.tanh(x); }
Value asinh_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_asinh(b, x) : chlo(b, "asinh", x);
}
Value acosh_of(Builder& b, const Value& x) { return chlo(b, "acosh", x); }
Value atanh_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_atanh(b, x) : chlo(b, "atanh", x);
}
// 1 / (1 + exp(-z)) for complex z, as ATen computes it.
Value sigmoid_of(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return b.logistic(x);
  return complex_divide(b, k(b, x, 1), b.add(k(b, x, 1), complex_exp(b, b.neg(x))));
}
Value erf_of(Builder& b, const Value& x) { return chlo(b, "erf", x); }
Value erfc_of(Builder& b, const Value& x) { return chlo(b, "erfc", x); }
// Complex: c10's (Smith's) division, as the CPU's 1 / z: reciprocal(inf + inf i)
// is NaN there, 0 in XLA's complex divide.
Value reciprocal_of(Builder& b, const Value& x) {
  return is_complex(x.type()) ? complex_divide(b, k(b, x, 1), x) : b.div(k(b, x, 1), x);
}

// `Complex`: StableHLO defines the function for complex operands too.
template <UnaryFn F, bool Complex>
std::vector<Value> unary_math(Context& c, const Args& a) {
  const Operand& x = a.operand(0);
  ET t = floating_type(c, x.value.type());
  require(Complex || !is_complex(t), c, t);
  return {F(c.b, lift(c.b, x, t))};
}

std::vector<Value> neg(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(x.type() != ET::Pred, c, x.type());
  return {negate(c.b, x)};
}

std::vector<Value> abs(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(x.type() != ET::Pred, c, x.type());
  if (is_unsigned(x.type())) return {x};
  Value magnitude = c.b.abs(x);  // complex: the real magnitude
  if (!is_complex(x.type())) return {magnitude};
  // An infinite part makes it infinite, NaN in the other part or not (C's cabs);
  // XLA's gives NaN for (NaN, inf).
  return {c.b.select(is_inf(c.b, x), k(c.b, magnitude, INFINITY), magnitude)};
}

// sign(NaN) is 0 on the CPU: (0 < x) - (x < 0).
Value sign_of(Builder& b, const Value& x) {
  if (x.type() == ET::Pred) return x;
  if (is_unsigned(x.type())) return b.convert(cmp(b, x, 0, Comparison::GT), x.type());
  if (is_signed_integral(x.type())) return b.unary("sign", x);
  Value pos = b.convert(cmp(b, x, 0, Comparison::GT), x.type());
  Value negative = b.convert(cmp(b, x, 0, Comparison::LT), x.type());
  return b.sub(pos, negative);
}

std::vector<Value> sign(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(!is_complex(x.type()), c, x.type());
  return {sign_of(c.b, x)};
}

// sgn(z) = z / |z| (0 for 0); the sign for real inputs.
std::vector<Value> sgn(Context& c, const Args& a) {
  Value x = a.tensor(0);
  if (!is_complex(x.type())) return {sign_of(c.b, x)};
  Builder& b = c.b;
  Value mag = b.abs(x);
  Value zero = cmp(b, mag, 0, Comparison::EQ);
  Value safe = b.select(zero, k(b, mag, 1), mag);
  Value unit = b.complex(b.div(b.real(x), safe), b.div(b.imag(x), safe));
  return {b.select(zero, k(b, x, 0), unit)};
}

// floor/ceil/round/trunc keep integers as they are.
template <UnaryFn F>
std::vector<Value> rounding(Context& c, const Args& a) {
  Value x = a.tensor(0);
  ET t = x.type();
  require(t != ET::Pred && !is_complex(t), c, t);
  if (is_integral(t)) return {x};
  return {F(c.b, convert(c.b, x, opmath(t)))};
}

Value floor_of(Builder& b, const Value& x) { return b.floor(x); }
Value ceil_of(Builder& b, const Value& x) { return b.ceil(x); }
Value round_of(Builder& b, const Value& x) { return b.unary("round_nearest_even", x); }
Value trunc_fn(Builder& b, const Value& x) { return trunc_of(b, x); }
Value frac_of(Builder& b, const Value& x) { return b.sub(x, trunc_of(b, x)); }

std::vector<Value> frac(Context& c, const Args& a) {
  ET t = a.tensor(0).type();
  require(is_floating(t), c, t);
  return rounding<frac_of>(c, a);
}

// round.decimals(self, *, decimals): PyTorch scales by 10^|decimals| in the
// opmath type and rounds half to even.
std::vector<Value> round_decimals(Context& c, const Args& a) {
  Value x = a.tensor(0);
  int64_t decimals = a.integer(1);
  require(is_floating(x.type()), c, x.type());
  Builder& b = c.b;
  Value v = convert(b, x, opmath(x.type()));
  Value ten = k(b, v, std::pow(10.0, static_cast<double>(std::llabs(decimals))));
  if (decimals < 0) return {b.mul(round_of(b, exact_divide(b, v, ten)), ten)};
  return {exact_divide(b, round_of(b, b.mul(v, ten)), ten)};
}

std::vector<Value> bitwise_not(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(x.type() == ET::Pred || is_integral(x.type()), c, x.type());
  return {c.b.not_(x)};
}

std::vector<Value> logical_not(Context& c, const Args& a) {
  return {c.b.not_(truthy(c.b, a.tensor(0)))};
}

std::vector<Value> isnan(Context& c, const Args& a) { return {is_nan(c.b, a.tensor(0))}; }
std::vector<Value> isinf(Context& c, const Args& a) { return {is_inf(c.b, a.tensor(0))}; }

std::vector<Value> isposinf(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(!is_complex(x.type()), c, x.type());
  if (!is_floating(x.type())) return {none_like(c.b, x)};
  return {cmp(c.b, x, INFINITY, Comparison::EQ)};
}

std::vector<Value> isneginf(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(!is_complex(x.type()), c, x.type());
  if (!is_floating(x.type())) return {none_like(c.b, x)};
  return {cmp(c.b, x, -INFINITY, Comparison::EQ)};
}

std::vector<Value> signbit(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require(!is_complex(x.type()), c, x.type());
  return {sign_bit(c.b, x)};
}

double highest_finite(ET t) {
  switch (t) {
    case ET::F16:
      return 65504.0;
    case ET::BF16:
      return 3.3895313892515355e38;
    case ET::F32:
      return std::numeric_limits<float>::max();
    default:
      return std::numeric_limits<double>::max();
  }
}

Value replace_non_finite(Builder& b, const Value& x, const Args& a) {
  double top = highest_finite(x.type());
  Value r = b.select(is_nan(b, x), k(b, x, a.optional_real(1).value_or(0.0)), x);
  r = b.select(cmp(b, x, INFINITY, Comparison::EQ), k(b, x, a.optional_real(2).value_or(top)), r);
  return b.select(cmp(b, x, -INFINITY, Comparison::EQ), k(b, x, a.optional_real(3).value_or(-top)),
                  r);
}

// nan_to_num(self, nan=None, posinf=None, neginf=None): the replacements are
// static floats, converted to the dtype like PyTorch's static_cast.
std::vector<Value> nan_to_num(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Builder& b = c.b;
  if (is_complex(x.type())) {
    return {b.complex(replace_non_finite(b, b.real(x), a), replace_non_finite(b, b.imag(x), a))};
  }
  if (!is_floating(x.type())) return {x};
  return {replace_non_finite(b, x, a)};
}

// ================================================================ arithmetic

// self + alpha * other (sub: self - alpha * other). `alpha` does not take
// part in type promotion; it may be absent (foreach overloads).
std::vector<Value> add_or_sub(Context& c, const Args& a, bool subtract) {
  const Operand& x = a.operand(0);
  const Operand& y = a.operand(1);
  ET t = result_type({&x, &y});
  // PyTorch rejects any bool operand of a subtraction (its meta kernel does not).
  if (subtract && (x.dtype == ET::Pred || y.dtype == ET::Pred)) unsupported(c, ET::Pred);
  Builder& b = c.b;
  auto v = lift_all(b, {&x, &y}, t);
  Value rhs = v[1];
  if (!a.is_none(2)) rhs = b.mul(broadcast_to(b, lift(b, a.operand(2), t), rhs.dims()), rhs);
  return {subtract ? b.sub(v[0], rhs) : b.add(v[0], rhs)};
}

std::vector<Value> add(Context& c, const Args& a) { return add_or_sub(c, a, false); }
std::vector<Value> sub(Context& c, const Args& a) { return add_or_sub(c, a, true); }

// rsub(self, other, alpha) = other - alpha * self.
std::vector<Value> rsub(Context& c, const Args& a) {
  std::vector<Arg> swapped(3);
  for (size_t i = 0; i < 3; ++i) {
    swapped[i].is_operand = true;
    size_t from = i == 2 ? 2 : 1 - i;
    swapped[i].operands.push_back(a.is_none(from) ? std::nullopt
                                                  : std::optional<Operand>(a.operand(from)));
  }
  return sub(c, Args(std::move(swapped)));
}

std::vector<Value> mul(Context& c, const Args& a) {
  const Operand& x = a.operand(0);
  const Operand& y = a.operand(1);
  ET t = result_type({&x, &y});
  Builder& b = c.b;
  auto v = broadcast_all(b, {lift(b, x, t), lift_scalar(b, y, t)});
  if (t == ET::Pred) return {b.and_(v[0], v[1])};
  return {b.mul(v[0], v[1])};
}

Value floor_divide_integral(Builder& b, const Value& x, const Value& y) {
  Value q = b.div(x, y);
  if (is_unsigned(x.type())) return q;
  // Truncation rounds towards zero: step down when the signs differ and the
  // division is inexact.
  Value r = b.rem(x, y);
  Value inexact = cmp(b, r, 0, Comparison::NE);
  Value signs_differ =
      cmp(b, cmp(b, x, 0, Comparison::LT), cmp(b, y, 0, Comparison::LT), Comparison::NE);
  return b.select(b.and_(inexact, signs_differ), b.sub(q, k(b, q, 1)), q);
}

// c10::div_floor_floating (Python's float //), operation by operation:
// (x - fmod(x, y)) / y is an integer in exact arithmetic, so rounding it to
// the nearest integer makes the result exact even where the division is not.
// `r` emulates reduced-float rounding.
Value floor_divide_floating(Builder& b, const Value& x, const Value& y, const Rounding& r) {
  Value zero = k(b, x, 0), one = k(b, x, 1);
  Value mod = r(b.rem(x, y));
  Value div = r(b.div(r(b.sub(x, mod)), y));
  Value mod_nonzero = cmp(b, mod, zero, Comparison::NE);
  Value signs_differ =
      cmp(b, cmp(b, y, zero, Comparison::LT), cmp(b, mod, zero, Comparison::LT), Comparison::NE);
  div = b.select(b.and_(mod_nonzero, signs_differ), r(b.sub(div, one)), div);
  Value floordiv = b.floor(div);
  Value round_up = cmp(b, r(b.sub(div, floordiv)), k(b, x, 0.5), Comparison::GT);
  floordiv = b.select(round_up, r(b.add(floordiv, one)), floordiv);
  Value basic = r(b.div(x, y));
  Value signed_zero = b.select(sign_bit(b, basic), k(b, x, -0.0), zero);
  floordiv = b.select(cmp(b, div, zero, Comparison::EQ), signed_zero, floordiv);
  return b.select(cmp(b, y, zero, Comparison::EQ), basic, floordiv);
}

// div(self, other, *, rounding_mode=None|"trunc"|"floor"). True division
// promotes integers to float; the rounding modes keep them integral.
std::vector<Value> div(Context& c, const Args& a) {
  const Operand& x = a.operand(0);
  const Operand& y = a.operand(1);
  std::string mode = a.is_none(2) ? "" : a.str(2);
  ET t = result_type({&x, &y});
  Builder& b = c.b;
  if (mode.empty()) {
    t = floating_type(c, t);
    auto v = broadcast_all(b, {lift(b, x, t), lift_scalar(b, y, t)});
    return {is_complex(t) ? complex_divide(b, v[0], v[1]) : b.div(v[0], v[1])};
  }
  require(t != ET::Pred && !is_complex(t), c, t);
  if (is_integral(t)) {
    auto v = lift_all(b, {&x, &y}, t);
    return {mode == "floor" ? floor_divide_integral(b, v[0], v[1]) : b.div(v[0], v[1])};
  }
  if (mode != "trunc" && mode != "floor") {
    throw std::invalid_argument(
        "div expected rounding_mode to be one of None, 'trunc', or 'floor'");
  }
  // A one-element divisor takes the CPU's float32 path; otherwise the
  // reduced-float kernels round after each operation (for trunc, the
  // quotient before truncating it).
  bool scalar_divisor = y.value.shape.numel() == 1;
  Rounding r{b, t, is_reduced(t) && !scalar_divisor};
  auto v = broadcast_all(b, {lift(b, x, t), lift_scalar(b, y, t)});
  if (mode == "floor") return {floor_divide_floating(b, v[0], v[1], r)};
  return {trunc_of(b, r.on ? r(b.div(v[0], v[1])) : exact_divide(b, v[0], v[1]))};
}

std::vector<Value> floor_divide(Context& c, const Args& a) {
  std::vector<Arg> args(3);
  for (size_t i = 0; i < 2; ++i) {
    args[i].is_operand = true;
    args[i].operands.push_back(a.operand(i));
  }
  args[2].value = std::string("floor");
  return div(c, Args(std::move(args)));
}

// Python's %: the result takes the sign of the divisor.
std::vector<Value> remainder(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(t != ET::Pred && !is_complex(t), c, t);
  Builder& b = c.b;
  auto v = lift_all(b, {&a.operand(0), &a.operand(1)}, t);
  Value mod = b.rem(v[0], v[1]);
  if (is_unsigned(t)) return {mod};
  Value nonzero = cmp(b, mod, 0, Comparison::NE);
  Value signs_differ =
      cmp(b, cmp(b, v[1], 0, Comparison::LT), cmp(b, mod, 0, Comparison::LT), Comparison::NE);
  return {b.select(b.and_(nonzero, signs_differ), b.add(mod, v[1]), mod)};
}

// C's fmod: the result takes the sign of the dividend.
std::vector<Value> fmod(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(t != ET::Pred && !is_complex(t), c, t);
  auto v = lift_all(c.b, {&a.operand(0), &a.operand(1)}, t);
  return {c.b.rem(v[0], v[1])};
}

// ---------------------------------------------------------------- pow

// c10's powi: by squaring, one exponent bit at a time, wrapping modulo 2^n
// as the CPU's multiplications do (XLA's power squares only six times, so
// exponents from 64 came out wrong: int64 55 ** 127, uint8 55 ** 128);
// negative exponents give 0 except for bases 1 and -1.
Value integral_pow(Builder& b, const Value& x, const Value& e) {
  const bool is_signed = !is_unsigned(e.type());
  Value r = k(b, x, 1), square = x;
  for (int bit = 0; bit < 8 * element_size(e.type()) - (is_signed ? 1 : 0); ++bit) {
    Value set = cmp(b, b.and_(e, k(b, e, std::ldexp(1.0, bit))), 0, Comparison::NE);
    r = b.select(set, b.mul(r, square), r);
    square = b.mul(square, square);
  }
  if (!is_signed) return r;
  Value negative = cmp(b, e, 0, Comparison::LT);
  Value odd = cmp(b, b.rem(e, k(b, e, 2)), 0, Comparison::NE);
  Value minus_one_pow = b.select(odd, k(b, x, -1), k(b, x, 1));
  Value small = b.select(cmp(b, x, 1, Comparison::EQ), k(b, x, 1),
                         b.select(cmp(b, x, -1, Comparison::EQ), minus_one_pow, k(b, x, 0)));
  return b.select(negative, small, r);
}

// pow(Tensor, Scalar): the CPU kernel computes common exponents with
// sqrt/rsqrt/reciprocal/multiplications (exact, and sqrt(-inf) is NaN where
// pow gives inf), so the rule selects on the runtime exponent. ATen fills 1
// for an exponent of 0 and copies the base for 1 (which complex pow would not:
// exp(0 * log 0) is NaN).
Value pow_by_scalar(Builder& b, const Value& x, const Value& e) {
  bool complex = is_complex(x.type());
  Value exponent = broadcast_to(b, e, x.dims());
  Value r = complex ? complex_pow(b, x, exponent) : b.pow(x, exponent);
  auto special = [&](double value, const Value& result) {
    r = b.select(cmp(b, e, value, Comparison::EQ), result, r);
  };
  Value square = b.mul(x, x);
  Value one = k(b, x, 1);
  special(2, square);
  special(3, b.mul(square, x));
  special(-2, complex ? complex_divide(b, one, square) : b.div(one, square));
  special(0.5, sqrt_of(b, x));
  special(-0.5, rsqrt_of(b, x));
  special(-1, reciprocal_of(b, x));
  if (complex) {  // real pow gives these already
    special(1, x);
    special(0, one);
  }
  return r;
}

// One rule for every overload (pow_.Scalar, the in-place form of
// pow.Tensor_Scalar, reaches it too); a Python-number exponent is told by its
// operand category.
std::vector<Value> pow(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  bool scalar_exponent = a.operand(1).category == Category::WrappedNumber;
  Builder& b = c.b;
  auto v = lift_all(b, {&a.operand(0), &a.operand(1)}, t);
  if (t == ET::Pred) {
    // PyTorch copies the base for an exponent of 1 and fills ones for 0,
    // before its kernel would reject bool.
    require(scalar_exponent, c, t);
    return {b.select(v[1], v[0], k(b, v[0], 1))};
  }
  if (is_integral(t)) return {integral_pow(b, v[0], v[1])};
  if (scalar_exponent) return {pow_by_scalar(b, v[0], lift(b, a.operand(1), t))};
  return {is_complex(t) ? complex_pow(b, v[0], v[1]) : b.pow(v[0], v[1])};
}

// ---------------------------------------------------------------- binary math

// Binary functions of floating inputs (integers promote to the default dtype).
using BinaryFn = Value (*)(Builder&, const Value&, const Value&);

template <BinaryFn F>
std::vector<Value> binary_math(Context& c, const Args& a) {
  ET t = floating_type(c, common_type(a, {0, 1}));
  require(!is_complex(t), c, t);
  auto v = lift_all(c.b, {&a.operand(0), &a.operand(1)}, t);
  return {F(c.b, v[0], v[1])};
}

// Binary functions PyTorch defines for floating dtypes only (`Complex`: and
// for complex ones).
template <BinaryFn F, bool Complex = false>
std::vector<Value> floating_math(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(is_floating(t) || (Complex && is_complex(t)), c, t);
  auto v = lift_all(c.b, {&a.operand(0), &a.operand(1)}, t);
  return {F(c.b, v[0], v[1])};
}

Value atan2_of(Builder& b, const Value& y, const Value& x) { return b.atan2(y, x); }

Value copysign_of(Builder& b, const Value& x, const Value& y) { return copy_sign(b, x, y); }

// x * log(y), with 0 for x == 0 and NaN for y NaN.
Value xlogy_of(Builder& b, const Value& x, const Value& y) {
  Value r = b.select(cmp(b, x, 0, Comparison::EQ), k(b, x, 0), b.mul(x, b.log(y)));
  return b.select(is_nan(b, y), y, r);
}

// std::hypot without overflow: max * sqrt(1 + (min/max)^2).
Value hypot_of(Builder& b, const Value& x, const Value& y) {
  Value ax = b.abs(x), ay = b.abs(y);
  Value hi = b.max(ax, ay), lo = b.min(ax, ay);
  Value ratio = b.div(lo, hi);
  Value r = b.mul(hi, b.sqrt(b.add(k(b, x, 1), b.mul(ratio, ratio))));
  r = b.select(cmp(b, hi, 0, Comparison::EQ), k(b, x, 0), r);
  r = b.select(b.or_(is_nan(b, x), is_nan(b, y)), k(b, x, NAN), r);
  return b.select(b.or_(is_inf(b, x), is_inf(b, y)), k(b, x, INFINITY), r);
}

// Complex logaddexp as PyTorch's CPU kernel: ordered by real part (y is the
// larger when the real parts tie), max + log1p(exp(min - max)); NaN if either
// part of either is; equal infinite real parts give min for -inf and
// log(exp(min) + exp(max)) for +inf.
Value complex_logaddexp(Builder& b, const Value& x, const Value& y) {
  Value x_smaller = cmp(b, b.real(x), b.real(y), Comparison::LT);
  Value lo = b.select(x_smaller, x, y), hi = b.select(x_smaller, y, x);
  Value lo_re = b.real(lo);
  Value r = b.add(b.unary("log_plus_one", b.exp(b.sub(lo, hi))), hi);
  Value both_inf = b.and_(is_inf(b, lo_re), cmp(b, lo_re, b.real(hi), Comparison::EQ));
  Value at_inf = b.select(cmp(b, lo_re, 0, Comparison::LT), lo, b.log(b.add(b.exp(lo), b.exp(hi))));
  r = b.select(both_inf, at_inf, r);
  Value nan = k(b, lo_re, NAN);
  return b.select(b.or_(is_nan(b, x), is_nan(b, y)), b.complex(nan, nan), r);
}

// max + log1p(exp(-|x - y|)), and x when both are the same infinity.
template <bool Base2>
Value logaddexp_of(Builder& b, const Value& x, const Value& y) {
  if (!Base2 && is_complex(x.type())) return complex_logaddexp(b, x, y);
  Value m = nan_max(b, x, y);
  Value d = b.neg(b.abs(b.sub(x, y)));
  Value r = Base2 ? b.mul(b.unary("log_plus_one", exp2_of(b, d)), k(b, x, 1 / M_LN2))
                  : b.unary("log_plus_one", b.exp(d));
  Value same_inf = b.and_(cmp(b, x, y, Comparison::EQ), is_inf(b, x));
  return b.select(same_inf, x, b.add(m, r));
}

// ---------------------------------------------------------------- min/max

template <bool Max, bool IgnoreNan>
std::vector<Value> extremum(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(!is_complex(t), c, t);
  Builder& b = c.b;
  auto v = exact_all(b, {&a.operand(0), &a.operand(1)}, t);
  Value r = Max ? nan_max(b, v[0], v[1]) : nan_min(b, v[0], v[1]);
  if (IgnoreNan && is_floating(t)) {  // fmax/fmin: NaN only if both are
    r = b.select(is_nan(b, v[0]), v[1], b.select(is_nan(b, v[1]), v[0], r));
  }
  return {r};
}

// clamp(self, min=None, max=None) in the common dtype of all three; NaN in
// any operand gives NaN, and min > max gives max.
std::vector<Value> clamp_impl(Context& c, const Operand& self, const Operand* lo,
                              const Operand* hi) {
  std::vector<const Operand*> ops = {&self};
  if (lo) ops.push_back(lo);
  if (hi) ops.push_back(hi);
  ET t = result_type(ops);
  require(t != ET::Pred && !is_complex(t), c, t);
  Builder& b = c.b;
  auto v = exact_all(b, ops, t);
  Value r = v[0];
  if (lo) r = nan_max(b, r, v[1]);
  if (hi) r = nan_min(b, r, v.back());
  return {r};
}

const Operand* optional_operand(const Args& a, size_t i) {
  return a.is_none(i) ? nullptr : &a.operand(i);
}

std::vector<Value> clamp(Context& c, const Args& a) {
  return clamp_impl(c, a.operand(0), optional_operand(a, 1), optional_operand(a, 2));
}

// Bool tensors clamp against bool tensors (not scalars) on the CPU: or / and.
bool bool_tensors(const Args& a) {
  return a.operand(0).dtype == ET::Pred && a.operand(1).dtype == ET::Pred &&
         a.operand(1).category != Category::WrappedNumber;
}

std::vector<Value> clamp_min(Context& c, const Args& a) {
  if (bool_tensors(a)) {
    auto v = promote(c.b, {&a.operand(0), &a.operand(1)}, ET::Pred);
    return {c.b.or_(v[0], v[1])};
  }
  return clamp_impl(c, a.operand(0), &a.operand(1), nullptr);
}

std::vector<Value> clamp_max(Context& c, const Args& a) {
  if (bool_tensors(a)) {
    auto v = promote(c.b, {&a.operand(0), &a.operand(1)}, ET::Pred);
    return {c.b.and_(v[0], v[1])};
  }
  return clamp_impl(c, a.operand(0), nullptr, &a.operand(1));
}

// ================================================================ comparisons

template <Comparison D>
std::vector<Value> compare(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  bool ordered = D != Comparison::EQ && D != Comparison::NE;
  require(!(ordered && is_complex(t)), c, t);
  auto v = exact_all(c.b, {&a.operand(0), &a.operand(1)}, t);
  return {cmp(c.b, v[0], v[1], D)};
}

// torch_tpu::isclose(self, other, rtol, atol, equal_nan), for floating and complex
// inputs of one dtype (the aten::isclose kernel sends the others to PyTorch's
// composite): that composite's ops in one program instead of a dozen, each step
// computed in its eager op's type (float32 for half types) and rounded to the
// inputs' type as that op rounds it.
std::vector<Value> isclose(Context& c, const Args& a) {
  Builder& b = c.b;
  auto v = broadcast_all(b, {a.tensor(0), a.tensor(1)});
  const Value &x = v[0], &y = v[1];
  const double rtol = a.real(2), atol = a.real(3);
  Value close = b.compare(x, y, Comparison::EQ);
  if (a.boolean(4)) close = b.or_(close, b.and_(is_nan(b, x), is_nan(b, y)));
  if (rtol == 0 && atol == 0) return {close};
  const ET t = x.type();
  auto op = [&](const Value& z) {  // z in its eager ops' computing type
    return z.type() == ET::BF16 || z.type() == ET::F16 ? convert(b, z, ET::F32) : z;
  };
  // |rtol * other|: a real factor scales both parts of a complex value.
  Value scaled = is_complex(t) ? b.complex(b.mul(b.real(y), k(b, b.real(y), rtol)),
                                           b.mul(b.imag(y), k(b, b.imag(y), rtol)))
                               : convert(b, b.mul(op(y), k(b, op(y), rtol)), t);
  Value magnitude = b.abs(scaled);  // real for complex values
  const ET real = magnitude.type();
  Value allowed = convert(b, b.add(k(b, op(magnitude), atol), op(magnitude)), real);
  Value actual = b.abs(is_complex(t) ? b.sub(x, y) : convert(b, b.sub(op(x), op(y)), t));
  Value within = b.and_(b.is_finite(actual), b.compare(actual, allowed, Comparison::LE));
  return {b.or_(close, within)};
}

// ================================================================ logical / bitwise

using PredFn = Value (Builder::*)(const Value&, const Value&);

template <PredFn F>
std::vector<Value> logical(Context& c, const Args& a) {
  Builder& b = c.b;
  auto v = broadcast_all(b, {truthy(b, a.tensor(0)), truthy(b, a.tensor(1))});
  return {(b.*F)(v[0], v[1])};
}

template <PredFn F>
std::vector<Value> bitwise(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(t == ET::Pred || is_integral(t), c, t);
  auto v = exact_all(c.b, {&a.operand(0), &a.operand(1)}, t);
  return {(c.b.*F)(v[0], v[1])};
}

// Shifts by a negative amount or by the width or more give 0 (left) or the
// sign fill (right), as on the CPU; StableHLO defines the same.
template <bool Left>
std::vector<Value> shift(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(is_integral(t), c, t);
  auto v = exact_all(c.b, {&a.operand(0), &a.operand(1)}, t);
  const char* op = Left             ? "shift_left"
                   : is_unsigned(t) ? "shift_right_logical"
                                    : "shift_right_arithmetic";
  return {c.b.binary(op, v[0], v[1])};
}

// ================================================================ selection

// where.self(condition, self, other)
std::vector<Value> where(Context& c, const Args& a) {
  ET t = common_type(a, {1, 2});
  Builder& b = c.b;
  auto v = broadcast_all(
      b, {truthy(b, a.tensor(0)), convert(b, a.tensor(1), t), convert(b, a.tensor(2), t)});
  return {b.select(v[0], v[1], v[2])};
}

// masked_fill(self, mask, value): value converted to self's dtype.
std::vector<Value> masked_fill(Context& c, const Args& a) {
  Builder& b = c.b;
  Value self = a.tensor(0);
  const Dims& dims = c.output(0).dims;
  Value mask = broadcast_to(b, truthy(b, a.tensor(1)), dims);
  Value value = broadcast_to(b, convert(b, a.tensor(2), self.type()), dims);
  return {b.select(mask, value, broadcast_to(b, self, dims))};
}

// ================================================================ pointwise ternary

// lerp(self, end, weight): at::lerp's two formulas keep either end exact.
std::vector<Value> lerp(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1});
  require(is_inexact(t), c, t);
  Builder& b = c.b;
  auto v = lift_all(b, {&a.operand(0), &a.operand(1)}, t);
  Value w = lift_scalar(b, a.operand(2), t);
  auto all = broadcast_all(b, {v[0], v[1], w});
  Value self = all[0], end = all[1];
  w = all[2];
  Value diff = b.sub(end, self);
  Value small = cmp(b, b.abs(w), 0.5, Comparison::LT);
  Value from_self = b.add(self, b.mul(w, diff));
  Value from_end = b.sub(end, b.mul(diff, b.sub(k(b, w, 1), w)));
  return {b.select(small, from_self, from_end)};
}

// addcmul: self + value * t1 * t2; addcdiv: self + value * t1 / t2.
template <bool Divide>
std::vector<Value> addc(Context& c, const Args& a) {
  ET t = common_type(a, {0, 1, 2});
  require(t != ET::Pred, c, t);
  Builder& b = c.b;
  auto v = lift_all(b, {&a.operand(0), &a.operand(1), &a.operand(2)}, t);
  Value scale = a.is_none(3) ? k(b, v[1], 1) : lift_scalar(b, a.operand(3), t);
  Value scaled = b.mul(broadcast_to(b, scale, v[1].dims()), v[1]);
  return {b.add(v[0], Divide ? b.div(scaled, v[2]) : b.mul(scaled, v[2]))};
}

}  // namespace

// Registers a rule with the engine and remembers it for elementwise::rule.
#define ELEMENTWISE(fn, ...)     \
  TPU_LOWERING(fn, __VA_ARGS__); \
  static const bool TPU_LOWER_CAT(tpu_elementwise_, __LINE__) = remember(fn, {__VA_ARGS__})

// unary math
ELEMENTWISE((unary_math<exp_of, true>), "exp");
ELEMENTWISE((unary_math<exp2_of, true>), "exp2");
ELEMENTWISE((unary_math<expm1_of, true>), "expm1");
ELEMENTWISE((unary_math<log_of, true>), "log");
ELEMENTWISE((unary_math<log2_of, true>), "log2");
ELEMENTWISE((unary_math<log10_of, true>), "log10");
ELEMENTWISE((unary_math<log1p_of, true>), "log1p");
ELEMENTWISE((unary_math<sqrt_of, true>), "sqrt");
ELEMENTWISE((unary_math<rsqrt_of, true>), "rsqrt");
ELEMENTWISE((unary_math<sin_of, true>), "sin");
ELEMENTWISE((unary_math<cos_of, true>), "cos");
ELEMENTWISE((unary_math<tan_of, true>), "tan");
ELEMENTWISE((unary_math<asin_of, true>), "asin");
ELEMENTWISE((unary_math<acos_of, true>), "acos");
ELEMENTWISE((unary_math<atan_of, true>), "atan");
ELEMENTWISE((unary_math<sinh_of, true>), "sinh");
ELEMENTWISE((unary_math<cosh_of, true>), "cosh");
ELEMENTWISE((unary_math<tanh_of, true>), "tanh");
ELEMENTWISE((unary_math<asinh_of, true>), "asinh");
ELEMENTWISE((unary_math<acosh_of, true>), "acosh");
ELEMENTWISE((unary_math<atanh_of, true>), "atanh");
ELEMENTWISE((unary_math<sigmoid_of, true>), "sigmoid");
ELEMENTWISE((unary_math<erf_of, false>), "erf");
ELEMENTWISE((unary_math<erfc_of, false>), "erfc");
ELEMENTWISE((unary_math<reciprocal_of, true>), "reciprocal");

// unary, dtype-preserving
ELEMENTWISE(neg, "neg");
ELEMENTWISE(abs, "abs");
ELEMENTWISE(sign, "sign");
ELEMENTWISE(sgn, "sgn");
ELEMENTWISE(rounding<floor_of>, "floor");
ELEMENTWISE(rounding<ceil_of>, "ceil");
ELEMENTWISE(rounding<round_of>, "round");
ELEMENTWISE(rounding<trunc_fn>, "trunc");
ELEMENTWISE(frac, "frac");
ELEMENTWISE(round_decimals, "round.decimals");
ELEMENTWISE(nan_to_num, "nan_to_num");
ELEMENTWISE(bitwise_not, "bitwise_not");
ELEMENTWISE(logical_not, "logical_not");
ELEMENTWISE(isnan, "isnan");
ELEMENTWISE(isinf, "isinf");
ELEMENTWISE(isposinf, "isposinf");
ELEMENTWISE(isneginf, "isneginf");
ELEMENTWISE(signbit, "signbit");

// arithmetic
ELEMENTWISE(add, "add.Tensor", "add.Scalar");
ELEMENTWISE(sub, "sub.Tensor", "sub.Scalar");
ELEMENTWISE(rsub, "rsub.Tensor", "rsub.Scalar");
ELEMENTWISE(mul, "mul.Tensor", "mul.Scalar");
ELEMENTWISE(div, "div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode");
ELEMENTWISE(floor_divide, "floor_divide", "floor_divide.Scalar");
ELEMENTWISE(remainder, "remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor");
ELEMENTWISE(fmod, "fmod.Tensor", "fmod.Scalar");
ELEMENTWISE(pow, "pow.Tensor_Tensor", "pow.Tensor_Scalar", "pow.Scalar");

// binary math
ELEMENTWISE(binary_math<atan2_of>, "atan2");
ELEMENTWISE(binary_math<copysign_of>, "copysign.Tensor", "copysign.Scalar");
ELEMENTWISE(binary_math<xlogy_of>, "xlogy.Tensor", "xlogy.Scalar_Self", "xlogy.Scalar_Other");
ELEMENTWISE(floating_math<hypot_of>, "hypot");
ELEMENTWISE((floating_math<logaddexp_of<false>, true>), "logaddexp");
ELEMENTWISE(floating_math<logaddexp_of<true>>, "logaddexp2");
ELEMENTWISE((extremum<true, false>), "maximum");
ELEMENTWISE((extremum<false, false>), "minimum");
ELEMENTWISE((extremum<true, true>), "fmax");
ELEMENTWISE((extremum<false, true>), "fmin");
ELEMENTWISE(clamp, "clamp", "clamp.Tensor");
ELEMENTWISE(clamp_min, "clamp_min", "clamp_min.Tensor");
ELEMENTWISE(clamp_max, "clamp_max", "clamp_max.Tensor");

// comparisons
ELEMENTWISE(compare<Comparison::EQ>, "eq.Tensor", "eq.Scalar");
TPU_LOWERING(isclose, "torch_tpu::isclose");
ELEMENTWISE(compare<Comparison::NE>, "ne.Tensor", "ne.Scalar");
ELEMENTWISE(compare<Comparison::LT>, "lt.Tensor", "lt.Scalar");
ELEMENTWISE(compare<Comparison::LE>, "le.Tensor", "le.Scalar");
ELEMENTWISE(compare<Comparison::GT>, "gt.Tensor", "gt.Scalar");
ELEMENTWISE(compare<Comparison::GE>, "ge.Tensor", "ge.Scalar");

// logical and bitwise
ELEMENTWISE(logical<&Builder::and_>, "logical_and");
ELEMENTWISE(logical<&Builder::or_>, "logical_or");
ELEMENTWISE(logical<&Builder::xor_>, "logical_xor");
ELEMENTWISE(bitwise<&Builder::and_>, "bitwise_and.Tensor", "bitwise_and.Scalar",
            "bitwise_and.Scalar_Tensor");
ELEMENTWISE(bitwise<&Builder::or_>, "bitwise_or.Tensor", "bitwise_or.Scalar",
            "bitwise_or.Scalar_Tensor");
ELEMENTWISE(bitwise<&Builder::xor_>, "bitwise_xor.Tensor", "bitwise_xor.Scalar",
            "bitwise_xor.Scalar_Tensor");
ELEMENTWISE(shift<true>, "bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar",
            "bitwise_left_shift.Scalar_Tensor", "__lshift__.Tensor", "__lshift__.Scalar",
            "__ilshift__.Tensor", "__ilshift__.Scalar");
ELEMENTWISE(shift<false>, "bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
            "bitwise_right_shift.Scalar_Tensor", "__rshift__.Tensor", "__rshift__.Scalar",
            "__irshift__.Tensor", "__irshift__.Scalar");

// selection and pointwise ternary
ELEMENTWISE(where, "where.self");
ELEMENTWISE(masked_fill, "masked_fill.Scalar", "masked_fill.Tensor");
ELEMENTWISE(lerp, "lerp.Scalar", "lerp.Tensor");
ELEMENTWISE(addc<false>, "addcmul");
ELEMENTWISE(addc<true>, "addcdiv");

RuleFn elementwise::rule(std::string_view op) {
  auto it = own_rules().find(op);
  if (it == own_rules().end()) {
    throw std::invalid_argument("no elementwise rule for " + std::string(op));
  }
  return it->second;
}

}  // namespace torch_tpu::lower
