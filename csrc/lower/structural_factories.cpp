// Factories PyTorch composes from several operators: triangle indices,
// logspace, range and the window functions. Each follows the arithmetic of
// PyTorch's CPU kernel (which types it computes in, where it rounds).
#include <algorithm>
#include <cmath>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// f64 where the platform has it (TPU has no f64).
ElementType wide_float(Context& c) {
  return c.platform() == "tpu" ? ElementType::F32 : ElementType::F64;
}

// Coordinates (2 x N) of the elements of a rows x cols matrix with
// column - row <= offset (tril) or >= offset (triu), in row-major order: a
// stable sort of all positions, kept ones first.
Value triangle_indices(Context& c, int64_t rows, int64_t cols, int64_t offset, bool upper) {
  const Shape& out = c.output(0);
  Builder& b = c.b;
  int64_t count = out.dims[1], n = rows * cols;
  if (count == 0) return b.full(out, 0);
  Shape idx{ElementType::S64, {n}};
  Value position = b.iota(idx, 0);
  Value row = b.div(position, b.full(idx, static_cast<double>(cols)));
  Value col = b.rem(position, b.full(idx, static_cast<double>(cols)));
  Value keep = b.compare(b.sub(col, row), b.full(idx, static_cast<double>(offset)),
                         upper ? hlo::Comparison::GE : hlo::Comparison::LE);
  Value dropped = b.convert(b.not_(keep), ElementType::S32);
  auto sorted = b.sort({dropped, position}, 0, true, [](Builder& r, const std::vector<Value>& v) {
    return std::vector<Value>{r.compare(v[0], v[1], hlo::Comparison::LT)};
  });
  Value first = b.slice(sorted[1], {0}, {count}, {1});
  Shape kept{ElementType::S64, {count}};
  Value r = b.div(first, b.full(kept, static_cast<double>(cols)));
  Value k = b.rem(first, b.full(kept, static_cast<double>(cols)));
  Value both = b.concatenate({b.reshape(r, {1, count}), b.reshape(k, {1, count})}, 0);
  return b.convert(both, out.type);
}

// tril_indices(int row, int col, int offset=0, *, dtype, layout, device, pin_memory)
std::vector<Value> tril_indices(Context& c, const Args& a) {
  return {triangle_indices(c, a.integer(0), a.integer(1), a.integer(2), false)};
}

std::vector<Value> triu_indices(Context& c, const Args& a) {
  return {triangle_indices(c, a.integer(0), a.integer(1), a.integer(2), true)};
}

// logspace.out(Scalar start, Scalar end, int steps, float base=10., *, out):
// start and end are first cast to the result type; the exponents count up
// from start for the first half and down from end for the second, in double
// (complex: in the result type).
std::vector<Value> logspace(Context& c, const Args& a) {
  // An out of the result's element count keeps its shape (factories.cpp).
  const Shape out{c.output(0).type, {c.output(0).numel()}};
  Builder& b = c.b;
  int64_t steps = a.integer(2);
  // Complex results are computed in their own type.
  ElementType t = is_complex(out.type) ? out.type : wide_float(c);
  Value start = convert(b, convert(b, a.tensor(0), out.type), t);
  Value end = convert(b, convert(b, a.tensor(1), out.type), t);
  Value base = b.full({t, out.dims}, a.real(3));
  if (steps <= 1) {
    return {b.reshape(b.pow(base, b.broadcast_in_dim(start, out.dims, {})), c.output(0).dims)};
  }
  // Behind a barrier XLA cannot turn the division into a product with the
  // reciprocal, which rounds otherwise than PyTorch's step.
  Value intervals = b.optimization_barrier({b.constant(static_cast<double>(steps - 1), t)})[0];
  Value step = b.div(b.sub(end, start), intervals);
  Shape s{t, out.dims};
  Value i = b.convert(b.iota({ElementType::S64, out.dims}, 0), t);
  Value up = b.add(b.broadcast_in_dim(start, out.dims, {}),
                   b.mul(b.broadcast_in_dim(step, out.dims, {}), i));
  Value back = b.sub(b.full(s, static_cast<double>(steps - 1)), i);
  Value down = b.sub(b.broadcast_in_dim(end, out.dims, {}),
                     b.mul(b.broadcast_in_dim(step, out.dims, {}), back));
  Value first_half = b.compare(i, b.full(s, static_cast<double>(steps / 2)), hlo::Comparison::LT);
  return {b.reshape(b.pow(base, b.select(first_half, up, down)), c.output(0).dims)};
}

