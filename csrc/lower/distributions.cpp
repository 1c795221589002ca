// Random distributions beyond uniform/normal/bernoulli (random.cpp):
// exponential, geometric, cauchy, log-normal, normal with tensor parameters,
// multinomial, randperm, gamma and Poisson. All draw from the op's generator
// (Context::random_bits); rejection samplers loop with their own
// rng_bit_generator state seeded from it.
#include <cmath>
#include <limits>
#include <tuple>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using Values = std::vector<Value>;

// Samples are computed in f32 (f64 for f64 results): f16/bf16 would lose too
// much in the logs and roots.
ElementType sample_type(ElementType out) {
  return out == ElementType::F64 ? ElementType::F64 : ElementType::F32;
}

ElementType bits_type(ElementType t) {
  return t == ElementType::F64 ? ElementType::U64 : ElementType::U32;
}

Value splat(Builder& b, double v, ElementType t, const Dims& dims) { return b.full({t, dims}, v); }

// Uniform in the open interval (0, 1): the top mantissa bits plus half an
// ulp, so logs and quotients never see 0 or 1.
Value open_uniform(Builder& b, const Value& bits, ElementType t) {
  bool wide = t == ElementType::F64;
  int mantissa = wide ? 52 : 23;
  Value top = b.binary("shift_right_logical", bits, b.full(bits.shape, wide ? 12 : 9));
  Value f = b.add(b.convert(top, t), splat(b, 0.5, t, bits.dims()));
  return b.mul(f, splat(b, std::ldexp(1.0, -mantissa), t, bits.dims()));
}

Value uniform(Context& c, const Dims& dims, ElementType t) {
  return open_uniform(c.b, c.random_bits({bits_type(t), dims}), t);
}

// Box-Muller from two open uniforms.
Value box_muller(Builder& b, const Value& u1, const Value& u2) {
  const Dims& d = u1.dims();
  ElementType t = u1.type();
  Value radius = b.sqrt(b.mul(splat(b, -2.0, t, d), b.log(u1)));
  return b.mul(radius, b.unary("cosine", b.mul(splat(b, 2.0 * M_PI, t, d), u2)));
}

Value normal(Context& c, const Dims& dims, ElementType t) {
  Value u1 = uniform(c, dims, t);
  return box_muller(c.b, u1, uniform(c, dims, t));
}

// exponential(self, float lambd=1, *, generator): -log(u) / lambd.
Values exponential(Context& c, const Args& a) {
  Builder& b = c.b;
  const Dims& d = c.output(0).dims;
  ElementType t = sample_type(c.output(0).type);
  Value e = b.neg(b.log(uniform(c, d, t)));
  return {b.div(e, splat(b, a.real(1), t, d))};
}

// geometric(self, float p, *, generator): trials up to the first success,
// ceil(log(u) / log(1 - p)) as PyTorch.
Values geometric(Context& c, const Args& a) {
  Builder& b = c.b;
  const Dims& d = c.output(0).dims;
  ElementType t = sample_type(c.output(0).type);
  Value denominator = splat(b, std::log1p(-a.real(1)), t, d);
  return {b.ceil(b.div(b.log(uniform(c, d, t)), denominator))};
}

// cauchy(self, float median=0, float sigma=1, *, generator)
Values cauchy(Context& c, const Args& a) {
  Builder& b = c.b;
  const Dims& d = c.output(0).dims;
  ElementType t = sample_type(c.output(0).type);
  Value angle = b.mul(b.sub(uniform(c, d, t), splat(b, 0.5, t, d)), splat(b, M_PI, t, d));
  Value tan = b.div(b.unary("sine", angle), b.unary("cosine", angle));
  return {b.add(splat(b, a.real(1), t, d), b.mul(splat(b, a.real(2), t, d), tan))};
}

// log_normal(self, float mean=1, float std=2, *, generator)
Values log_normal(Context& c, const Args& a) {
  Builder& b = c.b;
  const Dims& d = c.output(0).dims;
  ElementType t = sample_type(c.output(0).type);
  Value z = normal(c, d, t);
  return {b.exp(b.add(splat(b, a.real(1), t, d), b.mul(splat(b, a.real(2), t, d), z)))};
}

