// _ctc_loss and _ctc_loss_backward: the CTC forward (alpha) and backward
// (beta) recursions of Graves et al., as PyTorch's CPU kernels compute them,
// each as one while loop over time. The input and target lengths are static
// (int[] in these overloads), so the positions they select are constants.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;
constexpr double kInf = std::numeric_limits<double>::infinity();

Value like(Builder& b, const Value& x, double v) { return b.full(x.shape, v); }

Value flat_gather(Builder& b, const Value& x, const Value& index) {
  hlo::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = index.rank();
  Dims dims = index.dims();
  dims.push_back(1);
  return b.gather(b.reshape(x, {x.shape.numel()}), b.reshape(index, dims), g, {1});
}

// log(exp(a - m) + exp(b - m) [+ exp(c - m)]) + m with m the maximum, or 0
// when every term is -inf (PyTorch's formula, so -inf stays -inf).
Value log_sum_exp(Builder& b, const std::vector<Value>& xs) {
  Value m = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) m = b.max(m, xs[i]);
  m = b.select(b.compare(m, like(b, m, -kInf), hlo::Comparison::EQ), like(b, m, 0), m);
  Value sum = b.exp(b.sub(xs[0], m));
  for (size_t i = 1; i < xs.size(); ++i) sum = b.add(sum, b.exp(b.sub(xs[i], m)));
  return b.add(b.log(sum), m);
}

// The transpose of flat_gather in log space: each of `size` positions gets
// the log-sum-exp of the `values` sent to it (-inf when none is), combined
// pairwise as PyTorch's CPU kernel accumulates them.
Value flat_scatter_log_add(Builder& b, const Value& values, const Value& index, int64_t size) {
  hlo::ScatterDims d;
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = index.rank();
  Dims dims = index.dims();
  dims.push_back(1);
  return b.scatter(b.full({values.type(), {size}}, -kInf), b.reshape(index, dims), values, d,
                   [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                     return {log_sum_exp(r, {v[0], v[1]})};
                   });
}

// `x` [B, S] shifted along S by `k` (towards higher s when positive), `fill`
// (a scalar) entering at the other end.
Value shift(Builder& b, const Value& x, int64_t k, const Value& fill) {
  int64_t batch = x.dim(0), s = x.dim(1), n = std::abs(k);
  if (n >= s) return b.broadcast_in_dim(fill, x.dims(), {});
  Value kept = b.slice(x, {0, k > 0 ? 0 : n}, {batch, k > 0 ? s - n : s}, {1, 1});
  return b.pad(kept, fill, {0, k > 0 ? n : 0}, {0, k > 0 ? 0 : n}, {0, 0});
}

Value shift(Builder& b, const Value& x, int64_t k) {
  return shift(b, x, k, b.constant(-kInf, x.type()));
}

// An s64 [B] constant of one value per batch.
Value per_batch(Builder& b, const IntList& values) {
  return index_constant(b, Dims(values.begin(), values.end()),
                        {static_cast<int64_t>(values.size())});
}

void check_lengths(const IntList& input_lengths, const IntList& target_lengths, int64_t time,
                   int64_t batch) {
  if (static_cast<int64_t>(input_lengths.size()) != batch ||
      static_cast<int64_t>(target_lengths.size()) != batch) {
    throw Unsupported("ctc_loss lengths of another batch size");
  }
  for (int64_t l : input_lengths) {
    if (l < 1 || l > time) throw Unsupported("ctc_loss input length outside [1, T]");
  }
}

// The extended label sequence l' = (blank, l0, blank, l1, ..., blank) of
// each batch over the S states of log_alpha, [B, S].
struct Extended {
  Value s_index;       // s
  Value ext;           // l'[s] (s64)
  Value allow_skip;    // s - 2 -> s may skip a blank: labels that differ
  Value used;          // s < 2 * target_length + 1
  Value label_states;  // 2 * target_length + 1
};

// Where each batch's k-th target sits in the flattened targets, k < max_len
// (clamped to the batch's last target).
Dims target_positions(const Value& targets, const IntList& target_lengths, int64_t max_len) {
  bool padded = targets.rank() == 2;
  Dims where;
  int64_t offset = 0;
  for (size_t b = 0; b < target_lengths.size(); ++b) {
    int64_t len = target_lengths[b];
    for (int64_t k = 0; k < max_len; ++k) {
      int64_t kk = std::min(k, std::max<int64_t>(len - 1, 0));
      where.push_back(padded ? static_cast<int64_t>(b) * targets.dim(1) + kk : offset + kk);
    }
    offset += len;
  }
  return where;
}

