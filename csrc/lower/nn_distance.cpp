// Pairwise distances: cdist (between the rows of two batched matrices),
// pdist (between the rows of one matrix, upper triangle) and their
// gradients, with PyTorch's CPU formulas per p (0, 1, 2, inf, other), and
// _euclidean_dist (the matmul form cdist uses for large p=2 problems).
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

Value like(Builder& b, const Value& x, double v) { return b.full(x.shape, v); }

Value sign(Builder& b, const Value& x) { return b.unary("sign", x); }

// The p-norm of `diff` over its last dimension, as PyTorch's cdist/pdist
// kernels compute it for each p.
Value distance(Builder& b, const Value& diff, double p) {
  Dims last{diff.rank() - 1};
  Value d = b.abs(diff);
  if (p == 0)
    return reduce_sum(
        b, b.select(b.compare(d, like(b, d, 0), hlo::Comparison::NE), like(b, d, 1), like(b, d, 0)),
        last);
  if (p == 1) return reduce_sum(b, d, last);
  if (p == 2) return b.sqrt(reduce_sum(b, b.mul(d, d), last));
  if (std::isinf(p)) return reduce_max(b, d, last);
  Value sum = reduce_sum(b, b.pow(d, like(b, d, p)), last);
  return b.pow(sum, like(b, sum, 1.0 / p));
}

// Gradient of distance(diff) with respect to diff, times `grad`; `grad`
// and `dist` have diff's shape (broadcast along the last dimension).
Value distance_grad(Builder& b, const Value& diff, const Value& grad, const Value& dist, double p) {
  Value zero = like(b, diff, 0);
  if (p == 0) return zero;
  if (p == 1) return b.mul(sign(b, diff), grad);
  Value no_dist = b.compare(dist, zero, hlo::Comparison::EQ);
  Value abs = b.abs(diff);
  Value g;
  if (p == 2) {
    g = b.div(b.mul(grad, diff), dist);
  } else if (std::isinf(p)) {
    Value is_max = b.compare(abs, dist, hlo::Comparison::EQ);
    return b.select(is_max, b.mul(grad, sign(b, diff)), zero);
  } else if (p < 2) {
    g = b.div(b.mul(b.mul(sign(b, diff), b.pow(abs, like(b, abs, p - 1))), grad),
              b.pow(dist, like(b, dist, p - 1)));
    if (p < 1) no_dist = b.or_(no_dist, b.compare(diff, zero, hlo::Comparison::EQ));
  } else {
    g = b.div(b.mul(b.mul(diff, b.pow(abs, like(b, abs, p - 2))), grad),
              b.pow(dist, like(b, dist, p - 1)));
  }
  return b.select(no_dist, zero, g);
}

// x1 [..., P, M] and x2 [..., R, M] broadcast to [batch..., P, R, M] each.
std::pair<Value, Value> spread(Builder& b, const Value& x1, const Value& x2, const Dims& batch,
                               ElementType t) {
  int64_t k = static_cast<int64_t>(batch.size());
  int64_t p = x1.dim(-2), r = x2.dim(-2), m = x1.dim(-1);
  Dims full = batch;
  full.insert(full.end(), {p, r, m});
  auto widen = [&](const Value& x, int64_t skip) {
    Dims lead = batch;
    lead.insert(lead.end(), {x.dim(-2), m});
    Value v = broadcast_to(b, convert(b, x, t), lead);
    Dims mapping;
    for (int64_t i = 0; i < k; ++i) mapping.push_back(i);
    mapping.push_back(skip == k ? k + 1 : k);
    mapping.push_back(k + 2);
    return b.broadcast_in_dim(v, full, mapping);
  };
  return {widen(x1, k + 1), widen(x2, k)};
}

bool use_mm(double p, std::optional<int64_t> mode, int64_t r1, int64_t r2) {
  int64_t m = mode.value_or(0);
  return p == 2 && (m == 1 || (m == 0 && (r1 > 25 || r2 > 25)));
}

Value matmul_t(Builder& b, const Value& x, const Value& y, int64_t batch) {
  hlo::DotDims d;
  for (int64_t i = 0; i < batch; ++i) {
    d.lhs_batch.push_back(i);
    d.rhs_batch.push_back(i);
  }
  d.lhs_contract = {batch + 1};
  d.rhs_contract = {batch + 1};
  return b.dot_general(x, y, d, Precision::Highest, x.type());
}

// PyTorch's _euclidean_dist: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamped
// at 0, then sqrt (the rounding of the matmul form shows in the result).
Value euclidean(Builder& b, const Value& x1, const Value& x2, const Dims& batch, ElementType t) {
  int64_t k = static_cast<int64_t>(batch.size());
  auto prep = [&](const Value& x) {
    Dims dims = batch;
    dims.insert(dims.end(), {x.dim(-2), x.dim(-1)});
    return broadcast_to(b, convert(b, x, t), dims);
  };
  Value a = prep(x1), c = prep(x2);
  Value an = reduce_sum(b, b.mul(a, a), {k + 1}), cn = reduce_sum(b, b.mul(c, c), {k + 1});
  Dims a_col = an.dims(), c_col = cn.dims();
  a_col.push_back(1);
  c_col.push_back(1);
  an = b.reshape(an, a_col);
  cn = b.reshape(cn, c_col);
  Value lhs = b.concatenate({b.mul(like(b, a, -2), a), an, like(b, an, 1)}, k + 1);
  Value rhs = b.concatenate({c, like(b, cn, 1), cn}, k + 1);
  Value r = matmul_t(b, lhs, rhs, k);
  return b.sqrt(b.max(r, like(b, r, 0)));
}

