// Reductions: sums and products, extrema and their indices, statistics,
// boolean reductions, norms and cumulative scans.
//
// Conventions shared by the rules below:
// - PyTorch's meta kernel already decided the result dtype and shape, so a
//   rule casts its input to the result dtype first (that is what `dtype=`
//   means in PyTorch), accumulates in `accumulation_type` (f32 for f16/bf16)
//   and reshapes the reduced value to the expected result (keepdim only
//   inserts ones, so a reshape covers both forms).
// - Floating-point extrema propagate NaN, as PyTorch's do.
// - The meta kernels accept a few calls that PyTorch's CPU kernels reject
//   (max() of an empty tensor, var of integers, ...); those rules raise
//   PyTorch's own message rather than return a made-up value.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using Values = std::vector<Value>;

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

// ---------------------------------------------------------------- shapes

// `int[1]? dim`: None and [] both mean every dimension.
Dims dims_or_all(const Args& a, size_t i, int64_t rank) {
  return a.is_none(i) ? all_dims(rank) : reduction_dims(a.ints(i), rank);
}

// Positions along a dimension of `n` elements are computed in 32 bits where
// they fit (TPUs emulate 64-bit integers) and widened to PyTorch's int64 last.
ElementType index_type(int64_t n) {
  return n < std::numeric_limits<int32_t>::max() ? ElementType::S32 : ElementType::S64;
}

// The reduced value shaped as result `i` (keepdim or not).
Value fit(Context& c, const Value& v, size_t i = 0) { return c.b.reshape(v, c.output(i).dims); }

// A value reduced over `reduced` broadcast back to `shape`.
Value expand_reduced(Builder& b, const Value& v, const Dims& shape, const Dims& reduced) {
  Dims kept;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  return b.broadcast_in_dim(v, shape, kept);
}

// The input cast to the result dtype `out` (PyTorch casts before reducing),
// then widened to the accumulation type.
Value accumuland(Builder& b, const Value& x, ElementType out) {
  return convert(b, convert(b, x, out), accumulation_type(out));
}

// ---------------------------------------------------------------- elementwise pieces

Value nonzero(Builder& b, const Value& x) {
  if (x.type() == ElementType::Pred) return x;
  return b.compare(x, full_like(b, x, 0), Comparison::NE);
}

// Scalar `s` broadcast to the shape of `like`, in the type of `like`.
Value splat(Builder& b, const Value& s, const Value& like) {
  return broadcast_to(b, convert(b, s, like.type()), like.dims());
}

// |z|^2 without the square root, real for complex inputs.
Value abs_squared(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return b.mul(x, x);
  Value re = b.real(x), im = b.imag(x);
  return b.add(b.mul(re, re), b.mul(im, im));
}

// ---------------------------------------------------------------- reductions

using Combiner = Value (Builder::*)(const Value&, const Value&);

Value reduce_binary(Builder& b, const Value& x, const Dims& dims, const Value& init, Combiner op) {
  if (dims.empty()) return x;
  return b.reduce({x}, {init}, dims,
                  [op](Builder& r, const Values& v) -> Values { return {(r.*op)(v[0], v[1])}; })[0];
}

Value reduce_prod(Builder& b, const Value& x, const Dims& dims) {
  if (x.type() == ElementType::Pred) {
    return reduce_binary(b, x, dims, b.constant_bool(true), &Builder::and_);
  }
  return reduce_binary(b, x, dims, b.constant(1.0, x.type()), &Builder::mul);
}

Value reduce_any(Builder& b, const Value& x, const Dims& dims) {
  return reduce_binary(b, nonzero(b, x), dims, b.constant_bool(false), &Builder::or_);
}

Value reduce_all(Builder& b, const Value& x, const Dims& dims) {
  return reduce_binary(b, nonzero(b, x), dims, b.constant_bool(true), &Builder::and_);
}

// ---------------------------------------------------------------- sum, mean, prod

// sum(self, *, dtype) / sum.dim_IntList(self, dim, keepdim, *, dtype)
Values sum(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims dims = a.size() > 2 ? dims_or_all(a, 1, x.rank()) : all_dims(x.rank());
  return {fit(c, reduce_sum(c.b, accumuland(c.b, x, c.output(0).type), dims))};
}

