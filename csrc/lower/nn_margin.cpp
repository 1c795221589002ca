// Multi-class margin losses: multi_margin_loss and
// multilabel_margin_loss_forward, with PyTorch's CPU formulas. Both take
// [N, C] inputs (or one sample [C]); float16/bfloat16 compute in float32.
// Their backward operators have no meta kernel in PyTorch, so they run on
// the CPU (the engine needs a meta kernel for result shapes).
#include <algorithm>
#include <cmath>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

// at::Reduction
enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

Value like(Builder& b, const Value& x, double v) { return b.full(x.shape, v); }

// Per-sample losses [N] reduced as `reduction` says; `out` is the result shape.
Value reduce_samples(Builder& b, const Value& loss, int64_t reduction, const Shape& out) {
  if (reduction == kNone) return b.reshape(loss, out.dims);
  Value sum = reduce_sum(b, loss, {0});
  if (reduction == kSum) return sum;
  return b.div(sum, b.constant(static_cast<double>(loss.dim(0)), sum.type()));
}

// multi_margin_loss(self, target, p, margin, weight, reduction): per sample
// sum over d != t of max(0, margin - x[t] + x[d])^p (* weight[t]), / C.
std::vector<Value> multi_margin_loss(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType acc = accumulation_type(out.type);
  Value x = convert(c.b, a.tensor(0), acc);
  int64_t classes = x.rank() == 0 ? 1 : x.dim(-1);
  int64_t n = x.shape.numel() / std::max<int64_t>(classes, 1);
  if (n == 0 || classes == 0) return {c.b.full(out, a.integer(5) == kMean ? NAN : 0)};
  x = c.b.reshape(x, {n, classes});
  Dims dims{n, classes};
  Value target = c.b.reshape(convert(c.b, a.tensor(1), kIndex), {n});
  Value hit = c.b.compare(c.b.iota({kIndex, dims}, 1), c.b.broadcast_in_dim(target, dims, {0}),
                          hlo::Comparison::EQ);
  Value zeros = like(c.b, x, 0);
  Value x_target = reduce_sum(c.b, c.b.select(hit, x, zeros), {1});
  Value margin = c.b.broadcast_in_dim(convert(c.b, a.tensor(3), acc), dims, {});
  Value p = c.b.broadcast_in_dim(convert(c.b, a.tensor(2), acc), dims, {});
  Value z = c.b.add(c.b.sub(margin, c.b.broadcast_in_dim(x_target, dims, {0})), x);
  Value h = c.b.select(c.b.compare(p, like(c.b, p, 1), hlo::Comparison::EQ), z, c.b.mul(z, z));
  if (!a.is_none(4)) {
    Value w = convert(c.b, a.tensor(4), acc);
    Value w_target =
        reduce_sum(c.b, c.b.select(hit, c.b.broadcast_in_dim(w, dims, {1}), zeros), {1});
    h = c.b.mul(h, c.b.broadcast_in_dim(w_target, dims, {0}));
  }
  Value counted = c.b.and_(c.b.not_(hit), c.b.compare(z, zeros, hlo::Comparison::GT));
  Value sum = reduce_sum(c.b, c.b.select(counted, h, zeros), {1});
  Value loss = c.b.div(sum, like(c.b, sum, static_cast<double>(classes)));
  return {reduce_samples(c.b, loss, a.integer(5), out)};
}

// Whether each entry of `t` ([N, C]) comes before the row's first -1 (the
// rest of a row is ignored): no negative entry at or before it.
Value before_first_negative(Builder& b, const Value& t) {
  int64_t cols = t.dim(1);
  Value neg = b.convert(b.compare(t, like(b, t, 0), hlo::Comparison::LT), kIndex);
  Value zero = b.constant_int(0, kIndex);
  for (int64_t s = 1; s < cols; s *= 2) {
    Value shifted =
        b.pad(b.slice(neg, {0, 0}, {t.dim(0), cols - s}, {1, 1}), zero, {0, s}, {0, 0}, {0, 0});
    neg = b.max(neg, shifted);
  }
  return b.compare(neg, like(b, neg, 0), hlo::Comparison::EQ);
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output,
// is_target): targets are the class indices of a row before its first -1;
// per sample sum over targets j and non-targets d of max(0, 1 - (x[j] - x[d])), / C.
std::vector<Value> multilabel_margin_loss_forward(Context& c, const Args& a) {
  const Shape &out = c.output(0), &is_target_shape = c.output(1);
  ElementType acc = accumulation_type(out.type);
  Value x = convert(c.b, a.tensor(0), acc);
  int64_t classes = x.rank() == 0 ? 1 : x.dim(-1);
  int64_t n = x.shape.numel() / std::max<int64_t>(classes, 1);
  if (n == 0 || classes == 0) {
    return {c.b.full(out, a.integer(2) == kMean ? NAN : 0), c.b.full(is_target_shape, 0)};
  }
  x = c.b.reshape(x, {n, classes});
  Value t = c.b.reshape(convert(c.b, a.tensor(1), kIndex), {n, classes});
  Value valid = before_first_negative(c.b, t);
  // [N, j, d]: target j names class d.
  Dims cube{n, classes, classes};
  Value names = c.b.and_(c.b.compare(c.b.broadcast_in_dim(t, cube, {0, 1}),
                                     c.b.iota({kIndex, cube}, 2), hlo::Comparison::EQ),
                         c.b.broadcast_in_dim(valid, cube, {0, 1}));
  Value zeros = c.b.full({acc, cube}, 0);
  Value is_target = reduce_max(c.b, c.b.convert(names, acc), {1});
  Value x_d = c.b.broadcast_in_dim(x, cube, {0, 2});
  Value x_target = reduce_sum(c.b, c.b.select(names, x_d, zeros), {2});  // [N, j]
  Value z =
      c.b.add(c.b.sub(like(c.b, zeros, 1), c.b.broadcast_in_dim(x_target, cube, {0, 1})), x_d);
  Value other =
      c.b.compare(c.b.broadcast_in_dim(is_target, cube, {0, 2}), zeros, hlo::Comparison::EQ);
  Value counted = c.b.and_(c.b.and_(c.b.broadcast_in_dim(valid, cube, {0, 1}), other),
                           c.b.compare(z, zeros, hlo::Comparison::GT));
  Value sum = reduce_sum(c.b, c.b.select(counted, z, zeros), {1, 2});
  Value loss = c.b.div(sum, like(c.b, sum, static_cast<double>(classes)));
  return {reduce_samples(c.b, loss, a.integer(2), out),
          c.b.reshape(is_target, is_target_shape.dims)};
}

}  // namespace

TPU_LOWERING(multi_margin_loss, "multi_margin_loss");
TPU_LOWERING(multilabel_margin_loss_forward, "multilabel_margin_loss_forward");

}  // namespace torch_tpu::lower
