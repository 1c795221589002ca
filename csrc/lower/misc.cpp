// Assorted math and NN operators: the outer-product add, angle conversions,
// fused add/matmul + activation, weight norm, fused RNN cells, masked softmax,
// SyncBatchNorm's kernels, histogram and linear's backward. Where PyTorch
// builds an operator out of others (celu is an elu, dist a norm of a
// difference) the rule calls those operators' rules, so that it rounds
// exactly as they do.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "lower/helpers.h"
#include "lower/matmul.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using ET = ElementType;

Arg operand_arg(const Operand& o) {
  Arg r;
  r.operands.push_back(o);
  r.is_operand = true;
  return r;
}

Arg value_arg(const Value& v) { return operand_arg(Operand{v, v.type(), Category::Tensor}); }

Arg static_arg(Static s) {
  Arg r;
  r.value = std::move(s);
  return r;
}

// A Python number operand, as PyTorch passes one between composite operators.
Operand number(Builder& b, double v, ET type) {
  return Operand{b.constant(v, type), is_floating(type) ? ET::F32 : type, Category::WrappedNumber};
}

// Runs the rule registered for `op`, with results of `outputs`.
std::vector<Value> call(Context& c, const char* op, std::vector<Arg> args,
                        std::vector<Shape> outputs) {
  const Rule* rule = find_rule(op);
  if (rule == nullptr) throw Unsupported(std::string("no rule for ") + op);
  Context inner(c.b, c.op_name(), c.precision(), c.platform(), std::move(outputs));
  return rule->fn(inner, Args(std::move(args)));
}

Dims all_but(int64_t rank, int64_t dim) {
  Dims dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) dims.push_back(d);
  }
  return dims;
}

// ---------------------------------------------------------------- pointwise

// addr(self, vec1, vec2, *, beta, alpha): beta * self + alpha * vec1 vec2^T.
// PyTorch's kernel works in the result dtype itself (half types round after
// every operation) and ignores self when beta is 0, NaN included.
std::vector<Value> addr(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  auto full = [&](size_t i) {
    return broadcast_to(b, convert(b, a.tensor(i), out.type), out.dims);
  };
  Value v1 = b.broadcast_in_dim(convert(b, a.tensor(1), out.type), out.dims, {0});
  Value v2 = b.broadcast_in_dim(convert(b, a.tensor(2), out.type), out.dims, {1});
  Value self = full(0), beta = full(3), alpha = full(4);
  if (out.type == ET::Pred) {
    return {b.or_(b.and_(beta, self), b.and_(alpha, b.and_(v1, v2)))};
  }
  Value product = b.mul(b.mul(alpha, v1), v2);
  Value keep = b.compare(beta, b.full(out, 0), Comparison::NE);
  return {b.select(keep, b.add(b.mul(beta, self), product), product)};
}

// celu(self, alpha) = elu(self, alpha, scale=1, input_scale=1/alpha), the
// reciprocal taken in double like PyTorch's Scalar(1.0 / alpha).
std::vector<Value> celu(Context& c, const Args& a) {
  Builder& b = c.b;
  const Operand& alpha = a.operand(1);
  ET t = promote_types(alpha.value.type(), ET::F32);
  Value recip = b.div(b.constant(1, t), convert(b, alpha.value, t));
  Operand input_scale{recip, ET::F32, Category::WrappedNumber};
  return call(c, "elu",
              {operand_arg(a.operand(0)), operand_arg(alpha), operand_arg(number(b, 1, t)),
               operand_arg(input_scale)},
              {c.output(0)});
}

// self * factor, the factor a double rounded to the compute type the way a
// Python number multiplies a tensor (integers become the default dtype first).
Value scale_by(Context& c, const Value& x, double factor) {
  Builder& b = c.b;
  if (is_complex(x.type())) throw Unsupported("complex tensors");
  ET out = c.output(0).type, ct = accumulation_type(out);
  Value y = convert(b, convert(b, x, out), ct);
  return convert(b, b.mul(y, b.full(y.shape, factor)), out);
}

// deg2rad(self)
std::vector<Value> deg2rad(Context& c, const Args& a) {
  return {scale_by(c, a.tensor(0), 0.017453292519943295769236907684886127134428718885417)};
}

// rad2deg(self)
std::vector<Value> rad2deg(Context& c, const Args& a) {
  return {scale_by(c, a.tensor(0), 57.295779513082320876798154814105170332405472466564)};
}

// dist(self, other, p) = norm(self - other, p).
std::vector<Value> dist(Context& c, const Args& a) {
  ET t = result_type({&a.operand(0), &a.operand(1)});
  Dims dims = broadcast_shapes(a.tensor(0).dims(), a.tensor(1).dims());
  Value diff = call(c, "sub.Tensor",
                    {operand_arg(a.operand(0)), operand_arg(a.operand(1)),
                     operand_arg(number(c.b, 1, ET::S64))},
                    {Shape{t, dims}})
                   .at(0);
  return call(c, "norm.Scalar", {value_arg(diff), operand_arg(a.operand(2))}, {c.output(0)});
}

