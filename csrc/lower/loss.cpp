// Loss functions and their gradients, with PyTorch's CPU formulas (including
// the order of operations where it shows in rounding). float16/bfloat16
// compute in float32 and round once. Data-dependent checks PyTorch makes
// (class index out of range, probabilities outside [0, 1]) cannot raise here:
// an out-of-range class index selects nothing and contributes 0.
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

// at::Reduction
enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

Value constant_like(Builder& b, const Value& like, double v) { return b.full(like.shape, v); }

// apply_loss_reduction: sum, or the mean of every element (NaN when empty).
Value reduce_loss(Builder& b, const Value& loss, int64_t reduction) {
  if (reduction == kNone) return loss;
  Value sum = reduce_sum(b, loss, all_dims(loss.rank()));
  if (reduction == kSum) return sum;
  return b.div(sum, b.constant(static_cast<double>(loss.shape.numel()), sum.type()));
}

// The factor gradients of a mean are scaled by: 1/numel for a mean, else 1.
double mean_norm(int64_t reduction, const Value& input) {
  return reduction == kMean ? 1.0 / static_cast<double>(input.shape.numel()) : 1.0;
}

// Operands `first..` converted to `type` and broadcast to `dims`.
std::vector<Value> operands_as(Builder& b, const Args& a, std::initializer_list<size_t> indices,
                               ElementType type, const Dims& dims) {
  std::vector<Value> out;
  for (size_t i : indices) out.push_back(broadcast_to(b, convert(b, a.tensor(i), type), dims));
  return out;
}

// The shape the elementwise loss has before reduction: self and target broadcast.
Dims loss_dims(const Args& a) { return broadcast_shapes(a.tensor(0).dims(), a.tensor(1).dims()); }

// ---------------------------------------------------------------- regression

// mse_loss(self, target, reduction)
std::vector<Value> mse_loss(Context& c, const Args& a) {
  ElementType t = accumulation_type(c.output(0).type);
  auto v = operands_as(c.b, a, {0, 1}, t, loss_dims(a));
  Value diff = c.b.sub(v[0], v[1]);
  return {reduce_loss(c.b, c.b.mul(diff, diff), a.integer(2))};
}

// mse_loss_backward(grad_output, self, target, reduction): norm * (x - t) * g
// with norm = 2 (/ numel for a mean).
std::vector<Value> mse_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType t = accumulation_type(out.type);
  auto v = operands_as(c.b, a, {0, 1, 2}, t, out.dims);
  double norm = 2.0 * mean_norm(a.integer(3), a.tensor(1));
  Value diff = c.b.sub(v[1], v[2]);
  return {c.b.mul(c.b.mul(constant_like(c.b, diff, norm), diff), v[0])};
}

// smooth_l1_loss(self, target, reduction, beta): with beta == 0 the formula
// is exactly l1 (|x - t| - 0), what PyTorch switches to.
std::vector<Value> smooth_l1_loss(Context& c, const Args& a) {
  ElementType t = accumulation_type(c.output(0).type);
  auto v = operands_as(c.b, a, {0, 1}, t, loss_dims(a));
  double beta = a.real(3);
  Value z = c.b.abs(c.b.sub(v[0], v[1]));
  Value beta_v = constant_like(c.b, z, beta), half = constant_like(c.b, z, 0.5);
  Value quadratic = c.b.div(c.b.mul(c.b.mul(half, z), z), beta_v);
  Value linear = c.b.sub(z, constant_like(c.b, z, 0.5 * beta));
  Value loss = c.b.select(c.b.compare(z, beta_v, hlo::Comparison::LT), quadratic, linear);
  return {reduce_loss(c.b, loss, a.integer(2))};
}

// Piecewise gradient shared by smooth_l1 and huber: -outer / inner(x) / outer
// for x <= -bound / inside / x >= bound, evaluated in PyTorch's branch order.
Value piecewise_grad(Builder& b, const Value& x, double bound, const Value& low,
                     const Value& inside, const Value& high) {
  Value lo = constant_like(b, x, -bound), hi = constant_like(b, x, bound);
  return b.select(b.compare(x, lo, hlo::Comparison::LE), low,
                  b.select(b.compare(x, hi, hlo::Comparison::GE), high, inside));
}

