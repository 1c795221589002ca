// Tensor creation, views and storage manipulation on `tpu`: metadata only,
// except when a storage must grow.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>

#include "aten/allocator.h"
#include "aten/device.h"
#include "aten/tensor_bridge.h"

namespace torch_tpu::aten {

namespace {

c10::DeviceIndex device_index(std::optional<c10::Device> device) {
  c10::DeviceIndex index = device && device->has_index() ? device->index() : current_device();
  check_device_index(index);
  return index;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory || !*pin_memory, "only dense CPU tensors can be pinned");
  at::ScalarType st = c10::dtype_or_default(dtype);
  element_type(st);  // raises TypeError for unsupported dtypes
  c10::DeviceGuard guard(c10::Device(kTpu, device_index(device)));
  return at::detail::empty_generic(
      size, tpu_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st, memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  at::ScalarType st = c10::dtype_or_default(dtype);
  element_type(st);
  return empty_tpu(size, stride, st, device_index(device));
}

// Grows the storage of `self` to hold `nbytes` when it is smaller.
void ensure_storage(const at::Tensor& self, size_t nbytes) {
  c10::StorageImpl* storage = self.storage().unsafeGetStorageImpl();
  if (nbytes <= storage->nbytes()) return;
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  resize_storage_bytes(storage, nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (int64_t s : sizes)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() == sizes && !memory_format) return self;
  impl->set_sizes_contiguous(sizes);
  if (memory_format && *memory_format != at::MemoryFormat::Contiguous) {
    impl->empty_tensor_restride(*memory_format);
  }
  size_t nbytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                   self.dtype().itemsize(), self.storage_offset());
  ensure_storage(self, nbytes);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kTpu, "set_: expected a tpu storage, got ",
              source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  size_t nbytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                   self.dtype().itemsize(), offset);
  ensure_storage(self, nbytes);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return set_storage(self, std::move(source), offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                     C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  at::Tensor fresh = empty_tpu({0}, self.scalar_type(), self.device().index());
  return set_storage(self, fresh.storage(), 0, {0}, {});
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset) {
  std::optional<int64_t> concrete;
  if (offset) concrete = offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), concrete);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// Whether `self.data = from` may swap `from`'s storage and metadata into `self`'s
// TensorImpl (Module.to() moves parameters in place when it may, keeping the
// Parameter objects, and lazy modules' UninitializedParameter class, as on CUDA).
// c10's answer knows only its own dense devices: dense tensors of tpu, the CPU and
// those devices are compatible here.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  auto dense = [](c10::DispatchKeySet ks) {
    constexpr auto backends =
        c10::DispatchKeySet({c10::BackendComponent::PrivateUse1Bit, c10::BackendComponent::CPUBit,
                             c10::BackendComponent::CUDABit, c10::BackendComponent::MPSBit,
                             c10::BackendComponent::HIPBit, c10::BackendComponent::XPUBit,
                             c10::BackendComponent::HPUBit, c10::BackendComponent::MTIABit});
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
  };
  return dense(self.key_set()) && dense(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("is_set_to", at::native::is_set_to);
}

}  // namespace torch_tpu::aten
