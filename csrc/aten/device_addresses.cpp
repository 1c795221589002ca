#include "aten/device_addresses.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace torch_tpu::aten {

namespace {

// Never dereferenced: any range outside what a host pointer of this process
// could be is as good as another. Ranges are 512-byte aligned, as CUDA's.
constexpr uintptr_t kBase = uintptr_t{1} << 44;
constexpr uintptr_t kEnd = kBase + (uintptr_t{1} << 46);
constexpr uintptr_t kAlignment = 512;

struct Range {
  engine::StorageSlot* slot;
  uintptr_t width;
};

class AddressSpace {
 public:
  uintptr_t assign(engine::StorageSlot* slot, size_t nbytes) {
    uintptr_t width = (std::max<uintptr_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    std::lock_guard<std::mutex> lock(mutex_);
    uintptr_t start = place(width);
    live_[start] = {slot, width};
    start_of_[slot] = start;
    next_ = start + width;
    return start;
  }

  void forget(engine::StorageSlot* slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = start_of_.find(slot);
    if (it == start_of_.end()) return;
    live_.erase(it->second);
    start_of_.erase(it);
  }

  std::optional<SlotAddress> resolve(uintptr_t address) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.upper_bound(address);
    if (it == live_.begin()) return std::nullopt;
    --it;
    if (address - it->first >= it->second.width) return std::nullopt;
    return SlotAddress{it->second.slot, address - it->first};
  }

 private:
  // First free range of `width` from next_ on, wrapping once to kBase: ranges
  // are reused only after the whole space has been handed out.
  uintptr_t place(uintptr_t width) {
    uintptr_t candidate = next_;
    bool wrapped = false;
    auto it = live_.lower_bound(candidate);
    if (it != live_.begin()) {
      auto before = std::prev(it);
      candidate = std::max(candidate, before->first + before->second.width);
    }
    while (true) {
      if (candidate + width > kEnd) {
        if (wrapped) throw std::runtime_error("tpu device address space exhausted");
        wrapped = true;
        candidate = kBase;
        it = live_.begin();
        continue;
      }
      if (it == live_.end() || candidate + width <= it->first) return candidate;
      candidate = std::max(candidate, it->first + it->second.width);
      ++it;
    }
  }

  std::mutex mutex_;
  uintptr_t next_ = kBase;
  std::map<uintptr_t, Range> live_;  // by start
  std::unordered_map<engine::StorageSlot*, uintptr_t> start_of_;
};

AddressSpace& space() {
  static AddressSpace* s = new AddressSpace();  // outlives static destructors' frees
  return *s;
}

}  // namespace

void* assign_address(engine::StorageSlot* slot, size_t nbytes) {
  return reinterpret_cast<void*>(space().assign(slot, nbytes));
}

void forget_address(engine::StorageSlot* slot) { space().forget(slot); }

std::optional<SlotAddress> resolve_address(const void* address) {
  return space().resolve(reinterpret_cast<uintptr_t>(address));
}

}  // namespace torch_tpu::aten