// range.out(Scalar start, Scalar end, Scalar step=1, *, out): start + i * step
// in PyTorch's CPU accumulation type (double for f32/f64, float for f16/bf16,
// int64 for integers).
std::vector<Value> range(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Builder& b = c.b;
  ElementType t = ElementType::S64;
  if (is_floating(out.type)) {
    t = bit_width(out.type) >= 32 ? wide_float(c) : ElementType::F32;
  }
  const Dims flat{out.numel()};  // an out of the result's element count keeps its shape
  Value start = b.broadcast_in_dim(convert(b, a.tensor(0), t), flat, {});
  Value step = b.broadcast_in_dim(convert(b, a.tensor(2), t), flat, {});
  Value i = b.convert(b.iota({ElementType::S64, flat}, 0), t);
  return {b.reshape(b.add(start, b.mul(i, step)), out.dims)};
}

// ---------------------------------------------------------------- windows

// Window arithmetic in the result type, like PyTorch's chain of in-place
// ops with Scalar overloads: the scalar is first rounded to the result type,
// each step computes in the op math type (f32 for f16/bf16) and rounds.
struct WindowMath {
  Builder& b;
  ElementType t;  // result type
  ElementType math;
  Dims dims;

  Value round(const Value& v) const { return b.convert(b.convert(v, t), math); }
  Value constant(double v) const { return round(b.full({math, dims}, v)); }
  Value mul(const Value& x, double v) const { return round(b.mul(x, constant(v))); }
  Value add(const Value& x, double v) const { return round(b.add(x, constant(v))); }
  Value cos(const Value& x) const { return round(b.unary("cosine", x)); }
};

WindowMath window_math(Context& c, int64_t length) {
  ElementType t = c.output(0).type;
  if (!is_floating(t)) throw Unsupported("window of a non-floating type");
  ElementType math = bit_width(t) >= 32 ? t : ElementType::F32;
  return WindowMath{c.b, t, math, {length}};
}

// The length computed: one more for periodic windows (the default; the
// overloads take `periodic` second), whose last element is dropped at the end.
int64_t computed_length(Context& c, const Args& a) {
  int64_t n = a.integer(0);
  bool has_periodic = c.op_name().find('.') != std::string::npos;
  bool periodic = !has_periodic || a.boolean(1);
  return periodic ? n + 1 : n;
}

// Returns the window, or ones / empty for lengths 0 and 1 (PyTorch's special
// cases), cut to the requested length.
Value finish(Context& c, const WindowMath& m, const Value& window) {
  const Shape& out = c.output(0);
  Value w = m.b.convert(window, out.type);
  if (w.dim(0) == out.dims[0]) return w;
  return m.b.slice(w, {0}, out.dims, {1});
}

std::optional<Value> trivial_window(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  if (a.integer(0) <= 1) return c.b.full(out, 1);
  return std::nullopt;
}

// Large integers are not exact in f16/bf16: arange rounds them.
Value arange(const WindowMath& m) {
  return m.round(m.b.convert(m.b.iota({ElementType::S64, m.dims}, 0), m.math));
}

Value hamming(Context& c, const Args& a, double alpha, double beta) {
  int64_t n = computed_length(c, a);
  WindowMath m = window_math(c, n);
  Value w = m.mul(arange(m), M_PI * 2. / static_cast<double>(n - 1));
  w = m.add(m.mul(m.cos(w), -beta), alpha);
  return finish(c, m, w);
}

// hann_window(int window_length, *, ...) / hann_window.periodic(..., bool periodic, ...)
std::vector<Value> hann_window(Context& c, const Args& a) {
  if (auto w = trivial_window(c, a)) return {*w};
  return {hamming(c, a, 0.5, 0.5)};
}

// hamming_window[.periodic[_alpha[_beta]]](int window_length, bool periodic,
// float alpha=0.54, float beta=0.46, ...)
std::vector<Value> hamming_window(Context& c, const Args& a) {
  if (auto w = trivial_window(c, a)) return {*w};
  const std::string& name = c.op_name();
  bool has_alpha = name.find("periodic_alpha") != std::string::npos;
  bool has_beta = name.find("periodic_alpha_beta") != std::string::npos;
  double alpha = has_alpha ? a.real(2) : 0.54;
  double beta = has_beta ? a.real(3) : 0.46;
  return {hamming(c, a, alpha, beta)};
}