// mean + std * z with mean and std broadcast to the result.
Value shifted_normal(Context& c, const Value& mean, const Value& std) {
  Builder& b = c.b;
  const Dims& d = c.output(0).dims;
  ElementType t = sample_type(c.output(0).type);
  Value z = normal(c, d, t);
  return b.add(broadcast_to(b, convert(b, mean, t), d),
               b.mul(broadcast_to(b, convert(b, std, t), d), z));
}

// normal.Tensor_float(Tensor mean, float std=1, *, generator)
Values normal_tensor_float(Context& c, const Args& a) {
  ElementType t = sample_type(c.output(0).type);
  return {shifted_normal(c, a.tensor(0), c.b.constant(a.real(1), t))};
}

// normal.float_Tensor(float mean, Tensor std, *, generator)
Values normal_float_tensor(Context& c, const Args& a) {
  ElementType t = sample_type(c.output(0).type);
  return {shifted_normal(c, c.b.constant(a.real(0), t), a.tensor(1))};
}

// normal.Tensor_Tensor(Tensor mean, Tensor std, *, generator)
Values normal_tensor_tensor(Context& c, const Args& a) {
  return {shifted_normal(c, a.tensor(0), a.tensor(1))};
}

// Index of the largest key along the last dimension (first on ties).
Value argmax_last(Builder& b, const Value& keys) {
  int64_t dim = keys.rank() - 1;
  Value index = b.iota({ElementType::S64, keys.dims()}, dim);
  Values r = b.reduce(
      {keys, index}, {lowest_value(b, keys.type()), highest_value(b, ElementType::S64)}, {dim},
      [](Builder& r, const Values& v) -> Values {
        const Value &xv = v[0], &xi = v[1], &yv = v[2], &yi = v[3];
        Value tie = r.and_(r.compare(xv, yv, Comparison::EQ), r.compare(xi, yi, Comparison::LT));
        Value take_x = r.or_(r.compare(xv, yv, Comparison::GT), tie);
        return {r.select(take_x, xv, yv), r.select(take_x, xi, yi)};
      });
  return r[1];
}

// multinomial(self, int num_samples, bool replacement=False, *, generator).
// Category k wins a draw when p_k / E_k is largest, E_k ~ Exp(1): the
// exponential race picks k with probability p_k / sum(p). With replacement
// every draw races anew; without, the first num_samples finishers are taken
// (sequential sampling without replacement has the same law).
Values multinomial(Context& c, const Args& a) {
  Builder& b = c.b;
  Value p = a.tensor(0);
  ElementType t = sample_type(p.type());
  int64_t n = a.integer(1);
  bool replacement = a.boolean(2);
  Dims out_dims = c.output(0).dims;
  if (p.rank() == 1) p = b.reshape(p, {1, p.dim(0)});
  p = convert(b, p, t);
  int64_t rows = p.dim(0), k = p.dim(1);
  Value valid = b.and_(b.compare(p, splat(b, 0, t, p.dims()), Comparison::GE), b.is_finite(p));
  check_none(c, b.not_(valid), DataCheck::Error::Runtime,
             "probability tensor contains either `inf`, `nan` or element < 0");
  check_none(c, b.compare(reduce_sum(b, p, {1}), splat(b, 0, t, {rows}), Comparison::LE),
             DataCheck::Error::Runtime,
             "invalid multinomial distribution (sum of probabilities <= 0)");
  Value result;
  if (replacement) {
    Dims d{rows, n, k};
    Value race = b.neg(b.log(uniform(c, d, t)));
    Value keys = b.div(b.broadcast_in_dim(p, d, {0, 2}), race);
    result = argmax_last(b, keys);
  } else {
    Dims d{rows, k};
    Value keys = b.div(p, b.neg(b.log(uniform(c, d, t))));
    Value index = b.iota({ElementType::S64, d}, 1);
    Values sorted = b.sort({keys, index}, 1, true, [](Builder& r, const Values& v) -> Values {
      return {r.compare(v[0], v[1], Comparison::GT)};
    });
    result = b.slice(sorted[1], {0, 0}, {rows, n}, {1, 1});
  }
  return {b.reshape(result, out_dims)};
}

