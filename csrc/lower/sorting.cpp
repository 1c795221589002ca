// Sorting and selection: sort, topk, kthvalue, median, nanmedian, mode, and
// searches in sorted sequences (searchsorted, bucketize), isin and histc.
//
// Order is PyTorch's: NaN is larger than every number (ascending sorts put
// it last, descending ones first). Every sort is stable and carries an iota
// alongside, so ties get the indices PyTorch's CPU kernels give where those
// are defined (stable sorts, median's (value, index) order, mode); kthvalue
// replays the CPU's quickselect. The order of ties after an unstable CPU sort
// (sort(stable=False) beyond 16 elements, topk) is the C++ library's and is
// not reproduced: values match, tie indices may differ.
#include <algorithm>
#include <limits>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using Values = std::vector<Value>;

ElementType index_type(int64_t n) {
  return n < std::numeric_limits<int32_t>::max() ? ElementType::S32 : ElementType::S64;
}

void check_sortable(const Value& x, const char* op) {
  if (is_complex(x.type())) {
    throw std::invalid_argument(std::string(op) + "(): complex tensors are not supported");
  }
}

// Comparator of a stable sort on (value, index...) with NaN largest.
hlo::RegionFn order(bool descending) {
  return [descending](Builder& r, const Values& v) -> Values {
    const Value &x = v[0], &y = v[1];
    Value before = r.compare(x, y, descending ? Comparison::GT : Comparison::LT);
    if (is_floating(x.type())) {
      // Ascending: a number precedes NaN; descending: NaN precedes a number.
      Value nan_first = descending ? r.and_(is_nan(r, x), r.not_(is_nan(r, y)))
                                   : r.and_(r.not_(is_nan(r, x)), is_nan(r, y));
      before = r.or_(before, nan_first);
    }
    return {before};
  };
}

// Sorts `x` along `dim` (x has rank >= 1): {values, positions (index type)}.
Values sort_with_index(Builder& b, const Value& x, int64_t dim, bool descending) {
  Value index = b.iota({index_type(x.dim(dim)), x.dims()}, dim);
  return b.sort({x, index}, dim, /*stable=*/true, order(descending));
}

// `x` with `dim` moved last and the others flattened: [rows, n].
Value to_rows(Builder& b, const Value& x, int64_t dim) {
  if (x.rank() == 0) return b.reshape(x, {1, 1});
  Dims perm;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) perm.push_back(d);
  }
  perm.push_back(dim);
  int64_t n = x.dim(dim);
  return b.reshape(b.transpose(x, perm), {x.shape.numel() / n, n});
}

// rows[i, pos[i]] for a [m, n] `rows` and a [m] `pos`.
Value take_column(Builder& b, const Value& rows, const Value& pos) {
  int64_t m = rows.dim(0);
  Value p = b.convert(pos, ElementType::S64);
  Value coords = b.concatenate(
      {b.reshape(b.iota({ElementType::S64, {m}}, 0), {m, 1}), b.reshape(p, {m, 1})}, 1);
  return b.gather(rows, coords, hlo::GatherDims{{}, {0, 1}, {0, 1}, 1}, {1, 1});
}

// Elements of the [m, n] `rows` at column k (static): [m].
Value column(Builder& b, const Value& rows, int64_t k) {
  return b.reshape(b.slice(rows, {0, k}, {rows.dim(0), k + 1}, {1, 1}), {rows.dim(0)});
}

Value count_nans(Builder& b, const Value& rows) {
  ElementType it = index_type(rows.dim(1));
  if (!is_floating(rows.type())) return b.full({it, {rows.dim(0)}}, 0);
  return reduce_sum(b, b.convert(is_nan(b, rows), it), {1});
}

// ---------------------------------------------------------------- sort, topk

Values sort_rule(Context& c, const Value& x, int64_t dim, bool descending) {
  check_sortable(x, "sort");
  if (x.rank() == 0 || x.shape.numel() == 0) return {x, c.b.full(c.output(1), 0)};
  Values r = sort_with_index(c.b, x, wrap_dim(dim, x.rank()), descending);
  return {r[0], c.b.convert(r[1], ElementType::S64)};
}