// blackman_window: 0.42 - 0.5 cos(2x) + 0.08 cos(4x), x = pi i / (n - 1).
std::vector<Value> blackman_window(Context& c, const Args& a) {
  if (auto w = trivial_window(c, a)) return {*w};
  int64_t n = computed_length(c, a);
  WindowMath m = window_math(c, n);
  Value x = m.mul(arange(m), M_PI / static_cast<double>(n - 1));
  Value four = m.mul(m.cos(m.mul(x, 4)), 0.08);
  Value two = m.mul(m.cos(m.mul(x, 2)), 0.5);
  return {finish(c, m, m.add(m.round(c.b.sub(four, two)), 0.42))};
}

// bartlett_window: 2 i / (n - 1), mirrored as 2 - that past the middle.
std::vector<Value> bartlett_window(Context& c, const Args& a) {
  if (auto w = trivial_window(c, a)) return {*w};
  int64_t n = computed_length(c, a);
  WindowMath m = window_math(c, n);
  Value w = m.mul(arange(m), 2. / static_cast<double>(n - 1));
  int64_t first_half = ((n - 1) >> 1) + 1;
  Value mirrored = m.add(m.mul(w, -1), 2);
  Value i = c.b.iota({ElementType::S64, {n}}, 0);
  Value second = c.b.compare(i, c.b.full({ElementType::S64, {n}}, static_cast<double>(first_half)),
                             hlo::Comparison::GE);
  return {finish(c, m, c.b.select(second, mirrored, w))};
}

// Modified Bessel function I0 by its power series sum ((x/2)^2k / k!^2):
// all terms are positive, so it is accurate for the arguments kaiser_window
// uses (0 <= x <= beta), given enough terms for the largest.
Value bessel_i0(Builder& b, const Value& x, double largest) {
  int64_t terms = 20 + static_cast<int64_t>(2 * std::abs(largest));
  Value quarter_sq = b.mul(b.mul(x, x), b.full(x.shape, 0.25));
  Value term = b.full(x.shape, 1);
  Value sum = term;
  for (int64_t k = 1; k < terms; ++k) {
    term = b.div(b.mul(term, quarter_sq), b.full(x.shape, static_cast<double>(k * k)));
    sum = b.add(sum, term);
  }
  return sum;
}

// kaiser_window[.periodic|.beta](int window_length, bool periodic, float beta=12., ...):
// I0(beta sqrt(1 - ((i - alpha) / alpha)^2)) / I0(beta), alpha = (n - 1) / 2.
std::vector<Value> kaiser_window(Context& c, const Args& a) {
  if (auto w = trivial_window(c, a)) return {*w};
  int64_t n = computed_length(c, a);
  double beta = c.op_name().find(".beta") != std::string::npos ? a.real(2) : 12.0;
  WindowMath m = window_math(c, n);
  Builder& b = c.b;
  // PyTorch evaluates this in the op math type from the rounded arange.
  ElementType t = m.math == ElementType::F64 ? m.math : wide_float(c);
  Shape s{t, {n}};
  Value i = b.convert(b.iota({ElementType::S64, {n}}, 0), t);
  double alpha = static_cast<double>(n - 1) / 2.0;
  Value r = b.div(b.sub(i, b.full(s, alpha)), b.full(s, alpha));
  Value arg = b.mul(b.full(s, beta), b.sqrt(b.abs(b.sub(b.full(s, 1), b.mul(r, r)))));
  Value i0_beta = bessel_i0(b, b.full({t, {}}, beta), beta);
  Value w = b.div(bessel_i0(b, arg, beta), b.broadcast_in_dim(i0_beta, {n}, {}));
  return {finish(c, m, w)};
}

}  // namespace

TPU_LOWERING(tril_indices, "tril_indices");
TPU_LOWERING(triu_indices, "triu_indices");
TPU_LOWERING(logspace, "logspace.out");
TPU_LOWERING(range, "range.out");
TPU_LOWERING(hann_window, "hann_window", "hann_window.periodic");
TPU_LOWERING(hamming_window, "hamming_window", "hamming_window.periodic",
             "hamming_window.periodic_alpha", "hamming_window.periodic_alpha_beta");
TPU_LOWERING(blackman_window, "blackman_window", "blackman_window.periodic");
TPU_LOWERING(bartlett_window, "bartlett_window", "bartlett_window.periodic");
TPU_LOWERING(kaiser_window, "kaiser_window", "kaiser_window.periodic", "kaiser_window.beta");

}  // namespace torch_tpu::lower