// randperm.generator_out(int n, *, Generator? generator, Tensor(a!) out):
// positions sorted by random 64-bit keys.
Values randperm(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  int64_t n = a.integer(0);
  Value keys = c.random_bits({ElementType::U64, {n}});
  Value index = b.iota({ElementType::S64, {n}}, 0);
  Values sorted = b.sort({keys, index}, 0, true, [](Builder& r, const Values& v) -> Values {
    return {r.compare(v[0], v[1], Comparison::LT)};
  });
  return {b.convert(sorted[1], out.type)};
}

// ---------------------------------------------------------------- rejection samplers

// Loop state of a vectorized rejection sampler: every lane draws each round
// until it accepts; the loop ends when all lanes have (or after
// kMaxRounds, which only NaN-free inputs with vanishing probability reach).
constexpr int64_t kMaxRounds = 100000;

struct Draws {
  Builder& b;
  Value state;
  ElementType t;
  Dims dims;
  Value next() {
    auto [s, bits] = b.rng_bit_generator(state, {bits_type(t), dims});
    state = s;
    return open_uniform(b, bits, t);
  }
};

Value any_false(Builder& b, const Value& done) {
  Dims all(done.rank());
  for (int64_t i = 0; i < done.rank(); ++i) all[i] = i;
  Value pending = b.not_(done);
  return b.reduce({pending}, {b.constant_bool(false)}, all,
                  [](Builder& r, const Values& v) -> Values { return {r.or_(v[0], v[1])}; })[0];
}

// Runs `round` (lanes, draws) -> (accepted, value) until every lane accepted.
// `extra` values travel through the loop unchanged and reach `round`.
template <typename Round>
Value rejection_loop(Context& c, ElementType t, const Dims& dims, const Value& done0,
                     const Value& init, const Values& extra, Round round) {
  Builder& b = c.b;
  Value state = c.random_bits({ElementType::U64, {2}});
  Values carry{b.constant_int(0, ElementType::S64), state, done0, init};
  carry.insert(carry.end(), extra.begin(), extra.end());
  auto cond = [&](Builder& r, const Values& v) -> Values {
    Value more = r.compare(v[0], r.constant_int(kMaxRounds, ElementType::S64), Comparison::LT);
    return {r.and_(more, any_false(r, v[2]))};
  };
  auto body = [&](Builder& r, const Values& v) -> Values {
    Draws draws{r, v[1], t, dims};
    Values lanes(v.begin() + 4, v.end());
    auto [accepted, value, updated] = round(r, lanes, draws, v[2]);
    Value fresh = r.and_(accepted, r.not_(v[2]));
    Values next{r.add(v[0], r.constant_int(1, ElementType::S64)), draws.state,
                r.or_(v[2], accepted), r.select(fresh, value, v[3])};
    next.insert(next.end(), updated.begin(), updated.end());
    return next;
  };
  return b.while_loop(carry, cond, body)[3];
}

