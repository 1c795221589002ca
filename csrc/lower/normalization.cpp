// Layer, batch and group normalisation, forward and backward. Statistics and
// arithmetic run in float32 for float16/bfloat16 (like PyTorch's CPU
// kernels); normalisation uses the biased variance, and batch norm's running
// variance update the unbiased one. Running statistics are mutated
// arguments: a rule returns their new values after its schema results.
// Backward rules return all three gradients; those output_mask leaves out
// are dropped by the engine (and by XLA).
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

Dims range(int64_t begin, int64_t end) {
  Dims d;
  for (int64_t i = begin; i < end; ++i) d.push_back(i);
  return d;
}

int64_t count(const Dims& dims, const Dims& which) {
  int64_t n = 1;
  for (int64_t d : which) n *= dims[d];
  return n;
}

Value splat(Builder& b, const Value& like, double v) { return b.full(like.shape, v); }

// Sum over `dims`, kept as size-1 dims and broadcast back to x's shape.
Value sum_keep(Builder& b, const Value& x, const Dims& dims) {
  Value s = reduce_sum(b, x, dims);
  return b.reshape(s, reduced_shape(x.dims(), dims, true));
}

Value mean_keep(Builder& b, const Value& x, const Dims& dims) {
  Value s = sum_keep(b, x, dims);
  return b.div(s, b.reshape(reduced_count(b, x, dims, s.type()), s.dims()));
}

Value expand(Builder& b, const Value& x, const Dims& dims) { return broadcast_to(b, x, dims); }

// 1 / sqrt(var + eps), as PyTorch writes it (not rsqrt, which rounds differently).
Value inverse_std(Builder& b, const Value& var, double eps) {
  return b.div(splat(b, var, 1), b.sqrt(b.add(var, splat(b, var, eps))));
}

// A per-channel vector [C] spread along dimension 1 of `dims`.
Value per_channel(Builder& b, const Value& v, const Dims& dims) {
  return b.broadcast_in_dim(v, dims, {1});
}

std::optional<Value> optional_as(Builder& b, const Args& a, size_t i, ElementType t) {
  if (a.is_none(i)) return std::nullopt;
  return convert(b, a.tensor(i), t);
}

// ---------------------------------------------------------------- layer norm

// native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)
std::vector<Value> native_layer_norm(Context& c, const Args& a) {
  ElementType acc = accumulation_type(c.output(0).type);
  Value x = convert(c.b, a.tensor(0), acc);
  int64_t axis = x.rank() - static_cast<int64_t>(a.ints(1).size());
  Dims normalized = range(axis, x.rank());
  Value mean = mean_keep(c.b, x, normalized);
  Value centered = c.b.sub(x, expand(c.b, mean, x.dims()));
  Value rstd = inverse_std(c.b, mean_keep(c.b, c.b.mul(centered, centered), normalized), a.real(4));
  Value y = c.b.mul(centered, expand(c.b, rstd, x.dims()));
  if (auto w = optional_as(c.b, a, 2, acc)) y = c.b.mul(y, expand(c.b, *w, x.dims()));
  if (auto bias = optional_as(c.b, a, 3, acc)) y = c.b.add(y, expand(c.b, *bias, x.dims()));
  return {y, c.b.reshape(mean, c.output(1).dims), c.b.reshape(rstd, c.output(2).dims)};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
//     weight, bias, output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> native_layer_norm_backward(Context& c, const Args& a) {
  ElementType acc = accumulation_type(c.output(0).type);
  Value dy = convert(c.b, a.tensor(0), acc);
  Value x = convert(c.b, a.tensor(1), acc);
  const Dims& dims = x.dims();
  int64_t axis = x.rank() - static_cast<int64_t>(a.ints(2).size());
  Dims normalized = range(axis, x.rank()), outer = range(0, axis);
  Dims stat_dims = reduced_shape(dims, normalized, true);
  Value mean = expand(c.b, c.b.reshape(convert(c.b, a.tensor(3), acc), stat_dims), dims);
  Value rstd = expand(c.b, c.b.reshape(convert(c.b, a.tensor(4), acc), stat_dims), dims);
  Value xhat = c.b.mul(c.b.sub(x, mean), rstd);
  auto weight = optional_as(c.b, a, 5, acc);
  Value dxhat = weight ? c.b.mul(dy, expand(c.b, *weight, dims)) : dy;
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
  Value mean_dxhat = expand(c.b, mean_keep(c.b, dxhat, normalized), dims);
  Value mean_proj = expand(c.b, mean_keep(c.b, c.b.mul(dxhat, xhat), normalized), dims);
  Value dx = c.b.mul(rstd, c.b.sub(c.b.sub(dxhat, mean_dxhat), c.b.mul(xhat, mean_proj)));
  return {dx, reduce_sum(c.b, c.b.mul(dy, xhat), outer), reduce_sum(c.b, dy, outer)};
}

