// Orthogonal decompositions and matrix functions: Householder QR (LAPACK's
// geqrf/orgqr/ormqr conventions), Hermitian eigendecomposition and SVD by
// Jacobi rotations, and matrix_exp by scaling and squaring.
//
// QR's loop steps read and write single columns with dynamic slices; Jacobi's
// steps rotate every disjoint pair of a round at once. Both whole along the
// batch dimensions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>

#include "lower/helpers.h"
#include "lower/linalg.h"

namespace torch_tpu::lower {
namespace {

using namespace linalg;
using hlo::Comparison;
using Values = std::vector<Value>;
// The slice of x one wide at `at` (a runtime scalar) along `axis`: O(size),
// where a mask over the whole matrix costs O(n^2) a loop step.
std::vector<Value> starts_at(Builder& b, const Value& x, int64_t axis, const Value& at) {
  std::vector<Value> starts(x.rank(), b.constant_int(0, at.type()));
  starts[axis] = at;
  return starts;
}

Value take(Builder& b, const Value& x, int64_t axis, const Value& at) {
  Dims one = x.dims();
  one[axis] = 1;
  Dims out = x.dims();
  out.erase(out.begin() + axis);
  return b.reshape(b.dynamic_slice(x, starts_at(b, x, axis, at), one), out);
}

Value put(Builder& b, const Value& x, int64_t axis, const Value& at, const Value& v) {
  Dims one = x.dims();
  one[axis] = 1;
  return b.dynamic_update_slice(x, b.reshape(v, one), starts_at(b, x, axis, at));
}

// Column `j` (a runtime scalar) of x [..., m, n], as [..., m].
Value column(Builder& b, const Value& x, const Value& j) { return take(b, x, x.rank() - 1, j); }

// x with column j replaced by `v` [..., m].
Value set_column(Builder& b, const Value& x, const Value& j, const Value& v) {
  return put(b, x, x.rank() - 1, j, v);
}

// Entry j of v [..., n] for a runtime scalar j.
Value entry(Builder& b, const Value& v, const Value& j) { return take(b, v, v.rank() - 1, j); }

Value as_type(Builder& b, const Value& real, ElementType t) {
  return is_complex(t) ? b.complex(real, zeros(b, real.type(), real.dims())) : real;
}

Value abs_squared(Builder& b, const Value& x) {
  if (!is_complex(x.type())) return b.mul(x, x);
  Value re = b.real(x), im = b.imag(x);
  return b.add(b.mul(re, re), b.mul(im, im));
}

Value counter_less(Builder& r, const Value& j, int64_t n) {
  return r.compare(j, r.constant_int(n, kIndex), Comparison::LT);
}

Value next(Builder& r, const Value& j) { return r.add(j, r.constant_int(1, kIndex)); }

// ------------------------------------------------------------------ QR

// The Householder vector of column j of `v` [..., m, n] (geqrf storage):
// 1 at row j, the stored entries below it, zeros above.
Value reflector(Builder& b, const Value& v, const Value& j) {
  const int64_t rank = v.rank();
  Dims vm = leading(v.dims(), 1);
  vm.back() = v.dim(rank - 2);
  Value col = column(b, v, j);
  Value rows = index(b, vm, -1);
  Value below = b.compare(rows, splat(b, j, vm), Comparison::GT);
  Value at = b.compare(rows, splat(b, j, vm), Comparison::EQ);
  return b.select(at, b.full({v.type(), vm}, 1.0), b.select(below, col, zeros(b, v.type(), vm)));
}

// geqrf: A = Q R with Q = H_0 ... H_{k-1}, H_j = I - tau_j v_j v_j^H.
// Returns R above the diagonal with the v_j below it, and tau [..., k].
std::pair<Value, Value> geqrf(Builder& b, const Value& a) {
  const Dims d = a.dims();
  const int64_t rank = a.rank(), m = d[rank - 2], n = d[rank - 1], k = std::min(m, n);
  const Dims batch = leading(d, 2), vm = append(batch, {m}), vn = append(batch, {n});
  const Dims vk = append(batch, {k});
  const ElementType t = a.type(), rt = complex_component(t);
  Value tau = zeros(b, t, vk);
  if (k == 0 || a.shape.numel() == 0) return {a, tau};
  auto cond = [k](Builder& r, const Values& v) -> Values { return {counter_less(r, v[0], k)}; };
  auto body = [&](Builder& r, const Values& v) -> Values {
    const Value& j = v[0];
    Value x = v[1], tau = v[2];
    Value rows = index(r, vm, -1);
    Value below = r.compare(rows, splat(r, j, vm), Comparison::GT);
    Value col = column(r, x, j);
    Value alpha = entry(r, col, j);
    Value tail = r.select(below, col, zeros(r, t, vm));
    Value tail_norm2 = reduce_sum(r, abs_squared(r, tail), {rank - 2});
    // dlarfg: beta = -sign(Re alpha) |(alpha, tail)|; no reflection when the
    // column below the diagonal is already zero (and alpha is real).
    Value alpha_re = real_part(r, alpha);
    Value norm = r.sqrt(r.add(abs_squared(r, alpha), tail_norm2));
    Value zero_r = zeros(r, rt, batch);
    Value beta = r.select(r.compare(alpha_re, zero_r, Comparison::GE), r.neg(norm), norm);
    Value trivial = r.compare(tail_norm2, zero_r, Comparison::EQ);
    if (is_complex(t)) {
      trivial = r.and_(trivial, r.compare(r.imag(alpha), zero_r, Comparison::EQ));
    }
    Value beta_t = as_type(r, beta, t);
    Value tau_j = r.div(r.sub(beta_t, alpha), beta_t);
    tau_j = r.select(trivial, zeros(r, t, batch), tau_j);
    Value scale = r.div(r.full({t, batch}, 1.0), r.sub(alpha, beta_t));
    Value vtail = r.mul(tail, along(r, scale, vm, -1));
    Value at_j = r.compare(rows, splat(r, j, vm), Comparison::EQ);
    Value vj = r.select(at_j, r.full({t, vm}, 1.0), r.select(below, vtail, zeros(r, t, vm)));
    vj = r.select(along(r, trivial, vm, -1), r.select(at_j, r.full({t, vm}, 1.0), zeros(r, t, vm)),
                  vj);

    // Apply H_j^H = I - conj(tau) v v^H to the columns right of j.
    Value w = reduce_sum(r, r.mul(along(r, conj(r, vj), d, -1), x), {rank - 2});  // [..., n]
    Value cols = index(r, vn, -1);
    w = r.select(r.compare(cols, splat(r, j, vn), Comparison::GT), w, zeros(r, t, vn));
    Value ct = along(r, along(r, conj(r, tau_j), vm, -1), d, -1);
    x = r.sub(x, r.mul(ct, r.mul(along(r, vj, d, -1), along(r, w, d, -2))));
    // Column j becomes beta over the stored reflector.
    Value new_col = r.select(at_j, as_type(r, along(r, beta, vm, -1), t), vtail);
    new_col = r.select(r.compare(rows, splat(r, j, vm), Comparison::LT), col, new_col);
    new_col = r.select(along(r, trivial, vm, -1), col, new_col);
    x = set_column(r, x, j, new_col);
    Value at_k = r.compare(index(r, vk, -1), splat(r, j, vk), Comparison::EQ);
    tau = r.select(at_k, along(r, tau_j, vk, -1), tau);
    return {next(r, j), x, tau};
  };
  Values out = b.while_loop({b.constant_int(0, kIndex), a, tau}, cond, body);
  return {out[1], out[2]};
}

// orgqr: the first n columns of H_0 ... H_{k-1} from reflectors v [..., m, n]
// and tau [..., k], accumulated backwards as LAPACK does.
Value householder_product(Builder& b, const Value& v, const Value& tau) {
  const Dims d = v.dims();
  const int64_t rank = v.rank(), m = d[rank - 2], n = d[rank - 1], k = tau.dim(-1);
  const Dims batch = leading(d, 2);
  const ElementType t = v.type();
  Value q = eye(b, t, batch, m, n);
  if (k == 0 || q.shape.numel() == 0) return q;
  auto cond = [](Builder& r, const Values& v) -> Values {
    return {r.compare(v[0], r.constant_int(0, kIndex), Comparison::GE)};
  };
  auto body = [&](Builder& r, const Values& args) -> Values {
    const Value& j = args[0];
    Value q = args[1];
    Value vj = reflector(r, v, j);
    Value tau_j = entry(r, tau, j);
    Value w = reduce_sum(r, r.mul(along(r, conj(r, vj), d, -1), q), {rank - 2});  // v^H Q
    Value tj = along(r, along(r, tau_j, leading(d, 1), -1), d, -1);
    q = r.sub(q, r.mul(tj, r.mul(along(r, vj, d, -1), along(r, w, d, -2))));
    return {r.sub(j, r.constant_int(1, kIndex)), q};
  };
  return b.while_loop({b.constant_int(k - 1, kIndex), q}, cond, body)[1];
}

// `v` [..., m, n] widened (or cut) to `cols` columns; new columns are zero.
Value with_columns(Builder& b, const Value& v, int64_t cols) {
  const int64_t r = v.rank(), n = v.dim(-1);
  if (cols == n) return v;
  if (cols < n) {
    Dims limit = v.dims();
    limit[r - 1] = cols;
    return b.slice(v, Dims(r, 0), limit, Dims(r, 1));
  }
  Dims high(r, 0);
  high[r - 1] = cols - n;
  return b.pad(v, b.constant(0.0, v.type()), Dims(r, 0), high, Dims(r, 0));
}

Value first_rows(Builder& b, const Value& x, int64_t rows) {
  const int64_t r = x.rank();
  Dims limit = x.dims();
  limit[r - 2] = rows;
  return b.slice(x, Dims(r, 0), limit, Dims(r, 1));
}

// linalg_qr(A, mode) -> (Q, R); mode "r" leaves Q empty.
Values linalg_qr(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  require_floating(x);
  const std::string& mode = a.str(1);
  const int64_t m = x.dim(-2), n = x.dim(-1), k = std::min(m, n);
  auto [f, tau] = geqrf(b, x);
  const bool complete = mode == "complete";
  Value r = triangle(b, complete ? f : first_rows(b, f, k), false, 0);
  if (mode == "r") return {b.full(c.output(0), 0.0), r};
  Value q = householder_product(b, with_columns(b, f, complete ? m : k), tau);
  return {q, r};
}

// geqrf(self) -> (a, tau). PyTorch has no meta kernel for it: until one is
// registered the engine cannot size the results and falls back to the CPU.
Values geqrf_op(Context& c, const Args& a) {
  require_floating(a.tensor(0));
  auto [f, tau] = geqrf(c.b, a.tensor(0));
  return {f, tau};
}

// linalg_householder_product(input, tau)
Values linalg_householder_product(Context& c, const Args& a) {
  require_floating(a.tensor(0));
  return {householder_product(c.b, a.tensor(0), a.tensor(1))};
}

// ormqr(self, input2 = tau, input3 = C, left, transpose): op(Q) C or C op(Q)
// with Q the m x m product of self's reflectors, op = adjoint if transpose.
Values ormqr(Context& c, const Args& a) {
  Builder& b = c.b;
  Value v = a.tensor(0), tau = a.tensor(1), other = a.tensor(2);
  require_floating(v);
  const bool left = a.boolean(3), transpose = a.boolean(4);
  Value q = householder_product(b, with_columns(b, v, v.dim(-2)), tau);
  if (transpose) q = mH(b, q);
  return {left ? matmul(b, q, other) : matmul(b, other, q)};
}

// ------------------------------------------------------------------ Jacobi

double epsilon(ElementType real) { return real == ElementType::F32 ? 1.1920929e-07 : 2.220446e-16; }

// The Jacobi rotation G that diagonalizes the Hermitian [[a, g], [conj g, d]]
// (a, d real, [...]): G = D R with D = diag(1, conj w), w = g / |g|, and
// R = [[c, s], [-s, c]] the real rotation of [[a, |g|], [|g|, d]] (Golub and
// Van Loan's sym.schur2). t = s / c.
struct Rotation {
  Value c, s, w, t, mag;
};

Rotation jacobi_rotation(Builder& r, const Value& a, const Value& d, const Value& g) {
  const ElementType t = g.type(), rt = complex_component(t);
  const Dims& batch = a.dims();
  auto real = [&](double v) { return r.full({rt, batch}, v); };
  Value mag = r.abs(g);
  Value zero = r.compare(mag, real(0.0), Comparison::EQ);
  Value w = r.select(zero, r.full({t, batch}, 1.0), r.div(g, as_type(r, mag, t)));
  Value theta = r.div(r.sub(d, a), r.mul(real(2.0), mag));
  Value sign = r.select(r.compare(theta, real(0.0), Comparison::GE), real(1.0), real(-1.0));
  Value tan = r.div(sign, r.add(r.abs(theta), r.sqrt(r.add(r.mul(theta, theta), real(1.0)))));
  tan = r.select(zero, real(0.0), tan);
  Value cos = r.rsqrt(r.add(r.mul(tan, tan), real(1.0)));
  return {cos, r.mul(tan, cos), w, tan, mag};
}

// The index each index of the next round comes from, in the round-robin
// ordering of n (even) indices paired (2k, 2k+1): the tops 2k and bottoms 2k+1
// move one place round the tournament with index 0 fixed, so n - 1 rounds meet
// every pair once and bring the indices back to their places.
Dims round_robin_sources(int64_t n) {
  const int64_t h = n / 2;
  Dims from = iota_dims(n);
  if (h < 2) return from;
  from[2] = 1;  // bottom 0 moves to top 1
  for (int64_t k = 2; k < h; ++k) from[2 * k] = 2 * (k - 1);
  for (int64_t k = 0; k + 1 < h; ++k) from[2 * k + 1] = 2 * (k + 1) + 1;
  from[2 * h - 1] = 2 * (h - 1);  // the last top moves to the last bottom
  return from;
}

// The entries 2k (which = 0) or 2k + 1 (which = 1) of y along `axis`.
Value pair_half(Builder& r, const Value& y, int64_t axis, int64_t which) {
  Dims split = y.dims();
  split[axis] /= 2;
  split.insert(split.begin() + axis + 1, 2);
  Dims start(split.size(), 0), limit = split;
  start[axis + 1] = which;
  limit[axis + 1] = which + 1;
  Dims half = y.dims();
  half[axis] /= 2;
  return r.reshape(r.slice(r.reshape(y, split), start, limit, Dims(split.size(), 1)), half);
}

// The inverse of pair_half: p's entries at 2k, q's at 2k + 1 along `axis`.
Value interleave(Builder& r, const Value& p, const Value& q, int64_t axis) {
  Dims one = p.dims();
  one.insert(one.begin() + axis + 1, 1);
  Dims whole = p.dims();
  whole[axis] *= 2;
  return r.reshape(r.concatenate({r.reshape(p, one), r.reshape(q, one)}, axis + 1), whole);
}

// Every pair's rotation at once: X G on the columns (axis = rank - 1) or G^H X
// on the rows (axis = rank - 2) of x [..., rows, cols]; g's values are [..., n/2].
Value rotate_pairs(Builder& r, const Value& x, int64_t axis, const Rotation& g) {
  const ElementType t = x.type();
  const bool columns = axis == x.rank() - 1;
  Value xp = pair_half(r, x, axis, 0), xq = pair_half(r, x, axis, 1);
  // g's pair axis is the last; the other matrix axis is inserted beside it.
  const int64_t other = columns ? -2 : -1;
  auto vec = [&](const Value& v) { return along(r, as_type(r, v, t), xp.dims(), other); };
  Value wq = r.mul(along(r, columns ? conj(r, g.w) : g.w, xp.dims(), other), xq);
  Value new_p = r.sub(r.mul(vec(g.c), xp), r.mul(vec(g.s), wq));
  Value new_q = r.add(r.mul(vec(g.s), xp), r.mul(vec(g.c), wq));
  return interleave(r, new_p, new_q, axis);
}

// Jacobi sweeps in Brent and Luk's parallel ordering over n (even) indices:
// `round` rotates the pairs (2k, 2k+1) of the carried matrices at once and
// returns them with a convergence measure ([], the round's largest); `move`
// then takes one along the tournament (round_robin_sources). A sweep is n - 1
// vector steps, where the cyclic ordering took n (n - 1) / 2 serial ones;
// sweeps stop once a whole sweep's largest measure is at most `tol`, or after
// `max_sweeps`. Whole sweeps leave every index in its place.
using RoundFn = std::function<Values(Builder&, const Values& state)>;
using MoveFn = std::function<Values(Builder&, const Values& state, const Dims& from)>;

Values parallel_jacobi_sweeps(Builder& b, int64_t n, const Values& state, double tol,
                              int max_sweeps, const RoundFn& round, const MoveFn& move) {
  const ElementType mt = ElementType::F64;
  const Dims from = round_robin_sources(n);
  auto konst = [](Builder& r, int64_t v) { return r.constant_int(v, kIndex); };
  Values init{konst(b, 0), konst(b, 0), b.constant(0.0, mt)};
  init.insert(init.end(), state.begin(), state.end());
  auto cond = [max_sweeps](Builder& r, const Values& v) -> Values {
    return {r.compare(v[1], r.constant_int(max_sweeps, kIndex), Comparison::LT)};
  };
  auto body = [&](Builder& r, const Values& v) -> Values {
    const Value &step = v[0], &sweep = v[1];
    Values out = round(r, Values(v.begin() + 3, v.end()));
    Value measure = convert(r, out.back(), mt);
    out.pop_back();
    out = move(r, out, from);
    Value worst = r.max(v[2], measure);
    worst = r.select(r.compare(measure, measure, Comparison::NE), r.constant(1e300, mt), worst);
    Value end = r.compare(step, konst(r, n - 2), Comparison::EQ);
    Value done = r.and_(end, r.compare(worst, r.constant(tol, mt), Comparison::LE));
    Value sweep1 = r.select(done, konst(r, max_sweeps), r.select(end, next(r, sweep), sweep));
    Values result{r.select(end, konst(r, 0), next(r, step)), sweep1,
                  r.select(end, r.constant(0.0, mt), worst)};
    result.insert(result.end(), out.begin(), out.end());
    return result;
  };
  Values out = b.while_loop(init, cond, body);
  return Values(out.begin() + 3, out.end());
}

// `x` [..., m, n] cut to its first `rows` rows and `cols` columns.
Value top_left(Builder& b, const Value& x, int64_t rows, int64_t cols) {
  Dims limit = append(leading(x.dims(), 2), {rows, cols});
  return b.slice(x, Dims(limit.size(), 0), limit, Dims(limit.size(), 1));
}

// One-sided Jacobi on the columns of x [..., m, n]: returns X = x V with
// orthogonal columns, and the unitary V; a round's measure is its largest pair
// cosine |x_p^H x_q| / (|x_p| |x_q|). An odd n gets a zero column, which no
// rotation moves.
std::pair<Value, Value> one_sided_jacobi(Builder& b, const Value& x, double tol, int max_sweeps) {
  const int64_t rank = x.rank(), m = x.dim(-2), n = x.dim(-1), even = n + n % 2;
  const Dims batch = leading(x.dims(), 2);
  const ElementType t = x.type(), rt = complex_component(t);
  if (n < 2) return {x, eye(b, t, batch, n, n)};
  auto round = [&](Builder& r, const Values& s) -> Values {
    Value xp = pair_half(r, s[0], rank - 1, 0), xq = pair_half(r, s[0], rank - 1, 1);
    Value alpha = reduce_sum(r, abs_squared(r, xp), {rank - 2});
    Value beta = reduce_sum(r, abs_squared(r, xq), {rank - 2});
    Value gamma = reduce_sum(r, r.mul(conj(r, xp), xq), {rank - 2});
    Rotation g = jacobi_rotation(r, alpha, beta, gamma);
    Value scale = r.sqrt(r.mul(alpha, beta));
    Value zero = zeros(r, rt, scale.dims());
    Value cosine = r.select(r.compare(scale, zero, Comparison::GT), r.div(g.mag, scale), zero);
    return {rotate_pairs(r, s[0], rank - 1, g), rotate_pairs(r, s[1], rank - 1, g),
            reduce_max(r, cosine, iota_dims(cosine.rank()))};
  };
  auto move = [&](Builder& r, const Values& s, const Dims& from) -> Values {
    return {gather_along(r, s[0], rank - 1, from), gather_along(r, s[1], rank - 1, from)};
  };
  Values out =
      parallel_jacobi_sweeps(b, even, {with_columns(b, x, even), eye(b, t, batch, even, even)}, tol,
                             max_sweeps, round, move);
  return {top_left(b, out[0], m, n), top_left(b, out[1], n, n)};
}

// Sorts `values` [..., n] (ascending, or descending) and returns them with
// the permutation matrix that orders columns alike (X P).
std::pair<Value, Value> sort_with_permutation(Builder& b, const Value& values, bool descending,
                                              ElementType t) {
  const Dims& d = values.dims();
  Values sorted =
      b.sort({values, index(b, d, -1)}, values.rank() - 1, true,
             [descending](Builder& r, const Values& v) -> Values {
               return {r.compare(v[0], v[1], descending ? Comparison::GT : Comparison::LT)};
             });
  return {sorted[0], permutation_matrix(b, sorted[1], t)};
}

// Hermitian matrix from one triangle of `a` (the diagonal's real part).
Value hermitian_from(Builder& b, const Value& a, bool lower) {
  Value strict = triangle(b, a, lower, lower ? -1 : 1);
  Value diag = along(b, real_part(b, diagonal(b, a)), a.dims(), -1);
  Value on = b.compare(index(b, a.dims(), -2), index(b, a.dims(), -1), Comparison::EQ);
  Value d = b.select(on, as_type(b, diag, a.type()), zeros(b, a.type(), a.dims()));
  return b.add(b.add(strict, mH(b, strict)), d);
}

// Eigenvalues (ascending, real) and eigenvectors of Hermitian `h`: two-sided
// Jacobi, every pair of a round at once (G^H X G); a round's measure is the
// off-diagonal mass relative to the whole (worst matrix). An odd n gets a zero
// row and column, which no rotation moves.
std::pair<Value, Value> eigh(Builder& b, const Value& h) {
  const int64_t n = h.dim(-1), rank = h.rank(), even = n + n % 2;
  const Dims batch = leading(h.dims(), 2), d = append(batch, {even, even});
  const ElementType t = h.type(), rt = complex_component(t);
  const double eps = epsilon(rt);
  auto round = [&](Builder& r, const Values& s) -> Values {
    Value x = s[0];
    Value dg = real_part(r, diagonal(r, x));
    Value a = pair_half(r, dg, rank - 2, 0), dd = pair_half(r, dg, rank - 2, 1);
    Value g = diagonal(r, pair_half(r, pair_half(r, x, rank - 2, 0), rank - 1, 1));
    Rotation rot = jacobi_rotation(r, a, dd, g);
    x = rotate_pairs(r, rotate_pairs(r, x, rank - 2, rot), rank - 1, rot);
    // The pairs' 2 x 2 blocks are known exactly: set them so that rounding
    // does not leave an off-diagonal residue.
    Value row_i = index(r, d, -2), col_i = index(r, d, -1), two = r.full({kIndex, d}, 2.0);
    Value on = r.compare(row_i, col_i, Comparison::EQ);
    Value block = r.compare(r.div(row_i, two), r.div(col_i, two), Comparison::EQ);
    Value shift = r.mul(rot.t, rot.mag);
    Value diag = interleave(r, r.sub(a, shift), r.add(dd, shift), rank - 2);
    x = r.select(block, zeros(r, t, d), x);
    x = r.select(on, along(r, as_type(r, diag, t), d, -1), x);
    Value mag2 = abs_squared(r, x);
    Value all = reduce_sum(r, mag2, {rank - 2, rank - 1});
    Value off = reduce_sum(r, r.select(on, zeros(r, rt, d), mag2), {rank - 2, rank - 1});
    Value ratio = r.div(off, r.max(all, r.full({rt, batch}, std::numeric_limits<float>::min())));
    Value worst = batch.empty() ? ratio : reduce_max(r, ratio, iota_dims(batch.size()));
    return {x, rotate_pairs(r, s[1], rank - 1, rot), worst};
  };
  auto move = [&](Builder& r, const Values& s, const Dims& from) -> Values {
    Value x = gather_along(r, gather_along(r, s[0], rank - 2, from), rank - 1, from);
    return {x, gather_along(r, s[1], rank - 1, from)};
  };
  Value padded = mH(b, with_columns(b, mH(b, with_columns(b, h, even)), even));
  Values out = n < 2 ? Values{h, eye(b, t, batch, n, n)}
                     : parallel_jacobi_sweeps(b, even, {padded, eye(b, t, batch, even, even)},
                                              eps * eps, 30, round, move);
  Value x = top_left(b, out[0], n, n), v = top_left(b, out[1], n, n);
  auto [values, perm] = sort_with_permutation(b, real_part(b, diagonal(b, x)), false, t);
  return {values, matmul(b, v, perm)};
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors)
Values linalg_eigh(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  require_floating(x);
  if (x.shape.numel() == 0) return {b.full(c.output(0), 0.0), b.full(c.output(1), 0.0)};
  const std::string& uplo = a.str(1);  // "L", "U", "l" or "u" (PyTorch checked)
  auto [values, vectors] = eigh(b, hermitian_from(b, x, uplo == "L" || uplo == "l"));
  if (!a.boolean(2)) vectors = b.full(c.output(1), 0.0);
  return {values, vectors};
}

// SVD of a tall matrix (m >= n): A = Q R (Householder), then one-sided
// Jacobi on R makes its columns orthogonal: R V = B, sigma = column norms.
// U's columns come from a QR of B (sorted) rather than B / sigma, so they
// stay orthonormal where sigma is 0; with full_matrices Q's trailing columns
// complete them. Returns U ([m, m] or [m, n]), S [n] descending, V [n, n].
std::tuple<Value, Value, Value> svd_tall(Builder& b, const Value& a, bool full) {
  const Dims d = a.dims();
  const int64_t rank = a.rank(), m = d[rank - 2], n = d[rank - 1];
  const Dims batch = leading(d, 2), vn = append(batch, {n}), dn = append(batch, {n, n});
  const ElementType t = a.type(), rt = complex_component(t);
  auto [f, tau] = geqrf(b, a);
  Value r = triangle(b, first_rows(b, f, n), false, 0);
  auto [x, v_r] = one_sided_jacobi(b, r, epsilon(rt) * static_cast<double>(n), 30);
  const Values out{x, v_r};
  Value sigma = b.sqrt(reduce_sum(b, abs_squared(b, out[0]), {rank - 2}));
  auto [s, perm] = sort_with_permutation(b, sigma, true, t);
  Value bs = matmul(b, out[0], perm), v = matmul(b, out[1], perm);
  // B = Qb Rb with Rb diagonal up to rounding: U_R = Qb times Rb's phases.
  auto [fb, taub] = geqrf(b, bs);
  Value qb = householder_product(b, fb, taub);
  Value db = diagonal(b, fb);
  Value mag = b.abs(db);
  Value zero = zeros(b, rt, vn);
  Value phase = b.select(b.compare(mag, zero, Comparison::EQ), b.full({t, vn}, 1.0),
                         b.div(db, as_type(b, mag, t)));
  qb = b.mul(qb, along(b, phase, dn, -2));
  Value q = householder_product(b, with_columns(b, f, full ? m : n), tau);
  Value inner_u = qb;
  if (full && m > n) {
    Dims high(rank, 0);
    high[rank - 2] = high[rank - 1] = m - n;
    Value padded = b.pad(qb, b.constant(0.0, t), Dims(rank, 0), high, Dims(rank, 0));
    Value id = eye(b, t, batch, m, m);
    Value tail = b.and_(
        b.compare(index(b, id.dims(), -2), b.full({kIndex, id.dims()}, double(n)), Comparison::GE),
        b.compare(index(b, id.dims(), -1), b.full({kIndex, id.dims()}, double(n)), Comparison::GE));
    inner_u = b.add(padded, b.select(tail, id, zeros(b, t, id.dims())));
  }
  return {matmul(b, q, inner_u), s, v};
}

// _linalg_svd(A, full_matrices, compute_uv, *, driver) -> (U, S, Vh)
Values linalg_svd(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  require_floating(x);
  const bool full = a.boolean(1), compute_uv = a.boolean(2);
  if (x.shape.numel() == 0) {
    Values out;
    for (size_t i = 0; i < 3; ++i) {
      const Shape& o = c.output(i);
      // Empty A, but U or Vh of full_matrices may be a (non-empty) identity.
      if (o.numel() != 0 && o.rank() == x.rank()) {
        out.push_back(eye(b, o.type, leading(o.dims, 2), o.dims[o.rank() - 2], o.dims.back()));
      } else {
        out.push_back(b.full(o, 0.0));
      }
    }
    return out;
  }
  const bool wide = x.dim(-2) < x.dim(-1);
  auto [u, s, v] = svd_tall(b, wide ? mH(b, x) : x, full);
  // A^H = U S V^H gives A = V S U^H.
  Value left = wide ? v : u, right = wide ? mH(b, u) : mH(b, v);
  if (!compute_uv) return {b.full(c.output(0), 0.0), s, b.full(c.output(2), 0.0)};
  return {left, s, right};
}

// ------------------------------------------------------------------ matrix_exp

// 1-norm (largest column sum of magnitudes) per matrix, [...].
Value norm1(Builder& b, const Value& x) {
  Value colsum = reduce_sum(b, b.abs(x), {x.rank() - 2});
  return reduce_max(b, colsum, {x.rank() - 2});
}

// Degree-18 approximant of exp(A) in five products (Bader, Blanes and Casas,
// "Computing the matrix exponential with an optimized Taylor polynomial
// approximation", 2019): with P = (I, A, A^2, A^3, A^6) and B_i = sum_j
// c_ij P_j, A9 = B_0 B_4 + B_3 and T18 = B_1 + (B_2 + A9) A9. PyTorch uses
// it too (with lower degrees below its bounds, where T18 is as exact).
Value taylor18(Builder& b, const Value& a) {
  static constexpr double c[5][5] = {
      {0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04,
       0.},
      {0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
       -6.37898194594723280150e-04},
      {-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
       -6.98210122488052056106e-03, 3.34975017086070470649e-05},
      {-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
       2.95552570429315521194e-02, -1.39180257516060693404e-05},
      {0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
       -1.40086798182036094347e-05}};
  const Dims& d = a.dims();
  Value a2 = matmul(b, a, a), a3 = matmul(b, a2, a);
  Value p[5] = {eye(b, a.type(), leading(d, 2), d.back(), d.back()), a, a2, a3, matmul(b, a3, a3)};
  Value bs[5];
  for (int i = 0; i < 5; ++i) {
    bs[i] = zeros(b, a.type(), d);
    for (int j = 0; j < 5; ++j) {
      if (c[i][j] != 0.0) bs[i] = b.add(bs[i], b.mul(b.full({a.type(), d}, c[i][j]), p[j]));
    }
  }
  Value a9 = b.add(matmul(b, bs[0], bs[4]), bs[3]);
  return b.add(bs[1], matmul(b, b.add(bs[2], a9), a9));
}

// linalg_matrix_exp(self): exp(A) = T18(A / 2^s)^(2^s) with PyTorch's s (the
// smallest with |A / 2^s|_1 <= theta_18, the approximant's bound for the
// type). Half types compute in float32.
Values linalg_matrix_exp(Context& c, const Args& a) {
  Builder& b = c.b;
  Value x = a.tensor(0);
  if (!is_floating(x.type()) && !is_complex(x.type())) throw Unsupported("integer matrix_exp");
  const ElementType out = x.type(), t = accumulation_type(out);
  x = convert(b, x, t);
  if (x.shape.numel() == 0) return {convert(b, x, out)};
  const ElementType rt = complex_component(t);
  const Dims batch = leading(x.dims(), 2);
  const int64_t n = x.dim(-1);
  const double theta = rt == ElementType::F32 ? 3.010066362817634 : 1.090863719290036;
  // s = max(0, ceil(log2(|A|_1 / theta))), per matrix.
  Value norm = b.div(norm1(b, x), b.full({rt, batch}, theta));
  Value log2 = b.div(b.log(norm), b.full({rt, batch}, std::log(2.0)));
  Value s = b.max(b.ceil(log2), zeros(b, rt, batch));
  s = b.select(b.is_finite(s), s, zeros(b, rt, batch));
  s = b.min(s, b.full({rt, batch}, 1000.0));
  Value scale = b.pow(b.full({rt, batch}, 2.0), b.neg(s));
  Value y =
      b.mul(x, as_type(b, along(b, along(b, scale, append(batch, {n}), -1), x.dims(), -1), t));
  Value e = taylor18(b, y);
  // Square s times (each matrix its own s): the loop runs to the largest.
  Value steps = convert(b, s, kIndex);
  Value most = reduce_max(b, steps, iota_dims(batch.size()));
  auto cond = [](Builder& r, const Values& v) -> Values {
    return {r.compare(v[0], v[1], Comparison::LT)};
  };
  auto body = [&](Builder& r, const Values& v) -> Values {
    Value squared = matmul(r, v[2], v[2]);
    Value more = r.compare(splat(r, v[0], batch), v[3], Comparison::LT);
    Value e =
        r.select(along(r, along(r, more, append(batch, {n}), -1), x.dims(), -1), squared, v[2]);
    return {next(r, v[0]), v[1], e, v[3]};
  };
  e = b.while_loop({b.constant_int(0, kIndex), most, e, steps}, cond, body)[2];
  return {convert(b, e, out)};
}

}  // namespace

TPU_LOWERING(linalg_qr, "linalg_qr");
TPU_LOWERING(geqrf_op, "geqrf");
TPU_LOWERING(linalg_householder_product, "linalg_householder_product");
TPU_LOWERING(ormqr, "ormqr");
TPU_LOWERING(linalg_matrix_exp, "linalg_matrix_exp");
TPU_LOWERING(linalg_eigh, "_linalg_eigh");
TPU_LOWERING(linalg_svd, "_linalg_svd");

}  // namespace torch_tpu::lower
