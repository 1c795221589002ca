// max_unpool2d/3d (each value written at the flat position its index names
// within the output plane) and fractional max pooling (pseudo-random window
// starts drawn from the `random_samples` argument) with its gradient.
#include <cmath>
#include <limits>
#include <string>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

int64_t product(const Dims& dims, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < dims.size(); ++i) n *= dims[i];
  return n;
}

// Writes (combine = replace) or adds `values` ([planes..., plane_in...]) into
// zeros of `out` at the flat positions `indices` names within each plane of
// its last k dims. Positions outside the plane are dropped.
Value scatter_to_planes(Builder& b, const Value& values, const Value& indices, const Shape& out,
                        size_t k, bool add) {
  int64_t lead = out.rank() - static_cast<int64_t>(k);
  int64_t planes = product(Dims(out.dims.begin(), out.dims.begin() + lead));
  int64_t plane_out = product(out.dims, lead);
  int64_t plane_in = product(values.dims(), lead);
  ElementType t = add ? accumulation_type(out.type) : values.type();
  if (out.numel() == 0 || planes * plane_in == 0) return b.full({t, out.dims}, 0);
  Value updates = b.reshape(convert(b, values, t), {planes, plane_in});
  Dims index_dims{planes, plane_in, 1};
  Value plane = b.iota({kIndex, index_dims}, 0);
  Value position = b.reshape(convert(b, indices, kIndex), index_dims);
  hlo::ScatterDims d;
  d.inserted_window_dims = {0, 1};
  d.scatter_dims_to_operand_dims = {0, 1};
  d.index_vector_dim = 2;
  Value zeros = b.full({t, {planes, plane_out}}, 0);
  Value r = b.scatter(zeros, b.concatenate({plane, position}, 2), updates, d,
                      [add](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                        return {add ? r.add(v[0], v[1]) : v[1]};
                      });
  return b.reshape(r, out.dims);
}

// max_unpool2d(self, indices, output_size) /
// max_unpool3d(self, indices, output_size, stride, padding). Overlapping
// pooling windows repeat an index with the same value, so the order of
// writes does not matter.
// The CPU refuses an index outside the output plane ("4x4", "2x4x4").
void check_unpool_indices(Context& c, const Value& indices, const Shape& out, size_t k) {
  const size_t lead = out.dims.size() - k;
  std::string plane;
  for (size_t d = lead; d < out.dims.size(); ++d) {
    plane += (d > lead ? "x" : "") + std::to_string(out.dims[d]);
  }
  check_index_range(c, indices, product(out.dims, lead), false, DataCheck::Error::Runtime,
                    "Found an invalid max index: {} (output volumes are of size " + plane + ")");
}

std::vector<Value> max_unpool2d(Context& c, const Args& a) {
  check_unpool_indices(c, a.tensor(1), c.output(0), 2);
  return {scatter_to_planes(c.b, a.tensor(0), a.tensor(1), c.output(0), 2, false)};
}

std::vector<Value> max_unpool3d(Context& c, const Args& a) {
  check_unpool_indices(c, a.tensor(1), c.output(0), 3);
  return {scatter_to_planes(c.b, a.tensor(0), a.tensor(1), c.output(0), 3, false)};
}

// ---------------------------------------------------------------- fractional

// Reducer over (value, flat position) pairs keeping what PyTorch's scan
// `if (val > maxval || isnan(val))` keeps: the larger value, the first
// position among equals, NaN over everything (the last NaN).
std::vector<Value> max_with_index(Builder& b, const std::vector<Value>& v) {
  const Value &av = v[0], &ai = v[1], &bv = v[2], &bi = v[3];
  Value a_first = b.compare(ai, bi, hlo::Comparison::LT);
  Value take_a = b.or_(b.compare(av, bv, hlo::Comparison::GT),
                       b.and_(b.compare(av, bv, hlo::Comparison::EQ), a_first));
  Value a_nan = b.compare(av, av, hlo::Comparison::NE);
  Value b_nan = b.compare(bv, bv, hlo::Comparison::NE);
  take_a =
      b.select(b.and_(a_nan, b_nan), b.not_(a_first), b.or_(a_nan, b.and_(b.not_(b_nan), take_a)));
  return {b.select(take_a, av, bv), b.select(take_a, ai, bi)};
}

