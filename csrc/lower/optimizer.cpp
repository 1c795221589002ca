// Fused optimizer steps and AMP gradient scaling: the kernels torch.optim
// (fused=True) and torch.amp.GradScaler call. Each updates every tensor of its
// lists in one program. Arithmetic is in float32 for float16/bfloat16 tensors,
// as in PyTorch's CPU kernels.
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;

// A one-element tensor or runtime scalar `x`, converted to `type` and
// broadcast to `dims`.
Value splat(Builder& b, const Value& x, ElementType type, const Dims& dims) {
  return b.broadcast_in_dim(convert(b, b.reshape(x, {}), type), dims, {});
}

Value constant_like(Builder& b, double x, const Value& like) { return b.full(like.shape, x); }

// `updated` where no inf/nan was found (found_inf == 0), else `old`.
Value unless_found_inf(Builder& b, const std::optional<Value>& found_inf, const Value& updated,
                       const Value& old) {
  if (!found_inf) return updated;
  Value skip = b.compare(b.reshape(convert(b, *found_inf, ElementType::F32), {}),
                         b.constant(1.0, ElementType::F32), Comparison::EQ);
  return b.select(b.broadcast_in_dim(skip, old.dims(), {}), old, updated);
}

// The gradient the update uses: unscaled by grad_scale (that value is also
// written back to grads, like PyTorch's fused kernels) and negated to maximize.
std::pair<Value, Value> gradient(Builder& b, const Value& grad, ElementType t,
                                 const std::optional<Value>& grad_scale, bool maximize) {
  Value g = convert(b, grad, t);
  if (grad_scale) g = b.div(g, splat(b, *grad_scale, t, g.dims()));
  Value stored = convert(b, g, grad.type());
  return {maximize ? b.neg(g) : g, stored};
}

// _fused_adam / _fused_adamw (self, grads, exp_avgs, exp_avg_sqs,
// max_exp_avg_sqs, state_steps, *, lr, beta1, beta2, weight_decay, eps,
// amsgrad, maximize, grad_scale, found_inf) -> (self, grads, exp_avgs,
// exp_avg_sqs, max_exp_avg_sqs); the state steps were already incremented.
template <bool Decoupled>
std::vector<Value> fused_adam(Context& c, const Args& a) {
  Builder& b = c.b;
  std::vector<Value> params = a.tensors(0), grads = a.tensors(1), exp_avgs = a.tensors(2),
                     exp_avg_sqs = a.tensors(3), max_sqs = a.tensors(4), steps = a.tensors(5);
  const double beta1 = a.real(7), beta2 = a.real(8), weight_decay = a.real(9), eps = a.real(10);
  const bool amsgrad = a.boolean(11), maximize = a.boolean(12);
  std::optional<Value> grad_scale = a.optional_tensor(13), found_inf = a.optional_tensor(14);
  std::vector<Value> new_params, new_grads, new_avgs, new_sqs, new_max;
  for (size_t i = 0; i < params.size(); ++i) {
    const Value& p0 = params[i];
    ElementType t = accumulation_type(p0.type());
    Value p = convert(b, p0, t);
    auto [g, stored] = gradient(b, grads[i], t, grad_scale, maximize);
    Value lr = splat(b, a.tensor(6), t, p.dims());
    if (weight_decay != 0) {
      Value wd = constant_like(b, weight_decay, p);
      if (Decoupled) {
        p = b.sub(p, b.mul(b.mul(lr, wd), p));
      } else {
        g = b.add(g, b.mul(p, wd));
      }
    }
    Value step = splat(b, steps[i], t, p.dims());
    Value one = constant_like(b, 1.0, p);
    Value bias1 = b.sub(one, b.pow(constant_like(b, beta1, p), step));
    Value bias2_sqrt = b.sqrt(b.sub(one, b.pow(constant_like(b, beta2, p), step)));
    Value avg = b.add(b.mul(convert(b, exp_avgs[i], t), constant_like(b, beta1, p)),
                      b.mul(g, constant_like(b, 1 - beta1, p)));
    Value sq = b.add(b.mul(convert(b, exp_avg_sqs[i], t), constant_like(b, beta2, p)),
                     b.mul(b.mul(g, g), constant_like(b, 1 - beta2, p)));
    Value second = sq;
    if (amsgrad) {
      second = b.max(convert(b, max_sqs[i], t), sq);
      new_max.push_back(
          unless_found_inf(b, found_inf, convert(b, second, max_sqs[i].type()), max_sqs[i]));
    }
    Value denom = b.add(b.div(b.sqrt(second), bias2_sqrt), constant_like(b, eps, p));
    p = b.sub(p, b.div(b.mul(b.div(lr, bias1), avg), denom));
    new_params.push_back(unless_found_inf(b, found_inf, convert(b, p, p0.type()), p0));
    new_grads.push_back(unless_found_inf(b, found_inf, stored, grads[i]));
    new_avgs.push_back(
        unless_found_inf(b, found_inf, convert(b, avg, exp_avgs[i].type()), exp_avgs[i]));
    new_sqs.push_back(
        unless_found_inf(b, found_inf, convert(b, sq, exp_avg_sqs[i].type()), exp_avg_sqs[i]));
  }
  if (!amsgrad) new_max = max_sqs;
  std::vector<Value> out = new_params;
  for (const auto* list : {&new_grads, &new_avgs, &new_sqs, &new_max}) {
    out.insert(out.end(), list->begin(), list->end());
  }
  return out;
}