// `targets` [B, S'] padded or the targets of every batch concatenated (s64).
Extended extended_labels(Builder& b, const Value& targets, const IntList& target_lengths,
                         int64_t blank, int64_t states) {
  int64_t batch = static_cast<int64_t>(target_lengths.size());
  int64_t max_len = (states - 1) / 2;
  Dims extended{batch, states};
  Extended x;
  x.s_index = b.iota({kIndex, extended}, 1);
  Value is_label = b.compare(b.rem(x.s_index, like(b, x.s_index, 2)), like(b, x.s_index, 1),
                             hlo::Comparison::EQ);
  x.ext = like(b, x.s_index, static_cast<double>(blank));
  if (max_len > 0 && targets.shape.numel() > 0) {
    Dims where = target_positions(targets, target_lengths, max_len);
    Value labels = flat_gather(b, targets, index_constant(b, where, {batch, max_len}));
    // Position s reads label (s - 1) / 2.
    Value k = b.div(b.sub(x.s_index, like(b, x.s_index, 1)), like(b, x.s_index, 2));
    k = b.clamp(like(b, k, 0), k, like(b, k, static_cast<double>(max_len - 1)));
    Value rows = b.iota({kIndex, extended}, 0);
    Value label = flat_gather(b, labels, b.add(b.mul(rows, like(b, rows, double(max_len))), k));
    x.ext = b.select(is_label, label, x.ext);
  }
  Value two_back = shift(b, x.ext, 2, b.constant_int(-1, kIndex));
  x.allow_skip = b.and_(is_label, b.compare(x.ext, two_back, hlo::Comparison::NE));
  Dims label_states;
  for (int64_t len : target_lengths) label_states.push_back(2 * len + 1);
  x.label_states = b.broadcast_in_dim(index_constant(b, label_states, {batch}), extended, {0});
  x.used = b.compare(x.s_index, x.label_states, hlo::Comparison::LT);
  return x;
}

// The flat index of log_probs[t, b, ext[b, s]] for each [T, B, S]: where the
// emissions are read and where the gradient collects.
Value emission_index(Builder& b, const Value& ext, int64_t time, int64_t classes) {
  int64_t batch = ext.dim(0), states = ext.dim(1);
  Dims cube{time, batch, states};
  Value tb = b.add(b.mul(b.iota({kIndex, cube}, 0), b.full({kIndex, cube}, double(batch))),
                   b.iota({kIndex, cube}, 1));
  return b.add(b.mul(tb, b.full({kIndex, cube}, double(classes))),
               b.broadcast_in_dim(ext, cube, {1, 2}));
}

// log_alpha [B, T, S] from the emissions `em` [T, B, S].
Value ctc_alpha(Builder& b, const Value& em, const Extended& x, const IntList& input_lengths) {
  int64_t time = em.dim(0), batch = em.dim(1), states = em.dim(2);
  Dims extended{batch, states};
  Value neg_inf = b.full({em.type(), extended}, -kInf);
  Value first = b.reshape(b.slice(em, {0, 0, 0}, {1, batch, states}, {1, 1, 1}), extended);
  Value start = b.and_(x.used, b.compare(x.s_index, like(b, x.s_index, 2), hlo::Comparison::LT));
  Value row0 = b.select(start, first, neg_inf);
  Value alpha = b.full({em.type(), {batch, time, states}}, -kInf);
  Value zero = b.constant_int(0, kIndex);
  alpha = b.dynamic_update_slice(alpha, b.reshape(row0, {batch, 1, states}), {zero, zero, zero});

  auto cond = [time](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    return {r.compare(v[0], r.constant_int(time, kIndex), hlo::Comparison::LT)};
  };
  auto body = [batch, states, extended](Builder& r,
                                        const std::vector<Value>& v) -> std::vector<Value> {
    const Value &step = v[0], &prev = v[1], &alpha = v[2], &em = v[3], &skip = v[4], &used = v[5],
                &lengths = v[6];
    Value zero = r.constant_int(0, kIndex);
    Value e = r.reshape(r.dynamic_slice(em, {step, zero, zero}, {1, batch, states}), extended);
    Value ninf = r.full(prev.shape, -kInf);
    Value la3 = r.select(skip, shift(r, prev, 2), ninf);
    Value next = r.add(log_sum_exp(r, {prev, shift(r, prev, 1), la3}), e);
    Value live = r.compare(r.broadcast_in_dim(step, {batch}, {}), lengths, hlo::Comparison::LT);
    next = r.select(r.and_(used, r.broadcast_in_dim(live, extended, {0})), next, ninf);
    Value updated =
        r.dynamic_update_slice(alpha, r.reshape(next, {batch, 1, states}), {zero, step, zero});
    return {r.add(step, r.constant_int(1, kIndex)), next, updated, em, skip, used, lengths};
  };
  Value lengths = per_batch(b, input_lengths);
  return b.while_loop({b.constant_int(1, kIndex), row0, alpha, em, x.allow_skip, x.used, lengths},
                      cond, body)[2];
}