// _add_relu.Tensor(self, other, alpha): add, then relu of the rounded sum.
std::vector<Value> add_relu(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  // The dtypes PyTorch's kernel has; others raise its error on the CPU.
  const ET kernels[] = {ET::F32, ET::F64, ET::S8, ET::S16, ET::S32, ET::S64};
  if (std::find(std::begin(kernels), std::end(kernels), out.type) == std::end(kernels)) {
    throw Unsupported("no add_relu kernel for this dtype");
  }
  Value sum =
      call(c, "add.Tensor",
           {operand_arg(a.operand(0)), operand_arg(a.operand(1)), operand_arg(a.operand(2))}, {out})
          .at(0);
  return call(c, "relu", {value_arg(convert(c.b, sum, out.type))}, {out});
}

// _addmm_activation(self, mat1, mat2, *, beta, alpha, use_gelu): addmm, then
// relu or (exact) gelu of the rounded result, as PyTorch's CPU kernel does.
std::vector<Value> addmm_activation(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  std::vector<Arg> args;
  for (size_t i = 0; i < 5; ++i) args.push_back(operand_arg(a.operand(i)));
  Value y = convert(c.b, call(c, "addmm", std::move(args), {out}).at(0), out.type);
  if (a.boolean(5)) return call(c, "gelu", {value_arg(y), static_arg(std::string("none"))}, {out});
  return call(c, "relu", {value_arg(y)}, {out});
}

// ---------------------------------------------------------------- foreach

// _foreach_lgamma(self): lgamma of each tensor.
std::vector<Value> foreach_lgamma(Context& c, const Args& a) {
  std::vector<Value> out;
  const auto& list = a.operand_list(0);
  for (size_t i = 0; i < list.size(); ++i) {
    out.push_back(call(c, "lgamma", {operand_arg(list[i].value())}, {c.output(i)}).at(0));
  }
  return out;
}

// _foreach_clone(self, memory_format)
std::vector<Value> foreach_clone(Context& c, const Args& a) { return a.tensors(0); }

// ---------------------------------------------------------------- matmul

// _int_mm(self, mat2): int8 x int8 -> int32, exact.
std::vector<Value> int_mm(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = convert(b, a.tensor(0), ET::S32), y = convert(b, a.tensor(1), ET::S32);
  return {b.dot_general(x, y, {{}, {}, {1}, {0}}, hlo::Precision::Highest, ET::S32)};
}

// linear_backward(self, grad_output, weight, output_mask) -> (grad_input,
// grad_weight, grad_bias) of self @ weight^T + bias.
std::vector<Value> linear_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0), g = a.tensor(1), w = a.tensor(2);
  BoolList mask = a.bools(3);
  ET t = c.output(0).type, acc = accumulation_type(t);
  std::vector<Value> out;
  for (size_t i = 0; i < 3; ++i) out.push_back(b.full(c.output(i), 0));
  int64_t in = w.dim(1), outs = w.dim(0);
  if (mask.at(0)) {
    hlo::DotDims dims{{}, {}, {g.rank() - 1}, {0}};
    out[0] = convert(b, dot(c, g, w, dims, acc), c.output(0).type);
  }
  Value g2 = b.reshape(g, {g.shape.numel() / std::max<int64_t>(outs, 1), outs});
  if (mask.at(1)) {
    Value x2 = b.reshape(x, {g2.dim(0), in});
    out[1] = convert(b, dot(c, g2, x2, {{}, {}, {0}, {0}}, acc), c.output(1).type);
  }
  if (mask.at(2)) out[2] = convert(b, reduce_sum(b, convert(b, g2, acc), {0}), c.output(2).type);
  return out;
}

// ---------------------------------------------------------------- weight norm

// The vector of `dim` of a tensor whose other dimensions are all 1 (weight
// norm's g and norms).
Value along(Builder& b, const Value& x, int64_t size) { return b.reshape(x, {size}); }

// _weight_norm_interface(v, g, dim) -> (w, norms): w = v * g / ||v||, the
// norm over every dimension but `dim`.
std::vector<Value> weight_norm(Context& c, const Args& a) {
  Builder& b = c.b;
  Value v = a.tensor(0);
  int64_t dim = a.integer(2);
  // PyTorch's fused kernels take the first or the last dimension, unwrapped.
  if (dim != 0 && dim != v.rank() - 1) throw Unsupported("dim must be 0 or ndim - 1");
  ET acc = accumulation_type(c.output(0).type);
  Value vc = convert(b, v, acc);
  Value norm = b.sqrt(reduce_sum(b, b.mul(vc, vc), all_but(v.rank(), dim)));
  Value g = convert(b, along(b, a.tensor(1), v.dim(dim)), acc);
  Value scale = b.broadcast_in_dim(b.div(g, norm), v.dims(), {dim});
  return {convert(b, b.mul(vc, scale), c.output(0).type),
          convert(b, b.reshape(norm, c.output(1).dims), c.output(1).type)};
}

