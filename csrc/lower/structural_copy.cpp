// The functional copies of view operators (view_copy, permute_copy, ...)
// that functionalization and export emit, and composites that only move
// data: stack, block_diag, _chunk_cat, rot90. Inputs arrive dense in their
// logical shape, so every view is a reshape, transpose, slice or broadcast.
#include <algorithm>
#include <limits>
#include <numeric>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

Value to_output_shape(Context& c, const Value& x, size_t i = 0) {
  return c.b.reshape(x, c.output(i).dims);
}

// x[..., start : start + (n - 1) * step + 1 : step, ...] along `dim`.
Value strided(Builder& b, const Value& x, int64_t dim, int64_t start, int64_t n, int64_t step) {
  Dims lo(x.rank(), 0), hi = x.dims(), st(x.rank(), 1);
  lo[dim] = start;
  hi[dim] = n == 0 ? start : start + (n - 1) * step + 1;
  st[dim] = step;
  return b.slice(x, lo, hi, st);
}

// view_copy(self, SymInt[] size), _reshape_copy(self, SymInt[] size), and the
// views that only reshape: unsqueeze_copy, squeeze_copy (all overloads).
std::vector<Value> reshape_copy(Context& c, const Args& a) {
  return {to_output_shape(c, a.tensor(0))};
}

// view_copy.dtype(self, ScalarType dtype): reinterprets the bytes; a change of
// width changes the last dimension.
std::vector<Value> view_copy_dtype(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (is_complex(x.type()) || is_complex(out.type)) throw Unsupported("complex bitcast");
  Builder& b = c.b;
  // pred is stored as one byte of 0/1, like u8.
  if (x.type() == ElementType::Pred) x = b.convert(x, ElementType::U8);
  ElementType t = out.type == ElementType::Pred ? ElementType::U8 : out.type;
  int from = bit_width(x.type()), to = bit_width(t);
  if (to > from && x.rank() > 0) {
    Dims split(x.dims().begin(), x.dims().end() - 1);
    split.insert(split.end(), {x.dims().back() * from / to, to / from});
    x = b.reshape(x, split);
  }
  Value v = b.bitcast_convert(x, t);
  if (out.type == ElementType::Pred) v = b.compare(v, b.full(v.shape, 0), hlo::Comparison::NE);
  return {b.reshape(v, out.dims)};
}

// permute_copy(self, int[] dims)
std::vector<Value> permute_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims perm;
  for (int64_t d : a.ints(1)) perm.push_back(wrap_dim(d, x.rank()));
  return {c.b.transpose(x, perm)};
}

Value swap(Builder& b, const Value& x, int64_t d0, int64_t d1) {
  if (x.rank() < 2) return x;
  d0 = wrap_dim(d0, x.rank());
  d1 = wrap_dim(d1, x.rank());
  Dims perm(x.rank());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return b.transpose(x, perm);
}

// transpose_copy.int(self, int dim0, int dim1)
std::vector<Value> transpose_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  if (x.rank() == 0) return {x};
  return {swap(c.b, x, a.integer(1), a.integer(2))};
}

// t_copy(self): rank < 2 is unchanged.
std::vector<Value> t_copy(Context& c, const Args& a) { return {swap(c.b, a.tensor(0), 0, 1)}; }

// expand_copy(self, SymInt[] size, *, bool implicit=False)
std::vector<Value> expand_copy(Context& c, const Args& a) {
  return {broadcast_to(c.b, a.tensor(0), c.output(0).dims)};
}

// slice_copy.Tensor(self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1)
std::vector<Value> slice_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  if (x.rank() == 0) return {x};
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  int64_t size = x.dim(dim);
  int64_t start = a.optional_integer(2).value_or(0);
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  return {strided(c.b, x, dim, start, c.output(0).dims[dim], a.integer(4))};
}

// select_copy.int(self, int dim, SymInt index)
std::vector<Value> select_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  int64_t index = a.integer(2);
  if (index < 0) index += x.dim(dim);
  return {to_output_shape(c, strided(c.b, x, dim, index, 1, 1))};
}

// narrow_copy(self, int dim, SymInt start, SymInt length)
std::vector<Value> narrow_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  int64_t start = a.integer(2);
  if (start < 0) start += x.dim(dim);
  return {strided(c.b, x, dim, start, a.integer(3), 1)};
}

