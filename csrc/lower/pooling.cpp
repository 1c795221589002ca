// Pooling: max pooling (with PyTorch's indices: the flat position of the
// maximum within its input plane), average pooling and the adaptive variants,
// forward and backward. Pooled dimensions are the trailing k of the input;
// the leading ones (batch, channels) are independent planes. Result shapes
// (ceil_mode included) come from PyTorch's meta kernels via c.output().
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

// Geometry of the k pooled dimensions (all Dims have k entries).
struct Pool {
  int64_t lead = 0;  // leading dimensions that are not pooled
  Dims in, out, kernel, stride, pad, dilation;
};

// PyTorch accepts one value for every dimension; an empty stride means the kernel size.
Dims per_dim(const IntList& v, size_t k, const Dims& if_empty) {
  if (v.empty()) return if_empty;
  if (v.size() == 1) return Dims(k, v[0]);
  return Dims(v.begin(), v.end());
}

Pool pool_geometry(const Value& x, const Dims& out_dims, size_t k, const IntList& kernel,
                   const IntList& stride, const IntList& pad, const IntList& dilation) {
  Pool p;
  p.lead = x.rank() - static_cast<int64_t>(k);
  p.in.assign(x.dims().begin() + p.lead, x.dims().end());
  p.out.assign(out_dims.begin() + p.lead, out_dims.end());
  p.kernel = per_dim(kernel, k, {});
  p.stride = per_dim(stride, k, p.kernel);
  p.pad = per_dim(pad, k, Dims(k, 0));
  p.dilation = per_dim(dilation, k, Dims(k, 1));
  return p;
}

// Full-rank window over the pooled dimensions. The high padding makes the
// window count at least `out` (PyTorch's ceil_mode windows may run past the
// padded input); callers slice the surplus off.
hlo::Window pool_window(const Pool& p) {
  hlo::Window w;
  for (int64_t i = 0; i < p.lead; ++i) {
    w.dimensions.push_back(1);
    w.strides.push_back(1);
    w.window_dilations.push_back(1);
    w.padding.emplace_back(0, 0);
  }
  for (size_t d = 0; d < p.in.size(); ++d) {
    int64_t extent = (p.kernel[d] - 1) * p.dilation[d] + 1;
    int64_t high = (p.out[d] - 1) * p.stride[d] + extent - p.in[d] - p.pad[d];
    w.dimensions.push_back(p.kernel[d]);
    w.strides.push_back(p.stride[d]);
    w.window_dilations.push_back(p.dilation[d]);
    w.padding.emplace_back(p.pad[d], std::max<int64_t>(high, 0));
  }
  return w;
}

Value slice_to(Builder& b, const Value& x, const Dims& dims) {
  return b.slice(x, Dims(dims.size(), 0), dims, Dims(dims.size(), 1));
}

bool is_empty(const Dims& dims) {
  return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; });
}

int64_t product(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// ---------------------------------------------------------------- max

// Reducer body over (value, index) pairs choosing what PyTorch's CPU loop
// `if (val > maxval || isnan(val))` keeps when it scans a window in index
// order: the larger value, the first index among equal values, and NaN over
// everything (the last NaN). That is a total order, so the reduction may run
// in any order.
std::vector<Value> max_with_index(Builder& b, const std::vector<Value>& v) {
  const Value &av = v[0], &ai = v[1], &bv = v[2], &bi = v[3];
  Value a_first = b.compare(ai, bi, hlo::Comparison::LT);
  Value take_a = b.or_(b.compare(av, bv, hlo::Comparison::GT),
                       b.and_(b.compare(av, bv, hlo::Comparison::EQ), a_first));
  if (is_floating(av.type())) {
    Value a_nan = b.compare(av, av, hlo::Comparison::NE);
    Value b_nan = b.compare(bv, bv, hlo::Comparison::NE);
    Value both_nan = b.and_(a_nan, b_nan);
    take_a = b.select(both_nan, b.not_(a_first), b.or_(a_nan, b.and_(b.not_(b_nan), take_a)));
  }
  return {b.select(take_a, av, bv), b.select(take_a, ai, bi)};
}

// The flat position of every element within its plane (the last k dims).
Value plane_positions(Builder& b, const Dims& dims, int64_t lead) {
  Dims plane(dims.begin() + lead, dims.end());
  Value flat = b.iota({kIndex, {product(plane)}}, 0);
  Value positions = b.reshape(flat, plane);
  Dims mapping;
  for (size_t i = 0; i < plane.size(); ++i) mapping.push_back(lead + static_cast<int64_t>(i));
  return b.broadcast_in_dim(positions, dims, mapping);
}

Value no_index(Builder& b) { return b.constant_int(std::numeric_limits<int64_t>::max(), kIndex); }

// max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
std::vector<Value> max_pool_with_indices(Context& c, const Args& a, size_t k) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (is_empty(out.dims)) return {c.b.full(out, 0), c.b.full(c.output(1), 0)};
  Pool p = pool_geometry(x, out.dims, k, a.ints(1), a.ints(2), a.ints(3), a.ints(4));
  Value positions = plane_positions(c.b, x.dims(), p.lead);
  auto r = c.b.reduce_window({x, positions}, {lowest_value(c.b, x.type()), no_index(c.b)},
                             pool_window(p), max_with_index);
  return {slice_to(c.b, r[0], out.dims), slice_to(c.b, r[1], out.dims)};
}