// _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim)
// -> (grad_v, grad_g), PyTorch's formula: with s = sum(grad_w * v) per slice,
// grad_g = s / norm and grad_v = g / norm * grad_w - g * s / norm^3 * v.
std::vector<Value> weight_norm_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value v = a.tensor(1);
  int64_t dim = a.integer(4);
  if (dim != 0 && dim != v.rank() - 1) throw Unsupported("dim must be 0 or ndim - 1");
  int64_t size = v.dim(dim);
  ET acc = accumulation_type(c.output(0).type);
  Value gw = convert(b, a.tensor(0), acc), vc = convert(b, v, acc);
  Value g = convert(b, along(b, a.tensor(2), size), acc);
  Value norm = convert(b, along(b, a.tensor(3), size), acc);
  Value s = reduce_sum(b, b.mul(gw, vc), all_but(v.rank(), dim));
  Value ga = b.div(g, norm);
  Value gb = b.div(b.mul(ga, s), b.mul(norm, norm));
  auto expand = [&](const Value& x) { return b.broadcast_in_dim(x, v.dims(), {dim}); };
  Value grad_v = b.sub(b.mul(expand(ga), gw), b.mul(expand(gb), vc));
  Value grad_g = b.reshape(b.div(s, norm), c.output(1).dims);
  return {convert(b, grad_v, c.output(0).type), convert(b, grad_g, c.output(1).type)};
}

// ---------------------------------------------------------------- fused RNN cells

Value sigmoid(Builder& b, const Value& x) {
  Value one = b.full(x.shape, 1);
  return b.div(one, b.add(one, b.exp(b.neg(x))));
}

Value one_minus(Builder& b, const Value& x) { return b.sub(b.full(x.shape, 1), x); }

// Block k of `count` equal blocks along dimension 1 (a cell's gates).
Value gate(Builder& b, const Value& x, int64_t k, int64_t count) {
  int64_t h = x.dim(1) / count;
  return b.slice(x, {0, k * h}, {x.dim(0), (k + 1) * h}, {1, 1});
}