// diagonal_copy(self, int offset=0, int dim1=0, int dim2=1): the two dims
// move last, the square block holding the diagonal is cut out and flattened,
// and every (L + 1)-th element of it is the diagonal.
std::vector<Value> diagonal_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  int64_t rank = x.rank(), offset = a.integer(1);
  int64_t dim1 = wrap_dim(a.integer(2), rank), dim2 = wrap_dim(a.integer(3), rank);
  int64_t length = out.dims.back();
  if (out.numel() == 0) return {c.b.full(out, 0)};
  Dims perm;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim1 && d != dim2) perm.push_back(d);
  }
  perm.insert(perm.end(), {dim1, dim2});
  Builder& b = c.b;
  Value v = b.transpose(x, perm);
  Dims lo(rank, 0), hi = v.dims(), st(rank, 1);
  lo[rank - 2] = std::max<int64_t>(-offset, 0);
  lo[rank - 1] = std::max<int64_t>(offset, 0);
  hi[rank - 2] = lo[rank - 2] + length;
  hi[rank - 1] = lo[rank - 1] + length;
  v = b.slice(v, lo, hi, st);
  Dims flat(out.dims.begin(), out.dims.end() - 1);
  flat.push_back(length * length);
  v = b.reshape(v, flat);
  return {strided(b, v, rank - 2, 0, length, length + 1)};
}

// unfold_copy(self, int dimension, int size, int step): window j of every
// position is a strided slice starting at j; the windows stack last.
std::vector<Value> unfold_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Shape& out = c.output(0);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  if (x.rank() == 0) return {c.b.reshape(x, out.dims)};
  int64_t dim = wrap_dim(a.integer(1), x.rank());
  int64_t size = a.integer(2), step = a.integer(3);
  int64_t windows = out.dims[dim];
  Dims with_window = x.dims();
  with_window[dim] = windows;
  with_window.push_back(1);
  std::vector<Value> parts;
  for (int64_t j = 0; j < size; ++j) {
    parts.push_back(c.b.reshape(strided(c.b, x, dim, j, windows, step), with_window));
  }
  return {c.b.concatenate(parts, x.rank())};
}

// detach_copy(self), alias_copy(self)
std::vector<Value> identity_copy(Context& c, const Args& a) { return {a.tensor(0)}; }

// Consecutive pieces of `x` along `dim`, sized like the outputs.
std::vector<Value> pieces(Context& c, const Value& x, int64_t dim, bool drop_dim) {
  std::vector<Value> out;
  int64_t start = 0;
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    int64_t n = drop_dim ? 1 : c.output(i).dims[dim];
    out.push_back(to_output_shape(c, strided(c.b, x, dim, start, n, 1), i));
    start += n;
  }
  return out;
}

// split_copy.Tensor(self, SymInt split_size, int dim=0) and
// split_with_sizes_copy(self, SymInt[] split_sizes, int dim=0)
std::vector<Value> split_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  return pieces(c, x, wrap_dim(a.integer(2), x.rank()), false);
}

// unbind_copy.int(self, int dim=0)
std::vector<Value> unbind_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  return pieces(c, x, wrap_dim(a.integer(1), x.rank()), true);
}

// view_as_real_copy(self): complex [...] -> real [..., 2]
std::vector<Value> view_as_real_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  Dims with_pair = x.dims();
  with_pair.push_back(1);
  Value re = c.b.reshape(c.b.real(x), with_pair), im = c.b.reshape(c.b.imag(x), with_pair);
  return {c.b.concatenate({re, im}, x.rank())};
}

// view_as_complex_copy(self): real [..., 2] -> complex [...]
std::vector<Value> view_as_complex_copy(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const Dims& out = c.output(0).dims;
  int64_t last = x.rank() - 1;
  Value re = c.b.reshape(strided(c.b, x, last, 0, 1, 1), out);
  Value im = c.b.reshape(strided(c.b, x, last, 1, 1, 1), out);
  return {c.b.complex(re, im)};
}

// stack(Tensor[] tensors, int dim=0)
std::vector<Value> stack(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  int64_t dim = wrap_dim(a.integer(1), out.rank());
  std::vector<Value> parts;
  for (const Value& v : a.tensors(0)) {
    Dims with_dim = v.dims();
    with_dim.insert(with_dim.begin() + dim, 1);
    parts.push_back(c.b.reshape(convert(c.b, v, out.type), with_dim));
  }
  return {c.b.concatenate(parts, dim)};
}