// sort(self, int dim=-1, bool descending=False) -> (values, indices)
Values sort(Context& c, const Args& a) {
  return sort_rule(c, a.tensor(0), a.integer(1), a.boolean(2));
}

// sort.stable(self, *, bool? stable, int dim=-1, bool descending=False)
Values sort_stable(Context& c, const Args& a) {
  return sort_rule(c, a.tensor(0), a.integer(2), a.boolean(3));
}

// topk(self, SymInt k, int dim=-1, bool largest=True, bool sorted=True)
Values topk(Context& c, const Args& a) {
  Value x = a.tensor(0);
  check_sortable(x, "topk");
  int64_t k = a.integer(1);
  if (c.output(0).numel() == 0) return {c.b.full(c.output(0), 0), c.b.full(c.output(1), 0)};
  if (x.rank() == 0) return {x, c.b.full(c.output(1), 0)};
  int64_t dim = wrap_dim(a.integer(2), x.rank());
  Values r = sort_with_index(c.b, x, dim, a.boolean(3));
  Dims start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  limit[dim] = k;
  return {c.b.slice(r[0], start, limit, strides),
          c.b.convert(c.b.slice(r[1], start, limit, strides), ElementType::S64)};
}

// ---------------------------------------------------------------- kthvalue, median, mode

// Value and index at the per-row sorted position `pos` ([m]), shaped as the results.
Values select_sorted(Context& c, const Value& values, const Value& index, const Value& pos) {
  Value v = take_column(c.b, values, pos);
  Value i = take_column(c.b, index, pos);
  return {c.b.reshape(v, c.output(0).dims),
          c.b.reshape(c.b.convert(i, ElementType::S64), c.output(1).dims)};
}

struct SortedRows {
  Value values, index;  // [m, n], ascending, NaN last
};

SortedRows sorted_rows(Builder& b, const Value& x, int64_t dim) {
  Value rows = to_rows(b, x, x.rank() == 0 ? 0 : wrap_dim(dim, x.rank()));
  Values r = sort_with_index(b, rows, 1, false);
  return {r[0], r[1]};
}

// ---- PyTorch's CPU quickselect, replayed
//
// kthvalue's CPU kernel partitions each row with Sedgewick's quickselect
// (median-of-three pivot, NaN largest); which of several equal values it
// returns depends on that algorithm's swaps, so rows up to kQuickselectMax
// long replay it, all rows in step, as a state machine in one while loop.
// Longer rows take the stable sort's answer (the same value; for ties, the
// lowest index).

constexpr int64_t kQuickselectMax = 1024;

// x > y with NaN largest, on per-row scalars.
Value greater(Builder& b, const Value& x, const Value& y) {
  Value gt = b.compare(x, y, Comparison::GT);
  if (!is_floating(x.type())) return gt;
  return b.or_(gt, b.and_(is_nan(b, x), b.not_(is_nan(b, y))));
}

// Swaps columns p and q of every row of the [m, n] `rows` where `when`.
Value swap_columns(Builder& b, const Value& rows, const Value& when, const Value& p, Value q) {
  int64_t m = rows.dim(0);
  q = b.select(when, q, p);  // a row that does not swap exchanges p with itself
  Value row = b.reshape(b.iota({ElementType::S64, {m}}, 0), {m, 1, 1});
  auto column_of = [&](const Value& v) {
    return b.reshape(b.convert(v, ElementType::S64), {m, 1, 1});
  };
  Value coords = b.concatenate(
      {b.concatenate({row, column_of(p)}, 2), b.concatenate({row, column_of(q)}, 2)}, 1);
  Value updates = b.concatenate(
      {b.reshape(take_column(b, rows, q), {m, 1}), b.reshape(take_column(b, rows, p), {m, 1})}, 1);
  return b.scatter(rows, coords, updates, hlo::ScatterDims{{}, {0, 1}, {0, 1}, 2},
                   [](Builder&, const Values& v) -> Values { return {v[1]}; });
}

// Phases of a row: start a partition, scan i up, scan j down, swap or
// finish the partition, done.
enum Phase { kStart, kScanI, kScanJ, kCheck, kDone };