// `x` plus the optional bias argument `i`, broadcast over the batch.
Value plus_bias(Builder& b, const Value& x, const Args& a, size_t i) {
  auto bias = a.optional_tensor(i);
  return bias ? b.add(x, broadcast_to(b, convert(b, *bias, x.type()), x.dims())) : x;
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias,
// hidden_bias) -> (hy, cy, workspace): gates in the order input, forget,
// cell, output; the workspace keeps them activated for the backward.
std::vector<Value> fused_lstm_cell(Context& c, const Args& a) {
  Builder& b = c.b;
  ET acc = accumulation_type(c.output(0).type);
  Value gates = b.add(convert(b, a.tensor(0), acc), convert(b, a.tensor(1), acc));
  if (gates.rank() != 2) throw Unsupported("batched gates only");
  gates = plus_bias(b, plus_bias(b, gates, a, 3), a, 4);
  Value cx = convert(b, a.tensor(2), acc);
  Value in = sigmoid(b, gate(b, gates, 0, 4)), forget = sigmoid(b, gate(b, gates, 1, 4));
  Value cell = b.tanh(gate(b, gates, 2, 4)), out = sigmoid(b, gate(b, gates, 3, 4));
  Value cy = b.add(b.mul(forget, cx), b.mul(in, cell));
  Value hy = b.mul(out, b.tanh(cy));
  Value workspace = b.concatenate({in, forget, cell, out}, 1);
  return {convert(b, hy, c.output(0).type), convert(b, cy, c.output(1).type),
          convert(b, workspace, c.output(2).type)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace,
// has_bias) -> (grad_gates, grad_cx, grad_bias); a missing gradient is zero.
std::vector<Value> fused_lstm_cell_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  ET acc = accumulation_type(c.output(0).type);
  Value cx = convert(b, a.tensor(2), acc), cy = convert(b, a.tensor(3), acc);
  Value ws = convert(b, a.tensor(4), acc);
  auto grad = [&](size_t i) {
    auto g = a.optional_tensor(i);
    return g ? convert(b, *g, acc) : b.full(cy.shape, 0);
  };
  Value ghy = grad(0), gcy = grad(1);
  Value in = gate(b, ws, 0, 4), forget = gate(b, ws, 1, 4), cell = gate(b, ws, 2, 4),
        out = gate(b, ws, 3, 4);
  Value tcy = b.tanh(cy);
  Value g_out = b.mul(b.mul(b.mul(ghy, tcy), one_minus(b, out)), out);
  Value gcx = b.add(b.mul(b.mul(ghy, out), one_minus(b, b.mul(tcy, tcy))), gcy);
  Value g_in = b.mul(b.mul(b.mul(gcx, cell), one_minus(b, in)), in);
  Value g_forget = b.mul(b.mul(b.mul(gcx, cx), one_minus(b, forget)), forget);
  Value g_cell = b.mul(b.mul(gcx, in), one_minus(b, b.mul(cell, cell)));
  Value grad_gates = b.concatenate({g_in, g_forget, g_cell, g_out}, 1);
  Value grad_bias = a.boolean(5) ? convert(b, reduce_sum(b, grad_gates, {0}), c.output(2).type)
                                 : b.full(c.output(2), 0);
  return {convert(b, grad_gates, c.output(0).type),
          convert(b, b.mul(gcx, forget), c.output(1).type), grad_bias};
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias,
// hidden_bias) -> (hy, workspace): gates reset, input, new; the workspace
// keeps (reset, input, new, hx, hidden new gate) for the backward.
std::vector<Value> fused_gru_cell(Context& c, const Args& a) {
  Builder& b = c.b;
  ET acc = accumulation_type(c.output(0).type);
  Value ig = convert(b, a.tensor(0), acc), hg = convert(b, a.tensor(1), acc);
  if (ig.rank() != 2) throw Unsupported("batched gates only");
  ig = plus_bias(b, ig, a, 3);
  hg = plus_bias(b, hg, a, 4);
  Value hx = convert(b, a.tensor(2), acc);
  Value reset = sigmoid(b, b.add(gate(b, ig, 0, 3), gate(b, hg, 0, 3)));
  Value input = sigmoid(b, b.add(gate(b, ig, 1, 3), gate(b, hg, 1, 3)));
  Value hn = gate(b, hg, 2, 3);
  Value fresh = b.tanh(b.add(gate(b, ig, 2, 3), b.mul(reset, hn)));
  Value hy = b.add(fresh, b.mul(input, b.sub(hx, fresh)));
  Value workspace = b.concatenate({reset, input, fresh, hx, hn}, 1);
  return {convert(b, hy, c.output(0).type), convert(b, workspace, c.output(1).type)};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) ->
// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
// grad_hidden_bias)
std::vector<Value> fused_gru_cell_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  ET acc = accumulation_type(c.output(0).type);
  Value go = convert(b, a.tensor(0), acc), ws = convert(b, a.tensor(1), acc);
  Value reset = gate(b, ws, 0, 5), input = gate(b, ws, 1, 5);
  Value fresh = gate(b, ws, 2, 5), hx = gate(b, ws, 3, 5), hn = gate(b, ws, 4, 5);
  Value g_input = b.mul(b.mul(b.mul(go, b.sub(hx, fresh)), one_minus(b, input)), input);
  Value g_fresh = b.mul(b.mul(go, one_minus(b, input)), one_minus(b, b.mul(fresh, fresh)));
  Value g_hn = b.mul(g_fresh, reset);
  Value g_reset = b.mul(b.mul(b.mul(g_fresh, hn), one_minus(b, reset)), reset);
  Value grad_ig = b.concatenate({g_reset, g_input, g_fresh}, 1);
  Value grad_hg = b.concatenate({g_reset, g_input, g_hn}, 1);
  std::vector<Value> out{convert(b, grad_ig, c.output(0).type),
                         convert(b, grad_hg, c.output(1).type),
                         convert(b, b.mul(go, input), c.output(2).type), b.full(c.output(3), 0),
                         b.full(c.output(4), 0)};
  if (a.boolean(2)) {
    out[3] = convert(b, reduce_sum(b, grad_ig, {0}), c.output(3).type);
    out[4] = convert(b, reduce_sum(b, grad_hg, {0}), c.output(4).type);
  }
  return out;
}

// ---------------------------------------------------------------- masked softmax

// The mask of _masked_softmax as a pred tensor of the input's shape.
// mask_type 0 is an (L, L) attention mask and 1 a (B, L) padding mask of a
// (B, H, L, L) input; any other mask has the input's shape (type 2).
Value softmax_mask(Builder& b, const Value& mask, const Dims& dims, int64_t type) {
  Value m = convert(b, mask, ET::Pred);
  if (mask.rank() == 2 && dims.size() == 4 && type == 1) {
    return b.broadcast_in_dim(m, dims, {0, 3});
  }
  return broadcast_to(b, m, dims);
}

// _masked_softmax(self, mask, dim, mask_type): softmax over the unmasked
// (false) elements; masked ones are 0 and a fully masked row is NaN. Like
// PyTorch's kernel, x - max and its exp are rounded to the dtype, and
// the row is multiplied by the reciprocal of its sum.
std::vector<Value> masked_softmax(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  ET out = c.output(0).type, ct = accumulation_type(out);
  if (!is_floating(out)) throw Unsupported("floating-point dtypes only");
  auto mask_type = a.optional_integer(3);
  if (!mask_type) throw Unsupported("mask_type is required");
  if (x.rank() == 0) throw Unsupported("zero-dim input");
  int64_t dim = wrap_dim(a.optional_integer(2).value_or(x.rank() - 1), x.rank());
  Value masked = softmax_mask(b, a.tensor(1), x.dims(), *mask_type);
  Value xc = convert(b, x, ct);
  Value zero = b.full(xc.shape, 0);
  Value max = reduce_max(b, b.select(masked, b.full(xc.shape, -INFINITY), xc), {dim});
  auto round = [&](const Value& v) { return convert(b, convert(b, v, out), ct); };
  Value shifted = round(b.sub(xc, b.broadcast_in_dim(max, x.dims(), all_but(x.rank(), dim))));
  Value z = b.select(masked, zero, round(b.exp(shifted)));
  Value sum = reduce_sum(b, z, {dim});
  Value sum_zero = b.compare(sum, b.full(sum.shape, 0), Comparison::EQ);
  Value recip = b.select(sum_zero, b.full(sum.shape, NAN), b.div(b.full(sum.shape, 1), sum));
  return {convert(b, b.mul(z, b.broadcast_in_dim(recip, x.dims(), all_but(x.rank(), dim))), out)};
}

// _masked_softmax_backward(grad_output, output, mask, dim): y * (g - sum(g * y))
// over unmasked elements, 0 where masked.
std::vector<Value> masked_softmax_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value g = a.tensor(0), y = a.tensor(1);
  ET out = c.output(0).type, ct = accumulation_type(out);
  if (!is_floating(out) || g.rank() == 0) throw Unsupported("floating-point dtypes only");
  int64_t dim = wrap_dim(a.optional_integer(3).value_or(y.rank() - 1), y.rank());
  Value masked = broadcast_to(b, convert(b, a.tensor(2), ET::Pred), g.dims());
  Value gc = convert(b, convert(b, g, out), ct), yc = convert(b, convert(b, y, out), ct);
  Value zero = b.full(gc.shape, 0);
  Value product = convert(b, convert(b, b.mul(gc, yc), out), ct);
  Value sum = reduce_sum(b, b.select(masked, zero, product), {dim});
  Value grad = b.mul(yc, b.sub(gc, b.broadcast_in_dim(sum, g.dims(), all_but(g.rank(), dim))));
  return {convert(b, b.select(masked, zero, grad), out)};
}

// ---------------------------------------------------------------- SyncBatchNorm

// Per-channel statistics of (N, C, ...) inputs: channel dim 1.
Value channel_vector(Builder& b, const Value& v, const Dims& dims) {
  return b.broadcast_in_dim(v, dims, {1});
}

Dims non_channel(int64_t rank) { return all_but(rank, 1); }

// batch_norm_stats(input, eps) -> (mean, invstd): biased variance; invstd is
// 0 where both the variance and eps are 0, as in PyTorch.
std::vector<Value> batch_norm_stats(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  ET ct = accumulation_type(c.output(0).type);
  Value xc = convert(b, x, ct);
  Dims dims = non_channel(x.rank());
  double n = static_cast<double>(x.shape.numel() / std::max<int64_t>(x.dim(1), 1));
  Value mean = b.div(reduce_sum(b, xc, dims), b.full({ct, {x.dim(1)}}, n));
  Value centered = b.sub(xc, channel_vector(b, mean, x.dims()));
  Value var = b.div(reduce_sum(b, b.mul(centered, centered), dims), b.full(mean.shape, n));
  double eps = a.real(1);
  Value invstd = b.rsqrt(b.add(var, b.full(var.shape, eps)));
  if (eps == 0) {
    invstd = b.select(b.compare(var, b.full(var.shape, 0), Comparison::EQ), b.full(var.shape, 0),
                      invstd);
  }
  return {convert(b, mean, c.output(0).type), convert(b, invstd, c.output(1).type)};
}

// batch_norm_elemt(input, weight, bias, mean, invstd, eps)
std::vector<Value> batch_norm_elemt(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  ET ct = accumulation_type(c.output(0).type);
  auto channel = [&](size_t i, double fill) {
    auto v = a.optional_tensor(i);
    Value vc = v ? convert(b, *v, ct) : b.full({ct, {x.dim(1)}}, fill);
    return channel_vector(b, vc, x.dims());
  };
  Value y = b.mul(b.sub(convert(b, x, ct), channel(3, 0)), channel(4, 1));
  return {convert(b, b.add(b.mul(y, channel(1, 1)), channel(2, 0)), c.output(0).type)};
}

// batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g,
// weight_g, bias_g) -> (sum_dy, sum_dy_xmu, grad_weight, grad_bias)
std::vector<Value> batch_norm_backward_reduce(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(1);
  ET ct = accumulation_type(c.output(0).type);
  Value g = convert(b, a.tensor(0), ct);
  Value xmu = b.sub(convert(b, x, ct), channel_vector(b, convert(b, a.tensor(2), ct), x.dims()));
  Dims dims = non_channel(x.rank());
  Value sum_dy = reduce_sum(b, g, dims);
  Value sum_dy_xmu = reduce_sum(b, b.mul(g, xmu), dims);
  Value grad_weight = b.mul(sum_dy_xmu, convert(b, a.tensor(3), ct));
  return {convert(b, sum_dy, c.output(0).type), convert(b, sum_dy_xmu, c.output(1).type),
          convert(b, grad_weight, c.output(2).type), convert(b, sum_dy, c.output(3).type)};
}

// batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy,
// sum_dy_xmu, count): the input gradient from the all-reduced sums; count
// holds each replica's number of elements per channel.
std::vector<Value> batch_norm_backward_elemt(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(1);
  ET ct = accumulation_type(c.output(0).type);
  auto channel = [&](size_t i) { return channel_vector(b, convert(b, a.tensor(i), ct), x.dims()); };
  Value count = reduce_sum(b, convert(b, a.tensor(7), ct), {0});
  Value n = broadcast_to(b, count, x.dims());
  Value invstd = channel(3);
  Value mean_dy = b.div(channel(5), n), mean_dy_xmu = b.div(channel(6), n);
  Value xmu = b.sub(convert(b, x, ct), channel(2));
  Value g = b.sub(b.sub(convert(b, a.tensor(0), ct), mean_dy),
                  b.mul(b.mul(xmu, b.mul(invstd, invstd)), mean_dy_xmu));
  Value scale = invstd;
  if (auto w = a.optional_tensor(4)) {
    scale = b.mul(scale, channel_vector(b, convert(b, *w, ct), x.dims()));
  }
  return {convert(b, b.mul(g, scale), c.output(0).type)};
}

// Results followed by the new running statistics, for the engine to write
// where it treats them as mutated (PyTorch's schemas do not mark them): as
// many as c.num_outputs() expects, skipping those passed as None.
std::vector<Value> with_running_stats(Context& c, std::vector<Value> out, const Args& a,
                                      size_t rm_index, const Value& mean, const Value& var,
                                      double momentum, double unbiased_scale) {
  Builder& b = c.b;
  auto blend = [&](size_t i, const Value& v) -> std::optional<Value> {
    auto r = a.optional_tensor(i);
    if (!r) return std::nullopt;
    ET t = r->type();
    ET acc = accumulation_type(t);
    Value m = b.full({acc, r->dims()}, momentum);
    Value keep = b.full({acc, r->dims()}, 1 - momentum);
    return convert(b, b.add(b.mul(m, convert(b, v, acc)), b.mul(keep, convert(b, *r, acc))), t);
  };
  Value unbiased = b.mul(var, b.full(var.shape, unbiased_scale));
  for (const auto& stat : {blend(rm_index, mean), blend(rm_index + 1, unbiased)}) {
    if (stat && out.size() < c.num_outputs()) out.push_back(*stat);
  }
  return out;
}

// batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean,
// running_var, momentum, eps, counts): combines per-replica (W, C) means and
// inverse stds weighted by each replica's element count into the global
// mean and invstd; the running statistics take the unbiased variance.
std::vector<Value> gather_stats(Context& c, const Args& a, const Value& counts) {
  Builder& b = c.b;
  ET ct = accumulation_type(c.output(0).type);
  Value mean = convert(b, a.tensor(1), ct), invstd = convert(b, a.tensor(2), ct);
  double eps = a.real(6);
  Dims wc = mean.dims();
  Value n = b.broadcast_in_dim(convert(b, counts, ct), wc, {0});
  Value total = reduce_sum(b, n, {0});
  Value avg = b.div(reduce_sum(b, b.mul(n, mean), {0}), total);
  Value std = b.div(b.full(invstd.shape, 1), invstd);
  Value var_j = b.sub(b.mul(std, std), b.full(std.shape, eps));
  Value dev = b.sub(mean, b.broadcast_in_dim(avg, wc, {1}));
  Value var_n = reduce_sum(b, b.mul(n, b.add(var_j, b.mul(dev, dev))), {0});
  Value var = b.div(var_n, total);
  Value out_invstd = b.rsqrt(b.add(var, b.full(var.shape, eps)));
  Value unbiased = b.div(var_n, b.sub(total, b.full(total.shape, 1)));
  std::vector<Value> out{convert(b, avg, c.output(0).type),
                         convert(b, out_invstd, c.output(1).type)};
  return with_running_stats(c, std::move(out), a, 3, avg, unbiased, a.real(5), 1.0);
}

std::vector<Value> batch_norm_gather_stats_with_counts(Context& c, const Args& a) {
  return gather_stats(c, a, a.tensor(7));
}

// batch_norm_gather_stats(..., int count): every replica counted `count`.
std::vector<Value> batch_norm_gather_stats(Context& c, const Args& a) {
  Value counts = c.b.full({ET::F32, {a.tensor(1).dim(0)}}, static_cast<double>(a.integer(7)));
  return gather_stats(c, a, counts);
}

// batch_norm_update_stats(input, running_mean, running_var, momentum) ->
// (mean, biased var); the running variance takes the unbiased one.
std::vector<Value> batch_norm_update_stats(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  ET ct = accumulation_type(c.output(0).type);
  Value xc = convert(b, x, ct);
  Dims dims = non_channel(x.rank());
  int64_t count = x.shape.numel() / std::max<int64_t>(x.dim(1), 1);
  Value n = b.full({ct, {x.dim(1)}}, static_cast<double>(count));
  Value mean = b.div(reduce_sum(b, xc, dims), n);
  Value centered = b.sub(xc, channel_vector(b, mean, x.dims()));
  Value var = b.div(reduce_sum(b, b.mul(centered, centered), dims), n);
  std::vector<Value> out{convert(b, mean, c.output(0).type), convert(b, var, c.output(1).type)};
  double scale = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : INFINITY;
  return with_running_stats(c, std::move(out), a, 1, mean, var, a.real(3), scale);
}

// ---------------------------------------------------------------- histogram

// Counts (or sums the weights of) the elements of `x` in each bin of the
// sorted `edges`: bin i holds edges[i] <= x < edges[i + 1], the last bin also
// its right edge; elements outside the edges (and NaN) count nowhere. This is
// the bin PyTorch's binary search (or its interpolation, corrected by a local
// search) finds.
Value bin_counts(Builder& b, const Value& x, const Value& edges, std::optional<Value> weight,
                 ET type) {
  int64_t n = x.shape.numel(), e = edges.dim(0), bins = e - 1;
  Value flat = convert(b, b.reshape(x, {n}), edges.type());
  Dims ne{n, e}, nb{n, bins};
  Value xs = b.broadcast_in_dim(flat, ne, {0});
  Value below = b.compare(b.broadcast_in_dim(edges, ne, {1}), xs, Comparison::LE);
  Value count = reduce_sum(b, b.convert(below, ET::S32), {1});
  Value pos = b.min(b.sub(count, b.full(count.shape, 1)), b.full(count.shape, bins - 1));
  Value first = b.slice(edges, {0}, {1}, {1}), last = b.slice(edges, {e - 1}, {e}, {1});
  Value inside = b.and_(b.compare(flat, broadcast_to(b, first, {n}), Comparison::GE),
                        b.compare(flat, broadcast_to(b, last, {n}), Comparison::LE));
  Value hit =
      b.and_(b.compare(b.broadcast_in_dim(pos, nb, {0}), b.iota({ET::S32, nb}, 1), Comparison::EQ),
             b.broadcast_in_dim(inside, nb, {0}));
  Value w = weight ? convert(b, b.reshape(*weight, {n}), type) : b.full({type, {n}}, 1);
  return reduce_sum(b, b.select(hit, b.broadcast_in_dim(w, nb, {0}), b.full({type, nb}, 0)), {0});
}

// hist / (sum(hist) * bin widths) when `density`.
Value histogram_density(Builder& b, const Value& hist, const Value& edges, bool density) {
  if (!density) return hist;
  int64_t bins = hist.dim(0);
  Value widths = b.sub(b.slice(edges, {1}, {bins + 1}, {1}), b.slice(edges, {0}, {bins}, {1}));
  Value total = broadcast_to(b, reduce_sum(b, hist, {0}), hist.dims());
  return b.div(b.div(hist, total), convert(b, widths, hist.type()));
}

// histogram.bins_tensor(self, bins, *, weight, density) -> (hist, bin_edges)
std::vector<Value> histogram_edges(Context& c, const Args& a) {
  Builder& b = c.b;
  Value edges = a.tensor(1);
  if (edges.rank() != 1 || edges.dim(0) < 2) throw Unsupported("bins must have two edges");
  ET t = c.output(0).type;
  Value hist = bin_counts(b, a.tensor(0), edges, a.optional_tensor(2), t);
  return {histogram_density(b, hist, edges, a.boolean(3)), edges};
}

// histogram.bin_ct(self, bins, *, range, weight, density): `bins` equal bins
// from the data's min to its max (an empty range widens by 0.5 each way; no
// data spans [0, 1], as on the CPU), the edges made by PyTorch's linspace rule. An explicit range
// is a float list, which Args cannot read yet: it falls back to the CPU.
std::vector<Value> histogram_count(Context& c, const Args& a) {
  Builder& b = c.b;
  if (!a.is_none(2)) throw Unsupported("histogram with a range");
  Value x = a.tensor(0);
  ET t = c.output(0).type;
  ET wide = c.platform() == "tpu" ? ET::F32 : ET::F64;
  Value lo = b.constant(0, wide), hi = b.constant(1, wide);
  if (x.shape.numel() > 0) {
    Dims all = all_but(x.rank(), -1);
    lo = convert(b, reduce_min(b, x, all), wide);
    hi = convert(b, reduce_max(b, x, all), wide);
  }
  Value empty = b.compare(lo, hi, Comparison::EQ);
  Value half = b.constant(0.5, wide);
  lo = b.select(empty, b.sub(lo, half), lo);
  hi = b.select(empty, b.add(hi, half), hi);
  Value edges = call(c, "linspace.out",
                     {value_arg(lo), value_arg(hi), static_arg(a.integer(1) + 1)}, {c.output(1)})
                    .at(0);
  edges = convert(b, edges, c.output(1).type);
  Value hist = bin_counts(b, x, edges, a.optional_tensor(3), t);
  return {histogram_density(b, hist, edges, a.boolean(4)), edges};
}

// ---------------------------------------------------------------- others

// _logcumsumexp(self, dim): logcumsumexp's CPU kernel.
std::vector<Value> logcumsumexp_kernel(Context& c, const Args& a) {
  return call(c, "logcumsumexp", {operand_arg(a.operand(0)), static_arg(a.integer(1))},
              {c.output(0)});
}

// adaptive_avg_pool{2,3}d.out(self, output_size, *, out): the CPU kernels of
// the composite functional forms, which are _adaptive_avg_pool{2,3}d.
std::vector<Value> adaptive_avg_pool2d_out(Context& c, const Args& a) {
  return call(c, "_adaptive_avg_pool2d", {operand_arg(a.operand(0)), static_arg(a.ints(1))},
              {c.output(0)});
}

std::vector<Value> adaptive_avg_pool3d_out(Context& c, const Args& a) {
  return call(c, "_adaptive_avg_pool3d", {operand_arg(a.operand(0)), static_arg(a.ints(1))},
              {c.output(0)});
}

// adaptive_avg_pool3d_backward.grad_input(grad_output, self, *, grad_input)
std::vector<Value> adaptive_avg_pool3d_backward_out(Context& c, const Args& a) {
  return call(c, "_adaptive_avg_pool3d_backward",
              {operand_arg(a.operand(0)), operand_arg(a.operand(1))}, {c.output(0)});
}

// _efficientzerotensor(size, dtype, ...): plain zeros here.
std::vector<Value> efficient_zero_tensor(Context& c, const Args&) {
  return {c.b.full(c.output(0), 0)};
}

// _cummax_helper(self, values, indices, dim) -> (): cummax written into
// values and indices.
std::vector<Value> cumulative_helper(Context& c, const Args& a, const char* op) {
  Value x = a.tensor(0);
  return call(c, op, {value_arg(x), static_arg(a.integer(3))}, {x.shape, Shape{ET::S64, x.dims()}});
}

std::vector<Value> cummax_helper(Context& c, const Args& a) {
  return cumulative_helper(c, a, "cummax");
}

std::vector<Value> cummin_helper(Context& c, const Args& a) {
  return cumulative_helper(c, a, "cummin");
}

}  // namespace