std::vector<Value> max_pool2d_with_indices(Context& c, const Args& a) {
  return max_pool_with_indices(c, a, 2);
}

std::vector<Value> max_pool3d_with_indices(Context& c, const Args& a) {
  return max_pool_with_indices(c, a, 3);
}

// Gradient of a max pooling: each output's gradient is added at the input
// position its index names (PyTorch's `grad_input[index] += grad_output`).
// Indices outside the plane (e.g. -1) are skipped, as scatter does.
Value scatter_to_positions(Builder& b, const Value& grad, const Value& indices, const Shape& input,
                           size_t k) {
  int64_t lead = input.rank() - static_cast<int64_t>(k);
  Dims planes(input.dims.begin(), input.dims.begin() + lead);
  int64_t num_planes = product(planes);
  int64_t plane_in = product(Dims(input.dims.begin() + lead, input.dims.end()));
  int64_t plane_out = product(Dims(grad.dims().begin() + lead, grad.dims().end()));
  ElementType acc = accumulation_type(input.type);
  if (num_planes * plane_in == 0) return b.full(input, 0);

  Value updates = b.reshape(convert(b, grad, acc), {num_planes, plane_out});
  Dims index_dims{num_planes, plane_out, 1};
  Value plane = b.iota({kIndex, index_dims}, 0);
  Value position = b.reshape(convert(b, indices, kIndex), index_dims);
  Value where = b.concatenate({plane, position}, 2);
  hlo::ScatterDims dims;
  dims.inserted_window_dims = {0, 1};
  dims.scatter_dims_to_operand_dims = {0, 1};
  dims.index_vector_dim = 2;
  Value zeros = b.full({acc, {num_planes, plane_in}}, 0);
  Value summed = b.scatter(zeros, where, updates, dims,
                           [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                             return {r.add(v[0], v[1])};
                           });
  return b.reshape(summed, input.dims);
}

// max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride,
//     padding, dilation, ceil_mode, indices)
std::vector<Value> max_pool_backward(Context& c, const Args& a, size_t k) {
  return {scatter_to_positions(c.b, a.tensor(0), a.tensor(7), c.output(0), k)};
}

std::vector<Value> max_pool2d_backward(Context& c, const Args& a) {
  return max_pool_backward(c, a, 2);
}

std::vector<Value> max_pool3d_backward(Context& c, const Args& a) {
  return max_pool_backward(c, a, 3);
}

// ---------------------------------------------------------------- average