// log_beta [T, B, S] from the emissions `em` [T, B, S]: -inf wherever
// PyTorch's CPU kernel leaves it unused (s past the labels, t past the input).
Value ctc_beta(Builder& b, const Value& em, const Extended& x, const IntList& input_lengths) {
  int64_t time = em.dim(0), batch = em.dim(1), states = em.dim(2);
  Dims extended{batch, states};
  // Skipping a blank backwards (s + 2 -> s) mirrors the forward's s -> s + 2.
  Value skip = shift(b, x.allow_skip, -2, b.constant_bool(false));
  // The last step starts in the final blank or the last label.
  Value ends = b.and_(x.used, b.compare(b.add(x.s_index, like(b, x.s_index, 2)), x.label_states,
                                        hlo::Comparison::GE));
  IntList last_steps;
  for (int64_t l : input_lengths) last_steps.push_back(l - 1);

  auto cond = [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    return {r.compare(v[0], r.constant_int(0, kIndex), hlo::Comparison::GE)};
  };
  auto body = [batch, states, extended](Builder& r,
                                        const std::vector<Value>& v) -> std::vector<Value> {
    const Value &step = v[0], &prev = v[1], &beta = v[2], &em = v[3], &skip = v[4], &used = v[5],
                &ends = v[6], &last = v[7];
    Value zero = r.constant_int(0, kIndex);
    Value e = r.reshape(r.dynamic_slice(em, {step, zero, zero}, {1, batch, states}), extended);
    Value ninf = r.full(prev.shape, -kInf);
    Value lb3 = r.select(skip, shift(r, prev, -2), ninf);
    Value inner = r.add(log_sum_exp(r, {prev, shift(r, prev, -1), lb3}), e);
    auto when = [&](hlo::Comparison direction) {
      Value at = r.compare(r.broadcast_in_dim(step, {batch}, {}), last, direction);
      return r.broadcast_in_dim(at, extended, {0});
    };
    Value next = r.select(r.and_(used, when(hlo::Comparison::LT)), inner, ninf);
    next = r.select(r.and_(ends, when(hlo::Comparison::EQ)), e, next);
    Value updated =
        r.dynamic_update_slice(beta, r.reshape(next, {1, batch, states}), {step, zero, zero});
    return {r.sub(step, r.constant_int(1, kIndex)), next, updated, em, skip, used, ends, last};
  };
  Value ninf = b.full({em.type(), extended}, -kInf);
  Value beta = b.full(em.shape, -kInf);
  return b.while_loop({b.constant_int(time - 1, kIndex), ninf, beta, em, skip, x.used, ends,
                       per_batch(b, last_steps)},
                      cond, body)[2];
}

// t < input_lengths[b] over [T, B, ...].
Value within_input(Builder& b, const Value& lengths, const Dims& dims) {
  return b.compare(b.iota({kIndex, dims}, 0), b.broadcast_in_dim(lengths, dims, {1}),
                   hlo::Comparison::LT);
}

// The sum of eq. (16) in log space, [T, B, C]: log sum exp(alpha + beta)
// over the states s labelled c, from log_alpha [B, T, S] and log_beta
// [T, B, S].
Value collect(Builder& b, const Value& alpha, const Value& beta, const Extended& x,
              const Value& index, const Value& lengths, const Dims& dims) {
  // Only where beta is defined: PyTorch's forward leaves the rest of
  // log_alpha unwritten, so it may hold anything.
  Value live = b.and_(b.broadcast_in_dim(x.used, beta.dims(), {1, 2}),
                      within_input(b, lengths, beta.dims()));
  Value ab = b.select(live, b.add(b.transpose(alpha, {1, 0, 2}), beta), like(b, beta, -kInf));
  int64_t size = dims[0] * dims[1] * dims[2];
  return b.reshape(flat_scatter_log_add(b, ab, index, size), dims);
}

