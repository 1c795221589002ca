// One process per device: an advisory lock file per (platform, device).
#pragma once

#include <string>

namespace torch_tpu::runtime {

class DeviceLock {
 public:
  // Takes the lock for `device` of `platform` or throws Error naming the
  // process that holds it. The lock lives in $TORCH_TPU_LOCK_DIR (default
  // /tmp) and is released when this object (or the process) goes away.
  DeviceLock(const std::string& platform, int device);
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;
  ~DeviceLock();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace torch_tpu::runtime
