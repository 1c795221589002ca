// Multi-class margin losses: multi_margin_loss and
// multilabel_margin_loss_forward with their backward operators, with
// PyTorch's CPU formulas. All take [N, C] inputs (or one sample [C]);
// float16/bfloat16 compute in float32. (The backward operators' meta kernels
// are in torch_tpu/_meta.py: PyTorch has none.)
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

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

// The samples of a margin loss input: x [N, C] in `acc`, from [N, C] or [C].
struct Samples {
  Value x;
  int64_t n, classes;
};

Samples samples(Builder& b, const Value& input, ElementType acc) {
  int64_t classes = input.rank() == 0 ? 1 : input.dim(-1);
  int64_t n = input.shape.numel() / std::max<int64_t>(classes, 1);
  Value x = convert(b, input, acc);
  if (n > 0 && classes > 0) x = b.reshape(x, {n, classes});
  return {x, n, classes};
}

// The gradient's per-sample factor [N]: grad_output ([N] for reduction none,
// else a scalar) / C, and / N for the mean.
Value sample_scale(Builder& b, const Value& grad_output, int64_t reduction, const Samples& s) {
  ElementType t = s.x.type();
  Value g = convert(b, grad_output, t);
  g = reduction == kNone ? b.reshape(g, {s.n}) : b.broadcast_in_dim(b.reshape(g, {}), {s.n}, {});
  double denom = static_cast<double>(s.classes) * (reduction == kMean ? s.n : 1);
  return b.div(g, b.full({t, {s.n}}, denom));
}

// multi_margin_loss's terms z = margin - x[t] + x[d] over [N, C], the target
// class of each row (`hit`), and the weight of each row's target.
struct MultiMarginTerms {
  Value hit, z, zeros;
  std::optional<Value> w_target;  // [N, C], each row its target's weight
};

MultiMarginTerms multi_margin_terms(Builder& b, const Samples& s, const Value& target,
                                    const Value& margin, std::optional<Value> weight) {
  const Value& x = s.x;
  Dims dims{s.n, s.classes};
  Value t = b.reshape(convert(b, target, kIndex), {s.n});
  Value hit =
      b.compare(b.iota({kIndex, dims}, 1), b.broadcast_in_dim(t, dims, {0}), hlo::Comparison::EQ);
  Value zeros = like(b, x, 0);
  Value x_target = reduce_sum(b, b.select(hit, x, zeros), {1});
  Value m = b.broadcast_in_dim(convert(b, margin, x.type()), dims, {});
  Value z = b.add(b.sub(m, b.broadcast_in_dim(x_target, dims, {0})), x);
  std::optional<Value> w_target;
  if (weight) {
    Value w = b.broadcast_in_dim(convert(b, *weight, x.type()), dims, {1});
    w_target = b.broadcast_in_dim(reduce_sum(b, b.select(hit, w, zeros), {1}), dims, {0});
  }
  return {hit, z, zeros, w_target};
}

Value is_one(Builder& b, const Value& p, const Value& like_this) {
  Value ps = b.broadcast_in_dim(convert(b, p, like_this.type()), like_this.dims(), {});
  return b.compare(ps, like(b, like_this, 1), hlo::Comparison::EQ);
}

// multi_margin_loss(self, target, p, margin, weight, reduction): per sample
// sum over d != t of max(0, margin - x[t] + x[d])^p (* weight[t]), / C.
std::vector<Value> multi_margin_loss(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Samples s = samples(c.b, a.tensor(0), accumulation_type(out.type));
  if (s.n == 0 || s.classes == 0) return {c.b.full(out, a.integer(5) == kMean ? NAN : 0)};
  check_index_range(c, a.tensor(1), s.classes, false, DataCheck::Error::Runtime,
                    "target out of range");
  auto m = multi_margin_terms(c.b, s, a.tensor(1), a.tensor(3), a.optional_tensor(4));
  Value h = c.b.select(is_one(c.b, a.tensor(2), m.z), m.z, c.b.mul(m.z, m.z));
  if (m.w_target) h = c.b.mul(h, *m.w_target);
  Value counted = c.b.and_(c.b.not_(m.hit), c.b.compare(m.z, m.zeros, hlo::Comparison::GT));
  Value sum = reduce_sum(c.b, c.b.select(counted, h, m.zeros), {1});
  Value loss = c.b.div(sum, like(c.b, sum, static_cast<double>(s.classes)));
  return {reduce_samples(c.b, loss, a.integer(5), out)};
}

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight,
// reduction): each counted term's derivative (1, or 2z for p = 2; times
// weight[t]) added at d and subtracted at the target.
std::vector<Value> multi_margin_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Samples s = samples(c.b, a.tensor(1), accumulation_type(out.type));
  if (s.n == 0 || s.classes == 0) return {c.b.full(out, 0)};
  check_index_range(c, a.tensor(2), s.classes, false, DataCheck::Error::Runtime,
                    "target out of range");
  auto m = multi_margin_terms(c.b, s, a.tensor(2), a.tensor(4), a.optional_tensor(5));
  Value dh =
      c.b.select(is_one(c.b, a.tensor(3), m.z), like(c.b, m.z, 1), c.b.mul(like(c.b, m.z, 2), m.z));
  if (m.w_target) dh = c.b.mul(dh, *m.w_target);
  Value counted = c.b.and_(c.b.not_(m.hit), c.b.compare(m.z, m.zeros, hlo::Comparison::GT));
  Value others = c.b.select(counted, dh, m.zeros);
  Value at_target = c.b.broadcast_in_dim(reduce_sum(c.b, others, {1}), m.z.dims(), {0});
  Value grad = c.b.sub(others, c.b.select(m.hit, at_target, m.zeros));
  Value scale = sample_scale(c.b, a.tensor(0), a.integer(6), s);
  grad = c.b.mul(grad, c.b.broadcast_in_dim(scale, grad.dims(), {0}));
  return {convert(c.b, c.b.reshape(grad, out.dims), out.type)};
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

