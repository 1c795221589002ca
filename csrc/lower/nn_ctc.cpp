// _ctc_loss: the CTC forward (alpha) recursion of Graves et al., as
// PyTorch's CPU kernel computes it, as one while loop over time. The input
// and target lengths are static (int[] in this overload), so the positions
// they select are constants. Its backward (_ctc_loss_backward) has no meta
// kernel in PyTorch and runs on the CPU, reading the log_alpha given here.
#include <algorithm>
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

// `x` [B, S] shifted right by `k` along S, -inf filling.
Value shift(Builder& b, const Value& x, int64_t k) {
  int64_t batch = x.dim(0), s = x.dim(1);
  if (k >= s) return like(b, x, -kInf);
  Value fill = b.constant(-kInf, x.type());
  return b.pad(b.slice(x, {0, 0}, {batch, s - k}, {1, 1}), fill, {0, k}, {0, 0}, {0, 0});
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
  int64_t blank = a.integer(4);
  int64_t time = lp.dim(0), batch = lp.dim(1), classes = lp.dim(2);
  int64_t states = alpha_shape.dims[2];  // 2 * max target length + 1
  if (batch == 0) return {c.b.full(nll_shape, 0), c.b.full(alpha_shape, 0)};
  for (int64_t l : input_lengths) {
    if (l < 1 || l > time) throw Unsupported("ctc_loss input length outside [1, T]");
  }
  ElementType t = alpha_shape.type;
  lp = convert(c.b, lp, t);
  Value targets = convert(c.b, a.tensor(1), kIndex);

  // Where each batch's k-th target sits in the flattened targets.
  bool padded = targets.rank() == 2;
  int64_t max_len = (states - 1) / 2;
  Dims where, label_len;
  int64_t offset = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = target_lengths[b];
    for (int64_t k = 0; k < std::max<int64_t>(max_len, 1); ++k) {
      int64_t kk = std::min(k, std::max<int64_t>(len - 1, 0));
      where.push_back(padded ? b * targets.dim(1) + kk : offset + kk);
    }
    offset += len;
    label_len.push_back(len);
  }
  Dims extended{batch, states};
  Value s_index = c.b.iota({kIndex, extended}, 1);
  Value is_label = c.b.compare(c.b.rem(s_index, like(c.b, s_index, 2)), like(c.b, s_index, 1),
                               hlo::Comparison::EQ);
  Value ext = like(c.b, s_index, static_cast<double>(blank));
  if (max_len > 0 && targets.shape.numel() > 0) {
    Value labels = flat_gather(c.b, targets, index_constant(c.b, where, {batch, max_len}));
    // Position s reads label (s - 1) / 2.
    Value k = c.b.div(c.b.sub(s_index, like(c.b, s_index, 1)), like(c.b, s_index, 2));
    k = c.b.clamp(like(c.b, k, 0), k, like(c.b, k, static_cast<double>(max_len - 1)));
    Value rows = c.b.iota({kIndex, extended}, 0);
    Value label =
        flat_gather(c.b, labels, c.b.add(c.b.mul(rows, like(c.b, rows, double(max_len))), k));
    ext = c.b.select(is_label, label, ext);
  }
  // Skipping a blank (s - 2 -> s) is allowed between different labels.
  Value two_back = like(c.b, ext, -1);
  if (states > 2) {
    two_back = c.b.pad(c.b.slice(ext, {0, 0}, {batch, states - 2}, {1, 1}),
                       c.b.constant_int(-1, kIndex), {0, 2}, {0, 0}, {0, 0});
  }
  Value allow_skip = c.b.and_(is_label, c.b.compare(ext, two_back, hlo::Comparison::NE));

  // Emissions [T, B, S]: log_probs[t, b, ext[b, s]].
  Dims cube{time, batch, states};
  Value tb = c.b.add(c.b.mul(c.b.iota({kIndex, cube}, 0), c.b.full({kIndex, cube}, double(batch))),
                     c.b.iota({kIndex, cube}, 1));
  Value em_index = c.b.add(c.b.mul(tb, c.b.full({kIndex, cube}, double(classes))),
                           c.b.broadcast_in_dim(ext, cube, {1, 2}));
  Value em = flat_gather(c.b, lp, em_index);

  Dims label_states;
  for (int64_t len : label_len) label_states.push_back(2 * len + 1);
  Value used = c.b.compare(
      s_index, c.b.broadcast_in_dim(index_constant(c.b, label_states, {batch}), extended, {0}),
      hlo::Comparison::LT);
  Value lengths = index_constant(c.b, Dims(input_lengths.begin(), input_lengths.end()), {batch});

  Value neg_inf = c.b.full({t, extended}, -kInf);
  Value first = c.b.reshape(c.b.slice(em, {0, 0, 0}, {1, batch, states}, {1, 1, 1}), extended);
  Value start = c.b.and_(used, c.b.compare(s_index, like(c.b, s_index, 2), hlo::Comparison::LT));
  Value row0 = c.b.select(start, first, neg_inf);
  Value alpha = c.b.full({t, {batch, time, states}}, -kInf);
  Value zero = c.b.constant_int(0, kIndex);
  alpha =
      c.b.dynamic_update_slice(alpha, c.b.reshape(row0, {batch, 1, states}), {zero, zero, zero});

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
  auto out = c.b.while_loop(
      {c.b.constant_int(1, kIndex), row0, alpha, em, allow_skip, used, lengths}, cond, body);
  alpha = out[2];

  // -log p: the last two states at each batch's last step (one if no labels).
  std::vector<Value> nll;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t last = input_lengths[b] - 1, len = label_len[b];
    auto at = [&](int64_t s) {
      return c.b.reshape(c.b.slice(alpha, {b, last, s}, {b + 1, last + 1, s + 1}, {1, 1, 1}), {1});
    };
    Value ll = len == 0 ? at(0) : log_sum_exp(c.b, {at(2 * len), at(2 * len - 1)});
    nll.push_back(c.b.neg(ll));
  }
  return {c.b.reshape(c.b.concatenate(nll, 0), nll_shape.dims), alpha};
}

}  // namespace

TPU_LOWERING(ctc_loss, "_ctc_loss");

}  // namespace torch_tpu::lower
