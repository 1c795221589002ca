// Fast Fourier transforms (_fft_r2c, _fft_c2c, _fft_c2r) on stablehlo.fft.
// stablehlo.fft transforms at most the three trailing dimensions, so the
// transformed dimensions are moved to the end and done three at a time.
#include <algorithm>
#include <cmath>
#include <string>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// PyTorch's fft_norm_mode.
enum Norm : int64_t { kNone = 0, kByRootN = 1, kByN = 2 };

Dims wrap_dims(const IntList& dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) out.push_back(wrap_dim(d, rank));
  return out;
}

// One stablehlo.fft of `type` over `dims` (at most three) with the given
// lengths of the transformed signal. `result` is the result element type.
Value fft_over(Builder& b, const Value& x, const Dims& dims, const char* type, const Dims& lengths,
               ElementType result) {
  // Permutation moving `dims`, in order, to the end.
  Dims perm;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) perm.push_back(i);
  }
  perm.insert(perm.end(), dims.begin(), dims.end());
  Dims inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);

  Value moved = b.transpose(x, perm);
  Dims out_dims = moved.dims();
  if (std::string(type) == "RFFT") out_dims.back() = lengths.back() / 2 + 1;
  if (std::string(type) == "IRFFT") out_dims.back() = lengths.back();
  std::string attrs = std::string("fft_type = #stablehlo<fft_type ") + type +
                      ">, fft_length = " + hlo::i64_array(lengths);
  Value y = b.emit("stablehlo.fft", {moved}, attrs, {Shape{result, out_dims}})[0];
  return b.transpose(y, inverse);
}

// Forward or inverse complex transforms over `dims`, three at a time.
Value c2c_over(Builder& b, Value x, const Dims& dims, bool forward) {
  for (size_t start = 0; start < dims.size(); start += 3) {
    Dims chunk(dims.begin() + start, dims.begin() + std::min(dims.size(), start + 3));
    Dims lengths;
    for (int64_t d : chunk) lengths.push_back(x.dim(d));
    x = fft_over(b, x, chunk, forward ? "FFT" : "IFFT", lengths, x.type());
  }
  return x;
}

// Scales `x` so a transform of `n` points computed with `xla_scale` (1 for
// forward transforms, 1/n for XLA's inverse ones) ends with PyTorch's
// normalization.
Value normalize(Builder& b, const Value& x, int64_t norm, double n, double xla_scale) {
  double want = norm == kByN ? 1.0 / n : norm == kByRootN ? 1.0 / std::sqrt(n) : 1.0;
  double factor = want / xla_scale;
  if (factor == 1.0 || n == 0) return x;
  return b.mul(x, b.full(x.shape, factor));
}

double signal_size(const Value& x, const Dims& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.dim(d));
  return n;
}

// _fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward)
std::vector<Value> fft_c2c(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = convert(b, a.tensor(0), c.output(0).type);
  Dims dims = wrap_dims(a.ints(1), x.rank());
  if (dims.empty()) return {x};
  bool forward = a.boolean(3);
  double n = signal_size(x, dims);
  Value y = c2c_over(b, x, dims, forward);
  return {normalize(b, y, a.integer(2), n, forward ? 1.0 : 1.0 / n)};
}

// _fft_r2c(Tensor self, int[] dim, int normalization, bool onesided): the
// last listed dimension is halved when onesided.
std::vector<Value> fft_r2c(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType out = c.output(0).type;
  Value x = a.tensor(0);
  Dims dims = wrap_dims(a.ints(1), x.rank());
  if (dims.empty()) return {convert(b, x, out)};
  x = convert(b, x, complex_component(out));
  double n = signal_size(x, dims);
  Value y;
  if (!a.boolean(3)) {
    y = c2c_over(b, convert(b, x, out), dims, true);
  } else {
    // Real transform over the last (up to) three listed dimensions, then
    // complex transforms over the others.
    size_t split = dims.size() > 3 ? dims.size() - 3 : 0;
    Dims tail(dims.begin() + split, dims.end());
    Dims lengths;
    for (int64_t d : tail) lengths.push_back(x.dim(d));
    y = fft_over(b, x, tail, "RFFT", lengths, out);
    y = c2c_over(b, y, Dims(dims.begin(), dims.begin() + split), true);
  }
  return {normalize(b, y, a.integer(2), n, 1.0)};
}

// _fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size)
std::vector<Value> fft_c2r(Context& c, const Args& a) {
  Builder& b = c.b;
  const Shape& out = c.output(0);
  Value x = convert(b, a.tensor(0), to_complex(out.type));
  Dims dims = wrap_dims(a.ints(1), x.rank());
  if (dims.empty()) return {convert(b, x, out.type)};
  int64_t last = dims.back();
  int64_t last_size = a.integer(3);
  // The transform reads last_size / 2 + 1 points of the last dimension.
  int64_t half = last_size / 2 + 1;
  if (x.dim(last) > half) {
    Dims limit = x.dims();
    limit[last] = half;
    x = b.slice(x, Dims(x.rank(), 0), limit, Dims(x.rank(), 1));
  } else if (x.dim(last) < half) {
    Dims high(x.rank(), 0);
    high[last] = half - x.dim(last);
    x = b.pad(x, b.constant(0.0, x.type()), Dims(x.rank(), 0), high, Dims(x.rank(), 0));
  }
  size_t split = dims.size() > 3 ? dims.size() - 3 : 0;
  Dims tail(dims.begin() + split, dims.end());
  Dims head(dims.begin(), dims.begin() + split);
  double n = signal_size(x, head);
  Value y = c2c_over(b, x, head, false);
  Dims lengths;
  for (int64_t d : tail) lengths.push_back(d == last ? last_size : x.dim(d));
  for (int64_t d : lengths) n *= static_cast<double>(d);
  y = fft_over(b, y, tail, "IRFFT", lengths, out.type);
  return {normalize(b, y, a.integer(2), n, 1.0 / n)};
}

}  // namespace

TPU_LOWERING(fft_c2c, "_fft_c2c");
TPU_LOWERING(fft_r2c, "_fft_r2c");
TPU_LOWERING(fft_c2r, "_fft_c2r");

}  // namespace torch_tpu::lower
