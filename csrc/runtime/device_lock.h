// One process per device: an advisory lock file per (platform, host device).
#pragma once

#include <string>

namespace torch_tpu::runtime {

class DeviceLock {
 public:
  // Takes the lock for this process's `device` (of `devices` it sees) of
  // `platform` or throws Error naming the process that holds it. The lock
  // lives in $TORCH_TPU_LOCK_DIR (default /tmp) and is released when this
  // object (or the process) goes away.
  DeviceLock(const std::string& platform, int device, int devices);
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
  ~DeviceLock();

  const std::string& path() const { return path_; }

  // The host-wide index of this process's `device`. A launcher running one
  // process per device (torchrun: LOCAL_RANK) gives each process its own
  // device as tpu:0; on the CPU platform, whose devices are the same in every
  // process, local rank r's devices are r*devices .. r*devices+devices-1.
  // (TPU and GPU plugins are given the process's own chips by the platform's
  // visibility variables, not by this index.) Throws Error for a LOCAL_RANK
  // that is not a non-negative integer.
  static int host_device(const std::string& platform, int device, int devices);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace torch_tpu::runtime