// _fused_sgd(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr,
// dampening, nesterov, maximize, is_first_step, grad_scale, found_inf)
//   -> (self, grads, momentum_buffer_list)
std::vector<Value> fused_sgd(Context& c, const Args& a) {
  Builder& b = c.b;
  std::vector<Value> params = a.tensors(0), grads = a.tensors(1), bufs = a.tensors(2);
  const double weight_decay = a.real(3), momentum = a.real(4), dampening = a.real(6);
  const bool nesterov = a.boolean(7), maximize = a.boolean(8), first_step = a.boolean(9);
  std::optional<Value> grad_scale = a.optional_tensor(10), found_inf = a.optional_tensor(11);
  std::vector<Value> new_params, new_grads, new_bufs;
  for (size_t i = 0; i < params.size(); ++i) {
    const Value& p0 = params[i];
    ElementType t = accumulation_type(p0.type());
    Value p = convert(b, p0, t);
    auto [g, stored] = gradient(b, grads[i], t, grad_scale, maximize);
    Value lr = splat(b, a.tensor(5), t, p.dims());
    if (weight_decay != 0) g = b.add(g, b.mul(p, constant_like(b, weight_decay, p)));
    if (momentum != 0) {
      Value buf = first_step ? g
                             : b.add(b.mul(convert(b, bufs[i], t), constant_like(b, momentum, p)),
                                     b.mul(g, constant_like(b, 1 - dampening, p)));
      new_bufs.push_back(unless_found_inf(b, found_inf, convert(b, buf, bufs[i].type()), bufs[i]));
      g = nesterov ? b.add(g, b.mul(buf, constant_like(b, momentum, p))) : buf;
    }
    p = b.sub(p, b.mul(lr, g));
    new_params.push_back(unless_found_inf(b, found_inf, convert(b, p, p0.type()), p0));
    new_grads.push_back(unless_found_inf(b, found_inf, stored, grads[i]));
  }
  if (momentum == 0) new_bufs = bufs;
  std::vector<Value> out = new_params;
  out.insert(out.end(), new_grads.begin(), new_grads.end());
  out.insert(out.end(), new_bufs.begin(), new_bufs.end());
  return out;
}

// _fused_adagrad(self, grads, state_sums, state_steps, *, lr, lr_decay,
// weight_decay, eps, maximize, grad_scale, found_inf) -> (self, grads,
// state_sums[, state_steps]); the state steps were already incremented. As
// PyTorch's CPU kernel: clr = lr / (1 + (step - 1) * lr_decay), the gradient
// (unscaled, negated to maximize, plus weight decay) squared into the sum, and
// param -= clr * grad / (sqrt(sum) + eps). The float-lr overload also returns
// the (unchanged) steps, which its schema marks as written.
std::vector<Value> fused_adagrad(Context& c, const Args& a) {
  Builder& b = c.b;
  std::vector<Value> params = a.tensors(0), grads = a.tensors(1), sums = a.tensors(2),
                     steps = a.tensors(3);
  const double lr_decay = a.real(5), weight_decay = a.real(6), eps = a.real(7);
  const bool maximize = a.boolean(8);
  std::optional<Value> grad_scale = a.optional_tensor(9), found_inf = a.optional_tensor(10);
  std::vector<Value> new_params, new_grads, new_sums;
  for (size_t i = 0; i < params.size(); ++i) {
    const Value& p0 = params[i];
    ElementType t = accumulation_type(p0.type());
    Value p = convert(b, p0, t);
    auto [g, stored] = gradient(b, grads[i], t, grad_scale, maximize);
    if (weight_decay != 0) g = b.add(g, b.mul(p, constant_like(b, weight_decay, p)));
    Value lr = splat(b, a.tensor(4), t, p.dims());
    Value step = splat(b, steps[i], t, p.dims());
    Value one = constant_like(b, 1.0, p);
    Value clr = lr;
    if (lr_decay != 0) {
      clr = b.div(lr, b.add(one, b.mul(b.sub(step, one), constant_like(b, lr_decay, p))));
    }
    Value sum = b.add(convert(b, sums[i], t), b.mul(g, g));
    Value denom = b.add(b.sqrt(sum), constant_like(b, eps, p));
    p = b.sub(p, b.div(b.mul(clr, g), denom));
    new_params.push_back(unless_found_inf(b, found_inf, convert(b, p, p0.type()), p0));
    new_grads.push_back(unless_found_inf(b, found_inf, stored, grads[i]));
    new_sums.push_back(unless_found_inf(b, found_inf, convert(b, sum, sums[i].type()), sums[i]));
  }
  std::vector<Value> out = new_params;
  out.insert(out.end(), new_grads.begin(), new_grads.end());
  out.insert(out.end(), new_sums.begin(), new_sums.end());
  if (c.num_outputs() > out.size()) out.insert(out.end(), steps.begin(), steps.end());
  return out;
}