// smooth_l1_loss_backward(grad_output, self, target, reduction, beta)
std::vector<Value> smooth_l1_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  auto v = operands_as(c.b, a, {0, 1, 2}, accumulation_type(out.type), out.dims);
  double beta = a.real(4);
  Value norm = constant_like(c.b, v[0], mean_norm(a.integer(3), a.tensor(1)));
  Value x = c.b.sub(v[1], v[2]);
  Value high = c.b.mul(norm, v[0]);
  Value inside = c.b.div(c.b.mul(c.b.mul(norm, x), v[0]), constant_like(c.b, x, beta));
  return {piecewise_grad(c.b, x, beta, c.b.mul(c.b.neg(norm), v[0]), inside, high)};
}

// huber_loss(self, target, reduction, delta)
std::vector<Value> huber_loss(Context& c, const Args& a) {
  ElementType t = accumulation_type(c.output(0).type);
  auto v = operands_as(c.b, a, {0, 1}, t, loss_dims(a));
  double delta = a.real(3);
  Value z = c.b.abs(c.b.sub(v[0], v[1]));
  Value delta_v = constant_like(c.b, z, delta), half = constant_like(c.b, z, 0.5);
  Value quadratic = c.b.mul(c.b.mul(half, z), z);
  Value linear = c.b.mul(delta_v, c.b.sub(z, constant_like(c.b, z, 0.5 * delta)));
  Value loss = c.b.select(c.b.compare(z, delta_v, hlo::Comparison::LT), quadratic, linear);
  return {reduce_loss(c.b, loss, a.integer(2))};
}

// huber_loss_backward(grad_output, self, target, reduction, delta)
std::vector<Value> huber_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  auto v = operands_as(c.b, a, {0, 1, 2}, accumulation_type(out.type), out.dims);
  double delta = a.real(4);
  Value norm = constant_like(c.b, v[0], mean_norm(a.integer(3), a.tensor(1)));
  Value delta_v = constant_like(c.b, v[0], delta);
  Value x = c.b.sub(v[1], v[2]);
  Value low = c.b.mul(c.b.mul(c.b.neg(norm), v[0]), delta_v);
  Value high = c.b.mul(c.b.mul(norm, v[0]), delta_v);
  Value inside = c.b.mul(c.b.mul(norm, x), v[0]);
  return {piecewise_grad(c.b, x, delta, low, inside, high)};
}

// ---------------------------------------------------------------- binary

// Multiplies by the optional weight (argument `i`), broadcast.
Value weighted(Builder& b, const Args& a, size_t i, const Value& x) {
  if (a.is_none(i)) return x;
  return b.mul(x, broadcast_to(b, convert(b, a.tensor(i), x.type()), x.dims()));
}

// binary_cross_entropy(self, target, weight, reduction): logs clamped at -100.
std::vector<Value> binary_cross_entropy(Context& c, const Args& a) {
  ElementType t = accumulation_type(c.output(0).type);
  auto v = operands_as(c.b, a, {0, 1}, t, a.tensor(0).dims());
  const Value &x = v[0], &y = v[1];
  Value floor = constant_like(c.b, x, -100), one = constant_like(c.b, x, 1);
  Value valid = c.b.and_(c.b.compare(x, constant_like(c.b, x, 0), hlo::Comparison::GE),
                         c.b.compare(x, one, hlo::Comparison::LE));
  check_none(c, c.b.not_(valid), DataCheck::Error::Runtime,
             "all elements of input should be between 0 and 1");
  Value log_x = c.b.max(c.b.log(x), floor);
  Value log_1mx = c.b.max(c.b.unary("log_plus_one", c.b.neg(x)), floor);
  Value loss = c.b.sub(c.b.mul(c.b.sub(y, one), log_1mx), c.b.mul(y, log_x));
  return {reduce_loss(c.b, weighted(c.b, a, 2, loss), a.integer(3))};
}

// binary_cross_entropy_backward(grad_output, self, target, weight, reduction):
// g * (x - t) / max((1 - x) * x, 1e-12), then * weight, then / numel.
std::vector<Value> binary_cross_entropy_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  auto v = operands_as(c.b, a, {0, 1, 2}, accumulation_type(out.type), out.dims);
  const Value &g = v[0], &x = v[1], &y = v[2];
  Value one = constant_like(c.b, x, 1), eps = constant_like(c.b, x, 1e-12);
  Value denom = c.b.max(c.b.mul(c.b.sub(one, x), x), eps);
  Value grad = weighted(c.b, a, 3, c.b.div(c.b.mul(g, c.b.sub(x, y)), denom));
  if (a.integer(4) == kMean) {
    grad = c.b.div(grad, constant_like(c.b, grad, static_cast<double>(x.shape.numel())));
  }
  return {grad};
}

