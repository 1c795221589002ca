// Convolutions (1d/2d/3d, strided, padded, dilated, grouped, transposed) and
// their gradients, all as StableHLO convolutions in PyTorch's N, C, spatial
// layout with torch.tpu precision (see matmul.h).
#include "lower/helpers.h"
#include "lower/matmul.h"

namespace torch_tpu::lower {

namespace {

// output_padding is not kept: the result sizes the rules are given imply it.
struct ConvParams {
  Dims stride, padding, dilation;
  bool transposed = false;
  int64_t groups = 1;
};

// PyTorch accepts one value for every spatial dimension.
Dims per_dim(const IntList& v, int64_t spatial) {
  if (v.size() == 1) return Dims(spatial, v[0]);
  if (static_cast<int64_t>(v.size()) != spatial) {
    throw std::invalid_argument("convolution parameter of length " + std::to_string(v.size()) +
                                " for " + std::to_string(spatial) + " spatial dimensions");
  }
  return v;
}

// stride, padding, dilation, transposed, output_padding, groups from `first`.
ConvParams read_params(const Args& a, size_t first, int64_t spatial) {
  ConvParams p;
  p.stride = per_dim(a.ints(first), spatial);
  p.padding = per_dim(a.ints(first + 1), spatial);
  p.dilation = per_dim(a.ints(first + 2), spatial);
  p.transposed = a.boolean(first + 3);
  p.groups = a.integer(first + 5);
  return p;
}

Dims iota_from(int64_t first, int64_t n) {
  Dims d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = first + i;
  return d;
}

// N, C, spatial... for input and output; O, I, spatial... for the kernel.
hlo::ConvDims nc_dims(int64_t spatial) {
  hlo::ConvDims d;
  d.input_spatial = d.kernel_spatial = d.output_spatial = iota_from(2, spatial);
  return d;
}

Dims spatial_sizes(const Value& x) { return Dims(x.dims().begin() + 2, x.dims().end()); }

// Correlates x [N, C_in, ...] with w [C_out, C_in/groups, k...] and yields the
// `out` spatial sizes: PyTorch's forward convolution. The high padding is
// what reaching `out` needs; it never exceeds the requested padding.
Value correlate(Context& c, const Value& x, const Value& w, const ConvParams& p, const Dims& out,
                ElementType result) {
  int64_t n = static_cast<int64_t>(out.size());
  hlo::ConvConfig config;
  config.window_strides = p.stride;
  config.rhs_dilation = p.dilation;
  config.feature_group_count = p.groups;
  for (int64_t i = 0; i < n; ++i) {
    int64_t reach = p.dilation[i] * (w.dim(2 + i) - 1) + 1;
    int64_t high = (out[i] - 1) * p.stride[i] + reach - x.dim(2 + i) - p.padding[i];
    config.padding.emplace_back(p.padding[i], high);
  }
  return conv(c, x, w, nc_dims(n), config, result);
}

// w [C_in, C_out/groups, k...] as a kernel from C_in to C_out features in
// XLA's grouping ([C_in/groups, C_out, k...]), spatially flipped.
Value transposed_kernel(Builder& b, const Value& w, int64_t groups) {
  int64_t n = w.rank() - 2;
  Dims k = spatial_sizes(w);
  int64_t in = w.dim(0), out = w.dim(1);
  Dims split{groups, in / groups, out};
  split.insert(split.end(), k.begin(), k.end());
  Dims perm{1, 0, 2};
  for (int64_t i = 0; i < n; ++i) perm.push_back(3 + i);
  Dims merged{in / groups, groups * out};
  merged.insert(merged.end(), k.begin(), k.end());
  Value regrouped = b.reshape(b.transpose(b.reshape(w, split), perm), merged);
  return b.reverse(regrouped, iota_from(2, n));
}

// The transposed convolution of x [N, C_in, ...] by w [C_in, C_out/groups,
// k...] with `out` spatial sizes, i.e. the gradient of `correlate` with
// respect to its input: x dilated by the stride, padded by the kernel's reach
// less the padding, correlated with the flipped kernel. Padding larger than
// the reach is negative: it removes elements.
Value transpose_conv(Context& c, const Value& x, const Value& w, const ConvParams& p,
                     const Dims& out, ElementType result) {
  int64_t n = static_cast<int64_t>(out.size());
  hlo::ConvConfig config;
  config.lhs_dilation = p.stride;
  config.rhs_dilation = p.dilation;
  config.feature_group_count = p.groups;
  for (int64_t i = 0; i < n; ++i) {
    int64_t reach = p.dilation[i] * (w.dim(2 + i) - 1);
    int64_t low = reach - p.padding[i];
    int64_t high = out[i] - 1 - (x.dim(2 + i) - 1) * p.stride[i] + p.padding[i];
    config.padding.emplace_back(low, high);
  }
  hlo::ConvDims dims = nc_dims(n);
  dims.kernel_input_feature = 0;
  dims.kernel_output_feature = 1;
  return conv(c, x, transposed_kernel(c.b, w, p.groups), dims, config, result);
}

// Gradient of correlate(x, w) with respect to w, given grad_out: for each
// kernel tap, the sum over batch and positions of grad_out times the input it
// saw. That is a convolution of x (batch and feature roles swapped) by
// grad_out dilated by the stride, stepping by the dilation; batch groups
// keep each output channel with its input channels.
Value kernel_grad(Context& c, const Value& x, const Value& grad_out, const ConvParams& p,
                  const Dims& kernel, ElementType result) {
  int64_t n = static_cast<int64_t>(kernel.size());
  hlo::ConvConfig config;
  config.window_strides = p.dilation;
  config.rhs_dilation = p.stride;
  config.batch_group_count = p.groups;
  for (int64_t i = 0; i < n; ++i) {
    int64_t reach = (grad_out.dim(2 + i) - 1) * p.stride[i] + 1;
    int64_t high = (kernel[i] - 1) * p.dilation[i] + reach - x.dim(2 + i) - p.padding[i];
    config.padding.emplace_back(p.padding[i], high);
  }
  hlo::ConvDims dims = nc_dims(n);
  dims.input_batch = 1;
  dims.input_feature = 0;
  dims.kernel_input_feature = 0;
  dims.kernel_output_feature = 1;
  dims.output_batch = 1;
  dims.output_feature = 0;
  return conv(c, x, grad_out, dims, config, result);
}

// Integers convolve exactly (wrapping in their type), as PyTorch's int64
// kernels do. PyTorch's CPU kernels reject bool and complex (F.conv* splits
// complex inputs into real convolutions before reaching us): the fallback
// raises their error.
void check_type(const Value& x) {
  if (x.type() == ElementType::Pred || is_complex(x.type())) {
    throw Unsupported("convolution of " + std::string(short_name(x.type())) + " tensors");
  }
}

Value convolve(Context& c, const Value& x, const Value& w, const ConvParams& p, const Dims& out,
               ElementType result) {
  if (p.transposed) return transpose_conv(c, x, w, p, out, result);
  return correlate(c, x, w, p, out, result);
}

// convolution(input, weight, bias, stride, padding, dilation, transposed,
// output_padding, groups); also _convolution, whose extra arguments only
// pick a backend.
std::vector<Value> convolution(Context& c, const Args& a) {
  Value x = a.tensor(0), w = a.tensor(1);
  check_type(x);
  const Shape& out = c.output(0);
  ConvParams p = read_params(a, 3, x.rank() - 2);
  ElementType t = accumulation_type(out.type);
  Value y = convolve(c, x, w, p, Dims(out.dims.begin() + 2, out.dims.end()), t);
  if (auto bias = a.optional_tensor(2)) {
    y = c.b.add(y, c.b.broadcast_in_dim(convert(c.b, *bias, t), y.dims(), {1}));
  }
  return {y};
}

// convolution_backward(grad_output, input, weight, bias_sizes, stride,
// padding, dilation, transposed, output_padding, groups, output_mask)
//   -> (grad_input, grad_weight, grad_bias)
// A result the output mask leaves out is returned undefined: the engine
// discards whatever the rule gives for it, so it gets a zero placeholder of
// the type and shape the engine announces instead of a convolution.
std::vector<Value> convolution_backward(Context& c, const Args& a) {
  Value grad = a.tensor(0), x = a.tensor(1), w = a.tensor(2);
  check_type(x);
  ConvParams p = read_params(a, 4, x.rank() - 2);
  BoolList mask = a.bools(10);
  std::vector<Value> results;
  for (size_t i = 0; i < 3; ++i) results.push_back(c.b.full(c.output(i), 0));
  // A transposed convolution's input gradient is the forward correlation,
  // and a correlation's the transposed convolution, with the same weight.
  if (mask[0]) {
    ConvParams q = p;
    q.transposed = !p.transposed;
    results[0] = convolve(c, grad, w, q, spatial_sizes(x), c.output(0).type);
  }
  // The kernel gradient of a transposed convolution is that of the
  // correlation it is the gradient of: grad_output and input swap roles.
  if (mask[1]) {
    const Value& lhs = p.transposed ? grad : x;
    const Value& rhs = p.transposed ? x : grad;
    results[1] = kernel_grad(c, lhs, rhs, p, spatial_sizes(w), c.output(1).type);
  }
  if (mask[2]) {
    Value g = convert(c.b, grad, accumulation_type(grad.type()));
    Dims dims{0};
    for (int64_t i = 2; i < g.rank(); ++i) dims.push_back(i);
    results[2] = reduce_sum(c.b, g, dims);
  }
  return results;
}

}  // namespace

TPU_LOWERING_PRECISION(convolution, "convolution", "_convolution");
TPU_LOWERING_PRECISION(convolution_backward, "convolution_backward");

}  // namespace torch_tpu::lower