Values quickselect(Builder& b, const Value& rows, int64_t k) {
  int64_t m = rows.dim(0), n = rows.dim(1);
  const ElementType it = ElementType::S32;
  Shape vec{it, {m}};
  auto num = [&vec](Builder& r, int64_t v) { return r.full(vec, static_cast<double>(v)); };
  // Per row: values, their indices, L, R, i, j, pivot, phase.
  Value zero = num(b, 0);
  Value index = b.iota({it, rows.dims()}, 1), last = num(b, n - 1), pivot = column(b, rows, 0);
  Values init{rows, index, zero, last, zero, zero, pivot, num(b, kStart)};
  auto cond = [&](Builder& r, const Values& v) -> Values {
    Value active = r.convert(r.compare(v[7], num(r, kDone), Comparison::NE), it);
    return {r.compare(reduce_sum(r, active, {0}), r.constant_int(0, it), Comparison::GT)};
  };
  auto body = [&](Builder& r, const Values& v) -> Values {
    Value arr = v[0], idx = v[1], lo = v[2], hi = v[3], i = v[4], j = v[5], piv = v[6];
    const Value& phase = v[7];
    auto in = [&](Phase p) { return r.compare(phase, num(r, p), Comparison::EQ); };
    auto at = [&](const Value& p) { return take_column(r, arr, p); };
    auto swap = [&](const Value& when, const Value& p, const Value& q) {
      arr = swap_columns(r, arr, when, p, q);
      idx = swap_columns(r, idx, when, p, q);
    };
    Value one = num(r, 1);
    Value next_phase = phase;
    // Start: one or two elements finish; otherwise order L, L+1, R around
    // the middle element and set up the scans.
    Value start = in(kStart);
    Value lo1 = r.add(lo, one);
    Value single = r.compare(hi, lo, Comparison::LE);
    Value pair = r.compare(hi, lo1, Comparison::EQ);
    swap(r.and_(r.and_(start, pair), greater(r, at(lo), at(hi))), lo, hi);
    Value big = r.and_(start, r.not_(r.or_(single, pair)));
    swap(big, r.div(r.add(lo, hi), num(r, 2)), lo1);
    swap(r.and_(big, greater(r, at(lo1), at(hi))), lo1, hi);
    swap(r.and_(big, greater(r, at(lo), at(hi))), lo, hi);
    swap(r.and_(big, greater(r, at(lo1), at(lo))), lo1, lo);
    Value i_start = r.select(big, lo1, i), j_start = r.select(big, hi, j);
    piv = r.select(big, at(lo), piv);
    next_phase = r.select(r.and_(start, r.not_(big)), num(r, kDone), next_phase);
    next_phase = r.select(big, num(r, kScanI), next_phase);
    // Scan i up while the pivot is greater.
    Value scan_i = in(kScanI);
    i = r.select(scan_i, r.add(i_start, one), i_start);
    Value i_stops = r.and_(scan_i, r.not_(greater(r, piv, at(i))));
    next_phase = r.select(i_stops, num(r, kScanJ), next_phase);
    // Scan j down while greater than the pivot.
    Value scan_j = in(kScanJ);
    j = r.select(scan_j, r.sub(j_start, one), j_start);
    Value j_stops = r.and_(scan_j, r.not_(greater(r, at(j), piv)));
    next_phase = r.select(j_stops, num(r, kCheck), next_phase);
    // Check: swap and scan on, or put the pivot in place and narrow.
    Value check = in(kCheck);
    Value crossed = r.compare(j, i, Comparison::LT);
    Value finish = r.and_(check, crossed);
    swap(r.and_(check, r.not_(crossed)), i, j);
    swap(finish, lo, j);
    next_phase = r.select(check, r.select(crossed, num(r, kStart), num(r, kScanI)), next_phase);
    Value kk = num(r, k);
    Value new_lo = r.select(r.and_(finish, r.compare(j, kk, Comparison::LE)), i, lo);
    hi = r.select(r.and_(finish, r.compare(j, kk, Comparison::GE)), r.sub(j, one), hi);
    return {arr, idx, new_lo, hi, i, j, piv, next_phase};
  };
  Values out = b.while_loop(init, cond, body);
  return {column(b, out[0], k), column(b, out[1], k)};
}