// nansum(self, dim, keepdim, *, dtype): NaNs count as zero.
Values nansum(Context& c, const Args& a) {
  Value x = a.tensor(0);
  if (is_complex(x.type())) fail("nansum does not support complex inputs");
  Value v = accumuland(c.b, x, c.output(0).type);
  if (is_floating(v.type())) v = c.b.select(is_nan(c.b, v), full_like(c.b, v, 0), v);
  return {fit(c, reduce_sum(c.b, v, dims_or_all(a, 1, x.rank())))};
}

// mean(self, *, dtype) / mean.dim(self, dim, keepdim, *, dtype). The sum is
// divided in the accumulation type (PyTorch does the same for f16/bf16), and
// an empty reduction is 0/0 = NaN like PyTorch's.
Values mean(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims dims = a.size() > 2 ? dims_or_all(a, 1, x.rank()) : all_dims(x.rank());
  Value s = reduce_sum(c.b, accumuland(c.b, x, c.output(0).type), dims);
  return {fit(c, c.b.div(s, reduced_count(c.b, x, dims, s.type())))};
}

// prod(self, *, dtype) / prod.dim_int(self, dim, keepdim, *, dtype)
Values prod(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims dims = a.size() > 2 ? reduction_dims({a.integer(1)}, x.rank()) : all_dims(x.rank());
  return {fit(c, reduce_prod(c.b, accumuland(c.b, x, c.output(0).type), dims))};
}

// trace(self): the sum of the main diagonal of a (possibly rectangular)
// matrix, with sum's dtype rules.
Values trace(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = accumuland(b, a.tensor(0), c.output(0).type);
  ElementType it = index_type(std::max(x.dim(0), x.dim(1)));
  Value diagonal = b.compare(b.iota({it, x.dims()}, 0), b.iota({it, x.dims()}, 1), Comparison::EQ);
  return {reduce_sum(b, b.select(diagonal, x, full_like(b, x, 0)), {0, 1})};
}

// ---------------------------------------------------------------- extrema

void check_real(const Value& x, const char* op) {
  if (is_complex(x.type())) fail(std::string(op) + "(): does not support complex input");
}

// amax(self, dim=[], keepdim) / amin
Values amax(Context& c, const Args& a) {
  Value x = a.tensor(0);
  check_real(x, "amax");
  return {fit(c, reduce_extreme(c.b, x, reduction_dims(a.ints(1), x.rank()), true))};
}

Values amin(Context& c, const Args& a) {
  Value x = a.tensor(0);
  check_real(x, "amin");
  return {fit(c, reduce_extreme(c.b, x, reduction_dims(a.ints(1), x.rank()), false))};
}

// max(self) / min(self): the meta kernel accepts empty inputs, CPU does not.
Values full_extreme(Context& c, const Args& a, bool is_max) {
  Value x = a.tensor(0);
  check_real(x, is_max ? "max" : "min");
  if (x.shape.numel() == 0) {
    fail(std::string(is_max ? "max" : "min") +
         "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
         "reduction dim with the 'dim' argument.");
  }
  return {fit(c, reduce_extreme(c.b, x, all_dims(x.rank()), is_max))};
}

Values max(Context& c, const Args& a) { return full_extreme(c, a, true); }
Values min(Context& c, const Args& a) { return full_extreme(c, a, false); }

// aminmax(self, *, dim=None, keepdim) -> (min, max)
Values aminmax(Context& c, const Args& a) {
  Value x = a.tensor(0);
  check_real(x, "aminmax");
  auto dim = a.optional_integer(1);
  Dims dims = dim ? reduction_dims({*dim}, x.rank()) : all_dims(x.rank());
  return {fit(c, reduce_extreme(c.b, x, dims, false), 0),
          fit(c, reduce_extreme(c.b, x, dims, true), 1)};
}

// ---------------------------------------------------------------- arg extrema

// `x` is strictly better than `y`; NaN beats every number.
Value beats(Builder& b, const Value& x, const Value& y, bool is_max) {
  Value better = b.compare(x, y, is_max ? Comparison::GT : Comparison::LT);
  if (!is_floating(x.type())) return better;
  return b.or_(better, b.and_(is_nan(b, x), b.not_(is_nan(b, y))));
}

Value ties(Builder& b, const Value& x, const Value& y) {
  Value eq = b.compare(x, y, Comparison::EQ);
  if (!is_floating(x.type())) return eq;
  return b.or_(eq, b.and_(is_nan(b, x), is_nan(b, y)));
}

