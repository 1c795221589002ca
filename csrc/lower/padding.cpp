// Reflection and replication padding (1d/2d/3d) and their gradients. Each padded
// dimension maps every output position to one input position (reflected about the edges,
// or clamped to them), known at lowering time: the forward gathers those positions and
// the backward scatter-adds the gradient back. Negative padding crops, as in PyTorch.
// Circular padding is a CompositeImplicitAutograd decomposition (slices and cat).
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// Input position of each output position of one dimension padded by (low, high).
Dims source_positions(bool reflect, int64_t in, int64_t low, int64_t high) {
  Dims idx;
  for (int64_t o = 0; o < in + low + high; ++o) {
    int64_t i = o - low;
    if (reflect) {
      if (i < 0) i = -i;
      if (i >= in) i = 2 * (in - 1) - i;
    } else {
      i = std::clamp<int64_t>(i, 0, in - 1);
    }
    idx.push_back(i);
  }
  return idx;
}

bool empty(const Dims& dims) {
  return std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d == 0; });
}

// PyTorch's padding list names the last dimension first: (left, right, top, bottom, ...).
// Returns, for each padded dimension (outermost first), (dim, low, high).
std::vector<std::array<int64_t, 3>> padded_dims(const IntList& pad, int64_t rank) {
  std::vector<std::array<int64_t, 3>> dims;
  int64_t k = static_cast<int64_t>(pad.size()) / 2;
  for (int64_t d = 0; d < k; ++d) {
    int64_t from_last = k - 1 - d;
    dims.push_back({rank - k + d, pad[2 * from_last], pad[2 * from_last + 1]});
  }
  return dims;
}

// {reflection,replication}_pad{1,2,3}d(self, padding)
template <bool Reflect>
std::vector<Value> pad(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (empty(out.dims)) return {c.b.full(out, 0)};
  for (auto [dim, low, high] : padded_dims(a.ints(1), x.rank())) {
    x = gather_along(c.b, x, dim, source_positions(Reflect, x.dim(dim), low, high));
  }
  return {x};
}

// {reflection,replication}_pad{1,2,3}d_backward(grad_output, self, padding)
template <bool Reflect>
std::vector<Value> pad_backward(Context& c, const Args& a) {
  const Shape& in = c.output(0);
  Value g = a.tensor(0);
  if (empty(in.dims) || empty(g.dims())) return {c.b.full(in, 0)};
  g = convert(c.b, g, accumulation_type(g.type()));
  for (auto [dim, low, high] : padded_dims(a.ints(2), in.rank())) {
    g = scatter_add_along(c.b, g, dim, source_positions(Reflect, in.dims[dim], low, high),
                          in.dims[dim]);
  }
  return {g};
}

}  // namespace

TPU_LOWERING(pad<true>, "reflection_pad1d", "reflection_pad2d", "reflection_pad3d");
TPU_LOWERING(pad<false>, "replication_pad1d", "replication_pad2d", "replication_pad3d");
TPU_LOWERING(pad_backward<true>, "reflection_pad1d_backward", "reflection_pad2d_backward",
             "reflection_pad3d_backward");
TPU_LOWERING(pad_backward<false>, "replication_pad1d_backward", "replication_pad2d_backward",
             "replication_pad3d_backward");

}  // namespace torch_tpu::lower