// _standard_gamma(self, *, generator): Marsaglia and Tsang's squeeze and
// rejection method; shapes below 1 sample shape + 1 and scale by
// u^(1/shape), as PyTorch's sampler.
Values standard_gamma(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  const Dims& d = out.dims;
  ElementType t = sample_type(out.type);
  Value alpha = convert(b, a.tensor(0), t);
  Value one = splat(b, 1.0, t, d);
  Value small = b.compare(alpha, one, Comparison::LT);
  Value scale = b.select(small, b.pow(uniform(c, d, t), b.div(one, alpha)), one);
  Value boosted = b.select(small, b.add(alpha, one), alpha);
  Value dd = b.sub(boosted, splat(b, 1.0 / 3.0, t, d));
  Value cc = b.rsqrt(b.mul(splat(b, 9.0, t, d), dd));
  // Lanes with nothing to sample: NaN, zero or negative shapes, infinity.
  Value valid = b.and_(b.compare(alpha, splat(b, 0.0, t, d), Comparison::GT), b.is_finite(alpha));
  Value nan = splat(b, std::numeric_limits<double>::quiet_NaN(), t, d);
  Value init = b.select(b.compare(alpha, splat(b, 0.0, t, d), Comparison::EQ), splat(b, 0.0, t, d),
                        b.select(b.is_finite(alpha), nan, alpha));
  auto round = [t, d](Builder& r, const Values& lanes, Draws& draws, const Value&) {
    const Value &dd = lanes[0], &cc = lanes[1];
    Value u1 = draws.next();
    Value x = box_muller(r, u1, draws.next());
    Value u = draws.next();
    Value y = r.add(splat(r, 1.0, t, d), r.mul(cc, x));
    Value v = r.mul(r.mul(y, y), y);
    Value xx = r.mul(x, x);
    Value squeeze =
        r.compare(u, r.sub(splat(r, 1.0, t, d), r.mul(splat(r, 0.0331, t, d), r.mul(xx, xx))),
                  Comparison::LT);
    Value bound = r.add(r.mul(splat(r, 0.5, t, d), xx),
                        r.mul(dd, r.add(r.sub(splat(r, 1.0, t, d), v), r.log(v))));
    Value full = r.compare(r.log(u), bound, Comparison::LT);
    Value ok = r.and_(r.compare(y, splat(r, 0.0, t, d), Comparison::GT), r.or_(squeeze, full));
    return std::make_tuple(ok, r.mul(dd, v), lanes);
  };
  Value sample = rejection_loop(c, t, d, b.not_(valid), init, {dd, cc}, round);
  sample = b.mul(sample, scale);
  // PyTorch never returns 0 for a positive shape: it clamps to the smallest
  // normal number of the result type.
  double tiny = out.type == ElementType::F64   ? std::numeric_limits<double>::min()
                : out.type == ElementType::F16 ? 6.103515625e-05
                                               : std::numeric_limits<float>::min();
  Value clamped = b.max(sample, splat(b, tiny, t, d));
  return {b.select(b.compare(alpha, splat(b, 0.0, t, d), Comparison::GT), clamped, sample)};
}

// log P(k) for a Poisson(lam) variable, stable for large k: Stirling's series
// for log k! (exact lgamma below 10), with k log(lam) - k log(k) folded into
// one log1p so nothing cancels in f32.
Value poisson_log_pmf(Builder& b, const Value& k, const Value& lam, const Value& log_lam) {
  ElementType t = k.type();
  const Dims& d = k.dims();
  Value kk = b.max(k, splat(b, 1.0, t, d));
  Value small = b.compare(k, splat(b, 10.0, t, d), Comparison::LT);
  Value direct = b.sub(b.sub(b.mul(k, log_lam), lam),
                       b.emit("chlo.lgamma", {b.add(k, splat(b, 1.0, t, d))}, "", {k.shape})[0]);
  Value inv = b.div(splat(b, 1.0, t, d), kk);
  Value series = b.mul(
      inv, b.sub(splat(b, 1.0 / 12, t, d), b.mul(b.mul(inv, inv), splat(b, 1.0 / 360, t, d))));
  Value rel = b.div(b.sub(lam, kk), kk);
  Value stirling =
      b.sub(b.sub(b.add(b.mul(kk, b.unary("log_plus_one", rel)), b.sub(kk, lam)),
                  b.mul(splat(b, 0.5, t, d), b.log(b.mul(splat(b, 2 * M_PI, t, d), kk)))),
            series);
  return b.select(small, direct, stirling);
}

