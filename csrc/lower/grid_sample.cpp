// grid_sampler_{2,3}d and their backward: sampling `input` at the normalised
// coordinates of `grid` (bilinear/trilinear, nearest, bicubic; padding zeros, border,
// reflection), following aten/native/GridSampler.h. Along each spatial dimension a
// sample touches a few taps (2 for linear, 1 for nearest, 4 for bicubic), each with an
// integer position, a validity flag and a weight. The forward gathers the taps' channel
// vectors and sums them weighted; the backward scatter-adds the weighted output gradient
// into the input gradient and differentiates the weights for the grid gradient.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

enum Interp : int64_t { Bilinear = 0, Nearest = 1, Bicubic = 2 };
enum Padding : int64_t { Zeros = 0, Border = 1, Reflection = 2 };

constexpr ElementType kIndex = ElementType::S64;

struct Tap {
  Value position;  // s64
  Value valid;     // pred
  Value weight;
  Value dweight;  // d weight / d source coordinate
};

struct Sampler {
  Builder& b;
  ElementType acc;
  Dims g;  // grid dims without the coordinate dimension: N, *out
  int64_t padding;
  bool align_corners;

  Value k(double v) const { return b.full({acc, g}, v); }

  // grid_sampler_unnormalize_set_grad: returns the pixel coordinate, sets d/d coordinate.
  Value unnormalize(const Value& c, int64_t size, Value& mult) const {
    if (align_corners) {
      mult = k((size - 1) / 2.0);
      return b.mul(b.div(b.add(c, k(1)), k(2)), k(static_cast<double>(size - 1)));
    }
    mult = k(size / 2.0);
    return b.div(b.sub(b.mul(b.add(c, k(1)), k(static_cast<double>(size))), k(1)), k(2));
  }

  // clip_coordinates_set_grad
  Value clip(const Value& x, int64_t size, Value& grad) const {
    Value low = b.compare(x, k(0), hlo::Comparison::LE);
    Value high = b.compare(x, k(static_cast<double>(size - 1)), hlo::Comparison::GE);
    Value inside = b.not_(b.or_(low, high));
    grad = b.mul(grad, b.select(inside, k(1), k(0)));
    return b.select(low, k(0), b.select(high, k(static_cast<double>(size - 1)), x));
  }

  // reflect_coordinates_set_grad over [twice_low/2, twice_high/2]
  Value reflect(const Value& x, int64_t twice_low, int64_t twice_high, Value& grad) const {
    if (twice_low == twice_high) {
      grad = k(0);
      return k(0);
    }
    double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
    Value in = b.sub(x, k(lo));
    Value negative = b.compare(in, k(0), hlo::Comparison::LT);
    Value sign = b.select(negative, k(-1), k(1));
    in = b.abs(in);
    Value extra = b.rem(in, k(span));
    Value flips = b.floor(b.div(in, k(span)));
    Value odd = b.compare(b.sub(flips, b.mul(k(2), b.floor(b.div(flips, k(2))))), k(0),
                          hlo::Comparison::NE);
    grad = b.mul(grad, b.select(odd, b.neg(sign), sign));
    return b.select(odd, b.add(b.sub(k(span), extra), k(lo)), b.add(extra, k(lo)));
  }

  // compute_coordinates_set_grad: the padding mode applied to a pixel coordinate.
  Value pad(const Value& x, int64_t size, Value& grad) const {
    if (padding == Border) return clip(x, size, grad);
    if (padding == Reflection) {
      Value r =
          align_corners ? reflect(x, 0, 2 * (size - 1), grad) : reflect(x, -1, 2 * size - 1, grad);
      return clip(r, size, grad);
    }
    return x;
  }

  Tap tap(const Value& position, int64_t size, const Value& weight, const Value& dweight) const {
    Value p = b.convert(position, kIndex);
    Value lo = b.full({kIndex, g}, 0), hi = b.full({kIndex, g}, static_cast<double>(size - 1));
    Value valid =
        b.and_(b.compare(p, lo, hlo::Comparison::GE), b.compare(p, hi, hlo::Comparison::LE));
    return {b.clamp(lo, p, hi), valid, weight, dweight};
  }