// The divisor of every output window as PyTorch's avg_pool kernels count it:
// the window clipped to the padded input (count_include_pad) or to the input
// itself; both factor per dimension. Windows with nothing to count divide a
// zero sum by 1. Result: the pooled output dims, as `type`.
Value avg_divisors(Builder& b, const Pool& p, bool count_include_pad,
                   std::optional<int64_t> divisor_override, ElementType type) {
  Dims out_dims = p.out;
  if (divisor_override) return b.full({type, out_dims}, static_cast<double>(*divisor_override));
  std::optional<Value> total;
  for (size_t d = 0; d < p.in.size(); ++d) {
    Shape line{kIndex, {p.out[d]}};
    auto k = [&](int64_t v) { return b.full(line, static_cast<double>(v)); };
    Value start = b.sub(b.mul(b.iota(line, 0), k(p.stride[d])), k(p.pad[d]));
    Value end = b.min(b.add(start, k(p.kernel[d])), k(p.in[d] + p.pad[d]));
    Value count = count_include_pad
                      ? b.sub(end, start)
                      : b.max(b.sub(b.min(end, k(p.in[d])), b.max(start, k(0))), k(0));
    Dims mapping{static_cast<int64_t>(d)};
    Value spread = b.broadcast_in_dim(count, out_dims, mapping);
    total = total ? b.mul(*total, spread) : spread;
  }
  Value zero = b.full({kIndex, out_dims}, 0);
  Value one = b.full({kIndex, out_dims}, 1);
  Value safe = b.select(b.compare(*total, zero, hlo::Comparison::EQ), one, *total);
  return b.convert(safe, type);
}

Value window_sum(Builder& b, const Value& x, const hlo::Window& window) {
  return b.reduce_window({x}, {b.constant(0, x.type())}, window,
                         [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                           return {r.add(v[0], v[1])};
                         })[0];
}

struct AvgArgs {
  Pool pool;
  bool count_include_pad;
  std::optional<int64_t> divisor_override;
};

// avg_pool*(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override) from argument `first` on; `x` and `out_dims` are the
// pooled input and output.
AvgArgs avg_args(const Args& a, size_t first, const Value& x, const Dims& out_dims, size_t k) {
  AvgArgs r;
  r.pool =
      pool_geometry(x, out_dims, k, a.ints(first + 1), a.ints(first + 2), a.ints(first + 3), {});
  r.count_include_pad = a.boolean(first + 5);
  r.divisor_override = a.optional_integer(first + 6);
  // A window never counts past the padded input, so a kernel wider than it
  // (EfficientNet pools a 1x1 map with a 2560-wide kernel) sums and divides
  // as one exactly that wide; the full width would pad the input by it.
  for (size_t d = 0; d < k; ++d) {
    r.pool.kernel[d] = std::min(r.pool.kernel[d], r.pool.in[d] + 2 * r.pool.pad[d]);
  }
  return r;
}

// avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//     divisor_override): sums in the accumulation type, like PyTorch's kernels
// (integer inputs divide with truncation, as they do there).
std::vector<Value> avg_pool(Context& c, const Args& a, size_t k) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (is_empty(out.dims)) return {c.b.full(out, 0)};
  AvgArgs p = avg_args(a, 0, x, out.dims, k);
  ElementType acc = is_floating(x.type()) ? accumulation_type(x.type()) : kIndex;
  Value sum = slice_to(c.b, window_sum(c.b, convert(c.b, x, acc), pool_window(p.pool)), out.dims);
  Value divisor = avg_divisors(c.b, p.pool, p.count_include_pad, p.divisor_override, acc);
  return {c.b.div(sum, broadcast_to(c.b, divisor, out.dims))};
}

std::vector<Value> avg_pool2d(Context& c, const Args& a) { return avg_pool(c, a, 2); }
std::vector<Value> avg_pool3d(Context& c, const Args& a) { return avg_pool(c, a, 3); }

// Adds every output window's value back onto the input positions it covers
// (the transpose of a strided window sum): the values are spread `stride`
// apart and each input position sums the kernel-sized window that ends at it.
Value window_sum_transpose(Builder& b, const Value& g, const Pool& p) {
  Dims low(g.rank(), 0), high(g.rank(), 0), interior(g.rank(), 0);
  hlo::Window w;
  w.dimensions.assign(g.rank(), 1);
  for (size_t d = 0; d < p.in.size(); ++d) {
    size_t i = p.lead + d;
    int64_t spread = (p.out[d] - 1) * p.stride[d] + 1;
    interior[i] = p.stride[d] - 1;
    low[i] = p.kernel[d] - 1 - p.pad[d];
    high[i] = p.in[d] + p.kernel[d] - 1 - low[i] - spread;
    w.dimensions[i] = p.kernel[d];
  }
  Value spread = b.pad(g, b.constant(0, g.type()), low, high, interior);
  return window_sum(b, spread, w);
}

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding,
//     ceil_mode, count_include_pad, divisor_override)
std::vector<Value> avg_pool_backward(Context& c, const Args& a, size_t k) {
  Value grad = a.tensor(0);
  const Shape& in = c.output(0);
  if (is_empty(in.dims) || is_empty(grad.dims())) return {c.b.full(in, 0)};
  AvgArgs p = avg_args(a, 1, a.tensor(1), grad.dims(), k);
  ElementType acc = is_floating(in.type) ? accumulation_type(in.type) : in.type;
  Value divisor = avg_divisors(c.b, p.pool, p.count_include_pad, p.divisor_override, acc);
  Value share = c.b.div(convert(c.b, grad, acc), broadcast_to(c.b, divisor, grad.dims()));
  return {window_sum_transpose(c.b, share, p.pool)};
}