// Extremum of `x` along `dim` and the index of its first occurrence: one
// variadic reduce over (value, index) pairs. The init pairs the identity
// value with the largest index, so it never wins a tie.
Values arg_extreme(Builder& b, const Value& x, int64_t dim, bool is_max) {
  ElementType it = index_type(x.dim(dim));
  Value index = b.iota({it, x.dims()}, dim);
  Value init_value = is_max ? lowest_value(b, x.type()) : highest_value(b, x.type());
  Values r = b.reduce({x, index}, {init_value, highest_value(b, it)}, {dim},
                      [is_max](Builder& r, const Values& v) -> Values {
                        const Value &xv = v[0], &xi = v[1], &yv = v[2], &yi = v[3];
                        Value first = r.and_(ties(r, xv, yv), r.compare(xi, yi, Comparison::LT));
                        Value take_x = r.or_(beats(r, xv, yv, is_max), first);
                        return {r.select(take_x, xv, yv), r.select(take_x, xi, yi)};
                      });
  return {r[0], b.convert(r[1], ElementType::S64)};
}

// The input flattened (dim=None) or as rank >= 1 (a 0-dim input has one
// element along dim 0 / -1), and the dimension to reduce.
std::pair<Value, int64_t> arg_operand(Builder& b, const Value& x, std::optional<int64_t> dim) {
  if (!dim) return {b.reshape(x, {x.shape.numel()}), 0};
  if (x.rank() == 0) return {b.reshape(x, {1}), wrap_dim(*dim, 0)};
  return {x, wrap_dim(*dim, x.rank())};
}

void check_reduced_size(const Value& x, int64_t dim, const char* op) {
  if (x.dim(dim) == 0) {
    fail(std::string(op) + "(): Expected reduction dim " + std::to_string(dim) +
         " to have non-zero size.");
  }
}

// argmax(self, dim=None, keepdim) / argmin
Values arg_rule(Context& c, const Args& a, bool is_max) {
  const char* op = is_max ? "argmax" : "argmin";
  if (a.tensor(0).type() == ElementType::Pred) {
    fail(std::string(op) + "(): does not support bool input");
  }
  check_real(a.tensor(0), op);
  auto [x, dim] = arg_operand(c.b, a.tensor(0), a.optional_integer(1));
  check_reduced_size(x, dim, op);
  return {fit(c, arg_extreme(c.b, x, dim, is_max)[1])};
}

Values argmax(Context& c, const Args& a) { return arg_rule(c, a, true); }
Values argmin(Context& c, const Args& a) { return arg_rule(c, a, false); }

// max.dim(self, dim, keepdim) -> (values, indices) / min.dim
Values extreme_dim(Context& c, const Args& a, bool is_max) {
  const char* op = is_max ? "max" : "min";
  check_real(a.tensor(0), op);
  auto [x, dim] = arg_operand(c.b, a.tensor(0), a.integer(1));
  check_reduced_size(x, dim, op);
  Values r = arg_extreme(c.b, x, dim, is_max);
  return {fit(c, r[0], 0), fit(c, r[1], 1)};
}

Values max_dim(Context& c, const Args& a) { return extreme_dim(c, a, true); }
Values min_dim(Context& c, const Args& a) { return extreme_dim(c, a, false); }

// ---------------------------------------------------------------- var, std

struct Moments {
  Value var;   // reduced, accumulation type (real)
  Value mean;  // reduced, accumulation type
};

// Two passes (mean, then squared deviations) for accuracy close to
// PyTorch's Welford. Divides by max(N - correction, 0): like PyTorch, a
// correction >= N gives inf (or NaN when every deviation is zero).
Moments moments(Context& c, const Args& a, const char* op) {
  Value x = a.tensor(0);
  if (!is_floating(x.type()) && !is_complex(x.type())) {
    fail(std::string(op) + " only support floating point and complex dtypes");
  }
  Builder& b = c.b;
  x = convert(b, x, accumulation_type(x.type()));
  Dims dims = dims_or_all(a, 1, x.rank());
  Value mean = reduce_sum(b, x, dims);
  mean = b.div(mean, reduced_count(b, x, dims, mean.type()));
  Value dev = b.sub(x, expand_reduced(b, mean, x.dims(), dims));
  Value m2 = reduce_sum(b, abs_squared(b, dev), dims);
  ElementType real = m2.type();
  Value correction = a.is_none(2) ? b.constant(1.0, real) : convert(b, a.tensor(2), real);
  Value n = reduced_count(b, x, dims, real);
  Value divisor = b.max(b.sub(n, broadcast_to(b, correction, n.dims())), full_like(b, n, 0.0));
  return {b.div(m2, divisor), mean};
}

