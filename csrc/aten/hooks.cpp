// PrivateUse1HooksInterface: how PyTorch (torch.accelerator, autograd,
// generators, serialisation) asks about `tpu`.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "aten/device.h"
#include "aten/generator.h"
#include "aten/pinned_memory.h"
#include "aten/tensor_bridge.h"
#include "engine/backend.h"

namespace torch_tpu::aten {

namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_device_index(device);
    set_current_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex old = current_device();
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return at::make_generator<TpuGenerator>(device < 0 ? current_device() : device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return at::Device(kTpu, static_cast<engine::StorageSlot*>(data)->device);
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_memory(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_memory_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

}  // namespace
}  // namespace torch_tpu::aten

#include "aten/allocator.h"

namespace torch_tpu::aten {
namespace {

void TpuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
}

const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace
}  // namespace torch_tpu::aten