std::vector<Value> avg_pool2d_backward(Context& c, const Args& a) {
  return avg_pool_backward(c, a, 2);
}

std::vector<Value> avg_pool3d_backward(Context& c, const Args& a) {
  return avg_pool_backward(c, a, 3);
}

// ---------------------------------------------------------------- adaptive

// Adaptive window `o` of `out` over `in` positions: [floor(o*in/out), ceil((o+1)*in/out)).
Value adaptive_start(Builder& b, const Value& o, int64_t in, int64_t out) {
  return b.div(b.mul(o, b.full(o.shape, static_cast<double>(in))),
               b.full(o.shape, static_cast<double>(out)));
}

Value adaptive_end(Builder& b, const Value& o, int64_t in, int64_t out) {
  Value next = b.add(o, b.full(o.shape, 1));
  Value num = b.add(b.mul(next, b.full(o.shape, static_cast<double>(in))),
                    b.full(o.shape, static_cast<double>(out - 1)));
  return b.div(num, b.full(o.shape, static_cast<double>(out)));
}

// Largest adaptive window length (static).
int64_t adaptive_max_length(int64_t in, int64_t out) {
  int64_t longest = 0;
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * in / out, end = ((o + 1) * in + out - 1) / out;
    longest = std::max(longest, end - start);
  }
  return longest;
}

// [out, in] matrix with ones where input position i is in window o.
Value adaptive_membership(Builder& b, int64_t in, int64_t out, ElementType type) {
  Shape shape{kIndex, {out, in}};
  Value o = b.iota(shape, 0), i = b.iota(shape, 1);
  Value inside = b.and_(b.compare(i, adaptive_start(b, o, in, out), hlo::Comparison::GE),
                        b.compare(i, adaptive_end(b, o, in, out), hlo::Comparison::LT));
  return b.convert(inside, type);
}

// Window lengths [out] as `type`.
Value adaptive_lengths(Builder& b, int64_t in, int64_t out, ElementType type) {
  Value o = b.iota({kIndex, {out}}, 0);
  return b.convert(b.sub(adaptive_end(b, o, in, out), adaptive_start(b, o, in, out)), type);
}

// Contracts the first pooled dimension (at `lead`) with `matrix` along
// `matrix_dim`; the matrix's other dimension becomes the last one. Applied
// once per pooled dimension, the pooled dims end up in their original order.
Value contract_first_pooled(Builder& b, const Value& x, int64_t lead, const Value& matrix,
                            int64_t matrix_dim) {
  hlo::DotDims dims;
  dims.lhs_contract = {lead};
  dims.rhs_contract = {matrix_dim};
  return b.dot_general(x, matrix, dims, hlo::Precision::Highest, x.type());
}

// Divides by each output window's length along every pooled dimension in
// turn, as PyTorch's `sum / kh / kw` does.
Value divide_by_lengths(Builder& b, Value x, int64_t lead, const Dims& in, const Dims& out) {
  for (size_t d = 0; d < in.size(); ++d) {
    Value len = adaptive_lengths(b, in[d], out[d], x.type());
    x = b.div(x, b.broadcast_in_dim(len, x.dims(), {lead + static_cast<int64_t>(d)}));
  }
  return x;
}

// Windows that tile the input evenly (in % out == 0 in every pooled dim) make
// a plain strided window, cheaper to compile and run than contractions.
std::optional<Pool> even_windows(int64_t lead, const Dims& in, const Dims& out) {
  Pool p;
  p.lead = lead;
  p.in = in;
  p.out = out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (out[d] == 0 || in[d] % out[d] != 0) return std::nullopt;
    p.kernel.push_back(in[d] / out[d]);
    p.stride.push_back(in[d] / out[d]);
    p.pad.push_back(0);
    p.dilation.push_back(1);
  }
  return p;
}