// kthvalue(self, int k, int dim=-1, bool keepdim=False) -> (values, indices)
Values kthvalue(Context& c, const Args& a) {
  Value x = a.tensor(0);
  check_sortable(x, "kthvalue");
  if (x.shape.numel() == 0) return {c.b.full(c.output(0), 0), c.b.full(c.output(1), 0)};
  int64_t k = a.integer(1) - 1;
  int64_t dim = x.rank() == 0 ? 0 : wrap_dim(a.integer(2), x.rank());
  Values r;
  if (x.rank() > 0 && x.dim(dim) <= kQuickselectMax) {
    r = quickselect(c.b, to_rows(c.b, x, dim), k);
  } else {
    SortedRows s = sorted_rows(c.b, x, dim);
    r = {column(c.b, s.values, k), column(c.b, s.index, k)};
  }
  return {c.b.reshape(r[0], c.output(0).dims),
          c.b.reshape(c.b.convert(r[1], ElementType::S64), c.output(1).dims)};
}

// Sorted position of the median of each row: the lower middle of the
// non-NaN values (nanmedian), or for median the first NaN if any.
Value median_position(Builder& b, const SortedRows& s, bool ignore_nan) {
  int64_t n = s.values.dim(1);
  ElementType it = index_type(n);
  Value nans = count_nans(b, s.values);
  Value full_n = b.full(nans.shape, static_cast<double>(n));
  Value valid = b.sub(full_n, nans);
  if (!ignore_nan) {
    Value has_nan = b.compare(nans, b.full(nans.shape, 0), Comparison::GT);
    return b.select(has_nan, valid, b.full({it, nans.dims()}, static_cast<double>((n - 1) / 2)));
  }
  // (valid - 1) / 2, which is 0 for an all-NaN row as in C++.
  Value minus_one = b.max(b.sub(valid, b.full(valid.shape, 1)), b.full(valid.shape, 0));
  return b.div(minus_one, b.full(valid.shape, 2));
}

Values median_dim_rule(Context& c, const Args& a, bool ignore_nan) {
  Value x = a.tensor(0);
  check_sortable(x, ignore_nan ? "nanmedian" : "median");
  if (x.shape.numel() == 0) return {c.b.full(c.output(0), 0), c.b.full(c.output(1), 0)};
  SortedRows s = sorted_rows(c.b, x, a.integer(1));
  Value pos = median_position(c.b, s, ignore_nan);
  return select_sorted(c, s.values, s.index, pos);
}

// median.dim(self, int dim, bool keepdim=False) -> (values, indices)
Values median_dim(Context& c, const Args& a) { return median_dim_rule(c, a, false); }
Values nanmedian_dim(Context& c, const Args& a) { return median_dim_rule(c, a, true); }

Values median_all_rule(Context& c, const Args& a, bool ignore_nan) {
  Value x = a.tensor(0);
  check_sortable(x, ignore_nan ? "nanmedian" : "median");
  // The median of nothing is NaN on the CPU. (Integer types get 0: the CPU
  // converts a float NaN to them, which C++ leaves undefined.)
  if (x.shape.numel() == 0) {
    double nan = std::numeric_limits<double>::quiet_NaN();
    return {c.b.full(c.output(0), is_floating(x.type()) ? nan : 0.0)};
  }
  Value flat = c.b.reshape(x, {1, x.shape.numel()});
  Values r = sort_with_index(c.b, flat, 1, false);
  SortedRows s{r[0], r[1]};
  Value v = take_column(c.b, s.values, median_position(c.b, s, ignore_nan));
  return {c.b.reshape(v, c.output(0).dims)};
}

// median(self) -> Tensor / nanmedian(self)
Values median(Context& c, const Args& a) { return median_all_rule(c, a, false); }
Values nanmedian(Context& c, const Args& a) { return median_all_rule(c, a, true); }

