// Linear algebra: Cholesky, triangular solves, LU with partial pivoting and
// what is built on it (solves, inverses, determinants).
//
// Triangular solves are a StableHLO op. Cholesky and LU are while loops over
// the columns that update whole matrices under masks: every matrix of a batch
// pivots (or fails) differently, so rows are picked by comparing against iota
// rather than by dynamic slices. The work is O(n^3) per matrix, as LAPACK's
// unblocked algorithms, and the program stays small whatever n.
//
// Matrix products here always run at full precision: factorizations and
// solves amplify the rounding of a bfloat16 pass beyond any use.
#include "lower/linalg.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "lower/helpers.h"

namespace torch_tpu::lower::linalg {

using hlo::Comparison;

void require_floating(const Value& x) {
  if (!is_floating(x.type()) && !is_complex(x.type())) {
    throw Unsupported("linear algebra of non-floating tensors");
  }
  if (x.type() == ElementType::F16 || x.type() == ElementType::BF16) {
    throw Unsupported("linear algebra in half precision");
  }
}

Dims leading(const Dims& d, int64_t trailing) { return Dims(d.begin(), d.end() - trailing); }

Dims append(Dims a, const Dims& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Dims iota_dims(int64_t n) {
  Dims d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = i;
  return d;
}

Value to_batch(Builder& b, const Value& x, const Dims& batch, int64_t trailing) {
  Dims tail(x.dims().end() - trailing, x.dims().end());
  return broadcast_to(b, x, append(batch, tail));
}

Value conj(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return x;
  return b.complex(b.real(x), b.neg(b.imag(x)));
}

Value mT(Builder& b, const Value& x) {
  Dims perm = iota_dims(x.rank());
  std::swap(perm[x.rank() - 2], perm[x.rank() - 1]);
  return b.transpose(x, perm);
}

Value mH(Builder& b, const Value& x) { return conj(b, mT(b, x)); }

Value index(Builder& b, const Dims& dims, int64_t axis) {
  return b.iota({kIndex, dims}, axis < 0 ? axis + static_cast<int64_t>(dims.size()) : axis);
}

Value splat(Builder& b, const Value& scalar, const Dims& dims) {
  return b.broadcast_in_dim(scalar, dims, {});
}

Value along(Builder& b, const Value& x, const Dims& dims, int64_t axis) {
  Dims map = iota_dims(x.rank());
  const int64_t rank = static_cast<int64_t>(dims.size());
  axis = axis < 0 ? axis + rank : axis;
  for (int64_t& m : map) {
    if (m >= axis) ++m;
  }
  return b.broadcast_in_dim(x, dims, map);
}

Value zeros(Builder& b, ElementType t, const Dims& dims) { return b.full({t, dims}, 0.0); }

Value matmul(Builder& b, const Value& x, const Value& y) {
  const int64_t r = x.rank();
  hlo::DotDims d{iota_dims(r - 2), iota_dims(r - 2), {r - 1}, {r - 2}};
  return b.dot_general(x, y, d, Precision::Highest, x.type());
}

Value eye(Builder& b, ElementType t, const Dims& batch, int64_t m, int64_t n) {
  Dims d = append(batch, {m, n});
  Value eq = b.compare(index(b, d, -2), index(b, d, -1), Comparison::EQ);
  return b.select(eq, b.full({t, d}, 1.0), zeros(b, t, d));
}

Value triangle(Builder& b, const Value& x, bool lower, int64_t k) {
  const Dims& d = x.dims();
  Value diff = b.sub(index(b, d, -1), index(b, d, -2));  // column - row
  Value keep = b.compare(diff, b.full({kIndex, d}, static_cast<double>(k)),
                         lower ? Comparison::LE : Comparison::GE);
  return b.select(keep, x, zeros(b, x.type(), d));
}

Value diagonal(Builder& b, const Value& x) {
  const int64_t r = x.rank(), k = std::min(x.dim(-2), x.dim(-1));
  Dims limit = x.dims();
  limit[r - 2] = limit[r - 1] = k;
  Value square = b.slice(x, Dims(r, 0), limit, Dims(r, 1));
  Value on = b.compare(index(b, limit, -2), index(b, limit, -1), Comparison::EQ);
  return reduce_sum(b, b.select(on, square, zeros(b, x.type(), limit)), {r - 1});
}

Value real_part(Builder& b, const Value& x) { return is_complex(x.type()) ? b.real(x) : x; }

Value product(Builder& b, const Value& x, int64_t axis) {
  return b.reduce({x}, {b.constant(1.0, x.type())}, {axis},
                  [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                    return {r.mul(v[0], v[1])};
                  })[0];
}

Value tri_solve(Builder& b, Value a, Value rhs, bool left, bool lower, bool unit,
                Transpose transpose) {
  Dims batch = broadcast_shapes(leading(a.dims(), 2), leading(rhs.dims(), 2));
  a = to_batch(b, a, batch, 2);
  rhs = to_batch(b, rhs, batch, 2);
  if (rhs.shape.numel() == 0) return rhs;
  const char* names[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  if (transpose == Transpose::Adjoint && !is_complex(a.type())) transpose = Transpose::Transpose;
  std::string attrs =
      std::string("left_side = ") + (left ? "true" : "false") +
      ", lower = " + (lower ? "true" : "false") + ", unit_diagonal = " + (unit ? "true" : "false") +
      ", transpose_a = #stablehlo<transpose " + names[static_cast<int>(transpose)] + ">";
  return b.emit("stablehlo.triangular_solve", {a, rhs}, attrs, {rhs.shape})[0];
}

// Right-looking unblocked Cholesky of the lower triangle, column by column.
// Not stablehlo.cholesky: its result on a matrix that is not positive
// definite is unspecified (all NaN on XLA's CPU), and PyTorch's info needs the
// first failing column. As LAPACK's potrf, the loop stops there.
std::pair<Value, Value> checked_cholesky(Builder& b, const Value& a, bool upper) {
  Value x = upper ? mH(b, a) : a;
  const Dims d = x.dims();
  const int64_t rank = x.rank(), n = d[rank - 1];
  const Dims batch = leading(d, 2), vn = append(batch, {n});
  Value info = zeros(b, kIndex, batch);
  if (n == 0 || x.shape.numel() == 0) return {x, info};
  auto cond = [n](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    return {r.compare(v[0], r.constant_int(n, kIndex), Comparison::LT)};
  };
  auto body = [&](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    const Value& j = v[0];
    Value x = v[1], info = v[2];
    const ElementType t = x.type(), rt = complex_component(t);
    Value row = index(r, d, -2), col = index(r, d, -1), rows = index(r, vn, -1);
    Value in_col_j = r.compare(col, splat(r, j, d), Comparison::EQ);
    Value column = reduce_sum(r, r.select(in_col_j, x, zeros(r, t, d)), {rank - 1});
    Value at_j = r.compare(rows, splat(r, j, vn), Comparison::EQ);
    Value pivot = real_part(r, reduce_sum(r, r.select(at_j, column, zeros(r, t, vn)), {rank - 2}));
    Value ok = r.and_(r.compare(info, zeros(r, kIndex, batch), Comparison::EQ),
                      r.compare(pivot, zeros(r, rt, batch), Comparison::GT));
    Value root = r.sqrt(pivot);
    Value root_t = is_complex(t) ? r.complex(root, zeros(r, rt, batch)) : root;
    Value below = r.compare(rows, splat(r, j, vn), Comparison::GT);
    Value l = r.select(below, r.div(column, along(r, root_t, vn, -1)), zeros(r, t, vn));
    Value update = r.sub(x, r.mul(along(r, l, d, -1), along(r, conj(r, l), d, -2)));
    Value later = r.and_(r.compare(row, splat(r, j, d), Comparison::GT),
                         r.compare(col, splat(r, j, d), Comparison::GT));
    Value next = r.select(later, update, x);
    Value new_column = r.select(at_j, along(r, root_t, vn, -1), l);
    next = r.select(r.and_(in_col_j, r.compare(row, splat(r, j, d), Comparison::GE)),
                    along(r, new_column, d, -1), next);
    next = r.select(along(r, along(r, ok, vn, -1), d, -1), next, x);
    Value failed = r.and_(r.compare(info, zeros(r, kIndex, batch), Comparison::EQ), r.not_(ok));
    info = r.select(failed, r.add(splat(r, j, batch), r.full({kIndex, batch}, 1.0)), info);
    return {r.add(j, r.constant_int(1, kIndex)), next, info};
  };
  std::vector<Value> out = b.while_loop({b.constant_int(0, kIndex), x, info}, cond, body);
  Value l = triangle(b, out[1], true, 0);
  return {upper ? mH(b, l) : l, out[2]};
}

namespace {

// LAPACK's pivoting magnitude: |re| + |im| for complex numbers.
Value magnitude(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return b.abs(x);
  return b.add(b.abs(b.real(x)), b.abs(b.imag(x)));
}

// Element `j` of the last axis of `x` [..., n], for a runtime `j` (one for
// all, or one [...] per vector).
Value pick(Builder& b, const Value& x, const Value& j) {
  const Dims& d = x.dims();
  Value js = j.rank() == 0 ? splat(b, j, d) : along(b, j, d, -1);
  Value at = b.compare(index(b, d, -1), js, Comparison::EQ);
  return reduce_sum(b, b.select(at, x, zeros(b, x.type(), d)), {x.rank() - 1});
}

// `x` [..., m] with entries `i` and `j` ([...] each) exchanged.
Value swap_entries(Builder& b, const Value& x, const Value& i, const Value& j) {
  const Dims& d = x.dims();
  Value xi = along(b, pick(b, x, i), d, -1), xj = along(b, pick(b, x, j), d, -1);
  Value pos = index(b, d, -1);
  Value at_i = b.compare(pos, along(b, i, d, -1), Comparison::EQ);
  Value at_j = b.compare(pos, along(b, j, d, -1), Comparison::EQ);
  return b.select(at_i, xj, b.select(at_j, xi, x));
}

}  // namespace

Factorization lu_factor(Builder& b, const Value& a) {
  const Dims d = a.dims();
  const int64_t rank = a.rank(), m = d[rank - 2], n = d[rank - 1], k = std::min(m, n);
  const Dims batch = leading(d, 2), vm = append(batch, {m}), vk = append(batch, {k});
  Value perm = index(b, vm, -1);
  Value pivots = b.add(index(b, vk, -1), b.full({kIndex, vk}, 1.0));
  Value info = zeros(b, kIndex, batch);
  if (k == 0 || a.shape.numel() == 0) return {a, pivots, perm, info};

  auto cond = [k](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    return {r.compare(v[0], r.constant_int(k, kIndex), Comparison::LT)};
  };
  auto body = [&](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    const Value& j = v[0];
    Value x = v[1], piv = v[2], perm = v[3], info = v[4];
    const ElementType t = x.type();
    const Dims vn = append(batch, {n});
    Value row = index(r, d, -2), col = index(r, d, -1);
    Value rows = index(r, vm, -1), cols = index(r, vn, -1);
    Value jb = splat(r, j, batch);
    Value in_col_j = r.compare(col, splat(r, j, d), Comparison::EQ);

    // Pivot: the first row at or below j of largest magnitude in column j.
    Value column = reduce_sum(r, r.select(in_col_j, x, zeros(r, t, d)), {rank - 1});
    Value mag = magnitude(r, column);
    Value candidate = r.compare(rows, splat(r, j, vm), Comparison::GE);
    mag = r.select(candidate, mag, r.full(mag.shape, -1.0));
    Value best = along(r, reduce_max(r, mag, {rank - 2}), vm, -1);
    Value at_best = r.and_(candidate, r.compare(mag, best, Comparison::EQ));
    Value p = reduce_min(r, r.select(at_best, rows, r.full({kIndex, vm}, double(m))), {rank - 2});
    // A NaN column has no largest entry: keep row j.
    p = r.select(r.compare(p, r.full({kIndex, batch}, double(m)), Comparison::EQ), jb, p);

    // Exchange rows j and p (whole rows, as LAPACK's getrf).
    Value pd = along(r, along(r, p, vm, -1), d, -1);
    Value is_j = r.compare(row, splat(r, j, d), Comparison::EQ);
    Value is_p = r.compare(row, pd, Comparison::EQ);
    Value row_j = reduce_sum(r, r.select(is_j, x, zeros(r, t, d)), {rank - 2});
    Value row_p = reduce_sum(r, r.select(is_p, x, zeros(r, t, d)), {rank - 2});
    x = r.select(is_j, along(r, row_p, d, -2), r.select(is_p, along(r, row_j, d, -2), x));

    // Scale the column below the pivot (unless the pivot is 0: LAPACK then
    // records the column in info and leaves it, all zeros, alone).
    Value pivot = pick(r, row_p, j);
    Value nonzero = r.compare(pivot, zeros(r, t, batch), Comparison::NE);
    Value scale = r.div(r.full({t, batch}, 1.0), pivot);
    Value below = r.compare(rows, splat(r, j, vm), Comparison::GT);
    column = reduce_sum(r, r.select(in_col_j, x, zeros(r, t, d)), {rank - 1});
    Value scaled = r.mul(column, along(r, scale, vm, -1));
    Value l = r.select(r.and_(below, along(r, nonzero, vm, -1)), scaled, zeros(r, t, vm));
    Value u = r.select(r.compare(cols, splat(r, j, vn), Comparison::GT), row_p, zeros(r, t, vn));
    x = r.sub(x, r.mul(along(r, l, d, -1), along(r, u, d, -2)));
    Value below_j = r.and_(in_col_j, r.compare(row, splat(r, j, d), Comparison::GT));
    x = r.select(r.and_(below_j, along(r, along(r, nonzero, vm, -1), d, -1)),
                 along(r, scaled, d, -1), x);

    Value at_j = r.compare(index(r, vk, -1), splat(r, j, vk), Comparison::EQ);
    piv = r.select(at_j, along(r, r.add(p, r.full({kIndex, batch}, 1.0)), vk, -1), piv);
    perm = swap_entries(r, perm, jb, p);
    Value first = r.and_(r.compare(info, zeros(r, kIndex, batch), Comparison::EQ), r.not_(nonzero));
    info = r.select(first, r.add(jb, r.full({kIndex, batch}, 1.0)), info);
    return {r.add(j, r.constant_int(1, kIndex)), x, piv, perm, info};
  };
  std::vector<Value> out =
      b.while_loop({b.constant_int(0, kIndex), a, pivots, perm, info}, cond, body);
  return {out[1], out[2], out[3], out[4]};
}

Value permutation_from_pivots(Builder& b, const Value& pivots, int64_t m) {
  const Dims batch = leading(pivots.dims(), 1), vm = append(batch, {m});
  const int64_t k = pivots.dim(-1);
  Value perm = index(b, vm, -1);
  if (k == 0 || m == 0) return perm;
  auto cond = [k](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    return {r.compare(v[0], r.constant_int(k, kIndex), Comparison::LT)};
  };
  auto body = [&](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
    const Value& j = v[0];
    Value p = r.sub(pick(r, v[1], j), r.full({kIndex, batch}, 1.0));
    Value perm = swap_entries(r, v[2], splat(r, j, batch), p);
    return {r.add(j, r.constant_int(1, kIndex)), v[1], perm};
  };
  Value piv = convert(b, pivots, kIndex);
  return b.while_loop({b.constant_int(0, kIndex), piv, perm}, cond, body)[2];
}

Value permutation_matrix(Builder& b, const Value& perm, ElementType t) {
  const int64_t m = perm.dim(-1);
  const Dims d = append(leading(perm.dims(), 1), {m, m});
  Value at = b.compare(along(b, perm, d, -2), index(b, d, -2), Comparison::EQ);
  return b.select(at, b.full({t, d}, 1.0), zeros(b, t, d));
}

Value lu_solve(Builder& b, const Value& lu, const Value& perm, const Value& rhs, bool left,
               bool adjoint) {
  if (!left) return mH(b, lu_solve(b, lu, perm, mH(b, rhs), true, !adjoint));
  Dims batch = broadcast_shapes(leading(lu.dims(), 2), leading(rhs.dims(), 2));
  Value f = to_batch(b, lu, batch, 2), x = to_batch(b, rhs, batch, 2);
  if (x.shape.numel() == 0) return x;
  // A = P L U. The permutation matrix multiplies exactly (one 1 per row).
  Value p = permutation_matrix(b, to_batch(b, perm, batch, 1), f.type());
  if (!adjoint) {
    x = matmul(b, mT(b, p), x);
    x = tri_solve(b, f, x, true, true, true, Transpose::None);
    return tri_solve(b, f, x, true, false, false, Transpose::None);
  }
  x = tri_solve(b, f, x, true, false, false, Transpose::Adjoint);
  x = tri_solve(b, f, x, true, true, true, Transpose::Adjoint);
  return matmul(b, p, x);
}

Value permutation_sign(Builder& b, const Value& pivots, ElementType t) {
  const Dims& d = pivots.dims();
  Value expected = b.add(index(b, d, -1), b.full({kIndex, d}, 1.0));
  Value swapped = b.compare(convert(b, pivots, kIndex), expected, Comparison::NE);
  Value count = reduce_sum(b, b.select(swapped, b.full({kIndex, d}, 1.0), zeros(b, kIndex, d)),
                           {pivots.rank() - 1});
  Value odd = b.compare(b.rem(count, b.full(count.shape, 2.0)), zeros(b, kIndex, count.dims()),
                        Comparison::NE);
  return b.select(odd, b.full({t, count.dims()}, -1.0), b.full({t, count.dims()}, 1.0));
}

}  // namespace torch_tpu::lower::linalg

namespace torch_tpu::lower {
namespace {

using namespace linalg;
using hlo::Comparison;

// For det and slogdet PyTorch factors A^T when A is real and contiguous in
// the caller's layout: the LU and pivots it returns, which the backward
// formulas read back, are those of A^T. Rules cannot see strides; they take
// the contiguous case, the usual one. (_linalg_solve_ex always factors A.)
bool factors_transpose(const Value& a) { return !is_complex(a.type()); }

// linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info)
std::vector<Value> linalg_cholesky_ex(Context& c, const Args& a) {
  Value x = a.tensor(0);
  require_floating(x);
  auto [f, info] = checked_cholesky(c.b, x, a.boolean(1));
  return {f, info};
}

// cholesky(self, upper): the deprecated form, without info.
std::vector<Value> cholesky_op(Context& c, const Args& a) {
  require_floating(a.tensor(0));
  // The CPU takes an empty input as it is, square or not.
  if (c.output(0).numel() == 0) return {c.b.full(c.output(0), 0)};
  return {checked_cholesky(c.b, a.tensor(0), a.boolean(1)).first};
}

// cholesky_inverse(self, upper): (L L^H)^-1 = L^-H L^-1, (U^H U)^-1 = U^-1 U^-H.
std::vector<Value> cholesky_inverse(Context& c, const Args& a) {
  Value f = a.tensor(0);
  require_floating(f);
  bool upper = a.boolean(1);
  Value inv = tri_solve(c.b, f, eye(c.b, f.type(), leading(f.dims(), 2), f.dim(-1), f.dim(-1)),
                        true, !upper, false, Transpose::None);
  return {upper ? matmul(c.b, inv, mH(c.b, inv)) : matmul(c.b, mH(c.b, inv), inv)};
}

// _cholesky_solve_helper(self, A, upper): solves (L L^H) X = self.
std::vector<Value> cholesky_solve_helper(Context& c, const Args& a) {
  Value rhs = a.tensor(0), f = a.tensor(1);
  require_floating(f);
  bool upper = a.boolean(2);
  Transpose first = upper ? Transpose::Adjoint : Transpose::None;
  Transpose second = upper ? Transpose::None : Transpose::Adjoint;
  Value y = tri_solve(c.b, f, rhs, true, !upper, false, first);
  return {tri_solve(c.b, f, y, true, !upper, false, second)};
}

// linalg_solve_triangular(self, B, *, upper, left, unitriangular)
std::vector<Value> linalg_solve_triangular(Context& c, const Args& a) {
  require_floating(a.tensor(0));
  return {tri_solve(c.b, a.tensor(0), a.tensor(1), a.boolean(3), !a.boolean(2), a.boolean(4),
                    Transpose::None)};
}

// triangular_solve(self, A, upper, transpose, unitriangular) -> (solution, A)
std::vector<Value> triangular_solve(Context& c, const Args& a) {
  Value rhs = a.tensor(0), m = a.tensor(1);
  require_floating(m);
  Value x = tri_solve(c.b, m, rhs, true, !a.boolean(2), a.boolean(4),
                      a.boolean(3) ? Transpose::Transpose : Transpose::None);
  return {x, broadcast_to(c.b, m, c.output(1).dims)};
}

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info)
std::vector<Value> linalg_lu_factor_ex(Context& c, const Args& a) {
  require_floating(a.tensor(0));
  if (!a.boolean(1)) throw Unsupported("LU without pivoting");
  Factorization f = lu_factor(c.b, a.tensor(0));
  return {f.lu, f.pivots, f.info};
}

// P, L, U of A = P L U from a factorization's LU and row permutation.
std::vector<Value> unpack(Builder& b, const Value& lu, const Value& perm) {
  const int64_t m = lu.dim(-2), n = lu.dim(-1), k = std::min(m, n), r = lu.rank();
  const Dims batch = leading(lu.dims(), 2);
  Dims l_limit = lu.dims(), u_limit = lu.dims();
  l_limit[r - 1] = k;
  u_limit[r - 2] = k;
  Value l = b.slice(lu, Dims(r, 0), l_limit, Dims(r, 1));
  l = b.add(triangle(b, l, true, -1), eye(b, lu.type(), batch, m, k));
  Value u = triangle(b, b.slice(lu, Dims(r, 0), u_limit, Dims(r, 1)), false, 0);
  return {permutation_matrix(b, perm, lu.type()), l, u};
}

// linalg_lu(A, *, pivot) -> (P, L, U)
std::vector<Value> linalg_lu(Context& c, const Args& a) {
  require_floating(a.tensor(0));
  if (!a.boolean(1)) throw Unsupported("LU without pivoting");
  Factorization f = lu_factor(c.b, a.tensor(0));
  return unpack(c.b, f.lu, f.perm);
}

// The CPU's check of LU pivots (1-based rows, of `rows`): none below 1, and
// with `above` too none above `rows`.
void check_pivots(Context& c, const Value& pivots, int64_t rows, bool above, std::string message) {
  Builder& b = c.b;
  Value p = convert(b, pivots, ElementType::S64);
  Value invalid = b.compare(p, b.full(p.shape, 1), hlo::Comparison::LT);
  if (above) {
    invalid = b.or_(invalid,
                    b.compare(p, b.full(p.shape, static_cast<double>(rows)), hlo::Comparison::GT));
  }
  check_none(c, invalid, DataCheck::Error::Runtime, std::move(message));
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U);
// the parts not asked for are empty.
std::vector<Value> lu_unpack(Context& c, const Args& a) {
  Value lu = a.tensor(0);
  require_floating(lu);
  Dims batch = broadcast_shapes(leading(lu.dims(), 2), leading(a.tensor(1).dims(), 1));
  lu = to_batch(c.b, lu, batch, 2);
  Value pivots = to_batch(c.b, a.tensor(1), batch, 1);
  // The CPU applies the first min(m, n) pivots only: of an LU narrowed to
  // fewer columns, the rest are ignored.
  const int64_t k = std::min(lu.dim(-2), lu.dim(-1));
  if (pivots.dim(-1) > k) {
    Dims limits = pivots.dims();
    limits.back() = k;
    pivots = c.b.slice(pivots, Dims(pivots.rank(), 0), limits, Dims(pivots.rank(), 1));
  }
  // The pivots it applies, when it unpacks them.
  if (a.boolean(3)) {
    check_pivots(c, pivots, lu.dim(-2), true,
                 "pivots passed to lu_unpack must be between 1 and LU.size(-2) inclusive."
                 "Did you properly pass the result of lu_factor?");
  }
  std::vector<Value> out = unpack(c.b, lu, permutation_from_pivots(c.b, pivots, lu.dim(-2)));
  for (size_t i = 0; i < 3; ++i) {
    if (out[i].dims() != c.output(i).dims) out[i] = c.b.full(c.output(i), 0.0);
  }
  return out;
}

// linalg_lu_solve(LU, pivots, B, *, left, adjoint)
std::vector<Value> linalg_lu_solve(Context& c, const Args& a) {
  Value lu = a.tensor(0);
  require_floating(lu);
  check_pivots(c, a.tensor(1), lu.dim(-2), false,
               "Pivots given to lu_solve must all be greater or equal to 1. Did you properly "
               "pass the result of lu_factor?");
  check_pivots(c, a.tensor(1), lu.dim(-2), true,
               "Pivots given to lu_solve must all be smaller or equal to LU.size(-2). Did you "
               "properly pass the result of lu_factor?");
  Value perm = permutation_from_pivots(c.b, a.tensor(1), lu.dim(-2));
  return {lu_solve(c.b, lu, perm, a.tensor(2), a.boolean(3), a.boolean(4))};
}

// _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info).
// B is a (batch of) vector(s) when the result has one dimension less than A.
std::vector<Value> linalg_solve_ex(Context& c, const Args& a) {
  Builder& b = c.b;
  Value m = a.tensor(0), rhs = a.tensor(1);
  require_floating(m);
  const bool left = a.boolean(2);
  const bool vector = c.output(0).rank() == m.rank() - 1;
  Factorization f = lu_factor(b, m);
  if (vector) rhs = b.reshape(rhs, append(rhs.dims(), {1}));
  Dims batch = broadcast_shapes(leading(m.dims(), 2), leading(rhs.dims(), 2));
  Value x =
      lu_solve(b, to_batch(b, f.lu, batch, 2), to_batch(b, f.perm, batch, 1), rhs, left, false);
  if (vector) x = b.reshape(x, c.output(0).dims);
  return {x, f.lu, f.pivots, f.info};
}

// linalg_inv_ex(A, *, check_errors) -> (inverse, info)
std::vector<Value> linalg_inv_ex(Context& c, const Args& a) {
  Value m = a.tensor(0);
  require_floating(m);
  Factorization f = lu_factor(c.b, m);
  Value id = eye(c.b, m.type(), leading(m.dims(), 2), m.dim(-1), m.dim(-1));
  return {lu_solve(c.b, f.lu, f.perm, id, true, false), f.info};
}

// _linalg_det(A) -> (result, LU, pivots)
std::vector<Value> linalg_det(Context& c, const Args& a) {
  Builder& b = c.b;
  Value m = a.tensor(0);
  require_floating(m);
  Factorization f = lu_factor(b, factors_transpose(m) ? mT(b, m) : m);
  Value d = diagonal(b, f.lu);
  Value det = b.mul(permutation_sign(b, f.pivots, m.type()), product(b, d, d.rank() - 1));
  return {det, f.lu, f.pivots};
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
std::vector<Value> linalg_slogdet(Context& c, const Args& a) {
  Builder& b = c.b;
  Value m = a.tensor(0);
  require_floating(m);
  Factorization f = lu_factor(b, factors_transpose(m) ? mT(b, m) : m);
  Value d = diagonal(b, f.lu);
  Value mag = b.abs(d);
  Value zero = zeros(b, mag.type(), mag.dims());
  Value unit = is_complex(d.type()) ? b.div(d, b.complex(mag, zero)) : b.div(d, mag);
  Value sgn = b.select(b.compare(mag, zero, Comparison::EQ), zeros(b, d.type(), d.dims()), unit);
  Value sign = b.mul(permutation_sign(b, f.pivots, m.type()), product(b, sgn, d.rank() - 1));
  return {sign, reduce_sum(b, b.log(mag), {d.rank() - 1}), f.lu, f.pivots};
}

}  // namespace

TPU_LOWERING(linalg_cholesky_ex, "linalg_cholesky_ex");
TPU_LOWERING(cholesky_op, "cholesky");
TPU_LOWERING(cholesky_inverse, "cholesky_inverse");
TPU_LOWERING(cholesky_solve_helper, "_cholesky_solve_helper");
TPU_LOWERING(linalg_solve_triangular, "linalg_solve_triangular");
TPU_LOWERING(triangular_solve, "triangular_solve");
TPU_LOWERING(linalg_lu_factor_ex, "linalg_lu_factor_ex");
TPU_LOWERING(linalg_lu, "linalg_lu");
TPU_LOWERING(lu_unpack, "lu_unpack");
TPU_LOWERING(linalg_lu_solve, "linalg_lu_solve");
TPU_LOWERING(linalg_solve_ex, "_linalg_solve_ex");
TPU_LOWERING(linalg_inv_ex, "linalg_inv_ex");
TPU_LOWERING(linalg_det, "_linalg_det");
TPU_LOWERING(linalg_slogdet, "_linalg_slogdet");

}  // namespace torch_tpu::lower
