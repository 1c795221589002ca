// What torch.tpu.memory._record_memory_history records, as CUDA's caching
// allocator does: the live storages, each with the Python stack that
// allocated it, and a bounded trace of allocations and frees, for
// torch.tpu.memory._snapshot (the format PyTorch's memory viewer reads).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch {
struct CapturedTraceback;
}

namespace torch_tpu::aten {

struct MemoryBlock {
  c10::DeviceIndex device = 0;
  uintptr_t address = 0;  // the storage's identity (its slot)
  size_t size = 0;
  std::shared_ptr<torch::CapturedTraceback> stack;  // null: not recorded
};

struct MemoryEvent {
  bool alloc = true;  // else a free
  MemoryBlock block;
  int64_t time_us = 0;
};

// Starts (or stops, clearing what was recorded) recording; `max_entries`
// bounds the trace, oldest first out.
void record_memory_history(bool enabled, size_t max_entries);
bool recording_memory_history();

// Called by the allocator while recording.
void note_alloc(const void* storage, c10::DeviceIndex device, size_t size);
void note_free(const void* storage);

std::vector<MemoryBlock> live_blocks();
std::vector<MemoryEvent> memory_events();

}  // namespace torch_tpu::aten
