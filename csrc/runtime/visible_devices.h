// How many devices a platform shows this process, counted without a PJRT
// client. PyTorch asks early and often (device_count, is_available, seeding
// every device) in programs that may never use the device, and a client takes
// the devices and their memory. CUDA answers the same way (NVML, else the
// driver), so counting never creates a context.
#pragma once

#include <string>

namespace torch_tpu::runtime {

// Devices of `platform` ("tpu" or "cuda") visible to this process; 0 when
// none (or no driver) is found. Cheap enough to call once per process; the
// CUDA count may initialise the driver (cuInit), never a context.
int count_visible_devices(const std::string& platform);

// CUDA_VISIBLE_DEVICES applied to `physical` devices by the driver's rules for
// ordinals: entries are read up to the first that is not a number, negative or
// out of range; a repeated ordinal hides every device. nullptr: all devices.
// Returns -1 when the list names devices by UUID (only the driver can say).
int cuda_visible_count(const char* visible, int physical);

// TPU chips: TPU_VISIBLE_CHIPS ("0,1") when set, else the chips' device files
// under `dev_dir` (/dev/accel*, or /dev/vfio/<n> on newer hosts).
int tpu_visible_count(const char* visible_chips, const std::string& dev_dir);

}  // namespace torch_tpu::runtime