// Running maximum along dim 1 of [m, n] by doubling (log2(n) static steps).
Value running_max(Builder& b, Value x) {
  int64_t n = x.dim(1);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value earlier = b.pad(x, lowest_value(b, x.type()), {0, shift}, {0, 0}, {0, 0});
    earlier = b.slice(earlier, {0, 0}, {x.dim(0), n}, {1, 1});
    x = b.max(x, earlier);
  }
  return x;
}

// mode(self, int dim=-1, bool keepdim=False) -> (values, indices). PyTorch's
// CPU kernel sorts each row, takes the first (smallest) value of the longest
// run and the index of the last element of that run, which a stable sort
// makes the largest index holding the value.
Values mode(Context& c, const Args& a) {
  Value x = a.tensor(0);
  check_sortable(x, "mode");
  if (x.shape.numel() == 0) return {c.b.full(c.output(0), 0), c.b.full(c.output(1), 0)};
  Builder& b = c.b;
  SortedRows s = sorted_rows(b, x, a.integer(1));
  int64_t m = s.values.dim(0), n = s.values.dim(1);
  ElementType it = index_type(n + 1);
  Value pos = b.iota({it, {m, n}}, 1);
  // Runs start where the value differs from its predecessor, end where it
  // differs from its successor.
  Value prev = b.slice(s.values, {0, 0}, {m, n - 1}, {1, 1});
  Value next = b.slice(s.values, {0, 1}, {m, n}, {1, 1});
  Value differs = b.compare(prev, next, Comparison::NE);
  Value yes = b.full({ElementType::Pred, {m, 1}}, 1);
  Value starts = b.concatenate({yes, differs}, 1);
  Value ends = b.concatenate({differs, yes}, 1);
  Value run_start = running_max(b, b.select(starts, pos, b.full(pos.shape, 0)));
  Value length = b.add(b.sub(pos, run_start), b.full(pos.shape, 1));
  length = b.select(ends, length, b.full(pos.shape, 0));
  // First run end of maximal length.
  Values best = b.reduce({length, pos}, {b.constant_int(-1, it), b.constant_int(n, it)}, {1},
                         [](Builder& r, const Values& v) -> Values {
                           const Value &xl = v[0], &xp = v[1], &yl = v[2], &yp = v[3];
                           Value take_x = r.or_(r.compare(xl, yl, Comparison::GT),
                                                r.and_(r.compare(xl, yl, Comparison::EQ),
                                                       r.compare(xp, yp, Comparison::LT)));
                           return {r.select(take_x, xl, yl), r.select(take_x, xp, yp)};
                         });
  return select_sorted(c, s.values, s.index, best[1]);
}

// ---------------------------------------------------------------- searches

// Where each value goes in the sorted last axis of `seq`: PyTorch's binary
// search, step for step (the first entry not below it, !(s >= v), or not above
// it, !(s > v)), so NaN values land at the end and unsorted sequences give what
// the CPU's and CUDA's searches give. Each of the sequence's bit width of
// halvings gathers one entry per value.
Value search(Builder& b, Value seq, Value values, bool right, ElementType out) {
  ElementType t = promote_types(seq.type(), values.type());
  seq = convert(b, seq, t);
  values = convert(b, values, t);
  const int64_t n = seq.dim(-1);
  const int64_t rows = seq.shape.numel() / n;  // a 1-d seq serves every value
  const Dims shape = values.dims();
  Value v = b.reshape(values, {rows, values.shape.numel() / rows});
  Value table = b.reshape(seq, {rows, n});
  const Shape index{ElementType::S64, v.dims()};
  Value start = b.full(index, 0), end = b.full(index, n);
  Value one = b.full(index, 1), two = b.full(index, 2);
  Dims with_vector{v.dim(0), v.dim(1), 1};
  Value row = b.reshape(b.iota(index, 0), with_vector);
  for (int64_t steps = n; steps > 0; steps >>= 1) {
    Value open = b.compare(start, end, Comparison::LT);
    Value mid = b.add(start, b.div(b.sub(end, start), two));
    Value safe = b.select(open, mid, b.full(index, 0));
    Value coords = b.concatenate({row, b.reshape(safe, with_vector)}, 2);
    Value entry = b.gather(table, coords, hlo::GatherDims{{}, {0, 1}, {0, 1}, 2}, {1, 1});
    Value below = b.not_(b.compare(entry, v, right ? Comparison::GT : Comparison::GE));
    start = b.select(b.and_(open, below), b.add(mid, one), start);
    end = b.select(b.and_(open, b.not_(below)), mid, end);
  }
  return b.reshape(b.convert(start, out), shape);
}

