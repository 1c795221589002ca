// DeviceGuardImplInterface for `tpu`: device switching, the (single, default)
// stream per device, and device synchronisation.
#include <cstdlib>

#include "aten/device.h"
#include "aten/tensor_bridge.h"
#include "engine/backend.h"
#include "engine/deferred.h"

namespace torch_tpu::aten {

// Never starts the backend: PyTorch asks for the count (seeding every device,
// is_available, torch.accelerator) in programs that never use a tpu tensor.
c10::DeviceIndex device_count() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(engine::Backend::visible_device_count());
  } catch (...) {
    return 0;
  }
}

void check_device_index(c10::DeviceIndex device) {
  c10::DeviceIndex count = device_count();
  if (count == 0) engine::Backend::get();  // raises why there is no device
  TORCH_CHECK(device >= 0 && device < count, "tpu:", static_cast<int>(device),
              " does not exist: ", static_cast<int>(count), " tpu device(s) are available",
              engine::Backend::config().platform == "cpu"
                  ? " (the cpu platform has TORCH_TPU_NUM_DEVICES of them)"
                  : "");
}

void select_device(c10::DeviceIndex device) {
  static const char* local_rank = std::getenv("LOCAL_RANK");
  if (device > 0 && local_rank && device == std::atoi(local_rank) && device_count() == 1) {
    device = 0;
  }
  check_device_index(device);
  set_current_device(device);
}

void raise_torch_error(const engine::DataCheckFailure& failure) {
  TORCH_CHECK_INDEX(!failure.index_error(), failure.what());
  TORCH_CHECK(false, failure.what());
}

namespace {

struct TimingEvent {
  int device;
  std::shared_ptr<engine::CompletionMark> mark;
};

// Waits for the work a timing event marks; returns when it completed.
int64_t wait(void* event) {
  auto* timing = static_cast<TimingEvent*>(event);
  if (!timing->mark->done()) {
    raising_data_checks([&] { engine::synchronize(timing->device); });
  }
  return timing->mark->wait();
}

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    if (d.index() >= 0) select_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      if (d.index() >= 0) select_device(d.index());
    } catch (...) {  // restoring a device that existed: cannot fail
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT,
                       c10::Device(kTpu, d.index() < 0 ? current_device() : d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  // One in-order queue per device: a new stream is that queue.
  c10::Stream getNewStream(c10::Device d, int priority) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return getStream(d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  // Work on a device is ordered (one stream), so an event is "everything
  // launched so far" and waiting on one orders nothing. Events that time
  // (enable_timing=True) also hold when that work completed; the others are
  // free (FSDP2 records many).
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    if (flag != c10::EventFlag::BACKEND_DEFAULT) return;
    auto* timing =
        new TimingEvent{stream.device_index(), engine::mark_completion(stream.device_index())};
    destroyEvent(*event, device_index);
    *event = timing;
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override {
    return !event || static_cast<TimingEvent*>(event)->mark->done();
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    delete static_cast<TimingEvent*>(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start && end,
                "Both events must be created with enable_timing=True and recorded before "
                "calculating elapsed time.");
    int64_t from = wait(start), to = wait(end);
    return static_cast<double>(to - from) / 1e6;
  }
  bool queryStream(const c10::Stream& stream) const override { return false; }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronizeDevice(stream.device_index());
  }
  void synchronizeEvent(void* event) const override {
    if (event) wait(event);
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    raising_data_checks([&] { engine::synchronize(device_index); });
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torch_tpu::aten