// ---------------------------------------------------------------- batch norm

struct BatchNorm {
  Value out;                                       // normalised input, acc type
  Value mean, invstd;                              // [C]: the statistics used
  std::optional<Value> running_mean, running_var;  // updated (training) or as given
};

// Batch normalisation over every dimension but 1 (channels). Training uses
// the batch statistics and moves the running ones by `momentum`; otherwise
// the running statistics normalise.
BatchNorm batch_norm(Builder& b, const Value& input, std::optional<Value> weight,
                     std::optional<Value> bias, std::optional<Value> running_mean,
                     std::optional<Value> running_var, bool training, double momentum, double eps,
                     ElementType acc) {
  Value x = convert(b, input, acc);
  const Dims& dims = x.dims();
  Dims reduced{0};
  for (int64_t i = 2; i < x.rank(); ++i) reduced.push_back(i);
  BatchNorm r;
  if (training) {
    double n = static_cast<double>(count(dims, reduced));
    Value mean = b.div(reduce_sum(b, x, reduced), b.full({acc, {x.dim(1)}}, n));
    Value centered = b.sub(x, per_channel(b, mean, dims));
    Value var_sum = reduce_sum(b, b.mul(centered, centered), reduced);
    r.mean = mean;
    r.invstd = inverse_std(b, b.div(var_sum, splat(b, var_sum, n)), eps);
    auto moved = [&](const std::optional<Value>& running, const Value& batch) {
      if (!running) return running;
      Value old = convert(b, *running, acc);
      return std::optional<Value>(
          b.add(b.mul(splat(b, batch, momentum), batch), b.mul(splat(b, old, 1 - momentum), old)));
    };
    r.running_mean = moved(running_mean, mean);
    r.running_var = moved(running_var, b.div(var_sum, splat(b, var_sum, n - 1)));
  } else {
    r.mean = convert(b, *running_mean, acc);
    r.invstd = inverse_std(b, convert(b, *running_var, acc), eps);
    r.running_mean = running_mean;
    r.running_var = running_var;
  }
  Value y = b.mul(b.sub(x, per_channel(b, r.mean, dims)), per_channel(b, r.invstd, dims));
  if (weight) y = b.mul(y, per_channel(b, convert(b, *weight, acc), dims));
  if (bias) y = b.add(y, per_channel(b, convert(b, *bias, acc), dims));
  r.out = y;
  return r;
}

// A saved statistic. In eval mode PyTorch's meta kernels (like CUDA) report
// the running mean and 1/std there, which this returns; an empty expected
// result (the CPU kernels' convention) gets an empty value.
Value saved(Context& c, size_t i, const Value& v) {
  return c.output(i).numel() == 0 ? c.b.full(c.output(i), 0) : v;
}

// (input, weight, bias, running_mean, running_var) at their usual places 0..4.
BatchNorm batch_norm_args(Context& c, const Args& a, bool with_running, bool training,
                          double momentum, double eps) {
  Value x = a.tensor(0);
  std::optional<Value> rm, rv;
  if (with_running) {
    rm = a.optional_tensor(3);
    rv = a.optional_tensor(4);
  }
  return batch_norm(c.b, x, a.optional_tensor(1), a.optional_tensor(2), rm, rv, training, momentum,
                    eps, accumulation_type(x.type()));
}

// Results (out, save_mean, save_invstd[, reserve]) followed by the running
// statistics the call writes or returns, as many as c.num_outputs() expects.
// A missing statistic has no target when PyTorch passed None, and a
// discarded one (any value) when it passed an undefined tensor.
std::vector<Value> batch_norm_results(Context& c, const BatchNorm& r, size_t leading) {
  std::vector<Value> out{r.out, saved(c, 1, r.mean), saved(c, 2, r.invstd)};
  if (leading == 4) out.push_back(c.b.full(c.output(3), 0));  // reserve: empty
  std::vector<std::optional<Value>> running{r.running_mean, r.running_var};
  bool every_one = c.num_outputs() == out.size() + running.size();
  for (const auto& stat : running) {
    if (every_one) {
      out.push_back(stat ? *stat : c.b.full(c.output(out.size()), 0));
    } else if (stat && out.size() < c.num_outputs()) {
      out.push_back(*stat);
    }
  }
  return out;
}

