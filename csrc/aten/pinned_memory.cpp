#include "aten/pinned_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <unordered_set>

namespace torch_tpu::aten {
namespace {

class PinnedMemoryAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.insert(data);
    }
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool owns(const void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(const_cast<void*>(data)) > 0;
  }

 private:
  static void release(void* data);

  std::mutex mutex_;
  std::unordered_set<void*> live_;
};

PinnedMemoryAllocator& instance() {
  static auto* allocator = new PinnedMemoryAllocator();  // outlives static tensors
  return *allocator;
}

void PinnedMemoryAllocator::release(void* data) {
  {
    PinnedMemoryAllocator& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.live_.erase(data);
  }
  c10::free_cpu(data);
}

}  // namespace

c10::Allocator* pinned_memory_allocator() { return &instance(); }

bool is_pinned_memory(const void* data) { return data && instance().owns(data); }

}  // namespace torch_tpu::aten
