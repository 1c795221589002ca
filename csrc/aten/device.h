// Device queries shared by the guard, the hooks and the Python bindings.
#pragma once

#include "aten/torch_headers.h"

namespace torch_tpu::aten {

// Number of tpu devices; does not start the backend where the configuration
// already says (CPU platform). Never throws: 0 when no device can be used.
c10::DeviceIndex device_count() noexcept;
// Raises a clear error for an index that does not exist.
void check_device_index(c10::DeviceIndex device);

}  // namespace torch_tpu::aten
