// Data movement that keeps element values: concatenation, flips, rolls,
// padding, repetition, triangular masks.
#include <numeric>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// cat(Tensor[] tensors, int dim=0): legacy 1-D empty tensors are skipped, as
// in PyTorch; inputs are promoted to the result dtype.
std::vector<Value> cat(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  std::vector<Value> parts;
  for (const Value& v : a.tensors(0)) {
    if (v.rank() == 1 && v.dim(0) == 0 && out.rank() != 1) continue;
    if (v.shape.numel() == 0 && v.rank() == out.rank()) continue;
    parts.push_back(convert(c.b, v, out.type));
  }
  if (parts.empty()) return {c.b.full(out, 0)};
  int64_t dim = wrap_dim(a.integer(1), out.rank());
  return {c.b.concatenate(parts, dim)};
}

// flip(self, int[] dims)
std::vector<Value> flip(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims dims = reduction_dims(a.ints(1), x.rank());
  if (a.ints(1).empty()) dims.clear();
  return {c.b.reverse(x, dims)};
}

Value roll_dim(Builder& b, const Value& x, int64_t shift, int64_t dim) {
  int64_t n = x.dim(dim);
  if (n == 0) return x;
  shift = ((shift % n) + n) % n;
  if (shift == 0) return x;
  Dims start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  Dims mid_start = start, mid_limit = limit;
  mid_start[dim] = n - shift;
  Value tail = b.slice(x, mid_start, limit, strides);
  mid_limit[dim] = n - shift;
  Value head = b.slice(x, start, mid_limit, strides);
  return b.concatenate({tail, head}, dim);
}

// roll(self, int[] shifts, int[] dims): no dims rolls the flattened tensor.
std::vector<Value> roll(Context& c, const Args& a) {
  Value x = a.tensor(0);
  IntList shifts = a.ints(1), dims = a.ints(2);
  if (dims.empty()) {
    Value flat = c.b.reshape(x, {x.shape.numel()});
    return {c.b.reshape(roll_dim(c.b, flat, shifts.at(0), 0), x.dims())};
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    x = roll_dim(c.b, x, shifts.at(i), wrap_dim(dims[i], x.rank()));
  }
  return {x};
}

// constant_pad_nd(self, int[] pad, Scalar value): pairs from the last
// dimension backwards; negative padding crops.
std::vector<Value> constant_pad_nd(Context& c, const Args& a) {
  Value x = a.tensor(0);
  IntList pad = a.ints(1);
  Dims low(x.rank(), 0), high(x.rank(), 0), interior(x.rank(), 0);
  for (size_t i = 0; i + 1 < pad.size() && i / 2 < static_cast<size_t>(x.rank()); i += 2) {
    int64_t dim = x.rank() - 1 - static_cast<int64_t>(i / 2);
    low[dim] = pad[i];
    high[dim] = pad[i + 1];
  }
  Value value = convert(c.b, a.tensor(2), x.type());
  return {c.b.pad(x, value, low, high, interior)};
}

// repeat(self, int[] repeats): view self as [1, d0, 1, d1, ...], broadcast to
// [r0, d0, r1, d1, ...] and merge pairs.
std::vector<Value> repeat(Context& c, const Args& a) {
  Value x = a.tensor(0);
  IntList repeats = a.ints(1);
  size_t lead = repeats.size() - x.rank();
  Dims padded(lead, 1);
  padded.insert(padded.end(), x.dims().begin(), x.dims().end());
  Dims interleaved_in, interleaved_out, out;
  for (size_t i = 0; i < repeats.size(); ++i) {
    interleaved_in.insert(interleaved_in.end(), {1, padded[i]});
    interleaved_out.insert(interleaved_out.end(), {repeats[i], padded[i]});
    out.push_back(repeats[i] * padded[i]);
  }
  Value v = c.b.reshape(x, interleaved_in);
  Dims identity(interleaved_in.size());
  std::iota(identity.begin(), identity.end(), 0);
  v = c.b.broadcast_in_dim(v, interleaved_out, identity);
  return {c.b.reshape(v, out)};
}

// Elements kept by tril (keep_upper=false) or triu: compares column - row
// with the diagonal offset over the last two dimensions.
Value triangle(Context& c, const Args& a, bool keep_upper) {
  Value x = a.tensor(0);
  int64_t diagonal = a.integer(1);
  Builder& b = c.b;
  Shape idx{ElementType::S64, x.dims()};
  Value offset = b.sub(b.iota(idx, x.rank() - 1), b.iota(idx, x.rank() - 2));
  Value keep = b.compare(offset, b.full(idx, static_cast<double>(diagonal)),
                         keep_upper ? hlo::Comparison::GE : hlo::Comparison::LE);
  return b.select(keep, x, b.full(x.shape, 0));
}

std::vector<Value> tril(Context& c, const Args& a) { return {triangle(c, a, false)}; }
std::vector<Value> triu(Context& c, const Args& a) { return {triangle(c, a, true)}; }

}  // namespace

TPU_LOWERING(cat, "cat");
TPU_LOWERING(flip, "flip");
TPU_LOWERING(roll, "roll");
TPU_LOWERING(constant_pad_nd, "constant_pad_nd");
TPU_LOWERING(repeat, "repeat");
TPU_LOWERING(tril, "tril");
TPU_LOWERING(triu, "triu");

}  // namespace torch_tpu::lower