// seq reordered along its last axis by `sorter`.
Value apply_sorter(Builder& b, const Value& seq, const Value& sorter) {
  int64_t n = seq.dim(-1);
  Value rows = b.reshape(seq, {seq.shape.numel() / n, n});
  Value order = b.reshape(b.convert(sorter, ElementType::S64), rows.dims());
  int64_t m = rows.dim(0);
  Dims with_vector{m, n, 1};
  Value row = b.reshape(b.iota({ElementType::S64, {m, n}}, 0), with_vector);
  Value coords = b.concatenate({row, b.reshape(order, with_vector)}, 2);
  Value out = b.gather(rows, coords, hlo::GatherDims{{}, {0, 1}, {0, 1}, 2}, {1, 1});
  return b.reshape(out, seq.dims());
}

// searchsorted.Tensor(sorted_sequence, self, *, bool out_int32=False,
//   bool right=False, str? side=None, Tensor? sorter=None) / searchsorted.Scalar
Values searchsorted(Context& c, const Args& a) {
  Value seq = a.tensor(0);
  Value values = a.tensor(1);
  bool right = a.boolean(3) || (!a.is_none(4) && a.str(4) == "right");
  if (seq.dim(-1) == 0 || c.output(0).numel() == 0) return {c.b.full(c.output(0), 0)};
  if (auto sorter = a.optional_tensor(5)) {
    check_index_range(c, *sorter, seq.dim(-1), false, DataCheck::Error::Runtime,
                      "torch.searchsorted(): sorter index out of range");
    seq = apply_sorter(c.b, seq, *sorter);
  }
  return {c.b.reshape(search(c.b, seq, values, right, c.output(0).type), c.output(0).dims)};
}

// bucketize.Tensor(self, boundaries, *, bool out_int32=False, bool right=False)
// / bucketize.Scalar(Scalar self, ...)
Values bucketize(Context& c, const Args& a) {
  Value boundaries = a.tensor(1);
  if (boundaries.dim(0) == 0) return {c.b.full(c.output(0), 0)};
  Value r = search(c.b, boundaries, a.tensor(0), a.boolean(3), c.output(0).type);
  return {c.b.reshape(r, c.output(0).dims)};
}

// isin.Tensor_Tensor(elements, test_elements, *, bool assume_unique=False,
//   bool invert=False) / isin.Tensor_Scalar / isin.Scalar_Tensor
Values isin(Context& c, const Args& a) {
  Builder& b = c.b;
  ElementType t = result_type({&a.operand(0), &a.operand(1)});
  Value x = convert(b, a.tensor(0), t);
  Value tests = convert(b, a.tensor(1), t);
  bool invert = a.boolean(3);
  int64_t n = tests.shape.numel();
  if (n == 0 || x.shape.numel() == 0) return {b.full(c.output(0), invert ? 1 : 0)};
  tests = b.reshape(tests, {n});
  Dims dims = x.dims();
  dims.push_back(n);
  Dims x_map(x.rank());
  for (int64_t d = 0; d < x.rank(); ++d) x_map[d] = d;
  Value eq = b.compare(b.broadcast_in_dim(x, dims, x_map),
                       b.broadcast_in_dim(tests, dims, {x.rank()}), Comparison::EQ);
  Value any = b.compare(reduce_sum(b, b.convert(eq, ElementType::S32), {x.rank()}),
                        b.full({ElementType::S32, x.dims()}, 0), Comparison::GT);
  return {invert ? b.not_(any) : any};
}

