// Random sampling from the device generator: counter-based random bits
// (Context::random_bits) turned into the distributions PyTorch offers.
#include <cmath>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// Uniform floats in [0, 1) of type f32 (23 random mantissa bits) or f64 (52).
Value uniform01(Context& c, const Dims& dims, ElementType t) {
  Builder& b = c.b;
  if (t == ElementType::F64) {
    Shape bits_shape{ElementType::U64, dims};
    Value bits = c.random_bits(bits_shape);
    Value mantissa = b.binary("shift_right_logical", bits, b.full(bits_shape, 12));
    Value one =
        b.or_(mantissa,
              b.broadcast_in_dim(b.constant_int(0x3FF0000000000000LL, ElementType::U64), dims, {}));
    return b.sub(b.bitcast_convert(one, ElementType::F64), b.full({t, dims}, 1.0));
  }
  Shape bits_shape{ElementType::U32, dims};
  Value bits = c.random_bits(bits_shape);
  Value mantissa = b.binary("shift_right_logical", bits, b.full(bits_shape, 9));
  Value one =
      b.or_(mantissa, b.broadcast_in_dim(b.constant_int(0x3F800000, ElementType::U32), dims, {}));
  return b.sub(b.bitcast_convert(one, ElementType::F32), b.full({ElementType::F32, dims}, 1.0));
}

ElementType sample_type(ElementType out) {
  return out == ElementType::F64 ? ElementType::F64 : ElementType::F32;
}

// uniform(self, float from, float to, *, generator)
std::vector<Value> uniform(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Builder& b = c.b;
  ElementType t = sample_type(out.type);
  double from = a.real(1), to = a.real(2);
  Value u = uniform01(c, out.dims, t);
  Value v = b.add(b.mul(u, b.full({t, out.dims}, to - from)), b.full({t, out.dims}, from));
  return {v};
}

// Standard normal samples by Box-Muller.
Value standard_normal(Context& c, const Dims& dims, ElementType t) {
  Builder& b = c.b;
  Shape s{t, dims};
  // 1 - u lies in (0, 1], so the log is finite.
  Value u1 = b.sub(b.full(s, 1.0), uniform01(c, dims, t));
  Value u2 = uniform01(c, dims, t);
  Value radius = b.sqrt(b.mul(b.full(s, -2.0), b.log(u1)));
  Value angle = b.mul(b.full(s, 2.0 * M_PI), u2);
  return b.mul(radius, b.unary("cosine", angle));
}

// normal_(self, float mean, float std, *, generator)
std::vector<Value> normal_inplace(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Builder& b = c.b;
  ElementType t = sample_type(out.type);
  Value z = standard_normal(c, out.dims, t);
  return {b.add(b.mul(z, b.full({t, out.dims}, a.real(2))), b.full({t, out.dims}, a.real(1)))};
}

// Largest value random_() may draw for a dtype: 2^mantissa for floats, the
// type maximum for integers (as PyTorch).
int64_t random_limit(ElementType t) {
  switch (t) {
    case ElementType::F16:
      return int64_t{1} << 11;
    case ElementType::BF16:
      return int64_t{1} << 8;
    case ElementType::F32:
      return int64_t{1} << 24;
    case ElementType::F64:
      return int64_t{1} << 53;
    case ElementType::Pred:
      return 1;
    case ElementType::U8:
      return 255;
    case ElementType::S8:
      return 127;
    case ElementType::S16:
      return 32767;
    case ElementType::S32:
      return 2147483647;
    default:
      return std::numeric_limits<int64_t>::max();
  }
}

// Integers uniformly in [from, from + range); `range` 0 means 2^64.
Value random_range(Context& c, const Dims& dims, int64_t from, uint64_t range) {
  Builder& b = c.b;
  Value offset = c.random_bits({ElementType::U64, dims});
  if (range != 0) {
    Value r = b.constant_int(static_cast<int64_t>(range), ElementType::U64);
    offset = b.rem(offset, b.broadcast_in_dim(r, dims, {}));
  }
  return b.add(b.convert(offset, ElementType::S64),
               b.broadcast_in_dim(b.constant_int(from, ElementType::S64), dims, {}));
}

