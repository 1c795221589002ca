// The `tpu` allocator: a storage's DataPtr owns an engine::StorageSlot, not
// device memory, at an address of its own (device_addresses.h). Memory
// accounting follows storage sizes.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include "aten/device_addresses.h"

namespace torch_tpu::aten {

c10::DeviceAllocator* tpu_allocator();

// torch.tpu.set_per_process_memory_fraction: allocations beyond `fraction`
// of the device's memory raise torch.OutOfMemoryError.
void set_memory_fraction(c10::DeviceIndex device, double fraction);

// Where a tpu storage's bytes are: the slot it owns or, for a storage made from
// a pointer into another (a slice UntypedStorage[a:b], a DLPack capsule), that
// storage's slot at an offset. Raises for a pointer into no live tpu storage.
SlotAddress storage_slot(const c10::StorageImpl& storage);

// Grows or shrinks a tpu storage (contents kept, new bytes read as zero) and
// keeps the memory statistics right.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torch_tpu::aten
