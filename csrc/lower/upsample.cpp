// Upsampling (interpolate): nearest, nearest-exact, (bi/tri)linear, bicubic and the
// antialiased bilinear/bicubic, forward and backward. Every mode is separable: along each
// resampled dimension an output element is a weighted sum of input elements whose indices
// and weights depend only on the (static) sizes and scales. They are computed here, at
// lowering time, with PyTorch's own arithmetic (aten/native/UpSample.h: float for
// float/half/bfloat16, double for double), and applied as a matmul with a small
// [out, in] weight matrix per dimension; the backward is the transposed matmul. Nearest
// modes gather instead (exact for every dtype) and scatter-add their gradients.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic, LinearAA, CubicAA };

using Scale = std::optional<double>;

// ---------------------------------------------------------------- index math (UpSample.h)

template <typename T>
T scales_value(Scale scale, int64_t in, int64_t out) {
  return (scale && *scale > 0.) ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / out;
}

template <typename T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, Scale scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / (out - 1) : T(0);
  return scales_value<T>(scale, in, out);
}

template <typename T>
T source_index(T scale, int64_t i, bool align_corners, bool cubic) {
  if (align_corners) return scale * i;
  T src = scale * (i + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return (!cubic && src < T(0)) ? T(0) : src;
}

int64_t nearest_index(Mode mode, int64_t i, int64_t in, int64_t out, Scale scale) {
  if (mode == Mode::Nearest) {
    if (out == in) return i;
    if (out == 2 * in) return i >> 1;
    float s = scales_value<float>(scale, in, out);
    return std::min(static_cast<int64_t>(floorf(i * s)), in - 1);
  }
  float s = scales_value<float>(scale, in, out);
  return std::min(static_cast<int64_t>(floorf((i + 0.5) * s)), in - 1);
}

template <typename T>
T cubic1(T x, T a) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}

template <typename T>
T cubic2(T x, T a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

// PyTorch's guard_index_and_lambda.
template <typename T>
void index_and_lambda(T real, int64_t in, int64_t& index, T& lambda) {
  index = std::min(static_cast<int64_t>(floorf(real)), in - 1);
  lambda = std::min(std::max(real - static_cast<T>(index), T(0)), T(1));
}

// `v` rounded to nearest-even with `bits` significant bits, subnormals below 2^min_exp.
double round_to_precision(double v, int bits, int min_exp) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e = 0;
  std::frexp(v, &e);
  double ulp = std::ldexp(1.0, std::max(e, min_exp + 1) - bits);
  return std::nearbyint(v / ulp) * ulp;
}

// `v` as stored in `type`.
double store(double v, ElementType type) {
  if (type == ElementType::F16) return round_to_precision(v, 11, -14);
  if (type == ElementType::BF16) return round_to_precision(v, 8, -126);
  if (type == ElementType::F32) return static_cast<float>(v);
  return v;
}

// Row-major [out, in] interpolation weights of one dimension, computed in T (PyTorch's
// opmath type) and stored as `type`.
template <typename T>
std::vector<double> weights(Mode mode, int64_t in, int64_t out, bool align_corners, Scale scale,
                            ElementType type) {
  std::vector<double> w(static_cast<size_t>(in * out), 0.0);
  auto add = [&](int64_t o, int64_t i, double v) { w[o * in + i] += v; };
  auto st = [&](T v) { return static_cast<T>(store(static_cast<double>(v), type)); };
  T s = pixel_scale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    if (mode == Mode::Linear) {
      if (in == out) {
        add(o, o, T(1));
        continue;
      }
      int64_t i0;
      T l1;
      index_and_lambda(source_index<T>(s, o, align_corners, false), in, i0, l1);
      l1 = st(l1);
      add(o, i0, st(T(1) - l1));
      add(o, i0 + (i0 < in - 1 ? 1 : 0), l1);
    } else if (mode == Mode::Cubic) {
      int64_t i0;
      T t;
      index_and_lambda(source_index<T>(s, o, align_corners, true), in, i0, t);
      const T a = T(-0.75);
      T t2 = T(1) - t;
      T coeffs[4] = {cubic2<T>(t + T(1), a), cubic1<T>(t, a), cubic1<T>(t2, a),
                     cubic2<T>(t2 + T(1), a)};
      for (int64_t j = 0; j < 4; ++j)
        add(o, std::clamp<int64_t>(i0 - 1 + j, 0, in - 1), st(coeffs[j]));
    } else {
      // Antialiased: a filter stretched by the downscaling factor, normalised to sum 1
      // (PyTorch's _compute_weights_aa).
      bool cubic = mode == Mode::CubicAA;
      auto filter = [&](T x) -> T {
        x = std::abs(x);
        if (!cubic) return x < T(1) ? T(1) - x : T(0);
        const T a = T(-0.5);
        if (x < T(1)) return cubic1<T>(x, a);
        if (x < T(2)) return cubic2<T>(x, a);
        return T(0);
      };
      T interp = cubic ? T(4) : T(2);
      T support = s >= T(1) ? (interp * T(0.5)) * s : interp * T(0.5);
      int64_t max_size = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
      T center = static_cast<T>(s * (o + 0.5));
      T invscale = s >= T(1) ? T(1) / s : T(1);
      int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
      int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
      xsize = std::clamp(xsize, int64_t{0}, max_size);
      std::vector<T> taps(static_cast<size_t>(xsize));
      T total = 0;
      for (int64_t j = 0; j < xsize; ++j) {
        taps[j] = filter(static_cast<T>((j + xmin - center + 0.5) * invscale));
        total += taps[j];
      }
      for (int64_t j = 0; j < xsize; ++j)
        add(o, xmin + j, st(total != T(0) ? taps[j] / total : taps[j]));
    }
  }
  return w;
}

