// segment_reduce: sum/mean/max/min/prod over consecutive segments of `axis`
// given by lengths or offsets (batched over the dimensions before `axis`),
// and its gradient. Segments become a mask [lead..., S, J] (segment s holds
// position j), so lengths stay runtime data. Empty segments give `initial`,
// or the reduction's identity (NaN for a mean), as PyTorch's CPU kernel.
#include <limits>
#include <optional>
#include <string>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

constexpr ElementType kIndex = ElementType::S64;

Value like(Builder& b, const Value& x, double v) { return b.full(x.shape, v); }

// Offsets [lead..., S + 1] from the lengths or offsets argument.
Value segment_offsets(Builder& b, const Args& a, size_t lengths, size_t offsets) {
  if (a.is_none(lengths)) return convert(b, a.tensor(offsets), kIndex);
  Value len = convert(b, a.tensor(lengths), kIndex);
  int64_t last = len.rank() - 1, s = len.dim(last);
  Dims low(len.rank(), 0), high(len.rank(), 0), interior(len.rank(), 0);
  low[last] = 1;
  Value x = b.pad(len, b.constant_int(0, kIndex), low, high, interior);
  Dims zeros(x.rank(), 0), ones(x.rank(), 1);
  for (int64_t step = 1; step <= s; step *= 2) {
    Dims limit = x.dims();
    limit[last] -= step;
    Dims shift(x.rank(), 0);
    shift[last] = step;
    x = b.add(
        x, b.pad(b.slice(x, zeros, limit, ones), b.constant_int(0, kIndex), shift, zeros, zeros));
  }
  return x;
}

// The segments laid out against the data: `in` [lead..., S, J] says segment
// s holds position j; `count` [lead..., S] is each segment's length.
struct Segments {
  int64_t axis = 0, num = 0;
  Value in, count;
};

Segments segments(Builder& b, const Value& offsets, int64_t axis, int64_t length) {
  Segments s;
  s.axis = axis;
  s.num = offsets.dim(-1) - 1;
  int64_t last = offsets.rank() - 1;
  Dims start(offsets.rank(), 0), ones(offsets.rank(), 1), limit = offsets.dims();
  limit[last] -= 1;
  Value begin = b.slice(offsets, start, limit, ones);
  start[last] = 1;
  Value end = b.slice(offsets, start, offsets.dims(), ones);
  Dims dims = begin.dims();
  dims.push_back(length);
  Dims mapping;
  for (int64_t i = 0; i < begin.rank(); ++i) mapping.push_back(i);
  Value j = b.iota({kIndex, dims}, begin.rank());
  s.in = b.and_(b.compare(b.broadcast_in_dim(begin, dims, mapping), j, hlo::Comparison::LE),
                b.compare(j, b.broadcast_in_dim(end, dims, mapping), hlo::Comparison::LT));
  s.count = b.sub(end, begin);
  return s;
}

// `x` ([lead..., S, rest...] or [lead..., S]) broadcast to `dims`
// ([lead..., S, J, rest...]), skipping dimension `skip` (J or S).
Value spread(Builder& b, const Value& x, const Dims& dims, int64_t skip) {
  Dims mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()) && mapping.size() < size_t(x.rank());
       ++i) {
    if (i != skip) mapping.push_back(i);
  }
  return b.broadcast_in_dim(x, dims, mapping);
}

// The data [lead..., J, rest...] as [lead..., S, J, rest...].
Dims cube_dims(const Value& data, const Segments& s) {
  Dims dims = data.dims();
  dims.insert(dims.begin() + s.axis, s.num);
  return dims;
}

