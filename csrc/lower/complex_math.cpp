#include "lower/complex_math.h"

#include <cmath>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;

Value eq(Builder& b, const Value& x, double v) {
  return b.compare(x, full_like(b, x, v), Comparison::EQ);
}
Value chlo(Builder& b, const char* op, const Value& z) {
  return b.emit(std::string("chlo.") + op, {z}, "", {z.shape})[0];
}

// An odd function symmetric under conjugation (atanh, asinh): the real part
// has the sign of Re z and the imaginary part that of Im z, signed zeros
// included, which XLA's expansions lose.
Value with_signs_of(Builder& b, const Value& r, const Value& z) {
  return b.complex(copy_sign(b, b.real(r), b.real(z)), copy_sign(b, b.imag(r), b.imag(z)));
}

}  // namespace

Value complex_divide(Builder& b, const Value& x, const Value& y) {
  Value a = b.real(x), bi = b.imag(x), c = b.real(y), d = b.imag(y);
  Value abs_c = b.abs(c), abs_d = b.abs(d);
  // c10's Smith division scales by 1 / denominator. Where that is subnormal
  // (a denominator from 2^126 in float32), which XLA flushes to zero, the
  // parts are divided by the denominator instead, as the CPU's subnormal
  // reciprocal nearly gives.
  const double huge = c.type() == ElementType::F64 ? std::ldexp(1.0, 1022) : std::ldexp(1.0, 126);
  // Both parts over `den`: (real, imaginary) numerators.
  auto divide = [&](const Value& real, const Value& imag, const Value& den) {
    Value reciprocal = b.div(full_like(b, den, 1), den);
    Value normal = b.compare(b.abs(den), full_like(b, den, huge), Comparison::LT);
    auto part = [&](const Value& n) {
      return b.select(normal, b.mul(n, reciprocal), b.div(n, den));
    };
    return std::make_pair(part(real), part(imag));
  };
  // |c| >= |d|: divide through by c.
  Value rat = b.div(d, c);
  auto [re, im] =
      divide(b.add(a, b.mul(bi, rat)), b.sub(bi, b.mul(a, rat)), b.add(c, b.mul(d, rat)));
  // Otherwise by d.
  Value rat_d = b.div(c, d);
  auto [re_d, im_d] =
      divide(b.add(b.mul(a, rat_d), bi), b.sub(b.mul(bi, rat_d), a), b.add(d, b.mul(c, rat_d)));
  // A zero divisor gives a complex infinity or NaN.
  Value zero = b.and_(eq(b, c, 0), eq(b, d, 0));
  Value c_major = b.compare(abs_c, abs_d, Comparison::GE);
  re = b.select(c_major, b.select(zero, b.div(a, abs_c), re), re_d);
  im = b.select(c_major, b.select(zero, b.div(bi, abs_d), im), im_d);
  return b.complex(re, im);
}

Value complex_multiply(Builder& b, const Value& x, const Value& y) {
  Value a = b.real(x), bi = b.imag(x), c = b.real(y), d = b.imag(y);
  Value ac = b.mul(a, c), bd = b.mul(bi, d), ad = b.mul(a, d), bc = b.mul(bi, c);
  Value re = b.sub(ac, bd), im = b.add(ad, bc);
  // Where both parts are NaN: an infinite factor is "boxed" to a unit (its
  // NaN parts and the other factor's made 0), or products that overflowed
  // recovered with NaN parts made 0, and the product taken times infinity.
  Value zero = full_like(b, a, 0);
  auto unit = [&](const Value& v) {
    return copy_sign(b, b.select(is_inf(b, v), full_like(b, v, 1), zero), v);
  };
  auto nan_to_zero = [&](const Value& v) {
    return b.select(is_nan(b, v), copy_sign(b, zero, v), v);
  };
  Value x_inf = b.or_(is_inf(b, a), is_inf(b, bi));
  Value y_inf = b.or_(is_inf(b, c), is_inf(b, d));
  Value overflowed =
      b.or_(b.or_(is_inf(b, ac), is_inf(b, bd)), b.or_(is_inf(b, ad), is_inf(b, bc)));
  Value a2 = b.select(x_inf, unit(a), b.select(y_inf, nan_to_zero(a), a));
  Value b2 = b.select(x_inf, unit(bi), b.select(y_inf, nan_to_zero(bi), bi));
  Value c2 = b.select(y_inf, unit(c), b.select(x_inf, nan_to_zero(c), c));
  Value d2 = b.select(y_inf, unit(d), b.select(x_inf, nan_to_zero(d), d));
  Value recover_overflow = b.and_(b.not_(b.or_(x_inf, y_inf)), overflowed);
  a2 = b.select(recover_overflow, nan_to_zero(a), a2);
  b2 = b.select(recover_overflow, nan_to_zero(bi), b2);
  c2 = b.select(recover_overflow, nan_to_zero(c), c2);
  d2 = b.select(recover_overflow, nan_to_zero(d), d2);
  Value inf = full_like(b, a, INFINITY);
  Value re2 = b.mul(inf, b.sub(b.mul(a2, c2), b.mul(b2, d2)));
  Value im2 = b.mul(inf, b.add(b.mul(a2, d2), b.mul(b2, c2)));
  Value recalc =
      b.and_(b.and_(is_nan(b, re), is_nan(b, im)), b.or_(b.or_(x_inf, y_inf), overflowed));
  return b.complex(b.select(recalc, re2, re), b.select(recalc, im2, im));
}