TPU_LOWERING(addr, "addr");
TPU_LOWERING(celu, "celu");
TPU_LOWERING(deg2rad, "deg2rad");
TPU_LOWERING(rad2deg, "rad2deg");
TPU_LOWERING(dist, "dist");
TPU_LOWERING(add_relu, "_add_relu.Tensor", "_add_relu.Scalar");
TPU_LOWERING_PRECISION(addmm_activation, "_addmm_activation");
TPU_LOWERING(foreach_lgamma, "_foreach_lgamma");
TPU_LOWERING(foreach_clone, "_foreach_clone");
TPU_LOWERING(int_mm, "_int_mm");
TPU_LOWERING_PRECISION(linear_backward, "linear_backward");
TPU_LOWERING(weight_norm, "_weight_norm_interface");
TPU_LOWERING(weight_norm_backward, "_weight_norm_interface_backward");
TPU_LOWERING(fused_lstm_cell, "_thnn_fused_lstm_cell");
TPU_LOWERING(fused_lstm_cell_backward, "_thnn_fused_lstm_cell_backward_impl");
TPU_LOWERING(masked_softmax, "_masked_softmax");
TPU_LOWERING(masked_softmax_backward, "_masked_softmax_backward");
TPU_LOWERING(batch_norm_stats, "batch_norm_stats");
TPU_LOWERING(batch_norm_elemt, "batch_norm_elemt");
TPU_LOWERING(batch_norm_backward_reduce, "batch_norm_backward_reduce");
TPU_LOWERING(batch_norm_backward_elemt, "batch_norm_backward_elemt");
TPU_LOWERING(batch_norm_gather_stats, "batch_norm_gather_stats");
TPU_LOWERING(batch_norm_gather_stats_with_counts, "batch_norm_gather_stats_with_counts");
TPU_LOWERING(batch_norm_update_stats, "batch_norm_update_stats");
TPU_LOWERING(histogram_edges, "histogram.bins_tensor");
TPU_LOWERING(histogram_count, "histogram.bin_ct");
TPU_LOWERING(fused_gru_cell, "_thnn_fused_gru_cell");
TPU_LOWERING(fused_gru_cell_backward, "_thnn_fused_gru_cell_backward");
TPU_LOWERING(logcumsumexp_kernel, "_logcumsumexp");
TPU_LOWERING(adaptive_avg_pool2d_out, "adaptive_avg_pool2d");
TPU_LOWERING(adaptive_avg_pool3d_out, "adaptive_avg_pool3d");
TPU_LOWERING(adaptive_avg_pool3d_backward_out, "adaptive_avg_pool3d_backward.grad_input");
TPU_LOWERING(efficient_zero_tensor, "_efficientzerotensor");
TPU_LOWERING(cummax_helper, "_cummax_helper");
TPU_LOWERING(cummin_helper, "_cummin_helper");

}  // namespace torch_tpu::lower