// ---------------------------------------------------------------- program pieces

// A dense constant from host data (raw little-endian bytes, as MLIR's hex form takes).
Value dense_constant(Builder& b, const std::vector<double>& values, const Shape& shape) {
  std::string bytes;
  for (double v : values) {
    char buf[8];
    if (shape.type == ElementType::F64) {
      std::memcpy(buf, &v, 8);
      bytes.append(buf, 8);
    } else {
      auto f = static_cast<float>(v);
      std::memcpy(buf, &f, 4);
      bytes.append(buf, 4);
    }
  }
  static const char* hex = "0123456789ABCDEF";
  std::string text = "0x";
  for (unsigned char ch : bytes) {
    text += hex[ch >> 4];
    text += hex[ch & 15];
  }
  return b.emit("stablehlo.constant", {}, "value = dense<\"" + text + "\"> : " + shape.mlir(),
                {shape})[0];
}

struct Geometry {
  Mode mode;
  int64_t k;  // resampled (trailing) dimensions
  bool align_corners = false;
  std::vector<Scale> scales;
};

// Contracts the first resampled dimension (`lead`) of x with a [out, in] matrix (or its
// transpose); the new dimension comes last, so k calls restore the dimension order.
Value apply_matrix(Builder& b, const Value& x, const Value& w, int64_t lead, bool transposed) {
  hlo::DotDims d;
  d.lhs_contract = {lead};
  d.rhs_contract = {transposed ? 0 : 1};
  return b.dot_general(x, w, d, Precision::Highest, x.type());
}

// Resamples x from dims `in` to dims `out`; with `backward`, x has dims `out` and the
// transposed weights take it back to `in`.
Value resample(Builder& b, Value x, const Geometry& g, const Dims& in, const Dims& out,
               bool backward) {
  ElementType type = x.type();
  ElementType acc = type == ElementType::F64 ? ElementType::F64 : ElementType::F32;
  x = convert(b, x, acc);
  int64_t lead = x.rank() - g.k;
  // The CPU forward keeps the weights in the input's dtype, except in its vectorised
  // bilinear kernel (chosen for small outputs) and in the backward kernels.
  bool small = g.mode == Mode::Linear && g.k == 2 && out[lead] + out[lead + 1] <= 128;
  ElementType storage = backward || small ? acc : type;
  for (int64_t d = 0; d < g.k; ++d) {
    int64_t n_in = in[lead + d], n_out = out[lead + d];
    std::vector<double> w =
        acc == ElementType::F64
            ? weights<double>(g.mode, n_in, n_out, g.align_corners, g.scales[d], storage)
            : weights<float>(g.mode, n_in, n_out, g.align_corners, g.scales[d], storage);
    Value m = dense_constant(b, w, {acc, {n_out, n_in}});
    x = apply_matrix(b, x, m, lead, backward);
  }
  return x;
}

Dims nearest_indices(Mode mode, int64_t in, int64_t out, Scale scale) {
  Dims idx(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) idx[o] = nearest_index(mode, o, in, out, scale);
  return idx;
}

bool is_nearest(Mode m) { return m == Mode::Nearest || m == Mode::NearestExact; }

bool empty(const Dims& dims) {
  return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; });
}

Value forward(Context& c, const Value& x, const Geometry& g) {
  const Shape& out = c.output(0);
  if (empty(out.dims) || empty(x.dims())) return c.b.full(out, 0);
  if (!is_nearest(g.mode)) {
    if (!is_floating(x.type())) throw Unsupported("interpolation of integer tensors");
    return resample(c.b, x, g, x.dims(), out.dims, false);
  }
  Value y = x;
  int64_t lead = x.rank() - g.k;
  for (int64_t d = 0; d < g.k; ++d) {
    int64_t dim = lead + d;
    y = gather_along(c.b, y, dim, nearest_indices(g.mode, x.dim(dim), out.dims[dim], g.scales[d]));
  }
  return y;
}

