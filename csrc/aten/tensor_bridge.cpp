#include "aten/tensor_bridge.h"

#include "aten/allocator.h"

namespace torch_tpu::aten {

namespace {
thread_local c10::DeviceIndex g_current_device = 0;
}

c10::DeviceIndex current_device() { return g_current_device; }
void set_current_device(c10::DeviceIndex device) { g_current_device = device; }

ElementType element_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBool:
      return ElementType::Pred;
    case at::kByte:
      return ElementType::U8;
    case at::kChar:
      return ElementType::S8;
    case at::kShort:
      return ElementType::S16;
    case at::kInt:
      return ElementType::S32;
    case at::kLong:
      return ElementType::S64;
    case at::kUInt16:
      return ElementType::U16;
    case at::kUInt32:
      return ElementType::U32;
    case at::kUInt64:
      return ElementType::U64;
    case at::kHalf:
      return ElementType::F16;
    case at::kBFloat16:
      return ElementType::BF16;
    case at::kFloat:
      return ElementType::F32;
    case at::kDouble:
      return ElementType::F64;
    case at::kComplexFloat:
      return ElementType::C64;
    case at::kComplexDouble:
      return ElementType::C128;
    default:
      TORCH_CHECK_TYPE(false, "tpu does not support dtype ", dtype);
  }
}

at::ScalarType scalar_type(ElementType type) {
  switch (type) {
    case ElementType::Pred:
      return at::kBool;
    case ElementType::U8:
      return at::kByte;
    case ElementType::S8:
      return at::kChar;
    case ElementType::S16:
      return at::kShort;
    case ElementType::S32:
      return at::kInt;
    case ElementType::S64:
      return at::kLong;
    case ElementType::U16:
      return at::kUInt16;
    case ElementType::U32:
      return at::kUInt32;
    case ElementType::U64:
      return at::kUInt64;
    case ElementType::F16:
      return at::kHalf;
    case ElementType::BF16:
      return at::kBFloat16;
    case ElementType::F32:
      return at::kFloat;
    case ElementType::F64:
      return at::kDouble;
    case ElementType::C64:
      return at::kComplexFloat;
    case ElementType::C128:
      return at::kComplexDouble;
    default:
      TORCH_CHECK(false, "no PyTorch dtype for element type ", short_name(type));
  }
}

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

namespace {

SlotAddress slot_address(const at::Tensor& t) {
  TORCH_CHECK(t.has_storage(), "tpu tensor without storage");
  return storage_slot(*t.storage().unsafeGetStorageImpl());
}

}  // namespace

engine::StorageSlot* slot_of(const at::Tensor& t) {
  SlotAddress at = slot_address(t);
  TORCH_CHECK(at.byte_offset == 0,
              "this op needs a tensor on a whole tpu storage; its storage "
              "points into another one: use a copy (tensor.clone())");
  return at.slot;
}

engine::TensorView view_of(const at::Tensor& t) {
  SlotAddress at = slot_address(t);
  engine::TensorView v;
  v.slot = at.slot;
  v.dtype = element_type(t.scalar_type());
  v.sizes.assign(t.sizes().begin(), t.sizes().end());
  v.strides.assign(t.strides().begin(), t.strides().end());
  int64_t itemsize = static_cast<int64_t>(t.dtype().itemsize());
  TORCH_CHECK(static_cast<int64_t>(at.byte_offset) % itemsize == 0, "a ", t.scalar_type(),
              " tensor on a tpu storage that starts ", at.byte_offset,
              " bytes into another one, not a multiple of its element size ", itemsize);
  v.offset = t.storage_offset() + static_cast<int64_t>(at.byte_offset) / itemsize;
  return v;
}

at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                     c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kTpu, device));
  return at::detail::empty_strided_generic(
      sizes, strides, tpu_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

at::Tensor empty_tpu(c10::IntArrayRef sizes, at::ScalarType dtype, c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kTpu, device));
  return at::detail::empty_generic(sizes, tpu_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype,
                                   std::nullopt);
}

at::Tensor over_storage_of(const at::Tensor& base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                           int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(),
                                                    base.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

}  // namespace torch_tpu::aten