// var.correction(self, dim=None, *, correction=None, keepdim)
Values var(Context& c, const Args& a) { return {fit(c, moments(c, a, "std and var").var)}; }

Values std_(Context& c, const Args& a) {
  return {fit(c, c.b.sqrt(moments(c, a, "std and var").var))};
}

Values var_mean(Context& c, const Args& a) {
  Moments m = moments(c, a, "var_mean");
  return {fit(c, m.var, 0), fit(c, m.mean, 1)};
}

Values std_mean(Context& c, const Args& a) {
  Moments m = moments(c, a, "std_mean");
  return {fit(c, c.b.sqrt(m.var), 0), fit(c, m.mean, 1)};
}

// ---------------------------------------------------------------- any, all, count_nonzero

// any(self) / any.dim(self, int dim, keepdim) / any.dims(self, dim=None, keepdim).
// Unlike sum, any.dims with dim=[] reduces nothing. uint8 inputs give uint8.
Dims logical_dims(const Args& a, int64_t rank) {
  if (a.size() < 2 || a.is_none(1)) return all_dims(rank);
  IntList dims = a.ints(1);
  return dims.empty() ? Dims{} : reduction_dims(dims, rank);
}

Values any(Context& c, const Args& a) {
  Value x = a.tensor(0);
  return {fit(c, reduce_any(c.b, x, logical_dims(a, x.rank())))};
}

Values all(Context& c, const Args& a) {
  Value x = a.tensor(0);
  return {fit(c, reduce_all(c.b, x, logical_dims(a, x.rank())))};
}

// _is_all_true(self) / _is_any_true(self): bool tensors only, 0-dim result.
Values is_all_true(Context& c, const Args& a) {
  return {fit(c, reduce_all(c.b, a.tensor(0), all_dims(a.tensor(0).rank())))};
}

Values is_any_true(Context& c, const Args& a) {
  return {fit(c, reduce_any(c.b, a.tensor(0), all_dims(a.tensor(0).rank())))};
}

// count_nonzero(self, int? dim=None) / count_nonzero.dim_IntList(self, dim)
Values count_nonzero(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims dims = dims_or_all(a, 1, x.rank());
  Value ones = c.b.convert(nonzero(c.b, x), ElementType::S64);
  return {fit(c, reduce_sum(c.b, ones, dims))};
}

// ---------------------------------------------------------------- logsumexp

// logsumexp(self, dim, keepdim): max-shifted like PyTorch; the shift is the
// max of the real part, and an infinite max shifts by zero so that all -inf
// gives -inf and a +inf gives +inf instead of NaN.
Values logsumexp(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = accumuland(b, a.tensor(0), c.output(0).type);
  Dims dims = reduction_dims(a.ints(1), x.rank());
  Value re = is_complex(x.type()) ? b.real(x) : x;
  // The shift need not see NaNs: a NaN input makes the sum NaN anyway.
  Value m = reduce_max(b, re, dims);
  m = b.select(b.is_finite(m), m, full_like(b, m, 0));
  Value shift = convert(b, expand_reduced(b, m, x.dims(), dims), x.type());
  Value s = reduce_sum(b, b.exp(b.sub(x, shift)), dims);
  return {fit(c, b.add(b.log(s), convert(b, m, x.type())))};
}

// ---------------------------------------------------------------- norms

// linalg_vector_norm(self, ord=2, dim=None, keepdim, *, dtype=None)
Values linalg_vector_norm(Context& c, const Args& a) {
  Value x = a.tensor(0);
  if (auto dtype = a.dtype(4)) x = convert(c.b, x, *dtype);
  return {fit(c, vector_norm(c.b, x, a.tensor(1), dims_or_all(a, 2, x.rank())))};
}

// norm.Scalar(self, p=2) / norm.ScalarOpt_dtype(self, p, *, dtype) /
// norm.ScalarOpt_dim(self, p, dim, keepdim) /
// norm.ScalarOpt_dim_dtype(self, p, dim, keepdim, *, dtype). p=None is 2.
Values norm(Context& c, const Args& a) {
  Value x = a.tensor(0);
  bool has_dim = a.size() >= 4;
  size_t dtype_arg = has_dim ? 4 : 2;
  if (a.size() > dtype_arg) {
    if (auto dtype = a.dtype(dtype_arg)) x = convert(c.b, x, *dtype);
  }
  Dims dims = has_dim ? reduction_dims(a.ints(2), x.rank()) : all_dims(x.rank());
  Value p = a.is_none(1) ? c.b.constant(2.0, ElementType::F32) : a.tensor(1);
  return {fit(c, vector_norm(c.b, x, p, dims))};
}