// log(sigmoid(x)) without overflow: min(x, 0) - log1p(exp(-|x|)).
Value log_sigmoid(Builder& b, const Value& x) {
  Value zero = constant_like(b, x, 0);
  return b.sub(b.min(x, zero), b.unary("log_plus_one", b.exp(b.neg(b.abs(x)))));
}

// binary_cross_entropy_with_logits(self, target, weight, pos_weight, reduction):
// (1 - t) * x - log_sigmoid(x) * (1 + (pos_weight - 1) * t).
std::vector<Value> binary_cross_entropy_with_logits(Context& c, const Args& a) {
  ElementType t = accumulation_type(c.output(0).type);
  Dims dims = loss_dims(a);
  auto v = operands_as(c.b, a, {0, 1}, t, dims);
  const Value &x = v[0], &y = v[1];
  Value one = constant_like(c.b, x, 1);
  Value log_sig = log_sigmoid(c.b, x);
  if (!a.is_none(3)) {
    Value pos = broadcast_to(c.b, convert(c.b, a.tensor(3), t), dims);
    log_sig = c.b.mul(log_sig, c.b.add(c.b.mul(c.b.sub(pos, one), y), one));
  }
  Value loss = c.b.sub(c.b.mul(c.b.sub(one, y), x), log_sig);
  return {reduce_loss(c.b, weighted(c.b, a, 2, loss), a.integer(4))};
}

// soft_margin_loss(self, target, reduction): log1p(exp(-x * t)).
std::vector<Value> soft_margin_loss(Context& c, const Args& a) {
  ElementType t = accumulation_type(c.output(0).type);
  auto v = operands_as(c.b, a, {0, 1}, t, loss_dims(a));
  Value loss = c.b.unary("log_plus_one", c.b.exp(c.b.mul(c.b.neg(v[0]), v[1])));
  return {reduce_loss(c.b, loss, a.integer(2))};
}

// soft_margin_loss_backward(grad_output, self, target, reduction):
// t * z * -norm / (1 + z) * g with z = exp(-t * x).
std::vector<Value> soft_margin_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  auto v = operands_as(c.b, a, {0, 1, 2}, accumulation_type(out.type), out.dims);
  const Value &g = v[0], &x = v[1], &y = v[2];
  Value z = c.b.exp(c.b.mul(c.b.neg(y), x));
  Value norm = constant_like(c.b, x, -mean_norm(a.integer(3), a.tensor(1)));
  Value grad = c.b.mul(c.b.mul(y, z), norm);
  grad = c.b.div(grad, c.b.add(z, constant_like(c.b, z, 1)));
  return {c.b.mul(grad, g)};
}

// ---------------------------------------------------------------- nll

// Negative log likelihood over class dimension 1 of [N, C, ...] (or 0 of
// [C]): the sample dims are the input's without the class dim.
struct Nll {
  int64_t class_dim;
  Dims sample_dims;
  Value hit;     // pred, input dims: this class is the sample's target
  Value weight;  // acc, sample dims: the target's weight, 0 when ignored
};

// Broadcasts a value over the sample dims along the class dim.
Value along_classes(Builder& b, const Value& v, const Dims& dims, int64_t class_dim) {
  Dims mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i != class_dim) mapping.push_back(i);
  }
  return b.broadcast_in_dim(v, dims, mapping);
}

// The input is argument `self`, target and weight follow it (as in both
// nll_loss_forward and nll_loss_backward).
Nll nll_setup(Builder& b, const Args& a, size_t self, ElementType acc, int64_t ignore_index) {
  Nll n;
  Value x = a.tensor(self);
  n.class_dim = x.rank() == 1 ? 0 : 1;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != n.class_dim) n.sample_dims.push_back(x.dim(i));
  }
  Value target = b.reshape(convert(b, a.tensor(self + 1), kIndex), n.sample_dims);
  Value classes = b.iota({kIndex, x.dims()}, n.class_dim);
  n.hit = b.compare(classes, along_classes(b, target, x.dims(), n.class_dim), hlo::Comparison::EQ);
  Value kept = b.compare(target, b.full(target.shape, static_cast<double>(ignore_index)),
                         hlo::Comparison::NE);
  Value zeros = b.full({acc, x.dims()}, 0);
  Value w = b.full({acc, x.dims()}, 1);
  if (!a.is_none(self + 2)) {
    Dims mapping{n.class_dim};
    w = b.broadcast_in_dim(convert(b, a.tensor(self + 2), acc), x.dims(), mapping);
  }
  Value picked = reduce_sum(b, b.select(n.hit, w, zeros), {n.class_dim});
  n.weight = b.select(kept, picked, b.full(picked.shape, 0));
  return n;
}