// _adaptive_avg_pool{2,3}d(self, output_size)
std::vector<Value> adaptive_avg_pool(Context& c, const Args& a, size_t k) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (is_empty(out.dims)) return {c.b.full(out, 0)};
  int64_t lead = x.rank() - static_cast<int64_t>(k);
  Dims in_sizes(x.dims().begin() + lead, x.dims().end());
  Dims out_sizes(out.dims.begin() + lead, out.dims.end());
  Value y = convert(c.b, x, accumulation_type(x.type()));
  if (auto even = even_windows(lead, in_sizes, out_sizes)) {
    y = window_sum(c.b, y, pool_window(*even));
  } else {
    for (size_t d = 0; d < k; ++d) {
      Value member = adaptive_membership(c.b, in_sizes[d], out_sizes[d], y.type());
      y = contract_first_pooled(c.b, y, lead, member, 1);
    }
  }
  return {divide_by_lengths(c.b, y, lead, in_sizes, out_sizes)};
}

std::vector<Value> adaptive_avg_pool2d(Context& c, const Args& a) {
  return adaptive_avg_pool(c, a, 2);
}

std::vector<Value> adaptive_avg_pool3d(Context& c, const Args& a) {
  return adaptive_avg_pool(c, a, 3);
}

// _adaptive_avg_pool{2,3}d_backward(grad_output, self): each input position
// receives grad / window size from every window covering it.
std::vector<Value> adaptive_avg_pool_backward(Context& c, const Args& a, size_t k) {
  Value grad = a.tensor(0);
  const Shape& in = c.output(0);
  if (is_empty(in.dims) || is_empty(grad.dims())) return {c.b.full(in, 0)};
  int64_t lead = grad.rank() - static_cast<int64_t>(k);
  ElementType acc = accumulation_type(in.type);
  Dims in_sizes(in.dims.begin() + lead, in.dims.end());
  Dims out_sizes(grad.dims().begin() + lead, grad.dims().end());
  Value g = divide_by_lengths(c.b, convert(c.b, grad, acc), lead, in_sizes, out_sizes);
  if (auto even = even_windows(lead, in_sizes, out_sizes)) {
    return {window_sum_transpose(c.b, g, *even)};
  }
  for (size_t d = 0; d < k; ++d) {
    g = contract_first_pooled(c.b, g, lead,
                              adaptive_membership(c.b, in_sizes[d], out_sizes[d], acc), 0);
  }
  return {g};
}

std::vector<Value> adaptive_avg_pool2d_backward(Context& c, const Args& a) {
  return adaptive_avg_pool_backward(c, a, 2);
}

std::vector<Value> adaptive_avg_pool3d_backward(Context& c, const Args& a) {
  return adaptive_avg_pool_backward(c, a, 3);
}

// Gathers along dimension `dim` with a [out, len] table of positions: the
// dimension becomes two, (out, len).
Value gather_windows(Builder& b, const Value& x, int64_t dim, const Value& table) {
  hlo::GatherDims g;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) g.offset_dims.push_back(i < dim ? i : i + 1);
  }
  g.collapsed_slice_dims = {dim};
  g.start_index_map = {dim};
  g.index_vector_dim = 2;
  Dims sizes = x.dims();
  sizes[dim] = 1;
  Dims table_dims = table.dims();
  table_dims.push_back(1);
  return b.gather(x, b.reshape(table, table_dims), g, sizes);
}

// [out, len] positions of each adaptive window, repeating its last position
// where it is shorter than `len` (a repeated candidate changes no maximum).
Value adaptive_positions(Builder& b, int64_t in, int64_t out, int64_t len) {
  Shape shape{kIndex, {out, len}};
  Value o = b.iota(shape, 0), j = b.iota(shape, 1);
  Value last = b.sub(adaptive_end(b, o, in, out), b.full(shape, 1));
  return b.min(b.add(adaptive_start(b, o, in, out), j), last);
}