// histc(self, int bins=100, Scalar min=0, Scalar max=0). Like PyTorch's CPU
// kernel: min == max means the data's range (widened by 1 each side if it is
// a single value); bin = (x - lo) * bins / (hi - lo) in the input's type, the
// last edge belongs to the last bin and values outside [lo, hi] are dropped.
// Integer inputs, which CUDA bins (MoE routers count tokens per expert so) and
// the CPU refuses, use CUDA's integer arithmetic.
Values histc(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  ElementType t = x.type();
  if (t == ElementType::Pred || is_complex(t)) throw Unsupported("histc of bool or complex");
  int64_t bins = a.integer(1);
  int64_t n = x.shape.numel();
  Value flat = b.reshape(x, {n});
  Value lo = convert(b, a.tensor(2), ElementType::F64);
  Value hi = convert(b, a.tensor(3), ElementType::F64);
  if (n > 0) {
    Value same = b.compare(lo, hi, Comparison::EQ);
    lo = b.select(same, convert(b, reduce_min(b, flat, {0}), ElementType::F64), lo);
    hi = b.select(same, convert(b, reduce_max(b, flat, {0}), ElementType::F64), hi);
  }
  Value still_same = b.compare(lo, hi, Comparison::EQ);
  Value one = b.constant(1.0, ElementType::F64);
  lo = convert(b, b.select(still_same, b.sub(lo, one), lo), t);
  hi = convert(b, b.select(still_same, b.add(hi, one), hi), t);
  if (n == 0) return {b.full(c.output(0), 0)};
  Value lo_n = b.broadcast_in_dim(lo, {n}, {});
  Value hi_n = b.broadcast_in_dim(hi, {n}, {});
  Value inside =
      b.and_(b.compare(flat, lo_n, Comparison::GE), b.compare(flat, hi_n, Comparison::LE));
  // The CPU computes in the input's type, rounding every step; XLA may fuse
  // f16/bf16 steps in f32, so the rounding is explicit.
  bool integral = !is_floating(t);
  ElementType wide = integral ? ElementType::S64 : (t == ElementType::F64 ? t : ElementType::F32);
  auto step = [&](const Value& v) { return integral ? v : b.convert(b.convert(v, t), wide); };
  Value x_w = b.convert(flat, wide), lo_w = b.convert(lo_n, wide), hi_w = b.convert(hi_n, wide);
  Value width = step(b.sub(hi_w, lo_w));
  Value offset =
      step(b.mul(step(b.sub(x_w, lo_w)), b.full({wide, {n}}, static_cast<double>(bins))));
  Value scaled = step(b.div(offset, width));
  Value pos = b.convert(b.select(inside, scaled, b.full(scaled.shape, 0)), ElementType::S64);
  pos = b.min(pos, b.full(pos.shape, static_cast<double>(bins - 1)));
  // Values outside the range scatter out of bounds, which drops them.
  pos = b.select(inside, pos, b.full(pos.shape, static_cast<double>(bins)));
  Value counts =
      b.scatter(b.full({t, {bins}}, 0), b.reshape(pos, {n, 1}), b.full({t, {n}}, 1),
                hlo::ScatterDims{{}, {0}, {0}, 1},
                [](Builder& r, const Values& v) -> Values { return {r.add(v[0], v[1])}; });
  return {counts};
}

}  // namespace

TPU_LOWERING(sort, "sort");
TPU_LOWERING(sort_stable, "sort.stable");
TPU_LOWERING(topk, "topk");
TPU_LOWERING(kthvalue, "kthvalue");
TPU_LOWERING(median, "median");
TPU_LOWERING(median_dim, "median.dim");
TPU_LOWERING(nanmedian, "nanmedian");
TPU_LOWERING(nanmedian_dim, "nanmedian.dim");
TPU_LOWERING(mode, "mode");
TPU_LOWERING(searchsorted, "searchsorted.Tensor", "searchsorted.Scalar");
TPU_LOWERING(bucketize, "bucketize.Tensor", "bucketize.Scalar");
TPU_LOWERING(isin, "isin.Tensor_Tensor", "isin.Tensor_Scalar", "isin.Scalar_Tensor");
// Integer histc, which MoE routers run on CUDA (the CPU's kernel refuses integers).
TPU_LOWERING_CUDA_DTYPES(histc, "histc");

}  // namespace torch_tpu::lower