// poisson(self, *, generator): multiplying uniforms (Knuth) below rate 10,
// Hormann's transformed rejection (PTRS) above, as PyTorch's sampler.
Values poisson(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  const Dims& d = out.dims;
  ElementType t = sample_type(out.type);
  Value lam = convert(b, a.tensor(0), t);
  Value zero = splat(b, 0.0, t, d);
  Value valid = b.and_(b.compare(lam, zero, Comparison::GT), b.is_finite(lam));
  Value init = b.select(b.compare(lam, zero, Comparison::EQ), zero,
                        splat(b, std::numeric_limits<double>::quiet_NaN(), t, d));
  Value enlam = b.exp(b.neg(lam));
  // PTRS constants.
  Value slam = b.sqrt(lam);
  Value bb = b.add(splat(b, 0.931, t, d), b.mul(splat(b, 2.53, t, d), slam));
  Value aa = b.add(splat(b, -0.059, t, d), b.mul(splat(b, 0.02483, t, d), bb));
  Value inv_alpha =
      b.add(splat(b, 1.1239, t, d), b.div(splat(b, 1.1328, t, d), b.sub(bb, splat(b, 3.4, t, d))));
  Value vr =
      b.sub(splat(b, 0.9277, t, d), b.div(splat(b, 3.6224, t, d), b.sub(bb, splat(b, 2.0, t, d))));
  Values extra{lam, enlam, b.log(lam), aa, bb, inv_alpha, vr, splat(b, 1.0, t, d), zero};
  auto round = [t, d](Builder& r, const Values& l, Draws& draws, const Value&) {
    const Value &lam = l[0], &enlam = l[1], &log_lam = l[2], &aa = l[3], &bb = l[4],
                &inv_alpha = l[5], &vr = l[6], &prod = l[7], &count = l[8];
    auto k = [&](double v) { return splat(r, v, t, d); };
    // Knuth: count uniforms until their product drops to exp(-lam).
    Value new_prod = r.mul(prod, draws.next());
    Value knuth_done = r.compare(new_prod, enlam, Comparison::LE);
    Value new_count = r.select(knuth_done, count, r.add(count, k(1)));
    // PTRS.
    Value u = r.sub(draws.next(), k(0.5));
    Value v = draws.next();
    Value us = r.sub(k(0.5), r.abs(u));
    Value kk = r.floor(r.add(r.mul(r.add(r.div(r.mul(k(2), aa), us), bb), u), r.add(lam, k(0.43))));
    Value quick = r.and_(r.compare(us, k(0.07), Comparison::GE), r.compare(v, vr, Comparison::LE));
    Value reject =
        r.or_(r.compare(kk, k(0), Comparison::LT),
              r.and_(r.compare(us, k(0.013), Comparison::LT), r.compare(v, us, Comparison::GT)));
    Value lhs =
        r.sub(r.add(r.log(v), r.log(inv_alpha)), r.log(r.add(r.div(aa, r.mul(us, us)), bb)));
    Value rhs = poisson_log_pmf(r, r.max(kk, k(0)), lam, log_lam);
    Value slow = r.and_(r.not_(reject), r.compare(lhs, rhs, Comparison::LE));
    Value ptrs_done = r.or_(quick, slow);
    Value use_knuth = r.compare(lam, k(10), Comparison::LT);
    Value accepted = r.select(use_knuth, knuth_done, ptrs_done);
    Value value = r.select(use_knuth, count, kk);
    Values lanes{lam, enlam, log_lam, aa, bb, inv_alpha, vr, new_prod, new_count};
    return std::make_tuple(accepted, value, lanes);
  };
  return {rejection_loop(c, t, d, b.not_(valid), init, extra, round)};
}

}  // namespace

TPU_LOWERING_RANDOM(exponential, "exponential");
TPU_LOWERING_RANDOM(geometric, "geometric");
TPU_LOWERING_RANDOM(cauchy, "cauchy");
TPU_LOWERING_RANDOM(log_normal, "log_normal");
TPU_LOWERING_RANDOM(normal_tensor_float, "normal.Tensor_float");
TPU_LOWERING_RANDOM(normal_float_tensor, "normal.float_Tensor");
TPU_LOWERING_RANDOM(normal_tensor_tensor, "normal.Tensor_Tensor");
TPU_LOWERING_RANDOM(multinomial, "multinomial");
TPU_LOWERING_RANDOM(randperm, "randperm.generator_out");
TPU_LOWERING_RANDOM(standard_gamma, "_standard_gamma");
TPU_LOWERING_RANDOM(poisson, "poisson");

}  // namespace torch_tpu::lower