// The CPU's checks of the segments: unless `unsafe`, lengths not negative and
// summing to the data's size along the axis; offsets never decreasing.
void check_segments(Context& c, const Args& a, int64_t size) {
  Builder& b = c.b;
  if (!a.is_none(2) && !a.boolean(6)) {
    Value len = convert(b, a.tensor(2), kIndex);
    check_none(c, b.compare(len, like(b, len, 0), hlo::Comparison::LT), DataCheck::Error::Runtime,
               "lengths contains negative value!");
    if (len.rank() > 0) {
      Value sums = reduce_sum(b, len, {len.rank() - 1});
      check_none(c, b.compare(sums, like(b, sums, static_cast<double>(size)), hlo::Comparison::NE),
                 DataCheck::Error::Runtime,
                 "segment_reduce(): Expected all rows of lengths along axis to sum to "
                 "data.size(lengths.dim()-1) when !unsafe.");
    }
  }
  if (a.is_none(2) && !a.is_none(4)) {
    Value off = convert(b, a.tensor(4), kIndex);
    const int64_t last = off.rank() - 1;
    if (last >= 0 && off.dim(last) > 1) {
      Dims start(off.rank(), 0), limit = off.dims(), strides(off.rank(), 1);
      limit[last] -= 1;
      Value lower = b.slice(off, start, limit, strides);
      start[last] = 1;
      Value upper = b.slice(off, start, off.dims(), strides);
      check_none(c, b.compare(upper, lower, hlo::Comparison::LT), DataCheck::Error::Runtime,
                 "Expected segment_length >= 0 to be true, but got false.  (Could this error "
                 "message be improved?  If so, please report an enhancement request to "
                 "PyTorch.)");
    }
  }
}

// segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial)
std::vector<Value> segment_reduce(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  const std::string& reduce = a.str(1);
  if (!a.is_none(3) && a.is_none(2) && a.is_none(4)) throw Unsupported("segment_reduce indices");
  const Value& input = a.tensor(0);
  check_segments(c, a, input.dim(wrap_dim(a.integer(5), input.rank())));
  ElementType acc = accumulation_type(out.type);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  Value data = convert(c.b, a.tensor(0), acc);
  int64_t axis = wrap_dim(a.integer(5), data.rank());
  Segments s = segments(c.b, segment_offsets(c.b, a, 2, 4), axis, data.dim(axis));
  Dims dims = cube_dims(data, s);
  Value x = spread(c.b, data, dims, axis);
  Value in = spread(c.b, s.in, dims, -1);
  double identity = 0;
  if (reduce == "prod") identity = 1;
  if (reduce == "max") identity = -std::numeric_limits<double>::infinity();
  if (reduce == "min") identity = std::numeric_limits<double>::infinity();
  Value masked = c.b.select(in, x, like(c.b, x, identity));
  Dims over{axis + 1};
  Value r;
  if (reduce == "sum" || reduce == "mean") {
    r = reduce_sum(c.b, masked, over);
  } else if (reduce == "max") {
    r = reduce_max(c.b, masked, over);
  } else if (reduce == "min") {
    r = reduce_min(c.b, masked, over);
  } else if (reduce == "prod") {
    r = c.b.reduce({masked}, {c.b.constant(1, acc)}, over,
                   [](Builder& rb, const std::vector<Value>& v) -> std::vector<Value> {
                     return {rb.mul(v[0], v[1])};
                   })[0];
  } else {
    throw Unsupported("segment_reduce " + reduce);
  }
  Value count = spread(c.b, convert(c.b, s.count, acc), r.dims(), -1);
  Value empty = c.b.compare(count, like(c.b, count, 0), hlo::Comparison::EQ);
  std::optional<Value> initial;
  if (!a.is_none(7)) initial = c.b.broadcast_in_dim(convert(c.b, a.tensor(7), acc), r.dims(), {});
  if (initial) {
    if (reduce == "sum" || reduce == "mean") r = c.b.add(r, *initial);
    if (reduce == "prod") r = c.b.mul(r, *initial);
    if (reduce == "max") r = c.b.max(r, *initial);
    if (reduce == "min") r = c.b.min(r, *initial);
  }
  if (reduce == "mean") {
    r = c.b.div(r, count);
    if (initial) r = c.b.select(empty, *initial, r);
  }
  return {r};
}