// adaptive_max_pool{2,3}d(self, output_size) -> (values, indices): gathers
// every window as (out, len) pairs of dimensions and reduces the lens.
std::vector<Value> adaptive_max_pool(Context& c, const Args& a, size_t k) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (is_empty(out.dims)) return {c.b.full(out, 0), c.b.full(c.output(1), 0)};
  int64_t lead = x.rank() - static_cast<int64_t>(k);
  Value values = x;
  std::optional<Value> flat;  // plane position of each candidate, over the pooled (out, len) dims
  Dims reduced;
  Dims window_dims;
  for (size_t d = 0; d < k; ++d) {
    int64_t i = lead + static_cast<int64_t>(d);
    int64_t in = x.dim(i), n = out.dims[i];
    int64_t len = adaptive_max_length(in, n);
    Value table = adaptive_positions(c.b, in, n, len);
    values = gather_windows(c.b, values, lead + 2 * static_cast<int64_t>(d), table);
    reduced.push_back(lead + 2 * static_cast<int64_t>(d) + 1);
    // Row-major plane position: previous * in + this.
    window_dims.push_back(n);
    window_dims.push_back(len);
    Dims mapping;
    for (size_t m = 0; m + 2 < window_dims.size(); ++m) mapping.push_back(m);
    Value scaled = flat ? c.b.mul(c.b.broadcast_in_dim(*flat, window_dims, mapping),
                                  c.b.full({kIndex, window_dims}, static_cast<double>(in)))
                        : c.b.full({kIndex, window_dims}, 0);
    int64_t last = static_cast<int64_t>(window_dims.size());
    flat = c.b.add(scaled, c.b.broadcast_in_dim(table, window_dims, {last - 2, last - 1}));
  }
  Dims mapping;
  for (size_t m = 0; m < window_dims.size(); ++m) mapping.push_back(lead + m);
  Value positions = c.b.broadcast_in_dim(*flat, values.dims(), mapping);
  auto r = c.b.reduce({values, positions}, {lowest_value(c.b, x.type()), no_index(c.b)}, reduced,
                      max_with_index);
  return {r[0], r[1]};
}

std::vector<Value> adaptive_max_pool2d(Context& c, const Args& a) {
  return adaptive_max_pool(c, a, 2);
}

std::vector<Value> adaptive_max_pool3d(Context& c, const Args& a) {
  return adaptive_max_pool(c, a, 3);
}

// adaptive_max_pool{2,3}d_backward(grad_output, self, indices)
std::vector<Value> adaptive_max_pool2d_backward(Context& c, const Args& a) {
  return {scatter_to_positions(c.b, a.tensor(0), a.tensor(2), c.output(0), 2)};
}

std::vector<Value> adaptive_max_pool3d_backward(Context& c, const Args& a) {
  return {scatter_to_positions(c.b, a.tensor(0), a.tensor(2), c.output(0), 3)};
}

}  // namespace

TPU_LOWERING(max_pool2d_with_indices, "max_pool2d_with_indices");
TPU_LOWERING(max_pool3d_with_indices, "max_pool3d_with_indices");
TPU_LOWERING(max_pool2d_backward, "max_pool2d_with_indices_backward");
TPU_LOWERING(max_pool3d_backward, "max_pool3d_with_indices_backward");
TPU_LOWERING(avg_pool2d, "avg_pool2d");
TPU_LOWERING(avg_pool3d, "avg_pool3d");
TPU_LOWERING(avg_pool2d_backward, "avg_pool2d_backward");
TPU_LOWERING(avg_pool3d_backward, "avg_pool3d_backward");
TPU_LOWERING(adaptive_avg_pool2d, "_adaptive_avg_pool2d");
TPU_LOWERING(adaptive_avg_pool3d, "_adaptive_avg_pool3d");
TPU_LOWERING(adaptive_avg_pool2d_backward, "_adaptive_avg_pool2d_backward");
TPU_LOWERING(adaptive_avg_pool3d_backward, "_adaptive_avg_pool3d_backward");
TPU_LOWERING(adaptive_max_pool2d, "adaptive_max_pool2d");
TPU_LOWERING(adaptive_max_pool3d, "adaptive_max_pool3d");
TPU_LOWERING(adaptive_max_pool2d_backward, "adaptive_max_pool2d_backward");
TPU_LOWERING(adaptive_max_pool3d_backward, "adaptive_max_pool3d_backward");

}  // namespace torch_tpu::lower