// ---------------------------------------------------------------- scans

// Combines the running value of an earlier prefix with a later element or
// segment (both as tuples of same-shaped arrays). Must be associative.
using ScanFn = std::function<Values(Builder&, const Values& earlier, const Values& later)>;

// Inclusive scan along `axis` by doubling (Hillis-Steele): step k combines
// each element with the running value 2^k positions earlier. The steps are
// the iterations of one while loop, so the program (and its compile time)
// stays small whatever the length; the work is O(n log n).
Values doubling_scan(Builder& b, const Values& xs, int64_t axis, const ScanFn& fn) {
  const Dims dims = xs[0].dims();
  const int64_t n = dims[axis];
  if (n < 2) return xs;
  const ElementType it = index_type(n);
  Values init = xs;
  init.insert(init.begin(), b.constant_int(1, it));  // the shift, doubling each step
  auto cond = [n, it](Builder& r, const Values& v) -> Values {
    return {r.compare(v[0], r.constant_int(n, it), Comparison::LT)};
  };
  auto body = [&dims, axis, n, it, &fn](Builder& r, const Values& v) -> Values {
    const Value& shift = v[0];
    Values ys(v.begin() + 1, v.end()), earlier;
    Dims low(dims.size(), 0), none(dims.size(), 0);
    low[axis] = n;
    std::vector<Value> starts(dims.size(), r.constant_int(0, it));
    starts[axis] = r.sub(r.constant_int(n, it), shift);
    for (const Value& y : ys) {
      Value padded = r.pad(y, r.constant(0.0, y.type()), low, none, none);
      earlier.push_back(r.dynamic_slice(padded, starts, dims));
    }
    Values combined = fn(r, earlier, ys);
    Value position = r.iota({it, dims}, axis);
    Value has_earlier = r.compare(position, r.broadcast_in_dim(shift, dims, {}), Comparison::GE);
    Values next{r.mul(shift, r.constant_int(2, it))};
    for (size_t k = 0; k < ys.size(); ++k) {
      next.push_back(r.select(has_earlier, combined[k], ys[k]));
    }
    return next;
  };
  Values out = b.while_loop(init, cond, body);
  return Values(out.begin() + 1, out.end());
}

// Scans `xs` along `dim` of a possibly 0-dim input.
Values scan(Builder& b, Values xs, int64_t dim, const ScanFn& fn) {
  Dims shape = xs[0].dims();
  if (shape.empty()) return xs;  // one element: the scan is the identity
  return doubling_scan(b, xs, wrap_dim(dim, static_cast<int64_t>(shape.size())), fn);
}

ScanFn elementwise_scan(Combiner op) {
  return [op](Builder& b, const Values& x, const Values& y) -> Values {
    return {(b.*op)(x[0], y[0])};
  };
}

// cumsum(self, dim, *, dtype) / cumprod: accumulate in the accumulation type
// of the result dtype (bool results combine with or / and).
Values cumulative(Context& c, const Args& a, bool product) {
  Value x = accumuland(c.b, a.tensor(0), c.output(0).type);
  bool pred = x.type() == ElementType::Pred;
  Combiner op =
      product ? (pred ? &Builder::and_ : &Builder::mul) : (pred ? &Builder::or_ : &Builder::add);
  return {scan(c.b, {x}, a.integer(1), elementwise_scan(op))[0]};
}

Values cumsum(Context& c, const Args& a) { return cumulative(c, a, false); }
Values cumprod(Context& c, const Args& a) { return cumulative(c, a, true); }

// log(exp(x) + exp(y)) computed stably; equal infinities return themselves
// (PyTorch's _log_add_exp_helper) instead of inf - inf = NaN.
Value log_add_exp(Builder& b, const Value& x, const Value& y) {
  Value hi = extreme_of(b, x, y, true), lo = extreme_of(b, x, y, false);
  Value sum = b.add(hi, b.unary("log_plus_one", b.exp(b.sub(lo, hi))));
  Value general = b.or_(b.compare(lo, hi, Comparison::NE), b.is_finite(lo));
  return b.select(general, sum, x);
}

