// Matrix products (mm, bmm, mv, dot and their add* forms) and the precision
// helper they share with convolutions (see matmul.h).
#include "lower/matmul.h"

#include <functional>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// One bilinear product (a dot_general or a convolution) of two operands at a
// given precision_config, returning `result` elements.
using Product = std::function<Value(const Value&, const Value&, Precision, ElementType)>;

// float32 to bfloat16, to nearest (ties to even), as PyTorch and a TPU's
// matrix unit round. Spelled in integer arithmetic on the bits rather than as
// a convert: XLA's CPU backend converts to bfloat16 one element at a time,
// which cost a transformer training step a fifth of its time; the integer
// form vectorises on every platform. A NaN stays a NaN (its top bits, made
// quiet: the rounding carry would turn some into infinities).
Value to_bf16(Builder& b, const Value& x) {
  if (const Builder::Transposed* t = b.transposed(x)) {
    return b.transpose(to_bf16(b, t->operand), t->permutation);
  }
  Shape bits_shape{ElementType::U32, x.shape.dims};
  auto u32 = [&](double v) { return b.full(bits_shape, v); };
  auto shift_right = [&](const Value& v) { return b.binary("shift_right_logical", v, u32(16)); };
  Value bits = b.bitcast_convert(x, ElementType::U32);
  Value lsb = b.and_(shift_right(bits), u32(1));
  Value rounded = shift_right(b.add(b.add(bits, u32(0x7FFF)), lsb));
  Value quiet_nan = b.or_(shift_right(bits), u32(0x40));
  Value top = b.select(b.compare(x, x, hlo::Comparison::NE), quiet_nan, rounded);
  return b.bitcast_convert(b.convert(top, ElementType::U16), ElementType::BF16);
}

// x = hi + lo with hi = bf16(x), lo = bf16(x - hi): the two bf16 terms of a
// TPU's multi-pass float32 product (x - hi is exact in float32).
std::pair<Value, Value> split_bf16(Builder& b, const Value& x) {
  Value hi = to_bf16(b, x);
  return {hi, to_bf16(b, b.sub(x, b.convert(hi, ElementType::F32)))};
}

// A float32 product as a TPU's matrix unit computes it, for platforms whose
// matrix units ignore precision_config: products of bf16 operands (exact),
// accumulated in float32, so on a GPU they run on the tensor cores. DEFAULT
// is one such product, HIGH three (bf16x3); HIGHEST multiplies float32 and
// asks for HIGHEST so that no platform substitutes a faster, less precise
// mode (TF32 on GPUs).
Value f32_product(Precision p, const Value& lhs, const Value& rhs, Builder& b,
                  const Product& product) {
  auto pass = [&](const Value& l, const Value& r) {
    return product(l, r, Precision::Default, ElementType::F32);
  };
  switch (p) {
    case Precision::Default:
      return pass(to_bf16(b, lhs), to_bf16(b, rhs));
    case Precision::High: {
      auto [lhs_hi, lhs_lo] = split_bf16(b, lhs);
      auto [rhs_hi, rhs_lo] = split_bf16(b, rhs);
      // The small cross terms first: their sum loses less next to the large one.
      Value cross = b.add(pass(lhs_hi, rhs_lo), pass(lhs_lo, rhs_hi));
      return b.add(cross, pass(lhs_hi, rhs_hi));
    }
    case Precision::Highest:
      break;
  }
  return product(lhs, rhs, Precision::Highest, ElementType::F32);
}

// complex64 = two float32 parts: four real products at the same precision.
Value emulated_c64(Precision p, const Value& lhs, const Value& rhs, Builder& b,
                   const Product& product) {
  auto real = [&](const Value& l, const Value& r) { return f32_product(p, l, r, b, product); };
  Value lr = b.real(lhs), li = b.imag(lhs), rr = b.real(rhs), ri = b.imag(rhs);
  return b.complex(b.sub(real(lr, rr), real(li, ri)), b.add(real(lr, ri), real(li, rr)));
}

Value with_precision(Context& c, Value lhs, Value rhs, ElementType result, const Product& product) {
  Builder& b = c.b;
  ElementType t = promote_types(lhs.type(), rhs.type());
  if (t == ElementType::Pred) throw Unsupported("matrix products of bool tensors");
  lhs = convert(b, lhs, t);
  rhs = convert(b, rhs, t);
  Value out;
  if (t == ElementType::F32 || t == ElementType::C64) {
    if (c.platform() == "tpu") {
      out = product(lhs, rhs, c.precision(), t);
    } else if (t == ElementType::F32) {
      out = f32_product(c.precision(), lhs, rhs, b, product);
    } else if (c.precision() == Precision::Highest) {
      out = product(lhs, rhs, Precision::Highest, t);
    } else {
      out = emulated_c64(c.precision(), lhs, rhs, b, product);
    }
  } else if (t == ElementType::BF16 || t == ElementType::F16) {
    // PyTorch accumulates half types in float32; the products are exact in it.
    // HIGHEST keeps a TPU from rounding float16 operands to bfloat16.
    out = product(lhs, rhs, Precision::Highest, ElementType::F32);
  } else {
    // f64, c128 and integers (which wrap like PyTorch's in their own type).
    out = product(lhs, rhs, Precision::Highest, t);
  }
  return convert(b, out, result);
}

}  // namespace