  // The taps of one dimension for coordinates `c` (normalised); sets d source / d c.
  std::vector<Tap> taps(int64_t mode, const Value& c, int64_t size, Value& mult) const {
    Value x = unnormalize(c, size, mult);
    std::vector<Tap> out;
    if (mode == Bicubic) {
      // Taps around the unpadded coordinate; each tap position is padded on its own.
      Value f = b.floor(x);
      Value t = b.sub(x, f);
      const double a = -0.75;
      auto c1 = [&](const Value& v) {  // ((a+2)v - (a+3)) v^2 + 1
        return b.add(b.mul(b.mul(b.sub(b.mul(k(a + 2), v), k(a + 3)), v), v), k(1));
      };
      auto c2 = [&](const Value& v) {  // ((a v - 5a) v + 8a) v - 4a
        return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(k(a), v), k(5 * a)), v), k(8 * a)), v),
                     k(4 * a));
      };
      auto d1 = [&](const Value& v) {  // 3(a+2)v^2 - 2(a+3)v
        return b.mul(b.sub(b.mul(k(3 * (a + 2)), v), k(2 * (a + 3))), v);
      };
      auto d2 = [&](const Value& v) {  // 3a v^2 - 10a v + 8a
        return b.add(b.mul(b.sub(b.mul(k(3 * a), v), k(10 * a)), v), k(8 * a));
      };
      Value t1 = b.add(t, k(1)), u = b.sub(k(1), t), u1 = b.add(u, k(1));
      Value w[4] = {c2(t1), c1(t), c1(u), c2(u1)};
      Value dw[4] = {d2(t1), d1(t), b.neg(d1(u)), b.neg(d2(u1))};
      for (int64_t i = 0; i < 4; ++i) {
        Value unused = k(1);
        Value p = pad(b.add(f, k(static_cast<double>(i - 1))), size, unused);
        out.push_back(tap(p, size, w[i], dw[i]));
      }
      return out;
    }
    x = pad(x, size, mult);
    if (mode == Nearest) {
      Value r = b.unary("round_nearest_even", x);
      out.push_back(tap(r, size, k(1), k(0)));
      return out;
    }
    Value f = b.floor(x);
    Value f1 = b.add(f, k(1));
    out.push_back(tap(f, size, b.sub(f1, x), k(-1)));
    out.push_back(tap(f1, size, b.sub(x, f), k(1)));
    return out;
  }
};

struct Plan {
  int64_t n = 0, channels = 0, points = 0;  // points: samples per batch element
  Dims in_spatial, out_spatial;
  std::vector<std::vector<Tap>> taps;  // per coordinate (x, y, z)
  std::vector<Value> mult;             // d source / d grid, per coordinate
};

Plan plan(Sampler& s, const Value& input, const Value& grid, int64_t mode) {
  Plan p;
  int64_t k = grid.dim(-1);
  p.n = input.dim(0);
  p.channels = input.dim(1);
  p.in_spatial.assign(input.dims().begin() + 2, input.dims().end());
  p.out_spatial.assign(grid.dims().begin() + 1, grid.dims().end() - 1);
  p.points = 1;
  for (int64_t d : p.out_spatial) p.points *= d;
  Builder& b = s.b;
  for (int64_t d = 0; d < k; ++d) {
    Dims start(grid.rank(), 0), limit = grid.dims();
    start.back() = d;
    limit.back() = d + 1;
    Value c = b.reshape(b.slice(grid, start, limit, Dims(grid.rank(), 1)), s.g);
    int64_t size = p.in_spatial[k - 1 - d];  // x indexes the last input dimension
    Value mult = s.k(1);
    p.taps.push_back(s.taps(mode, c, size, mult));
    p.mult.push_back(mult);
  }
  return p;
}

// Every combination of one tap per coordinate; calls fn(taps) with x varying fastest.
void for_each_corner(const Plan& p, const std::function<void(const std::vector<const Tap*>&)>& fn) {
  size_t k = p.taps.size();
  std::vector<size_t> at(k, 0);
  while (true) {
    std::vector<const Tap*> corner;
    for (size_t d = 0; d < k; ++d) corner.push_back(&p.taps[d][at[d]]);
    fn(corner);
    size_t d = 0;
    while (d < k && ++at[d] == p.taps[d].size()) at[d++] = 0;
    if (d == k) return;
  }
}

// All corners (one tap per coordinate) side by side: [N, T * points] values, corner-major.
struct Corners {
  int64_t count = 0;           // T
  Value indices;               // [N, T * points, 2]: batch, flat input position
  Value valid;                 // pred
  Value weight;                // product of the taps' weights
  std::vector<Value> dweight;  // per coordinate: d weight / d source coordinate
};

