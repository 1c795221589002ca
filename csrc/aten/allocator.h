// The `tpu` allocator: a storage's DataPtr owns an engine::StorageSlot, not
// device memory. Memory accounting follows storage sizes.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include "engine/storage.h"

namespace torch_tpu::aten {

c10::DeviceAllocator* tpu_allocator();

// torch.tpu.set_per_process_memory_fraction: allocations beyond `fraction`
// of the device's memory raise torch.OutOfMemoryError.
void set_memory_fraction(c10::DeviceIndex device, double fraction);

// The slot a tpu storage owns. Raises for a storage the allocator did not make
// (a slice UntypedStorage[a:b] points into another storage's data).
engine::StorageSlot* storage_slot(const c10::StorageImpl& storage);

// Grows or shrinks a tpu storage (contents kept, new bytes read as zero) and
// keeps the memory statistics right.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torch_tpu::aten