Value complex_scale(Builder& b, const Value& z, double factor) {
  Value re = b.real(z), im = b.imag(z);
  return b.complex(b.mul(re, full_like(b, re, factor)), b.mul(im, full_like(b, im, factor)));
}

// e^x (cos y + i sin y), with Im exactly y where y is 0 (exp(inf + 0i) is
// inf + 0i, where inf * sin 0 is NaN); exp(-inf + i y) is a signed zero and
// exp(inf + i y) is inf + NaN i for y infinite or NaN.
Value complex_exp(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Value e = b.exp(x);
  Value re = b.mul(e, b.unary("cosine", y));
  Value im = b.select(eq(b, y, 0), y, b.mul(e, b.unary("sine", y)));
  Value y_not_finite = b.not_(b.is_finite(y));
  Value vanishes = b.and_(eq(b, x, -INFINITY), y_not_finite);
  Value zero = full_like(b, x, 0);
  re = b.select(vanishes, zero, re);
  im = b.select(vanishes, copy_sign(b, zero, y), im);
  Value unbounded = b.and_(eq(b, x, INFINITY), y_not_finite);
  re = b.select(unbounded, full_like(b, x, INFINITY), re);
  im = b.select(unbounded, full_like(b, x, NAN), im);
  return b.complex(re, im);
}

// log of an infinity is +inf + i arg z, even where the other part is NaN.
Value complex_log(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Value r = b.log(z);
  Value infinite = is_inf(b, z);
  return b.complex(b.select(infinite, full_like(b, x, INFINITY), b.real(r)),
                   b.select(infinite, b.atan2(y, x), b.imag(r)));
}

// The imaginary part has the sign of Im z (sqrt(-1 - 0i) = -i) and
// sqrt(x + i inf) = inf + i inf for every x, NaN included.
Value complex_sqrt(Builder& b, const Value& z) {
  Value r = b.sqrt(z);
  Value y = b.imag(z);
  Value re = b.real(r), im = copy_sign(b, b.imag(r), y);
  Value y_inf = is_inf(b, y);
  return b.complex(b.select(y_inf, full_like(b, re, INFINITY), re), b.select(y_inf, y, im));
}

// atanh(+-inf + NaN i) = +-0 + NaN i; atanh(NaN +- inf i) = 0 +- i pi/2.
Value complex_atanh(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Value r = with_signs_of(b, chlo(b, "atanh", z), z);
  Value re = b.real(r), im = b.imag(r);
  Value inf_nan = b.and_(is_inf(b, x), is_nan(b, y));
  re = b.select(inf_nan, copy_sign(b, full_like(b, x, 0), x), re);
  im = b.select(inf_nan, y, im);
  Value nan_inf = b.and_(is_nan(b, x), is_inf(b, y));
  re = b.select(nan_inf, full_like(b, x, 0), re);
  im = b.select(nan_inf, copy_sign(b, full_like(b, y, M_PI_2), y), im);
  return b.complex(re, im);
}

// atan z = -i atanh(i z).
Value complex_atan(Builder& b, const Value& z) {
  Value r = complex_atanh(b, b.complex(b.neg(b.imag(z)), b.real(z)));
  return b.complex(b.imag(r), b.neg(b.real(r)));
}

Value complex_asinh(Builder& b, const Value& z) { return with_signs_of(b, chlo(b, "asinh", z), z); }

Value complex_pow(Builder& b, const Value& x, const Value& y) {
  return complex_exp(b, complex_multiply(b, y, complex_log(b, x)));
}

}  // namespace torch_tpu::lower