Value dot(Context& c, const Value& lhs, const Value& rhs, const hlo::DotDims& dims,
          ElementType result) {
  Builder& b = c.b;
  // XLA's CPU runtime has no BF16 x BF16 = F32 product for the dots it hands to
  // its library (a transposed operand at batch 1): there the operands are widened
  // first, which gives the same exact products and float32 sums.
  const bool widen = c.platform() == "cpu";
  return with_precision(c, lhs, rhs, result,
                        [&](const Value& l, const Value& r, Precision p, ElementType t) {
                          if (widen && l.type() != t) {
                            return b.dot_general(convert(b, l, t), convert(b, r, t), dims, p, t);
                          }
                          return b.dot_general(l, r, dims, p, t);
                        });
}

Value conv(Context& c, const Value& lhs, const Value& rhs, const hlo::ConvDims& dims,
           const hlo::ConvConfig& config, ElementType result) {
  Builder& b = c.b;
  return with_precision(c, lhs, rhs, result,
                        [&](const Value& l, const Value& r, Precision p, ElementType t) {
                          return b.convolution(l, r, dims, config, p, t);
                        });
}

namespace {

// Type the products are summed (and scaled) in before rounding to the result.
ElementType compute_type(Context& c) { return accumulation_type(c.output(0).type); }

Value conj(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return x;
  return b.complex(b.real(x), b.neg(b.imag(x)));
}

// `scale * x`, or zeros where `scale` is 0 so that NaN and inf in `x` do not
// propagate. PyTorch documents this for beta and self in the add* family;
// for alpha it is what BLAS (PyTorch's float32/float64 path) does: with
// alpha == 0 it reads neither matrix.
Value scaled(Builder& b, const Value& scale, const Value& x) {
  Value s = broadcast_to(b, convert(b, scale, x.type()), x.dims());
  Value zero = full_like(b, x, 0.0);
  return b.select(b.compare(s, zero, hlo::Comparison::EQ), zero, b.mul(s, x));
}

// beta * self + alpha * product, in the type of `product`. beta and alpha
// are runtime scalars: new values do not recompile.
Value scale_add(Builder& b, const Operand& self, const Value& product, const Operand& beta,
                const Operand& alpha) {
  Value s = broadcast_to(b, convert(b, self.value, product.type()), product.dims());
  return b.add(scaled(b, beta.value, s), scaled(b, alpha.value, product));
}

const hlo::DotDims kMatrix{{}, {}, {1}, {0}};          // [n,m] x [m,p]
const hlo::DotDims kBatched{{0}, {0}, {2}, {1}};       // [b,n,m] x [b,m,p]
const hlo::DotDims kBatchSum{{}, {}, {0, 2}, {0, 1}};  // sum over b of the above
const hlo::DotDims kVector{{}, {}, {0}, {0}};          // [m] . [m]

// mm(self, mat2)
std::vector<Value> mm(Context& c, const Args& a) {
  return {dot(c, a.tensor(0), a.tensor(1), kMatrix, c.output(0).type)};
}

// bmm(self, mat2)
std::vector<Value> bmm(Context& c, const Args& a) {
  return {dot(c, a.tensor(0), a.tensor(1), kBatched, c.output(0).type)};
}

// mv(self, vec)
std::vector<Value> mv(Context& c, const Args& a) {
  return {dot(c, a.tensor(0), a.tensor(1), kMatrix, c.output(0).type)};
}

// dot(self, tensor)
std::vector<Value> vector_dot(Context& c, const Args& a) {
  return {dot(c, a.tensor(0), a.tensor(1), kVector, c.output(0).type)};
}

// vdot(self, other): conjugates self.
std::vector<Value> vdot(Context& c, const Args& a) {
  return {dot(c, conj(c.b, a.tensor(0)), a.tensor(1), kVector, c.output(0).type)};
}

// addmm / baddbmm / addbmm / addmv(self, x, y, *, beta, alpha): the product
// of x and y under `dims`, scaled and added to self.
Value add_product(Context& c, const Args& a, const hlo::DotDims& dims) {
  Value product = dot(c, a.tensor(1), a.tensor(2), dims, compute_type(c));
  return scale_add(c.b, a.operand(0), product, a.operand(3), a.operand(4));
}

std::vector<Value> addmm(Context& c, const Args& a) { return {add_product(c, a, kMatrix)}; }
std::vector<Value> baddbmm(Context& c, const Args& a) { return {add_product(c, a, kBatched)}; }
std::vector<Value> addbmm(Context& c, const Args& a) { return {add_product(c, a, kBatchSum)}; }
std::vector<Value> addmv(Context& c, const Args& a) { return {add_product(c, a, kMatrix)}; }

}  // namespace

TPU_LOWERING_PRECISION(mm, "mm");
TPU_LOWERING_PRECISION(bmm, "bmm");
TPU_LOWERING_PRECISION(mv, "mv");
TPU_LOWERING_PRECISION(vector_dot, "dot");
TPU_LOWERING_PRECISION(vdot, "vdot");
TPU_LOWERING_PRECISION(addmm, "addmm");
TPU_LOWERING_PRECISION(baddbmm, "baddbmm");
TPU_LOWERING_PRECISION(addbmm, "addbmm");
TPU_LOWERING_PRECISION(addmv, "addmv");

}  // namespace torch_tpu::lower
