// Device queries shared by the guard, the hooks and the Python bindings.
#pragma once

#include "aten/torch_headers.h"
#include "engine/data_checks.h"

namespace torch_tpu::aten {

// Number of tpu devices; does not start the backend where the configuration
// already says (CPU platform). Never throws: 0 when no device can be used.
c10::DeviceIndex device_count() noexcept;
// Raises a clear error for an index that does not exist.
void check_device_index(c10::DeviceIndex device);
// Makes `device` the current device. Under a launcher a process holds one
// device, tpu:0, while PyTorch's code selects "its" device by LOCAL_RANK
// (DeviceMesh before any tpu op, torch.accelerator.set_device_index): that
// index selects the process's device too.
void select_device(c10::DeviceIndex device);

// Raises `failure` as the CPU's exception: IndexError or RuntimeError.
[[noreturn]] void raise_torch_error(const engine::DataCheckFailure& failure);

// Runs `fn` (a wait for the device: a download, synchronize), raising a data
// check that failed on the device as the CPU would have raised it.
template <class Fn>
decltype(auto) raising_data_checks(Fn&& fn) {
  try {
    return fn();
  } catch (const engine::DataCheckFailure& failure) {
    raise_torch_error(failure);
  }
}

}  // namespace torch_tpu::aten