// _segment_reduce_backward(grad, output, data, reduce, *, lengths, offsets,
//     axis, initial): sum/mean spread the segment's gradient (mean / length);
//     max/min give it to the elements equal to the result; prod gives
//     grad * output / x, or for a zero element the product of the others.
std::vector<Value> segment_reduce_backward(Context& c, const Args& a) {
  const Shape& out = c.output(0);
  const std::string& reduce = a.str(3);
  ElementType acc = accumulation_type(out.type);
  if (out.numel() == 0) return {c.b.full(out, 0)};
  Value data = convert(c.b, a.tensor(2), acc);
  int64_t axis = wrap_dim(a.integer(6), data.rank());
  Segments s = segments(c.b, segment_offsets(c.b, a, 4, 5), axis, data.dim(axis));
  if (s.num == 0) return {c.b.full(out, 0)};
  Dims dims = cube_dims(data, s);
  Value x = spread(c.b, data, dims, axis);
  Value in = spread(c.b, s.in, dims, -1);
  auto per_segment = [&](const Value& v) {  // [lead..., S, rest...] -> cube
    return spread(c.b, convert(c.b, v, acc), dims, axis + 1);
  };
  Value g = per_segment(a.tensor(0));
  Value zeros = like(c.b, x, 0);
  Value count = spread(c.b, convert(c.b, s.count, acc), dims, -1);
  Value contribution;
  if (reduce == "sum") {
    contribution = g;
  } else if (reduce == "mean") {
    contribution = c.b.div(g, count);
  } else if (reduce == "max" || reduce == "min") {
    // PyTorch's kernel: NaNs and elements equal to the result take the
    // gradient; with two or more, positive gradients are divided among them.
    Value nan = c.b.compare(x, x, hlo::Comparison::NE);
    Value equal = c.b.compare(x, per_segment(a.tensor(1)), hlo::Comparison::EQ);
    Value hit = c.b.and_(in, c.b.or_(nan, equal));
    Value ties = reduce_sum(c.b, c.b.select(hit, like(c.b, x, 1), zeros), {axis + 1});
    ties = spread(c.b, ties, dims, axis + 1);
    Value divide = c.b.and_(c.b.compare(ties, like(c.b, x, 2), hlo::Comparison::GE),
                            c.b.compare(g, zeros, hlo::Comparison::GT));
    contribution = c.b.select(hit, c.b.select(divide, c.b.div(g, ties), g), zeros);
  } else if (reduce == "prod") {
    Value one = like(c.b, x, 1);
    Value is_zero = c.b.compare(x, zeros, hlo::Comparison::EQ);
    Value zero_in = c.b.and_(in, is_zero);
    Value zero_count = reduce_sum(c.b, c.b.select(zero_in, one, zeros), {axis + 1});
    Value nonzero = c.b.select(c.b.and_(in, c.b.not_(is_zero)), x, one);
    Value others = c.b.reduce({nonzero}, {c.b.constant(1, acc)}, {axis + 1},
                              [](Builder& rb, const std::vector<Value>& v) -> std::vector<Value> {
                                return {rb.mul(v[0], v[1])};
                              })[0];
    if (!a.is_none(7)) {
      others =
          c.b.mul(others, c.b.broadcast_in_dim(convert(c.b, a.tensor(7), acc), others.dims(), {}));
    }
    Value output = per_segment(a.tensor(1));
    Value single_zero =
        c.b.compare(spread(c.b, zero_count, dims, axis + 1), one, hlo::Comparison::EQ);
    Value at_zero = c.b.select(single_zero, c.b.mul(g, spread(c.b, others, dims, axis + 1)), zeros);
    Value regular = c.b.div(c.b.mul(g, output), x);
    Value no_zero =
        c.b.compare(spread(c.b, zero_count, dims, axis + 1), zeros, hlo::Comparison::EQ);
    contribution = c.b.select(is_zero, at_zero, c.b.select(no_zero, regular, zeros));
  } else {
    throw Unsupported("segment_reduce " + reduce);
  }
  return {reduce_sum(c.b, c.b.select(in, contribution, zeros), {axis})};
}

}  // namespace

TPU_LOWERING(segment_reduce, "segment_reduce");
TPU_LOWERING(segment_reduce_backward, "_segment_reduce_backward");

}  // namespace torch_tpu::lower