Corners corners(Builder& b, const Plan& p) {
  Dims g{p.n, p.points};
  std::vector<Value> flats, valids, weights;
  std::vector<std::vector<Value>> dweights(p.taps.size());
  for_each_corner(p, [&](const std::vector<const Tap*>& corner) {
    std::optional<Value> flat, valid, weight;
    int64_t stride = 1;
    for (size_t d = 0; d < corner.size(); ++d) {
      Value term = b.mul(b.reshape(corner[d]->position, g),
                         b.full({kIndex, g}, static_cast<double>(stride)));
      flat = flat ? b.add(*flat, term) : term;
      Value v = b.reshape(corner[d]->valid, g);
      valid = valid ? b.and_(*valid, v) : v;
      Value w = b.reshape(corner[d]->weight, g);
      weight = weight ? b.mul(*weight, w) : w;
      stride *= p.in_spatial[p.in_spatial.size() - 1 - d];
    }
    for (size_t d = 0; d < corner.size(); ++d) {
      std::optional<Value> dw;
      for (size_t e = 0; e < corner.size(); ++e) {
        Value f = b.reshape(e == d ? corner[e]->dweight : corner[e]->weight, g);
        dw = dw ? b.mul(*dw, f) : f;
      }
      dweights[d].push_back(*dw);
    }
    flats.push_back(*flat);
    valids.push_back(*valid);
    weights.push_back(*weight);
  });
  auto cat = [&](const std::vector<Value>& v) {
    return v.size() == 1 ? v[0] : b.concatenate(v, 1);
  };
  Corners c;
  c.count = static_cast<int64_t>(flats.size());
  Dims g1{p.n, c.count * p.points, 1};
  Value batch = b.iota({kIndex, g1}, 0);
  c.indices = b.concatenate({batch, b.reshape(cat(flats), g1)}, 2);
  c.valid = cat(valids);
  c.weight = cat(weights);
  for (auto& dw : dweights) c.dweight.push_back(cat(dw));
  return c;
}

// input [N, C, *S] -> [N, prod(S), C]
Value channels_last(Builder& b, const Value& x, const Plan& p) {
  Dims perm{0};
  for (int64_t i = 2; i < x.rank(); ++i) perm.push_back(i);
  perm.push_back(1);
  int64_t size = 1;
  for (int64_t d : p.in_spatial) size *= d;
  return b.reshape(b.transpose(x, perm), {p.n, size, p.channels});
}

// [N, points, C] -> [N, C, *out]
Value channels_first(Builder& b, const Value& x, const Plan& p) {
  Dims dims{p.n};
  dims.insert(dims.end(), p.out_spatial.begin(), p.out_spatial.end());
  dims.push_back(p.channels);
  Dims perm{0, static_cast<int64_t>(dims.size()) - 1};
  for (size_t i = 1; i + 1 < dims.size(); ++i) perm.push_back(static_cast<int64_t>(i));
  return b.transpose(b.reshape(x, dims), perm);
}

// [N, M] -> [N, M, C]
Value spread(Builder& b, const Value& v, int64_t channels);

// The corners' channel vectors, [N, T * points, C]; zero at invalid corners.
Value gather_corners(Builder& b, const Value& table, const Corners& c, const Plan& p) {
  hlo::GatherDims d;
  d.offset_dims = {2};
  d.collapsed_slice_dims = {0, 1};
  d.start_index_map = {0, 1};
  d.index_vector_dim = 2;
  Value v = b.gather(table, c.indices, d, {1, 1, p.channels});
  return b.select(spread(b, c.valid, p.channels), v, b.full(v.shape, 0));
}

// [N, M] -> [N, M, C]
Value spread(Builder& b, const Value& v, int64_t channels) {
  return b.broadcast_in_dim(v, {v.dim(0), v.dim(1), channels}, {0, 1});
}

// Sum over the corners of [N, T * points, ...] -> [N, points, ...]
Value sum_corners(Builder& b, const Value& v, const Corners& c, const Plan& p) {
  Dims dims{p.n, c.count, p.points};
  dims.insert(dims.end(), v.dims().begin() + 2, v.dims().end());
  return reduce_sum(b, b.reshape(v, dims), {1});
}

void check_supported(const Value& input, const Value& grid) {
  if (!is_floating(input.type()) || input.type() != grid.type()) {
    throw Unsupported("grid_sampler on non-floating or mixed dtypes");
  }
}

// grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners)
std::vector<Value> grid_sampler(Context& c, const Args& a) {
  Builder& b = c.b;
  Value input = a.tensor(0), grid = a.tensor(1);
  check_supported(input, grid);
  const Shape& out = c.output(0);
  if (out.numel() == 0 || input.shape.numel() == 0) return {b.full(out, 0)};
  ElementType acc = accumulation_type(input.type());
  input = convert(b, input, acc);
  grid = convert(b, grid, acc);
  Dims g(grid.dims().begin(), grid.dims().end() - 1);
  Sampler s{b, acc, g, a.integer(3), a.boolean(4)};
  Plan p = plan(s, input, grid, a.integer(2));
  Value table = channels_last(b, input, p);
  Corners cs = corners(b, p);
  Value v = gather_corners(b, table, cs, p);
  Value sum = sum_corners(b, b.mul(v, spread(b, cs.weight, p.channels)), cs, p);
  return {channels_first(b, sum, p)};
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
//     align_corners, output_mask) -> (grad_input, grad_grid)
std::vector<Value> grid_sampler_backward(Context& c, const Args& a) {
  Builder& b = c.b;
  Value input = a.tensor(1), grid = a.tensor(2);
  check_supported(input, grid);
  const Shape& grad_input_shape = c.output(0);
  const Shape& grad_grid_shape = c.output(1);
  if (input.shape.numel() == 0 || grid.shape.numel() == 0) {
    return {b.full(grad_input_shape, 0), b.full(grad_grid_shape, 0)};
  }
  ElementType acc = accumulation_type(input.type());
  Value grad = convert(b, a.tensor(0), acc);
  input = convert(b, input, acc);
  grid = convert(b, grid, acc);
  Dims g(grid.dims().begin(), grid.dims().end() - 1);
  int64_t mode = a.integer(3);
  Sampler s{b, acc, g, a.integer(4), a.boolean(5)};
  Plan p = plan(s, input, grid, mode);
  size_t k = p.taps.size();
  Value table = channels_last(b, input, p);
  // grad_output [N, C, *out] -> [N, points, C]
  Dims perm{0};
  for (int64_t i = 2; i < grad.rank(); ++i) perm.push_back(i);
  perm.push_back(1);
  Value gout = b.reshape(b.transpose(grad, perm), {p.n, p.points, p.channels});
  Corners cs = corners(b, p);
  // grad_output repeated for every corner: [N, T * points, C]
  Value gout_all =
      b.reshape(b.broadcast_in_dim(gout, {p.n, cs.count, p.points, p.channels}, {0, 2, 3}),
                {p.n, cs.count * p.points, p.channels});
  Value mask = spread(b, cs.valid, p.channels);
  Value update =
      b.select(mask, b.mul(gout_all, spread(b, cs.weight, p.channels)), b.full(gout_all.shape, 0));
  hlo::ScatterDims sd;
  sd.update_window_dims = {2};
  sd.inserted_window_dims = {0, 1};
  sd.scatter_dims_to_operand_dims = {0, 1};
  sd.index_vector_dim = 2;
  Value grad_table = b.scatter(b.full(table.shape, 0), cs.indices, update, sd,
                               [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                                 return {r.add(v[0], v[1])};
                               });
  std::vector<std::optional<Value>> grad_coord(k);
  if (mode != Nearest) {
    // sum over channels of value * grad_output, times d weight / d coordinate
    Value vg = reduce_sum(b, b.mul(gather_corners(b, table, cs, p), gout_all), {2});
    for (size_t d = 0; d < k; ++d) {
      grad_coord[d] = b.reshape(sum_corners(b, b.mul(vg, cs.dweight[d]), cs, p), g);
    }
  }

  // grad_table [N, prod(S), C] -> [N, C, *S]
  Dims dims{p.n};
  dims.insert(dims.end(), p.in_spatial.begin(), p.in_spatial.end());
  dims.push_back(p.channels);
  Dims back{0, static_cast<int64_t>(dims.size()) - 1};
  for (size_t i = 1; i + 1 < dims.size(); ++i) back.push_back(static_cast<int64_t>(i));
  Value grad_input = b.transpose(b.reshape(grad_table, dims), back);

  Dims g1 = g;
  g1.push_back(1);
  std::vector<Value> parts;
  for (size_t d = 0; d < k; ++d) {
    Value gd = grad_coord[d] ? b.mul(*grad_coord[d], p.mult[d]) : s.k(0);
    parts.push_back(b.reshape(gd, g1));
  }
  return {grad_input, b.concatenate(parts, static_cast<int64_t>(g.size()))};
}

}  // namespace

TPU_LOWERING(grid_sampler, "grid_sampler_2d", "grid_sampler_3d");
TPU_LOWERING(grid_sampler_backward, "grid_sampler_2d_backward", "grid_sampler_3d_backward");

}  // namespace torch_tpu::lower
