// The addresses PyTorch sees as a tpu storage's data pointer. A storage owns a
// StorageSlot, not memory, but data_ptr() must behave as on a real device:
// distinct live storages never overlap, and a pointer into a storage (an
// UntypedStorage[a:b] slice, a DLPack capsule) leads back to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "engine/storage.h"

namespace torch_tpu::aten {

struct SlotAddress {
  engine::StorageSlot* slot;
  size_t byte_offset;  // of the address into the slot's bytes
};

// Reserves a range of `nbytes` addresses for `slot` (released by forget) and
// returns its start. Thread-safe.
void* assign_address(engine::StorageSlot* slot, size_t nbytes);
void forget_address(engine::StorageSlot* slot);

// The slot whose range holds `address`, if one does.
std::optional<SlotAddress> resolve_address(const void* address);

}  // namespace torch_tpu::aten