// _cdist_forward(x1, x2, p, compute_mode)
std::vector<Value> cdist_forward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Value x1 = a.tensor(0), x2 = a.tensor(1);
  double p = a.real(2);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  Dims batch(out.dims.begin(), out.dims.end() - 2);
  if (x1.dim(-1) == 0) return {c.b.full(out, 0)};
  if (use_mm(p, a.optional_integer(3), x1.dim(-2), x2.dim(-2))) {
    return {euclidean(c.b, x1, x2, batch, out.type)};
  }
  auto [u, v] = spread(c.b, x1, x2, batch, out.type);
  return {distance(c.b, c.b.sub(u, v), p)};
}

// _euclidean_dist(x1, x2)
std::vector<Value> euclidean_dist(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  Dims batch(out.dims.begin(), out.dims.end() - 2);
  return {euclidean(c.b, a.tensor(0), a.tensor(1), batch, out.type)};
}

// _cdist_backward(grad, x1, x2, p, cdist): the gradient for x1, summed over
// the rows of x2 (shape: the broadcast batch, then x1's).
std::vector<Value> cdist_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Value grad = a.tensor(0), dist = a.tensor(4);
  double p = a.real(3);
  if (out.numel() == 0 || a.tensor(2).dim(-2) == 0) return {c.b.full(out, 0)};
  Dims batch(out.dims.begin(), out.dims.end() - 2);
  auto [u, v] = spread(c.b, a.tensor(1), a.tensor(2), batch, out.type);
  Value diff = c.b.sub(u, v);
  Dims mapping;
  for (int64_t i = 0; i < diff.rank() - 1; ++i) mapping.push_back(i);
  auto along = [&](const Value& x) {
    return c.b.broadcast_in_dim(convert(c.b, x, out.type), diff.dims(), mapping);
  };
  Value g = distance_grad(c.b, diff, along(grad), along(dist), p);
  return {reduce_sum(c.b, g, {diff.rank() - 2})};
}

// An s64 vector constant.
Value index_list(Builder& b, const Dims& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(values[i]);
  }
  Shape shape{kIndex, {static_cast<int64_t>(values.size())}};
  return b.emit("stablehlo.constant", {}, "value = dense<[" + text + "]> : " + shape.mlir(),
                {shape})[0];
}

// The pairs (i, j), i < j, in pdist's order.
std::pair<Value, Value> pairs(Builder& b, int64_t n) {
  Dims first, second;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      first.push_back(i);
      second.push_back(j);
    }
  }
  return {index_list(b, first), index_list(b, second)};
}

Value rows_at(Builder& b, const Value& x, const Value& index) {
  hlo::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  return b.gather(x, b.reshape(index, {index.dim(0), 1}), g, {1, x.dim(1)});
}

Value add_rows(Builder& b, const Value& into, const Value& index, const Value& rows) {
  hlo::ScatterDims d;
  d.update_window_dims = {1};
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return b.scatter(into, b.reshape(index, {index.dim(0), 1}), rows, d,
                   [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                     return {r.add(v[0], v[1])};
                   });
}

// _pdist_forward(self, p)
std::vector<Value> pdist_forward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Value x = convert(c.b, a.tensor(0), out.type);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  if (x.dim(1) == 0) return {c.b.full(out, 0)};
  auto [i, j] = pairs(c.b, x.dim(0));
  return {distance(c.b, c.b.sub(rows_at(c.b, x, i), rows_at(c.b, x, j)), a.real(1))};
}

// _pdist_backward(grad, self, p, pdist): each pair's gradient goes to its
// first row and, negated, to its second.
std::vector<Value> pdist_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Value x = convert(c.b, a.tensor(1), out.type);
  int64_t n = x.dim(0);
  if (out.numel() == 0 || n < 2) return {c.b.full(out, 0)};
  auto [i, j] = pairs(c.b, n);
  Value diff = c.b.sub(rows_at(c.b, x, i), rows_at(c.b, x, j));
  auto along = [&](const Value& v) {
    return c.b.broadcast_in_dim(convert(c.b, v, out.type), diff.dims(), {0});
  };
  Value g = distance_grad(c.b, diff, along(a.tensor(0)), along(a.tensor(3)), a.real(2));
  Value zeros = c.b.full(out, 0);
  return {c.b.add(add_rows(c.b, zeros, i, g), add_rows(c.b, zeros, j, c.b.neg(g)))};
}

}  // namespace

TPU_LOWERING(cdist_forward, "_cdist_forward");
TPU_LOWERING(cdist_backward, "_cdist_backward");
TPU_LOWERING(euclidean_dist, "_euclidean_dist");
TPU_LOWERING(pdist_forward, "_pdist_forward");
TPU_LOWERING(pdist_backward, "_pdist_backward");

}  // namespace torch_tpu::lower