// The CPU's check of nll_loss's targets (forward and backward): each names a
// class, but those equal to ignore_index, which may be anything.
void check_targets(Context& c, const Value& targets, int64_t ignore_index, int64_t classes) {
  Value target = convert(c.b, targets, kIndex);
  Value ignored = c.b.compare(target, c.b.full(target.shape, static_cast<double>(ignore_index)),
                              hlo::Comparison::EQ);
  check_index_range(c, c.b.select(ignored, c.b.full(target.shape, 0), target), classes, false,
                    DataCheck::Error::Index, "Target {} is out of bounds.");
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight, reduction,
// ignore_index) -> (output, total_weight). Unreduced batches report a total
// weight of 0, as PyTorch's kernel leaves it.
std::vector<Value> nll_loss_forward(Context& c, const Args& a) {
  ElementType acc = accumulation_type(c.output(0).type);
  Value x = convert(c.b, a.tensor(0), acc);
  int64_t reduction = a.integer(3);
  Nll n = nll_setup(c.b, a, 0, acc, a.integer(4));
  check_targets(c, a.tensor(1), a.integer(4), x.dim(n.class_dim));
  Value zeros = c.b.full(x.shape, 0);
  Value picked = reduce_sum(c.b, c.b.select(n.hit, x, zeros), {n.class_dim});
  Value loss = c.b.mul(c.b.neg(picked), n.weight);
  if (reduction == kNone && x.rank() > 1) return {loss, c.b.full(c.output(1), 0)};
  Dims every = all_dims(loss.rank());
  Value total_weight = reduce_sum(c.b, n.weight, every);
  Value sum = reduce_sum(c.b, loss, every);
  return {reduction == kMean ? c.b.div(sum, total_weight) : sum, total_weight};
}

// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight,
// reduction, ignore_index, total_weight): -weight[t] * g (/ total_weight for
// a mean) at each sample's target class, 0 elsewhere.
std::vector<Value> nll_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  ElementType acc = accumulation_type(out.type);
  int64_t reduction = a.integer(4);
  Nll n = nll_setup(c.b, a, 1, acc, a.integer(5));
  check_targets(c, a.tensor(2), a.integer(5), a.tensor(1).dim(n.class_dim));
  Value g = convert(c.b, a.tensor(0), acc);
  if (reduction == kMean) g = c.b.div(g, convert(c.b, a.tensor(6), acc));
  g = c.b.neg(g);
  g = g.rank() == 0 ? broadcast_to(c.b, g, n.sample_dims) : c.b.reshape(g, n.sample_dims);
  Value grad = c.b.mul(n.weight, g);
  Value spread = along_classes(c.b, grad, out.dims, n.class_dim);
  return {c.b.select(n.hit, spread, c.b.full({acc, out.dims}, 0))};
}

}  // namespace

TPU_LOWERING(mse_loss, "mse_loss");
TPU_LOWERING(mse_loss_backward, "mse_loss_backward");
TPU_LOWERING(smooth_l1_loss, "smooth_l1_loss");
TPU_LOWERING(smooth_l1_loss_backward, "smooth_l1_loss_backward");
TPU_LOWERING(huber_loss, "huber_loss");
TPU_LOWERING(huber_loss_backward, "huber_loss_backward");
TPU_LOWERING(binary_cross_entropy, "binary_cross_entropy");
TPU_LOWERING(binary_cross_entropy_backward, "binary_cross_entropy_backward");
TPU_LOWERING(binary_cross_entropy_with_logits, "binary_cross_entropy_with_logits");
TPU_LOWERING(soft_margin_loss, "soft_margin_loss");
TPU_LOWERING(soft_margin_loss_backward, "soft_margin_loss_backward");
TPU_LOWERING(nll_loss_forward, "nll_loss_forward", "nll_loss2d_forward");
TPU_LOWERING(nll_loss_backward, "nll_loss_backward", "nll_loss2d_backward");

}  // namespace torch_tpu::lower
