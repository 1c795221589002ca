// Building blocks of the linear algebra rules (linalg*.cpp): batched matrix
// helpers, triangular solves, Cholesky and LU factorizations. Matrices are
// [..., m, n]; leading dimensions are batch dimensions.
#pragma once

#include <utility>

#include "lower/lowering.h"

namespace torch_tpu::lower::linalg {

// Indices (pivots, permutations, info) are int32, as PyTorch's.
constexpr ElementType kIndex = ElementType::S32;

// Throws Unsupported unless `x` is float32/float64/complex (as PyTorch's CPU
// linear algebra).
void require_floating(const Value& x);
// `d` without its last `trailing` dimensions.
Dims leading(const Dims& d, int64_t trailing);
Dims append(Dims a, const Dims& b);
Dims iota_dims(int64_t n);  // 0, 1, ..., n-1
// Broadcasts the leading dimensions of `x` (all but the last `trailing`) to `batch`.
Value to_batch(Builder& b, const Value& x, const Dims& batch, int64_t trailing);

Value conj(Builder& b, const Value& x);
Value mT(Builder& b, const Value& x);  // swaps the last two dimensions
Value mH(Builder& b, const Value& x);  // conjugate transpose
// s32 iota of shape `dims` along `axis` (negative counts from the end).
Value index(Builder& b, const Dims& dims, int64_t axis);
// A rank-0 value broadcast to `dims`.
Value splat(Builder& b, const Value& scalar, const Dims& dims);
// `x` broadcast to `dims`, which is x's shape with a dimension inserted at `axis`.
Value along(Builder& b, const Value& x, const Dims& dims, int64_t axis);
Value zeros(Builder& b, ElementType t, const Dims& dims);
// Batched product [..., m, k] x [..., k, n] at full precision.
Value matmul(Builder& b, const Value& x, const Value& y);
// [..., m, n] with ones on the diagonal.
Value eye(Builder& b, ElementType t, const Dims& batch, int64_t m, int64_t n);
// Lower (entries with column - row <= k) or upper (>= k) triangle; zeros elsewhere.
Value triangle(Builder& b, const Value& x, bool lower, int64_t k);
// Main diagonal [..., min(m, n)].
Value diagonal(Builder& b, const Value& x);
Value real_part(Builder& b, const Value& x);
// Product over `axis`.
Value product(Builder& b, const Value& x, int64_t axis);

enum class Transpose { None, Transpose, Adjoint };
// Solves op(a) X = rhs (left) or X op(a) = rhs with triangular `a`; batch
// dimensions broadcast.
Value tri_solve(Builder& b, Value a, Value rhs, bool left, bool lower, bool unit,
                Transpose transpose);
// Cholesky factor and LAPACK's info (first column that is not positive
// definite, 1-based; 0 if none), computed column by column.
std::pair<Value, Value> checked_cholesky(Builder& b, const Value& a, bool upper);

struct Factorization {
  Value lu;      // [..., m, n]: L below the diagonal (unit diagonal implied), U on and above
  Value pivots;  // [..., min(m, n)]: LAPACK's 1-based row interchanges
  Value perm;    // [..., m]: row i of P^T A is row perm[i] of A
  Value info;    // [...]: first zero pivot (1-based), 0 if none
};
// LU with partial pivoting, A = P L U.
Factorization lu_factor(Builder& b, const Value& a);
// The permutation that LAPACK's sequential row interchanges `pivots` make of m rows.
Value permutation_from_pivots(Builder& b, const Value& pivots, int64_t m);
// P [..., m, m] with P[perm[j], j] = 1.
Value permutation_matrix(Builder& b, const Value& perm, ElementType t);
// Solves A X = rhs (A^H X = rhs if adjoint; X A = rhs, X A^H = rhs if !left)
// from A's factorization; batch dimensions broadcast.
Value lu_solve(Builder& b, const Value& lu, const Value& perm, const Value& rhs, bool left,
               bool adjoint);
// (-1)^(number of interchanges) as `t`, [...].
Value permutation_sign(Builder& b, const Value& pivots, ElementType t);

}  // namespace torch_tpu::lower::linalg