// native_batch_norm(input, weight, bias, running_mean, running_var, training,
//     momentum, eps) and _native_batch_norm_legit (same arguments, running
//     statistics marked as written) and _native_batch_norm_legit_functional
//     (which returns them).
std::vector<Value> native_batch_norm(Context& c, const Args& a) {
  bool training = a.boolean(5);
  if (!training && (a.is_none(3) || a.is_none(4))) {
    throw Unsupported("batch norm in eval mode without running statistics");
  }
  return batch_norm_results(c, batch_norm_args(c, a, true, training, a.real(6), a.real(7)), 3);
}

// _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
std::vector<Value> batch_norm_no_stats(Context& c, const Args& a) {
  return batch_norm_results(c, batch_norm_args(c, a, false, true, a.real(4), a.real(5)), 3);
}

// _native_batch_norm_legit_no_training(input, weight, bias, running_mean,
//     running_var, momentum, eps)
std::vector<Value> batch_norm_no_training(Context& c, const Args& a) {
  return batch_norm_results(c, batch_norm_args(c, a, true, false, a.real(5), a.real(6)), 3);
}

// _batch_norm_with_update(input, weight, bias, running_mean!, running_var!,
//     momentum, eps) -> (out, save_mean, save_invstd, reserve), and its
//     _functional form returning the new running statistics.
std::vector<Value> batch_norm_with_update(Context& c, const Args& a) {
  return batch_norm_results(c, batch_norm_args(c, a, true, true, a.real(5), a.real(6)), 4);
}

// _batch_norm_no_update(input, weight, bias, running_mean?, running_var?,
//     momentum, eps): batch statistics when running ones are missing.
std::vector<Value> batch_norm_no_update(Context& c, const Args& a) {
  bool training = a.is_none(3) || a.is_none(4);
  return batch_norm_results(c, batch_norm_args(c, a, !training, training, a.real(5), a.real(6)), 4);
}

// native_batch_norm_backward(grad_out, input, weight, running_mean,
//     running_var, save_mean, save_invstd, train, eps, output_mask), also
//     batch_norm_backward (same order, `update` for train, then reserve).
std::vector<Value> native_batch_norm_backward(Context& c, const Args& a) {
  ElementType acc = accumulation_type(a.tensor(1).type());
  Value dy = convert(c.b, a.tensor(0), acc);
  Value x = convert(c.b, a.tensor(1), acc);
  const Dims& dims = x.dims();
  bool train = a.boolean(7);
  double eps = a.real(8);
  Value mean, invstd;
  if (train) {
    mean = convert(c.b, a.tensor(5), acc);
    invstd = convert(c.b, a.tensor(6), acc);
  } else {
    mean = convert(c.b, a.tensor(3), acc);
    invstd = inverse_std(c.b, convert(c.b, a.tensor(4), acc), eps);
  }
  Dims reduced{0};
  for (int64_t i = 2; i < x.rank(); ++i) reduced.push_back(i);
  double n = static_cast<double>(count(dims, reduced));
  Value centered = c.b.sub(x, per_channel(c.b, mean, dims));
  Value sum_dy = reduce_sum(c.b, dy, reduced);
  Value dotp = reduce_sum(c.b, c.b.mul(centered, dy), reduced);
  Value scale = invstd;  // invstd * weight
  if (auto w = optional_as(c.b, a, 2, acc)) scale = c.b.mul(invstd, *w);
  Value dx;
  if (train) {
    // (dy - mean(dy) - centered * dotp * invstd^2 / n) * invstd * weight
    Value k = c.b.div(c.b.mul(c.b.mul(dotp, invstd), invstd), splat(c.b, dotp, n));
    Value mean_dy = c.b.div(sum_dy, splat(c.b, sum_dy, n));
    Value inner = c.b.sub(c.b.sub(dy, c.b.mul(centered, per_channel(c.b, k, dims))),
                          per_channel(c.b, mean_dy, dims));
    dx = c.b.mul(inner, per_channel(c.b, scale, dims));
  } else {
    dx = c.b.mul(dy, per_channel(c.b, scale, dims));
  }
  return {dx, c.b.mul(dotp, invstd), sum_dy};
}

