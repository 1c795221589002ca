#include "runtime/element_type.h"

#include <stdexcept>

namespace torch_tpu {

namespace {

struct TypeInfo {
  int size;
  const char* mlir;
  const char* short_name;
};

const TypeInfo& info(ElementType t) {
  static const TypeInfo table[] = {
      {0, "invalid", "invalid"},
      {1, "i1", "pred"},
      {1, "i8", "s8"},
      {2, "i16", "s16"},
      {4, "i32", "s32"},
      {8, "i64", "s64"},
      {1, "ui8", "u8"},
      {2, "ui16", "u16"},
      {4, "ui32", "u32"},
      {8, "ui64", "u64"},
      {2, "f16", "f16"},
      {4, "f32", "f32"},
      {8, "f64", "f64"},
      {2, "bf16", "bf16"},
      {8, "complex<f32>", "c64"},
      {16, "complex<f64>", "c128"},
  };
  auto i = static_cast<int>(t);
  if (i <= 0 || i >= static_cast<int>(sizeof(table) / sizeof(table[0]))) {
    throw std::invalid_argument("invalid element type " + std::to_string(i));
  }
  return table[i];
}

}  // namespace

int element_size(ElementType t) { return info(t).size; }
const char* mlir_name(ElementType t) { return info(t).mlir; }
const char* short_name(ElementType t) { return info(t).short_name; }

bool is_floating(ElementType t) {
  return t == ElementType::F16 || t == ElementType::BF16 || t == ElementType::F32 ||
         t == ElementType::F64;
}

bool is_complex(ElementType t) { return t == ElementType::C64 || t == ElementType::C128; }

bool is_unsigned(ElementType t) {
  return t == ElementType::U8 || t == ElementType::U16 || t == ElementType::U32 ||
         t == ElementType::U64;
}

bool is_integral(ElementType t) {
  return is_unsigned(t) || t == ElementType::S8 || t == ElementType::S16 || t == ElementType::S32 ||
         t == ElementType::S64;
}

int bit_width(ElementType t) { return t == ElementType::Pred ? 1 : 8 * element_size(t); }

ElementType complex_component(ElementType t) {
  if (t == ElementType::C64) return ElementType::F32;
  if (t == ElementType::C128) return ElementType::F64;
  return t;
}

ElementType to_complex(ElementType t) {
  if (is_complex(t)) return t;
  return t == ElementType::F64 ? ElementType::C128 : ElementType::C64;
}

}  // namespace torch_tpu
