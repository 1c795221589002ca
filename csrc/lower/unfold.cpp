// Sliding-window rearrangements: im2col (nn.functional.unfold) and col2im
// (nn.functional.fold), each the other's gradient, plus channel_shuffle. A window
// position (i, j) of the kernel selects a strided slice of the zero-padded input;
// im2col stacks the kh*kw slices, col2im places each block back (a pad with interior
// padding does the striding) and sums them.
#include <cstdint>
#include <optional>
#include <vector>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

struct Window2d {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
};

Window2d window(const Args& a, size_t kernel, size_t dilation, size_t padding, size_t stride) {
  IntList k = a.ints(kernel), d = a.ints(dilation), p = a.ints(padding), s = a.ints(stride);
  return {k[0], k[1], d[0], d[1], p[0], p[1], s[0], s[1]};
}

int64_t blocks(int64_t size, int64_t k, int64_t d, int64_t p, int64_t s) {
  return (size + 2 * p - (d * (k - 1) + 1)) / s + 1;
}

// im2col(self, kernel_size, dilation, padding, stride): [N,] C, H, W -> [N,] C*kh*kw, L
std::vector<Value> im2col(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (out.numel() == 0) return {b.full(out, 0)};
  bool batched = x.rank() == 4;
  if (!batched) x = b.reshape(x, {1, x.dim(0), x.dim(1), x.dim(2)});
  Window2d w = window(a, 1, 2, 3, 4);
  int64_t n = x.dim(0), ch = x.dim(1);
  int64_t oh = blocks(x.dim(2), w.kh, w.dh, w.ph, w.sh);
  int64_t ow = blocks(x.dim(3), w.kw, w.dw, w.pw, w.sw);
  Value padded =
      b.pad(x, scalar(b, 0, x.type()), {0, 0, w.ph, w.pw}, {0, 0, w.ph, w.pw}, {0, 0, 0, 0});
  std::vector<Value> slices;
  for (int64_t i = 0; i < w.kh; ++i) {
    for (int64_t j = 0; j < w.kw; ++j) {
      Dims start{0, 0, i * w.dh, j * w.dw};
      Dims limit{n, ch, start[2] + (oh - 1) * w.sh + 1, start[3] + (ow - 1) * w.sw + 1};
      Value s = b.slice(padded, start, limit, {1, 1, w.sh, w.sw});
      slices.push_back(b.reshape(s, {n, ch, 1, oh * ow}));
    }
  }
  Value stacked = slices.size() == 1 ? slices[0] : b.concatenate(slices, 2);
  return {b.reshape(stacked, out.dims)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride):
// [N,] C*kh*kw, L -> [N,] C, H, W
std::vector<Value> col2im(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (out.numel() == 0) return {b.full(out, 0)};
  IntList size = a.ints(1);
  Window2d w = window(a, 2, 3, 4, 5);
  int64_t n = x.rank() == 3 ? x.dim(0) : 1;
  int64_t k = w.kh * w.kw;
  int64_t ch = x.dim(-2) / k;
  int64_t oh = blocks(size[0], w.kh, w.dh, w.ph, w.sh);
  int64_t ow = blocks(size[1], w.kw, w.dw, w.pw, w.sw);
  int64_t hp = size[0] + 2 * w.ph, wp = size[1] + 2 * w.pw;
  ElementType acc = accumulation_type(x.type());
  Value cols = b.reshape(convert(b, x, acc), {n, ch, k, oh, ow});
  Value zero = scalar(b, 0, acc);
  std::optional<Value> sum;
  for (int64_t i = 0; i < w.kh; ++i) {
    for (int64_t j = 0; j < w.kw; ++j) {
      int64_t kk = i * w.kw + j;
      Value block =
          b.reshape(b.slice(cols, {0, 0, kk, 0, 0}, {n, ch, kk + 1, oh, ow}, {1, 1, 1, 1, 1}),
                    {n, ch, oh, ow});
      int64_t top = i * w.dh, left = j * w.dw;
      Dims low{0, 0, top, left};
      Dims high{0, 0, hp - top - (oh - 1) * w.sh - 1, wp - left - (ow - 1) * w.sw - 1};
      Value placed = b.pad(block, zero, low, high, {0, 0, w.sh - 1, w.sw - 1});
      sum = sum ? b.add(*sum, placed) : placed;
    }
  }
  Value y =
      b.slice(*sum, {0, 0, w.ph, w.pw}, {n, ch, w.ph + size[0], w.pw + size[1]}, {1, 1, 1, 1});
  return {b.reshape(y, out.dims)};
}

// channel_shuffle(self, groups): channels (g, C/g) -> (C/g, g)
std::vector<Value> channel_shuffle(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  int64_t groups = a.integer(1);
  if (x.rank() < 2 || x.dim(1) % groups != 0) throw Unsupported("channel_shuffle shape");
  Dims split{x.dim(0), groups, x.dim(1) / groups};
  Dims perm{0, 2, 1};
  for (int64_t i = 2; i < x.rank(); ++i) {
    split.push_back(x.dim(i));
    perm.push_back(i + 1);
  }
  return {b.reshape(b.transpose(b.reshape(x, split), perm), x.dims())};
}

}  // namespace

TPU_LOWERING(im2col, "im2col");
TPU_LOWERING(col2im, "col2im");
TPU_LOWERING(channel_shuffle, "channel_shuffle");

}  // namespace torch_tpu::lower