// multilabel_margin_loss's terms over [N, j, d]: target j (a valid entry of
// row n) names class d, and z = 1 - x[t_j] + x[d] counts where d is no target
// and z > 0.
struct MultilabelTerms {
  Value names, z, counted, is_target;  // is_target [N, C] in x's type
};

// The CPU's check of multilabel_margin_loss's targets: each in [-1, C), the
// argument named by its position (`arg`) as TensorArg prints it.
void check_multilabel_targets(Context& c, const Value& target, int64_t classes, int arg) {
  Value t = convert(c.b, target, kIndex);
  Value invalid =
      c.b.or_(c.b.compare(t, like(c.b, t, -1), hlo::Comparison::LT),
              c.b.compare(t, like(c.b, t, static_cast<double>(classes)), hlo::Comparison::GE));
  check_none(c, invalid, DataCheck::Error::Runtime,
             "argument #" + std::to_string(arg) + " 'target' is out of range");
}

MultilabelTerms multilabel_terms(Builder& b, const Samples& s, const Value& target) {
  const Value& x = s.x;
  Value t = b.reshape(convert(b, target, kIndex), {s.n, s.classes});
  Value valid =
      b.broadcast_in_dim(before_first_negative(b, t), {s.n, s.classes, s.classes}, {0, 1});
  Dims cube{s.n, s.classes, s.classes};
  Value names = b.and_(b.compare(b.broadcast_in_dim(t, cube, {0, 1}), b.iota({kIndex, cube}, 2),
                                 hlo::Comparison::EQ),
                       valid);
  Value zeros = b.full({x.type(), cube}, 0);
  Value is_target = reduce_max(b, b.convert(names, x.type()), {1});
  Value x_d = b.broadcast_in_dim(x, cube, {0, 2});
  Value x_target = reduce_sum(b, b.select(names, x_d, zeros), {2});  // [N, j]
  Value z = b.add(b.sub(like(b, zeros, 1), b.broadcast_in_dim(x_target, cube, {0, 1})), x_d);
  Value other = b.compare(b.broadcast_in_dim(is_target, cube, {0, 2}), zeros, hlo::Comparison::EQ);
  Value counted = b.and_(b.and_(valid, other), b.compare(z, zeros, hlo::Comparison::GT));
  return {names, z, counted, is_target};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output,
// is_target): targets are the class indices of a row before its first -1;
// per sample sum over targets j and non-targets d of max(0, 1 - (x[j] - x[d])), / C.
std::vector<Value> multilabel_margin_loss_forward(Context& c, const Args& a) {
  const Shape &out = c.output(0), &is_target_shape = c.output(1);
  Samples s = samples(c.b, a.tensor(0), accumulation_type(out.type));
  if (s.n == 0 || s.classes == 0) {
    return {c.b.full(out, a.integer(2) == kMean ? NAN : 0), c.b.full(is_target_shape, 0)};
  }
  check_multilabel_targets(c, a.tensor(1), s.classes, 2);
  auto m = multilabel_terms(c.b, s, a.tensor(1));
  Value sum = reduce_sum(c.b, c.b.select(m.counted, m.z, like(c.b, m.z, 0)), {1, 2});
  Value loss = c.b.div(sum, like(c.b, sum, static_cast<double>(s.classes)));
  return {reduce_samples(c.b, loss, a.integer(2), out),
          convert(c.b, c.b.reshape(m.is_target, is_target_shape.dims), is_target_shape.type)};
}

// multilabel_margin_loss_backward(grad_output, self, target, reduction,
// is_target): each counted (j, d) adds 1 at d and subtracts 1 at t_j.
std::vector<Value> multilabel_margin_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Samples s = samples(c.b, a.tensor(1), accumulation_type(out.type));
  if (s.n == 0 || s.classes == 0) return {c.b.full(out, 0)};
  check_multilabel_targets(c, a.tensor(2), s.classes, 3);
  auto m = multilabel_terms(c.b, s, a.tensor(2));
  ElementType t = s.x.type();
  Value counted = c.b.convert(m.counted, t);
  Value per_target = reduce_sum(c.b, counted, {2});  // [N, j]
  Value names = c.b.convert(m.names, t);
  Value at_targets =
      reduce_sum(c.b, c.b.mul(names, c.b.broadcast_in_dim(per_target, names.dims(), {0, 1})), {1});
  Value grad = c.b.sub(reduce_sum(c.b, counted, {1}), at_targets);
  Value scale = sample_scale(c.b, a.tensor(0), a.integer(3), s);
  grad = c.b.mul(grad, c.b.broadcast_in_dim(scale, grad.dims(), {0}));
  return {convert(c.b, c.b.reshape(grad, out.dims), out.type)};
}

}  // namespace

TPU_LOWERING(multi_margin_loss, "multi_margin_loss");
TPU_LOWERING(multi_margin_loss_backward, "multi_margin_loss_backward");
TPU_LOWERING(multilabel_margin_loss_forward, "multilabel_margin_loss_forward");
TPU_LOWERING(multilabel_margin_loss_backward, "multilabel_margin_loss_backward");

}  // namespace torch_tpu::lower