// ---------------------------------------------------------------- group norm

// native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd)
std::vector<Value> native_group_norm(Context& c, const Args& a) {
  ElementType acc = accumulation_type(c.output(0).type);
  Value input = a.tensor(0);
  int64_t n = a.integer(3), channels = a.integer(4), hw = a.integer(5), groups = a.integer(6);
  Value x = c.b.reshape(convert(c.b, input, acc), {n, groups, channels / groups * hw});
  Value mean = mean_keep(c.b, x, {2});
  Value centered = c.b.sub(x, expand(c.b, mean, x.dims()));
  Value rstd = inverse_std(c.b, mean_keep(c.b, c.b.mul(centered, centered), {2}), a.real(7));
  Dims spread{n, channels, hw};
  Value y = c.b.reshape(c.b.mul(centered, expand(c.b, rstd, x.dims())), spread);
  if (auto w = optional_as(c.b, a, 1, acc)) y = c.b.mul(y, per_channel(c.b, *w, spread));
  if (auto bias = optional_as(c.b, a, 2, acc)) y = c.b.add(y, per_channel(c.b, *bias, spread));
  return {c.b.reshape(y, input.dims()), c.b.reshape(mean, {n, groups}),
          c.b.reshape(rstd, {n, groups})};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW,
//     group, output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> native_group_norm_backward(Context& c, const Args& a) {
  ElementType acc = accumulation_type(c.output(0).type);
  int64_t n = a.integer(5), channels = a.integer(6), hw = a.integer(7), groups = a.integer(8);
  Dims grouped{n, groups, channels / groups, hw};
  Value dy = c.b.reshape(convert(c.b, a.tensor(0), acc), grouped);
  Value x = c.b.reshape(convert(c.b, a.tensor(1), acc), grouped);
  Dims stat{n, groups, 1, 1};
  Value mean = expand(c.b, c.b.reshape(convert(c.b, a.tensor(2), acc), stat), grouped);
  Value rstd = expand(c.b, c.b.reshape(convert(c.b, a.tensor(3), acc), stat), grouped);
  Value xhat = c.b.mul(c.b.sub(x, mean), rstd);
  Value dxhat = dy;
  if (auto w = optional_as(c.b, a, 4, acc)) {
    dxhat = c.b.mul(
        dy, c.b.broadcast_in_dim(c.b.reshape(*w, {groups, channels / groups}), grouped, {1, 2}));
  }
  Dims within{2, 3};
  Value mean_dxhat = expand(c.b, mean_keep(c.b, dxhat, within), grouped);
  Value mean_proj = expand(c.b, mean_keep(c.b, c.b.mul(dxhat, xhat), within), grouped);
  Value dx = c.b.mul(rstd, c.b.sub(c.b.sub(dxhat, mean_dxhat), c.b.mul(xhat, mean_proj)));
  auto per_channel_sum = [&](const Value& v) {
    return c.b.reshape(reduce_sum(c.b, v, {0, 3}), {channels});
  };
  return {c.b.reshape(dx, a.tensor(1).dims()), per_channel_sum(c.b.mul(dy, xhat)),
          per_channel_sum(dy)};
}

}  // namespace

TPU_LOWERING(native_layer_norm, "native_layer_norm");
TPU_LOWERING(native_layer_norm_backward, "native_layer_norm_backward");
TPU_LOWERING(native_batch_norm, "native_batch_norm", "_native_batch_norm_legit",
             "_native_batch_norm_legit_functional");
TPU_LOWERING(batch_norm_no_stats, "_native_batch_norm_legit.no_stats");
TPU_LOWERING(batch_norm_no_training, "_native_batch_norm_legit_no_training");
TPU_LOWERING(batch_norm_with_update, "_batch_norm_with_update",
             "_batch_norm_with_update_functional");
TPU_LOWERING(batch_norm_no_update, "_batch_norm_no_update");
TPU_LOWERING(native_batch_norm_backward, "native_batch_norm_backward", "batch_norm_backward");
TPU_LOWERING(native_group_norm, "native_group_norm");
TPU_LOWERING(native_group_norm_backward, "native_group_norm_backward");

}  // namespace torch_tpu::lower