// random_.from(self, int from, int? to, *, generator); to=None draws up to the
// dtype's limit.
std::vector<Value> random_from(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  int64_t from = a.integer(1);
  uint64_t range =
      a.is_none(2) ? static_cast<uint64_t>(random_limit(out.type)) - static_cast<uint64_t>(from) + 1
                   : static_cast<uint64_t>(a.integer(2) - from);
  return {random_range(c, out.dims, from, range)};
}

// random_.to(self, int to, *, generator)
std::vector<Value> random_to(Context& c, const Args& a) {
  return {random_range(c, c.output(0).dims, 0, static_cast<uint64_t>(a.integer(1)))};
}

// random_(self, *, generator): [0, limit] of the dtype.
std::vector<Value> random_full(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  return {random_range(c, out.dims, 0, static_cast<uint64_t>(random_limit(out.type)) + 1)};
}

Value bernoulli_mask(Context& c, const Value& p) {
  Builder& b = c.b;
  ElementType t = sample_type(p.type());
  Value u = uniform01(c, p.dims(), t);
  return b.compare(u, convert(b, p, t), hlo::Comparison::LT);
}

// bernoulli(self, *, generator): self holds the probabilities.
// The CPU's check of tensor probabilities (NaN fails too).
void check_probabilities(Context& c, const Value& p) {
  Builder& b = c.b;
  Value valid = b.and_(b.compare(p, full_like(b, p, 0), hlo::Comparison::GE),
                       b.compare(p, full_like(b, p, 1), hlo::Comparison::LE));
  check_none(c, b.not_(valid), DataCheck::Error::Runtime,
             "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
             "message be improved?  If so, please report an enhancement request to PyTorch.)");
}

std::vector<Value> bernoulli(Context& c, const Args& a) {
  check_probabilities(c, a.tensor(0));
  return {bernoulli_mask(c, a.tensor(0))};
}

// bernoulli.p(self, float p, *, generator) / bernoulli_.float
std::vector<Value> bernoulli_p(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType t = sample_type(out.type);
  return {bernoulli_mask(c, c.b.full({t, out.dims}, a.real(1)))};
}

// bernoulli_.Tensor(self, Tensor p, *, generator)
std::vector<Value> bernoulli_tensor(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  check_probabilities(c, a.tensor(1));
  return {bernoulli_mask(c, broadcast_to(c.b, a.tensor(1), out.dims))};
}

// native_dropout(input, float p, bool? train) -> (output, mask)
std::vector<Value> native_dropout(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  double p = a.real(1);
  bool train = a.is_none(2) || a.boolean(2);
  if (!train || p == 0) {
    return {x, b.full({ElementType::Pred, x.dims()}, 1)};
  }
  ElementType t = accumulation_type(x.type());
  Value keep = bernoulli_mask(c, b.full({t, x.dims()}, 1.0 - p));
  double scale = p == 1 ? 0.0 : 1.0 / (1.0 - p);
  Value y = b.mul(convert(b, x, t), b.full({t, x.dims()}, scale));
  return {b.select(keep, y, b.full({t, x.dims()}, 0)), keep};
}

// native_dropout_backward(grad_output, mask, float scale)
std::vector<Value> native_dropout_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value g = a.tensor(0);
  ElementType t = accumulation_type(c.output(0).type);
  Value scaled = b.mul(convert(b, g, t), b.full({t, g.dims()}, a.real(2)));
  Value mask = convert(b, a.tensor(1), ElementType::Pred);
  return {b.select(mask, scaled, b.full({t, g.dims()}, 0))};
}

}  // namespace

TPU_LOWERING_RANDOM(uniform, "uniform");
TPU_LOWERING_RANDOM(normal_inplace, "normal_");
TPU_LOWERING_RANDOM(random_from, "random_.from");
TPU_LOWERING_RANDOM(random_to, "random_.to");
TPU_LOWERING_RANDOM(random_full, "random_");
TPU_LOWERING_RANDOM(bernoulli, "bernoulli");
TPU_LOWERING_RANDOM(bernoulli_p, "bernoulli.p", "bernoulli_.float");
TPU_LOWERING_RANDOM(bernoulli_tensor, "bernoulli_.Tensor");
TPU_LOWERING_RANDOM(native_dropout, "native_dropout");
TPU_LOWERING(native_dropout_backward, "native_dropout_backward");

}  // namespace torch_tpu::lower
