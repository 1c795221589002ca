// Building blocks shared by lowering rules: PyTorch's type promotion,
// broadcasting, constants and reductions.
#pragma once

#include <vector>

#include "lower/lowering.h"

namespace torch_tpu::lower {

// ---- type promotion (torch.promote_types / torch.result_type)
ElementType promote_types(ElementType a, ElementType b);
ElementType result_type(const std::vector<const Operand*>& operands);
// Type of operations like `a / b` on integers: the default float type.
ElementType to_floating(ElementType t);

// ---- shapes
int64_t wrap_dim(int64_t dim, int64_t rank);
// Dims to reduce over: `dims` wrapped and sorted; empty means all.
Dims reduction_dims(const IntList& dims, int64_t rank);
// 0, 1, ..., rank - 1.
Dims all_dims(int64_t rank);
Dims broadcast_shapes(const Dims& a, const Dims& b);
// NumPy-style broadcast (align trailing dimensions).
Value broadcast_to(Builder& b, const Value& x, const Dims& dims);
// Drops (keepdim=false) or keeps as 1 the reduced dimensions of `dims`.
Dims reduced_shape(const Dims& dims, const Dims& reduced, bool keepdim);

// ---- values
// Converts with PyTorch semantics (complex to real keeps the real part).
Value convert(Builder& b, const Value& x, ElementType type);
Value scalar(Builder& b, double value, ElementType type);
// A constant with the type and shape of `like`.
Value full_like(Builder& b, const Value& like, double value);
// NaN / infinite elements (in either part of a complex); none for integers.
Value is_nan(Builder& b, const Value& x);
Value is_inf(Builder& b, const Value& x);
// The sign bit (set for -0.0 and negative NaNs, which comparisons miss).
Value sign_bit(Builder& b, const Value& x);
// |magnitude| with the sign bit of `sign` (C's copysign).
Value copy_sign(Builder& b, const Value& magnitude, const Value& sign);
// Converts every operand to `type` and broadcasts all to a common shape.
std::vector<Value> promote(Builder& b, const std::vector<const Operand*>& operands,
                           ElementType type);
std::vector<Value> broadcast_all(Builder& b, std::vector<Value> values);

// ---- reductions
Value reduce_sum(Builder& b, const Value& x, const Dims& dims);
// How many entries of `x` a reduction over `dims` combines, of `type` and the
// shape of the reduction's result: a constant, or in a program with bounded
// dynamic sizes a count at run time (XLA masks the padding in a sum, not in a
// count the rule divides by).
Value reduced_count(Builder& b, const Value& x, const Dims& dims, ElementType type);
// The largest (`max`) or smallest entry over `dims`, NaN where any is.
Value reduce_extreme(Builder& b, const Value& x, const Dims& dims, bool max);
Value reduce_max(Builder& b, const Value& x, const Dims& dims);
Value reduce_min(Builder& b, const Value& x, const Dims& dims);
// The larger (`max`) or smaller of x and y, NaN where either is, as PyTorch's
// max/min/amax propagate NaN (XLA's maximum keeps one operand's).
Value extreme_of(Builder& b, const Value& x, const Value& y, bool max);
// The vector p-norm of `x` over `dims` for a runtime `ord` (a program operand: one
// program serves every ord), as linalg_vector_norm computes it: max|x| (inf), min|x|
// (-inf), the count of non-zeros (0), sum|x| (1), sqrt(sum |x|^2) (2), else
// (sum |x|^p)^(1/p); accumulated in `accumulation_type`.
Value vector_norm(Builder& b, const Value& x, const Value& ord, const Dims& dims);
// How a scatter combines an update with the value it lands on: "replace",
// "sum"/"add"/"mean" (a mean's sum), "prod"/"multiply", "amax", "amin".
hlo::RegionFn scatter_combiner(const std::string& reduce);
// An s64 constant of `dims` from row-major `values` (index maps known at
// lowering time).
Value index_constant(Builder& b, const Dims& values, const Dims& dims);
// x[..., idx, ...] along `dim`, for indices known at lowering time.
Value gather_along(Builder& b, const Value& x, int64_t dim, const Dims& idx);
// The transpose of gather_along: g's elements along `dim` are added at idx
// into a dimension of `size`.
Value scatter_add_along(Builder& b, const Value& g, int64_t dim, const Dims& idx, int64_t size);

// Lowest / highest value of a type (-inf / inf for floats), as a constant.
Value lowest_value(Builder& b, ElementType t);
Value highest_value(Builder& b, ElementType t);

// Element type used to accumulate a reduction of `t` (f32 for f16/bf16).
ElementType accumulation_type(ElementType t);

// ---- data checks (see DataCheck)
// The CPU's check that every element of `index` lies in [-size, size) (or
// [0, size) without `negative_ok`); `message` has "{}" where the offending
// index goes (the largest above the range, else the smallest below it).
void check_index_range(Context& c, const Value& index, int64_t size, bool negative_ok,
                       DataCheck::Error error, std::string message);
// The same against a size known as the program runs (an s64 scalar, see
// runtime_size); "{size}" in `message` stands for it.
void check_index_range(Context& c, const Value& index, const Value& size, bool negative_ok,
                       DataCheck::Error error, std::string message);
// `index` as s64 with negative entries counted back from `size` (an s64 scalar,
// or a static size); with `clamp`, first clamped into [-size, size).
Value wrap_index(Builder& b, const Value& index, const Value& size, bool clamp = false);
Value wrap_index(Builder& b, const Value& index, int64_t size, bool clamp = false);
// The size of dimension `dim` of `x` as the program runs, an s64 scalar: in a
// program with bounded dynamic sizes the valid size (not the bound), else the
// static one.
Value runtime_size(Builder& b, const Value& x, int64_t dim);
// The CPU's check that no element of the pred `invalid` holds.
void check_none(Context& c, const Value& invalid, DataCheck::Error error, std::string message);

}  // namespace torch_tpu::lower