// Complex log(exp(x) + exp(y)), factoring out the operand with the larger real
// part, as PyTorch's CPU kernel does for finite values.
Value complex_log_add_exp(Builder& b, const Value& x, const Value& y) {
  Value x_larger = b.compare(b.real(x), b.real(y), Comparison::GE);
  Value hi = b.select(x_larger, x, y), lo = b.select(x_larger, y, x);
  return b.add(hi, b.unary("log_plus_one", b.exp(b.sub(lo, hi))));
}

// logcumsumexp(self, dim)
Values logcumsumexp(Context& c, const Args& a) {
  Value x = a.tensor(0);
  bool complex = is_complex(x.type());
  x = accumuland(c.b, x, c.output(0).type);
  ScanFn fn = [complex](Builder& b, const Values& p, const Values& q) -> Values {
    return {complex ? complex_log_add_exp(b, p[0], q[0]) : log_add_exp(b, p[0], q[0])};
  };
  return {scan(c.b, {x}, a.integer(1), fn)[0]};
}

// cummax(self, dim) -> (values, indices) / cummin. PyTorch's kernel keeps
// the running extremum and moves to a later element that ties it (>= / <=)
// or is NaN; once NaN, only a later NaN replaces it. As a combine of an
// earlier segment's winner with a later one's this is associative.
Values cumulative_extreme(Context& c, const Args& a, bool is_max) {
  Value x = a.tensor(0);
  check_real(x, is_max ? "cummax" : "cummin");
  int64_t dim = a.integer(1);
  Value index = x.rank() == 0
                    ? c.b.constant_int(0, ElementType::S32)
                    : c.b.iota({index_type(x.dim(dim)), x.dims()}, wrap_dim(dim, x.rank()));
  bool floating = is_floating(x.type());
  ScanFn fn = [is_max, floating](Builder& b, const Values& p, const Values& q) -> Values {
    Value take = b.compare(q[0], p[0], is_max ? Comparison::GE : Comparison::LE);
    if (floating) {
      take = b.or_(is_nan(b, q[0]), b.and_(b.not_(is_nan(b, p[0])), take));
    }
    return {b.select(take, q[0], p[0]), b.select(take, q[1], p[1])};
  };
  Values r = scan(c.b, {x, index}, dim, fn);
  return {r[0], c.b.convert(r[1], ElementType::S64)};
}

Values cummax(Context& c, const Args& a) { return cumulative_extreme(c, a, true); }
Values cummin(Context& c, const Args& a) { return cumulative_extreme(c, a, false); }

}  // namespace

TPU_LOWERING(sum, "sum", "sum.dim_IntList");
TPU_LOWERING(nansum, "nansum");
TPU_LOWERING(mean, "mean", "mean.dim");
TPU_LOWERING(prod, "prod", "prod.dim_int");
TPU_LOWERING(trace, "trace");
TPU_LOWERING(amax, "amax");
TPU_LOWERING(amin, "amin");
TPU_LOWERING(max, "max");
TPU_LOWERING(min, "min");
TPU_LOWERING(aminmax, "aminmax");
TPU_LOWERING(argmax, "argmax");
TPU_LOWERING(argmin, "argmin");
TPU_LOWERING(max_dim, "max.dim");
TPU_LOWERING(min_dim, "min.dim");
TPU_LOWERING(var, "var.correction");
TPU_LOWERING(std_, "std.correction");
TPU_LOWERING(var_mean, "var_mean.correction");
TPU_LOWERING(std_mean, "std_mean.correction");
TPU_LOWERING(any, "any", "any.dim", "any.dims");
TPU_LOWERING(all, "all", "all.dim", "all.dims");
TPU_LOWERING(is_all_true, "_is_all_true");
TPU_LOWERING(is_any_true, "_is_any_true");
TPU_LOWERING(count_nonzero, "count_nonzero", "count_nonzero.dim_IntList");
TPU_LOWERING(logsumexp, "logsumexp");
TPU_LOWERING(linalg_vector_norm, "linalg_vector_norm");
TPU_LOWERING(norm, "norm.Scalar", "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim",
             "norm.ScalarOpt_dim_dtype");
TPU_LOWERING_PREFIX(cumsum, "cumsum");
TPU_LOWERING_PREFIX(cumprod, "cumprod");
TPU_LOWERING(logcumsumexp, "logcumsumexp");
TPU_LOWERING(cummax, "cummax");
TPU_LOWERING(cummin, "cummin");

}  // namespace torch_tpu::lower