// -log p: the last two states at each batch's last step (one if no labels).
Value neg_log_likelihood(Builder& b, const Value& alpha, const IntList& input_lengths,
                         const IntList& target_lengths) {
  std::vector<Value> nll;
  for (size_t i = 0; i < input_lengths.size(); ++i) {
    int64_t bi = static_cast<int64_t>(i), last = input_lengths[i] - 1, len = target_lengths[i];
    auto at = [&](int64_t s) {
      return b.reshape(b.slice(alpha, {bi, last, s}, {bi + 1, last + 1, s + 1}, {1, 1, 1}), {1});
    };
    Value ll = len == 0 ? at(0) : log_sum_exp(b, {at(2 * len), at(2 * len - 1)});
    nll.push_back(b.neg(ll));
  }
  return b.concatenate(nll, 0);
}

// _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
//     zero_infinity) -> (neg_log_likelihood, log_alpha). log_probs is
//     [T, B, C]; targets [B, S] padded or the targets of every batch
//     concatenated. zero_infinity applies after (in ctc_loss).
std::vector<Value> ctc_loss(Context& c, const Args& a) {
  const Shape &nll_shape = c.output(0), &alpha_shape = c.output(1);
  Value lp = a.tensor(0);
  if (lp.rank() != 3) throw Unsupported("ctc_loss of unbatched log_probs");
  IntList input_lengths = a.ints(2), target_lengths = a.ints(3);
  int64_t time = lp.dim(0), batch = lp.dim(1), classes = lp.dim(2);
  if (batch == 0) return {c.b.full(nll_shape, 0), c.b.full(alpha_shape, 0)};
  check_lengths(input_lengths, target_lengths, time, batch);
  lp = convert(c.b, lp, alpha_shape.type);
  Extended x = extended_labels(c.b, convert(c.b, a.tensor(1), kIndex), target_lengths, a.integer(4),
                               alpha_shape.dims[2]);
  Value em = flat_gather(c.b, lp, emission_index(c.b, x.ext, time, classes));
  Value alpha = ctc_alpha(c.b, em, x, input_lengths);
  Value nll = neg_log_likelihood(c.b, alpha, input_lengths, target_lengths);
  return {c.b.reshape(nll, nll_shape.dims), alpha};
}

// _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
//     neg_log_likelihood, log_alpha, blank, zero_infinity) -> the gradient
//     of log_probs [T, B, C]: Graves et al.'s eq. (16) from alpha and beta,
//     zero past each input length and, with zero_infinity, for infinite
//     losses.
std::vector<Value> ctc_loss_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  Value lp = a.tensor(1);
  if (lp.rank() != 3) throw Unsupported("ctc_loss_backward of unbatched log_probs");
  IntList input_lengths = a.ints(3), target_lengths = a.ints(4);
  int64_t time = lp.dim(0), batch = lp.dim(1), classes = lp.dim(2);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  check_lengths(input_lengths, target_lengths, time, batch);
  ElementType t = out.type;
  lp = convert(c.b, lp, t);
  Value alpha = convert(c.b, a.tensor(6), t);
  Extended x = extended_labels(c.b, convert(c.b, a.tensor(2), kIndex), target_lengths, a.integer(7),
                               alpha.dim(2));
  Value index = emission_index(c.b, x.ext, time, classes);
  Value beta = ctc_beta(c.b, flat_gather(c.b, lp, index), x, input_lengths);
  Value lengths = per_batch(c.b, input_lengths);
  Value collected = collect(c.b, alpha, beta, x, index, lengths, out.dims);

  Value nll = c.b.broadcast_in_dim(convert(c.b, a.tensor(5), t), out.dims, {1});
  Value grad_out = c.b.broadcast_in_dim(convert(c.b, a.tensor(0), t), out.dims, {1});
  Value grad =
      c.b.mul(c.b.sub(c.b.exp(lp), c.b.exp(c.b.sub(c.b.add(collected, nll), lp))), grad_out);
  Value zeros = c.b.full(out, 0);
  grad = c.b.select(within_input(c.b, lengths, out.dims), grad, zeros);
  if (a.boolean(8)) {
    grad = c.b.select(c.b.compare(nll, like(c.b, nll, kInf), hlo::Comparison::EQ), zeros, grad);
  }
  return {grad};
}

}  // namespace

TPU_LOWERING(ctc_loss, "_ctc_loss");
TPU_LOWERING(ctc_loss_backward, "_ctc_loss_backward");

}  // namespace torch_tpu::lower
