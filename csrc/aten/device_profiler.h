// The device rows of torch.profiler: each program a device ran and each copy
// to the host, with its device time, linked to the op that queued it (the
// "Self TPU" and "TPU total" columns, the device lane of a Chrome trace).
#pragma once

#include <functional>
#include <string>

#include "engine/trace.h"

namespace torch_tpu::aten {

// engine::TraceHooks::device_work while a torch.profiler session with
// ProfilerActivity.PrivateUse1 records; nothing otherwise.
std::function<void()> record_device_work(engine::DeviceWork kind, int device,
                                         const std::string& name);

}  // namespace torch_tpu::aten