// Window starts along one pooled dimension for every plane: PyTorch's
// generate_intervals, in the samples' dtype,
//   start[i] = int((i + u) * alpha) - int(u * alpha),  alpha = (in - k) / (out - 1),
// and in - k for the last window. `u`: [planes]; result: [planes, out] s64.
Value interval_starts(Builder& b, const Value& u, int64_t in, int64_t out, int64_t k) {
  int64_t planes = u.dim(0);
  Shape line{kIndex, {planes, out}};
  Value last = b.full(line, static_cast<double>(in - k));
  if (out == 1) return last;
  ElementType t = u.type();
  Dims dims{planes, out};
  Value alpha = b.div(b.full({t, dims}, static_cast<double>(in - k)),
                      b.full({t, dims}, static_cast<double>(out - 1)));
  Value us = b.broadcast_in_dim(u, dims, {0});
  Value i = b.convert(b.iota({kIndex, dims}, 1), t);
  Value whole = b.convert(b.mul(b.add(i, us), alpha), kIndex);
  Value offset = b.convert(b.mul(us, alpha), kIndex);
  Value is_last =
      b.compare(b.iota(line, 1), b.full(line, static_cast<double>(out - 1)), hlo::Comparison::EQ);
  return b.select(is_last, last, b.sub(whole, offset));
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples)
// -> (output, indices). samples[..., j] draws the starts of pooled dim j,
// counted from the last (width) for 2d and from the first for 3d.
std::vector<Value> fractional_max_pool(Context& c, const Args& a, size_t k) {
  const Shape &out = c.output(0), &idx_shape = c.output(1);
  Value x = a.tensor(0);
  if (out.numel() == 0) return {c.b.full(out, 0), c.b.full(idx_shape, 0)};
  int64_t lead = x.rank() - static_cast<int64_t>(k);
  int64_t planes = product(Dims(x.dims().begin(), x.dims().begin() + lead));
  Dims in(x.dims().begin() + lead, x.dims().end()), pooled(out.dims.begin() + lead, out.dims.end());
  IntList kernel = a.ints(1);
  if (kernel.size() == 1) kernel = IntList(k, kernel[0]);
  // The CPU reads plane p's samples at p * k of the contiguous samples: the first
  // planes * k of them (an unbatched input takes the first batch's of [N, C, k]).
  Value all = a.tensor(3);
  Value samples = c.b.reshape(all, {all.shape.numel()});
  if (all.shape.numel() > planes * int64_t(k)) {
    samples = c.b.slice(samples, {0}, {planes * int64_t(k)}, {1});
  }
  samples = c.b.reshape(convert(c.b, samples, x.type()), {planes, int64_t(k)});

  // Per output element and window offset, the flat position in the plane:
  // dims [planes, out_0..out_k-1, kernel_0..kernel_k-1].
  Dims dims{planes};
  dims.insert(dims.end(), pooled.begin(), pooled.end());
  dims.insert(dims.end(), kernel.begin(), kernel.end());
  int64_t kk = static_cast<int64_t>(k);
  Value position = c.b.full({kIndex, dims}, 0);
  for (int64_t d = 0; d < kk; ++d) {
    int64_t sample = k == 2 ? kk - 1 - d : d;
    Value u = c.b.reshape(c.b.slice(samples, {0, sample}, {planes, sample + 1}, {1, 1}), {planes});
    Value starts = interval_starts(c.b, u, in[d], pooled[d], kernel[d]);
    Value along = c.b.add(c.b.broadcast_in_dim(starts, dims, {0, 1 + d}),
                          c.b.iota({kIndex, dims}, 1 + kk + d));
    int64_t stride = product(in, d + 1);
    position = c.b.add(position, c.b.mul(along, c.b.full(along.shape, double(stride))));
  }
  int64_t plane_in = product(in);
  Value plane = c.b.mul(c.b.iota({kIndex, dims}, 0), c.b.full({kIndex, dims}, double(plane_in)));
  Value flat = c.b.add(plane, position);
  hlo::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = flat.rank();
  Dims index_dims = dims;
  index_dims.push_back(1);
  Value values =
      c.b.gather(c.b.reshape(x, {planes * plane_in}), c.b.reshape(flat, index_dims), g, {1});
  Dims window;
  for (int64_t d = 0; d < kk; ++d) window.push_back(1 + kk + d);
  Value no_index = c.b.constant_int(std::numeric_limits<int64_t>::max(), kIndex);
  auto r = c.b.reduce({values, position}, {lowest_value(c.b, x.type()), no_index}, window,
                      max_with_index);
  return {c.b.reshape(r[0], out.dims), c.b.reshape(r[1], idx_shape.dims)};
}

std::vector<Value> fractional_max_pool2d(Context& c, const Args& a) {
  return fractional_max_pool(c, a, 2);
}

std::vector<Value> fractional_max_pool3d(Context& c, const Args& a) {
  return fractional_max_pool(c, a, 3);
}

// fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size,
//     output_size, indices): each gradient added at its index's position.
//     (fractional_max_pool3d_backward's meta kernel is in torch_tpu/_meta.py.)
std::vector<Value> fractional_max_pool2d_backward(Context& c, const Args& a) {
  return {scatter_to_planes(c.b, a.tensor(0), a.tensor(4), c.output(0), 2, true)};
}

std::vector<Value> fractional_max_pool3d_backward(Context& c, const Args& a) {
  return {scatter_to_planes(c.b, a.tensor(0), a.tensor(4), c.output(0), 3, true)};
}

}  // namespace

TPU_LOWERING(fractional_max_pool2d, "fractional_max_pool2d");
TPU_LOWERING(fractional_max_pool3d, "fractional_max_pool3d");
TPU_LOWERING(fractional_max_pool2d_backward, "fractional_max_pool2d_backward");
TPU_LOWERING(fractional_max_pool3d_backward, "fractional_max_pool3d_backward");
TPU_LOWERING(max_unpool2d, "max_unpool2d");
TPU_LOWERING(max_unpool3d, "max_unpool3d");

}  // namespace torch_tpu::lower
