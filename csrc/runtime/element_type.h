// Element types of device buffers and program values. The numbering is the
// PJRT buffer type numbering, so converting is a cast.
#pragma once

#include <cstdint>
#include <string>

namespace torch_tpu {

enum class ElementType : int8_t {
  Invalid = 0,
  Pred = 1,
  S8 = 2,
  S16 = 3,
  S32 = 4,
  S64 = 5,
  U8 = 6,
  U16 = 7,
  U32 = 8,
  U64 = 9,
  F16 = 10,
  F32 = 11,
  F64 = 12,
  BF16 = 13,
  C64 = 14,
  C128 = 15,
};

// Size of one element in bytes (pred is stored as one byte).
int element_size(ElementType t);
// MLIR spelling: i1, i32, ui8, bf16, complex<f32>, ...
const char* mlir_name(ElementType t);
// Short name for messages and cache keys: pred, s32, u8, bf16, c64, ...
const char* short_name(ElementType t);

bool is_floating(ElementType t);  // f16, bf16, f32, f64
bool is_complex(ElementType t);
bool is_integral(ElementType t);  // signed or unsigned, not pred
bool is_unsigned(ElementType t);
int bit_width(ElementType t);
// The real type of a complex type (c64 -> f32); other types map to themselves.
ElementType complex_component(ElementType t);
// The complex type with the given real precision (f32 -> c64, f64 -> c128).
ElementType to_complex(ElementType t);

}  // namespace torch_tpu
