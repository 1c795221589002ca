#include "aten/pinned_memory.h"

#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <unordered_map>

#include "aten/tensor_bridge.h"

namespace torch_tpu::aten {
namespace {

class PinnedMemoryAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.emplace(data, nbytes);
      stats_.active_requests.increase(1);
      stats_.allocations.increase(1);
      stats_.active_bytes.increase(nbytes);
      stats_.allocated_bytes.increase(nbytes);
      stats_.num_host_alloc += 1;
    }
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // A copy from pinned memory has read it by the time the copy returns (the
  // runtime keeps its own reference to a buffer it reads later), so a block
  // needs no event to be freed safely, and none is cached.
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (c10::CachingAllocator::Stat* s : stats()) s->reset_accumulated();
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (c10::CachingAllocator::Stat* s : stats()) s->reset_peak();
  }

  bool owns(const void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(const_cast<void*>(data)) > 0;
  }

 private:
  static void release(void* data);

  std::vector<c10::CachingAllocator::Stat*> stats() {
    return {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
            &stats_.allocated_bytes};
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;  // data -> bytes
  at::HostStats stats_;
};

PinnedMemoryAllocator& instance() {
  static auto* allocator = new PinnedMemoryAllocator();  // outlives static tensors
  return *allocator;
}

void PinnedMemoryAllocator::release(void* data) {
  {
    PinnedMemoryAllocator& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.live_.find(data);
    if (it != self.live_.end()) {
      self.stats_.active_requests.decrease(1);
      self.stats_.allocations.decrease(1);
      self.stats_.active_bytes.decrease(it->second);
      self.stats_.allocated_bytes.decrease(it->second);
      self.stats_.num_host_free += 1;
      self.live_.erase(it);
    }
  }
  c10::free_cpu(data);
}

const bool registered = [] {
  at::setHostAllocator(kTpu, &instance());
  return true;
}();

}  // namespace

at::HostAllocator* pinned_memory_allocator() { return &instance(); }

bool is_pinned_memory(const void* data) { return data && instance().owns(data); }

}  // namespace torch_tpu::aten
