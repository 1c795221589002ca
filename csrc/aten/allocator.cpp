#include "aten/allocator.h"

#include <unistd.h>

#include <iomanip>
#include <mutex>
#include <sstream>

#include "aten/device.h"
#include "aten/memory_history.h"
#include "aten/tensor_bridge.h"
#include "engine/backend.h"
#include "engine/storage_ops.h"

namespace torch_tpu::aten {

namespace {

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

struct MemoryCapacity {
  uint64_t total, free;
};

std::string format_size(uint64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  if (bytes < (1 << 20)) {
    s << bytes / 1024.0 << " KiB";
  } else if (bytes < (1ull << 30)) {
    s << bytes / 1048576.0 << " MiB";
  } else {
    s << bytes / 1073741824.0 << " GiB";
  }
  return s.str();
}

// What the device has: the plugin's memory limit (a GPU's), else the host's
// memory (the CPU platform's devices use it).
MemoryCapacity capacity(c10::DeviceIndex device) {
  runtime::MemoryStats stats = engine::Backend::get().client().memory_stats(device);
  if (stats.bytes_limit > 0) {
    return {static_cast<uint64_t>(stats.bytes_limit),
            static_cast<uint64_t>(std::max<int64_t>(0, stats.bytes_limit - stats.bytes_in_use))};
  }
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  return {page * static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)),
          page * static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES))};
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  // Storages take device memory at their first write; like CUDA, a request
  // the device cannot hold fails here, with the sizes.
  at::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    if (nbytes > 0) check_fits(device, nbytes);
    auto* slot = new engine::StorageSlot{device, nbytes, nullptr};
    record(device, static_cast<int64_t>(nbytes));
    if (recording_memory_history()) note_alloc(slot, device, nbytes);
    return data_ptr(slot, nbytes);
  }

  static at::DataPtr data_ptr(engine::StorageSlot* slot, size_t nbytes) {
    return {assign_address(slot, nbytes), slot, &TpuAllocator::release,
            c10::Device(kTpu, static_cast<c10::DeviceIndex>(slot->device))};
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    MemoryCapacity c = capacity(device);
    return {c.free, c.total};
  }

  // torch.tpu.set_per_process_memory_fraction
  void set_memory_fraction(c10::DeviceIndex device, double fraction) {
    std::lock_guard<std::mutex> lock(mutex_);
    limits(device).fraction = fraction;
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
    if (recording_memory_history()) note_free(slot);
    forget_address(slot);
    // Buffers may be shared with in-flight launches; the runtime keeps them
    // alive until those finish.
    delete slot;
  }

  c10::CachingDeviceAllocator::DeviceStats& stats(c10::DeviceIndex device) {
    if (device >= static_cast<c10::DeviceIndex>(stats_.size())) stats_.resize(device + 1);
    return stats_[device];
  }

  struct Limit {
    uint64_t total = 0;  // 0: not asked yet
    double fraction = 1.0;
  };
  Limit& limits(c10::DeviceIndex device) {
    if (device >= static_cast<c10::DeviceIndex>(limits_.size())) limits_.resize(device + 1);
    return limits_[device];
  }

  void check_fits(c10::DeviceIndex device, size_t nbytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    Limit& limit = limits(device);
    if (limit.total == 0) {
      lock.unlock();
      uint64_t total = capacity(device).total;  // starts the backend: a device use
      lock.lock();
      limits(device).total = total;
    }
    const Limit& l = limits(device);
    uint64_t allowed = static_cast<uint64_t>(static_cast<double>(l.total) * l.fraction);
    uint64_t allocated = static_cast<uint64_t>(stats(device).allocated_bytes[kAggregate].current);
    if (allocated + nbytes <= allowed) return;
    uint64_t free = allowed > allocated ? allowed - allocated : 0;
    TORCH_CHECK_WITH(
        OutOfMemoryError, false, "tpu out of memory. Tried to allocate ", format_size(nbytes),
        ". tpu:", static_cast<int>(device), " has a total capacity of ", format_size(l.total),
        " of which ", format_size(free), " is free",
        l.fraction < 1.0 ? " within this process's memory fraction" : "",
        ". Of the allocated memory ", format_size(allocated), " is allocated by PyTorch.");
  }

 public:
  static TpuAllocator& instance();

 private:
  std::mutex mutex_;
  std::vector<c10::CachingDeviceAllocator::DeviceStats> stats_;
  std::vector<Limit> limits_;
};

TpuAllocator g_allocator;
TpuAllocator& TpuAllocator::instance() { return g_allocator; }

}  // namespace

c10::DeviceAllocator* tpu_allocator() { return &g_allocator; }

void set_memory_fraction(c10::DeviceIndex device, double fraction) {
  TORCH_CHECK_VALUE(fraction >= 0 && fraction <= 1, "Invalid fraction value: ", fraction,
                    ". Allowed range: 0~1");
  check_device_index(device);
  g_allocator.set_memory_fraction(device, fraction);
}

SlotAddress storage_slot(const c10::StorageImpl& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get_deleter() == g_allocator.raw_deleter() && data.get_context()) {
    return {static_cast<engine::StorageSlot*>(data.get_context()), 0};
  }
  std::optional<SlotAddress> at = resolve_address(data.get());
  TORCH_CHECK(at, "this tpu storage's data pointer ", data.get(),
              " is not in any live tpu storage (was the storage it points into freed or resized?)");
  TORCH_CHECK(at->byte_offset + storage.nbytes() <= at->slot->nbytes, "this tpu storage (",
              storage.nbytes(), " bytes at ", data.get(),
              ") runs past the end of the tpu storage it "
              "points into (",
              at->slot->nbytes, " bytes)");
  return *at;
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  SlotAddress at = storage_slot(*storage);
  TORCH_CHECK(at.byte_offset == 0 && storage->data_ptr().get_context() == at.slot,
              "cannot resize a tpu storage that points into another one");
  engine::StorageSlot* slot = at.slot;
  int64_t delta = static_cast<int64_t>(nbytes) - static_cast<int64_t>(slot->nbytes);
  engine::resize_storage(*slot, nbytes);
  g_allocator.record(slot->device, delta);
  // A resized storage moves, as on CUDA: the old range could overlap another's.
  forget_address(slot);
  c10::DataPtr old = storage->set_data_ptr(TpuAllocator::data_ptr(slot, nbytes));
  old.release_context();  // the slot lives on in the new DataPtr
  storage->set_nbytes(nbytes);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_tpu::aten
