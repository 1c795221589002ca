// Adapts PyTorch tensors on `tpu` to the engine's storage slots and views.
#pragma once

#include "aten/torch_headers.h"
#include "engine/storage.h"

namespace torch_tpu::aten {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// dtype mapping; unsupported dtypes raise TypeError naming the dtype.
ElementType element_type(at::ScalarType dtype);
at::ScalarType scalar_type(ElementType type);

bool is_tpu(const at::Tensor& t);
engine::StorageSlot* slot_of(const at::Tensor& t);
engine::TensorView view_of(const at::Tensor& t);

// A new tpu tensor with the given layout (its storage holds no buffer yet).
at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                     c10::DeviceIndex device);
at::Tensor empty_tpu(c10::IntArrayRef sizes, at::ScalarType dtype, c10::DeviceIndex device);

// A tensor over `base`'s storage with the given layout that autograd does not
// see as a view of `base` (as_strided's result is one): a program's outputs
// share storages, but each is its own tensor, as on the CPU.
at::Tensor over_storage_of(const at::Tensor& base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                           int64_t offset);

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex device);

}  // namespace torch_tpu::aten