Value backward(Context& c, const Value& grad, const Geometry& g) {
  const Shape& in = c.output(0);
  if (empty(in.dims) || empty(grad.dims())) return c.b.full(in, 0);
  if (!is_nearest(g.mode)) return resample(c.b, grad, g, in.dims, grad.dims(), true);
  Value y = convert(c.b, grad, accumulation_type(grad.type()));
  int64_t lead = in.rank() - g.k;
  for (int64_t d = 0; d < g.k; ++d) {
    int64_t dim = lead + d;
    Dims idx = nearest_indices(g.mode, in.dims[dim], grad.dim(dim), g.scales[d]);
    y = scatter_add_along(c.b, y, dim, idx, in.dims[dim]);
  }
  return y;
}

std::vector<Scale> scales_from(const Args& a, size_t first, int64_t k) {
  std::vector<Scale> s;
  for (int64_t d = 0; d < k; ++d) s.push_back(a.optional_real(first + d));
  return s;
}

// ---------------------------------------------------------------- rules

// upsample_nearest{1,2,3}d(self, output_size, scales...)
template <Mode M, int64_t K>
std::vector<Value> nearest(Context& c, const Args& a) {
  return {forward(c, a.tensor(0), {M, K, false, scales_from(a, 2, K)})};
}

// upsample_nearest{1,2,3}d_backward(grad_output, output_size, input_size, scales...)
template <Mode M, int64_t K>
std::vector<Value> nearest_backward(Context& c, const Args& a) {
  return {backward(c, a.tensor(0), {M, K, false, scales_from(a, 3, K)})};
}

// upsample_{linear1d,bilinear2d,trilinear3d,bicubic2d}(self, output_size, align_corners,
//     scales...) and the _aa variants
template <Mode M, int64_t K>
std::vector<Value> interpolate(Context& c, const Args& a) {
  return {forward(c, a.tensor(0), {M, K, a.boolean(2), scales_from(a, 3, K)})};
}

// ..._backward(grad_output, output_size, input_size, align_corners, scales...)
template <Mode M, int64_t K>
std::vector<Value> interpolate_backward(Context& c, const Args& a) {
  return {backward(c, a.tensor(0), {M, K, a.boolean(3), scales_from(a, 4, K)})};
}

}  // namespace

TPU_LOWERING((nearest<Mode::Nearest, 1>), "upsample_nearest1d");
TPU_LOWERING((nearest<Mode::Nearest, 2>), "upsample_nearest2d");
TPU_LOWERING((nearest<Mode::Nearest, 3>), "upsample_nearest3d");
TPU_LOWERING((nearest<Mode::NearestExact, 1>), "_upsample_nearest_exact1d");
TPU_LOWERING((nearest<Mode::NearestExact, 2>), "_upsample_nearest_exact2d");
TPU_LOWERING((nearest<Mode::NearestExact, 3>), "_upsample_nearest_exact3d");
TPU_LOWERING((nearest_backward<Mode::Nearest, 1>), "upsample_nearest1d_backward");
TPU_LOWERING((nearest_backward<Mode::Nearest, 2>), "upsample_nearest2d_backward");
TPU_LOWERING((nearest_backward<Mode::Nearest, 3>), "upsample_nearest3d_backward");
TPU_LOWERING((nearest_backward<Mode::NearestExact, 1>), "_upsample_nearest_exact1d_backward");
TPU_LOWERING((nearest_backward<Mode::NearestExact, 2>), "_upsample_nearest_exact2d_backward");
TPU_LOWERING((nearest_backward<Mode::NearestExact, 3>), "_upsample_nearest_exact3d_backward");
TPU_LOWERING((interpolate<Mode::Linear, 1>), "upsample_linear1d");
TPU_LOWERING((interpolate<Mode::Linear, 2>), "upsample_bilinear2d");
TPU_LOWERING((interpolate<Mode::Linear, 3>), "upsample_trilinear3d");
TPU_LOWERING((interpolate<Mode::Cubic, 2>), "upsample_bicubic2d");
TPU_LOWERING((interpolate<Mode::LinearAA, 2>), "_upsample_bilinear2d_aa");
TPU_LOWERING((interpolate<Mode::CubicAA, 2>), "_upsample_bicubic2d_aa");
TPU_LOWERING((interpolate_backward<Mode::Linear, 1>), "upsample_linear1d_backward");
TPU_LOWERING((interpolate_backward<Mode::Linear, 2>), "upsample_bilinear2d_backward");
TPU_LOWERING((interpolate_backward<Mode::Linear, 3>), "upsample_trilinear3d_backward");
TPU_LOWERING((interpolate_backward<Mode::Cubic, 2>), "upsample_bicubic2d_backward");
TPU_LOWERING((interpolate_backward<Mode::LinearAA, 2>), "_upsample_bilinear2d_aa_backward");
TPU_LOWERING((interpolate_backward<Mode::CubicAA, 2>), "_upsample_bicubic2d_aa_backward");

}  // namespace torch_tpu::lower