// block_diag(Tensor[] tensors): scalars count as 1x1 and vectors as rows;
// each block is padded with zeros to the full width and the rows stack.
std::vector<Value> block_diag(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  int64_t width = out.dims[1], col = 0;
  std::vector<Value> rows;
  for (const Value& v : a.tensors(0)) {
    Value m = convert(c.b, v, out.type);
    if (m.rank() == 0) m = c.b.reshape(m, {1, 1});
    if (m.rank() == 1) m = c.b.reshape(m, {1, m.dim(0)});
    int64_t cols = m.dim(1);
    if (m.dim(0) > 0) {
      rows.push_back(
          c.b.pad(m, scalar(c.b, 0, out.type), {0, col}, {0, width - col - cols}, {0, 0}));
    }
    col += cols;
  }
  if (rows.empty() || out.numel() == 0) return {c.b.full(out, 0)};
  return {c.b.concatenate(rows, 0)};
}

// _chunk_cat(Tensor[] tensors, int dim, int num_chunks): each tensor is split
// into num_chunks chunks along dim (zero-padded to equal size), every chunk
// is flattened from dim on, and the chunks of all tensors concatenate.
std::vector<Value> chunk_cat(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  int64_t chunks = a.integer(2);
  std::vector<Value> parts;
  for (const Value& v : a.tensors(0)) {
    int64_t dim = wrap_dim(a.integer(1), v.rank());
    int64_t size = v.dim(dim), chunk = (size + chunks - 1) / chunks;
    Dims high(v.rank(), 0);
    high[dim] = chunk * chunks - size;
    Value p = c.b.pad(convert(c.b, v, out.type), scalar(c.b, 0, out.type), Dims(v.rank(), 0), high,
                      Dims(v.rank(), 0));
    Dims split(v.dims().begin(), v.dims().begin() + dim);
    int64_t inner = chunk;
    for (int64_t d = dim + 1; d < v.rank(); ++d) inner *= v.dim(d);
    split.insert(split.end(), {chunks, inner});
    if (inner > 0) parts.push_back(c.b.reshape(p, split));
  }
  if (parts.empty()) return {c.b.full(out, 0)};
  return {c.b.concatenate(parts, out.rank() - 1)};
}

// rot90(self, int k=1, int[] dims=[0, 1]): one quarter turn flips dims[1]
// then swaps the two dims; three flip dims[0] instead.
std::vector<Value> rot90(Context& c, const Args& a) {
  Value x = a.tensor(0);
  IntList dims = a.ints(2);
  int64_t d0 = wrap_dim(dims.at(0), x.rank()), d1 = wrap_dim(dims.at(1), x.rank());
  int64_t k = ((a.integer(1) % 4) + 4) % 4;
  if (k == 0) return {x};
  if (k == 2) return {c.b.reverse(x, {std::min(d0, d1), std::max(d0, d1)})};
  return {swap(c.b, c.b.reverse(x, {k == 1 ? d1 : d0}), d0, d1)};
}

}  // namespace

TPU_LOWERING(reshape_copy, "view_copy", "_reshape_copy", "unsqueeze_copy", "squeeze_copy",
             "squeeze_copy.dim", "squeeze_copy.dims");
TPU_LOWERING(view_copy_dtype, "view_copy.dtype");
TPU_LOWERING(permute_copy, "permute_copy");
TPU_LOWERING(transpose_copy, "transpose_copy.int");
TPU_LOWERING(t_copy, "t_copy");
TPU_LOWERING(expand_copy, "expand_copy");
TPU_LOWERING(slice_copy, "slice_copy.Tensor");
TPU_LOWERING(select_copy, "select_copy.int");
TPU_LOWERING(narrow_copy, "narrow_copy");
TPU_LOWERING(diagonal_copy, "diagonal_copy");
TPU_LOWERING(unfold_copy, "unfold_copy");
TPU_LOWERING(identity_copy, "detach_copy", "alias_copy");
TPU_LOWERING(split_copy, "split_copy.Tensor", "split_with_sizes_copy");
TPU_LOWERING(unbind_copy, "unbind_copy.int");
TPU_LOWERING(view_as_real_copy, "view_as_real_copy");
TPU_LOWERING(view_as_complex_copy, "view_as_complex_copy");
TPU_LOWERING(stack, "stack");
TPU_LOWERING(block_diag, "block_diag");
TPU_LOWERING(chunk_cat, "_chunk_cat");
TPU_LOWERING(rot90, "rot90");

}  // namespace torch_tpu::lower