// _amp_foreach_non_finite_check_and_unscale(self, found_inf, inv_scale)
//   -> (self_out, found_inf_out): every tensor multiplied by inv_scale;
// found_inf set to 1 if any holds an inf or nan.
std::vector<Value> amp_unscale(Context& c, const Args& a) {
  Builder& b = c.b;
  std::vector<Value> out;
  Value found = convert(b, a.tensor(1), ElementType::F32);
  for (const Value& x : a.tensors(0)) {
    ElementType t = accumulation_type(x.type());
    Value v = convert(b, x, t);
    out.push_back(convert(b, b.mul(v, splat(b, a.tensor(2), t, v.dims())), x.type()));
    if (x.shape.numel() == 0) continue;
    Value all_finite =
        reduce_min(b, convert(b, b.is_finite(v), ElementType::F32), all_dims(v.rank()));
    Value nonfinite = b.sub(b.constant(1.0, ElementType::F32), all_finite);
    found = b.max(found, b.broadcast_in_dim(nonfinite, found.dims(), {}));
  }
  out.push_back(convert(b, found, a.tensor(1).type()));
  return out;
}

// _amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor,
// scale_backoff_factor, growth_interval) -> (self, growth_tracker_out): backs
// the scale off after an inf/nan; grows it after growth_interval clean steps
// (unless growing overflows).
std::vector<Value> amp_update_scale(Context& c, const Args& a) {
  Builder& b = c.b;
  Value scale = a.tensor(0), tracker = a.tensor(1);
  Value found = b.compare(convert(b, a.tensor(2), ElementType::F32),
                          b.full({ElementType::F32, scale.dims()}, 0), Comparison::NE);
  Value successful = b.add(tracker, b.full(tracker.shape, 1));
  Value grow = b.compare(successful, b.full(tracker.shape, static_cast<double>(a.integer(5))),
                         Comparison::GE);
  Value grown = b.mul(scale, b.full(scale.shape, a.real(3)));
  grown = b.select(b.is_finite(grown), grown, scale);
  Value backed_off = b.mul(scale, b.full(scale.shape, a.real(4)));
  Value zero = b.full(tracker.shape, 0);
  Value new_scale = b.select(found, backed_off, b.select(grow, grown, scale));
  Value new_tracker = b.select(found, zero, b.select(grow, zero, successful));
  return {new_scale, new_tracker};
}

}  // namespace

// The float-lr overloads read lr as a scalar operand: a scheduler changes it every step.
TPU_LOWERING_FLOAT_OPERAND(fused_adam<false>, "lr", "_fused_adam", "_fused_adam.tensor_lr");
TPU_LOWERING_FLOAT_OPERAND(fused_adam<true>, "lr", "_fused_adamw", "_fused_adamw.tensor_lr");
TPU_LOWERING_FLOAT_OPERAND(fused_sgd, "lr", "_fused_sgd", "_fused_sgd.tensor_lr");
TPU_LOWERING_FLOAT_OPERAND(fused_adagrad, "lr", "_fused_adagrad", "_fused_adagrad.tensor_lr");
TPU_LOWERING(amp_unscale, "_amp_foreach_non_finite_check_and_unscale");
TPU_LOWERING(amp_update_scale, "_amp_update_scale");

}  // namespace torch_tpu::lower
