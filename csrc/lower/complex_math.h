// Complex functions with the values C99's Annex G gives at infinities, NaNs
// and signed zeros: glibc's, which PyTorch's kernels call (std::exp, std::pow
// and c10::complex's division) and NumPy matches. XLA's complex ops differ
// there (its exp(-inf + i inf) is NaN, its sqrt drops the sign of a zero
// imaginary part), and its complex divide scales differently.
#pragma once

#include "lower/lowering.h"

namespace torch_tpu::lower {

// c10::complex's (NumPy's) division: Smith's algorithm.
Value complex_divide(Builder& b, const Value& x, const Value& y);
// C's complex product (libgcc's __mulsc3): infinities that the textbook
// formula turns into NaN + NaN i are recovered.
Value complex_multiply(Builder& b, const Value& x, const Value& y);
// Both parts of `z` times a real constant (C++'s complex / real).
Value complex_scale(Builder& b, const Value& z, double factor);
Value complex_exp(Builder& b, const Value& z);
Value complex_log(Builder& b, const Value& z);
Value complex_sqrt(Builder& b, const Value& z);
Value complex_atanh(Builder& b, const Value& z);
Value complex_atan(Builder& b, const Value& z);
Value complex_asinh(Builder& b, const Value& z);
// glibc's cpow: exp(y log x).
Value complex_pow(Builder& b, const Value& x, const Value& y);

}  // namespace torch_tpu::lower
