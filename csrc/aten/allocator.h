// The `tpu` allocator: a storage's DataPtr owns an engine::StorageSlot, not
// device memory. Memory accounting follows storage sizes.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include "engine/storage.h"

namespace torch_tpu::aten {

c10::DeviceAllocator* tpu_allocator();

// Called when a storage's size changes (resize_) to keep statistics right.
void account_resize(engine::StorageSlot* slot, size_t new_nbytes);

}  // namespace torch_tpu::aten
