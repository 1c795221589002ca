#include "aten/allocator.h"

#include <mutex>

#include "aten/tensor_bridge.h"
#include "engine/backend.h"
#include "engine/storage_ops.h"

namespace torch_tpu::aten {

namespace {

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  at::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    auto* slot = new engine::StorageSlot{device, nbytes, nullptr};
    record(device, static_cast<int64_t>(nbytes));
    return {slot, slot, &TpuAllocator::release, c10::Device(kTpu, device)};
  }

  at::DeleterFnPtr raw_deleter() const override { return &TpuAllocator::release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise; use tensor.copy_()");
  }

  bool initialized() override { return engine::Backend::started(); }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const at::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats(device);
    s.allocated_bytes[kAggregate].reset_accumulated();
    s.reserved_bytes[kAggregate].reset_accumulated();
    s.num_device_alloc = s.num_device_free = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats(device);
    s.allocated_bytes[kAggregate].reset_peak();
    s.reserved_bytes[kAggregate].reset_peak();
  }

  void record(c10::DeviceIndex device, int64_t delta) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats(device);
    if (delta >= 0) {
      s.allocated_bytes[kAggregate].increase(delta);
      s.reserved_bytes[kAggregate].increase(delta);
      s.num_device_alloc++;
    } else {
      // Never below zero: this runs in deleters, which must not throw.
      int64_t d = std::min(-delta, s.allocated_bytes[kAggregate].current);
      s.allocated_bytes[kAggregate].decrease(d);
      s.reserved_bytes[kAggregate].decrease(std::min(-delta, s.reserved_bytes[kAggregate].current));
      s.num_device_free++;
    }
  }

 private:
  static void release(void* ctx) {
    auto* slot = static_cast<engine::StorageSlot*>(ctx);
    instance().record(slot->device, -static_cast<int64_t>(slot->nbytes));
    // Buffers may be shared with in-flight launches; the runtime keeps them
    // alive until those finish.
    delete slot;
  }

  c10::CachingDeviceAllocator::DeviceStats& stats(c10::DeviceIndex device) {
    if (device >= static_cast<c10::DeviceIndex>(stats_.size())) stats_.resize(device + 1);
    return stats_[device];
  }

 public:
  static TpuAllocator& instance();

 private:
  std::mutex mutex_;
  std::vector<c10::CachingDeviceAllocator::DeviceStats> stats_;
};

TpuAllocator g_allocator;
TpuAllocator& TpuAllocator::instance() { return g_allocator; }

}  // namespace

c10::DeviceAllocator* tpu_allocator() { return &g_allocator; }

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  auto* slot = static_cast<engine::StorageSlot*>(storage->data_ptr().get_context());
  TORCH_CHECK(slot, "tpu storage has no slot");
  int64_t delta = static_cast<int64_t>(nbytes) - static_cast<int64_t>(slot->nbytes);
  engine::resize_storage(*slot, nbytes);
  g_allocator.record(slot->device, delta);
  storage->set_nbytes(nbytes);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_tpu::aten
