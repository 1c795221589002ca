#include "runtime/device_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/plugin.h"

namespace torch_tpu::runtime {

namespace {

std::string lock_dir() {
  const char* dir = std::getenv("TORCH_TPU_LOCK_DIR");
  return dir && *dir ? dir : "/tmp";
}

std::string command_line(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  return raw;
}

}  // namespace

int DeviceLock::host_device(const std::string& platform, int device, int devices) {
  const char* raw = std::getenv("LOCAL_RANK");
  if (platform != "cpu" || raw == nullptr || *raw == '\0') return device;
  char* end = nullptr;
  long rank = std::strtol(raw, &end, 10);
  if (*end != '\0' || rank < 0 || rank > 1 << 20) {
    throw Error(std::string("LOCAL_RANK=") + raw + " is not a non-negative integer", 3);
  }
  return static_cast<int>(rank) * devices + device;
}

DeviceLock::DeviceLock(const std::string& platform, int device, int devices) {
  std::string dir = lock_dir();
  std::error_code ignored;  // open() reports real problems
  std::filesystem::create_directories(dir, ignored);
  int host = host_device(platform, device, devices);
  path_ = dir + "/torch_tpu-" + platform + "-" + std::to_string(host) + ".lock";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    throw Error("cannot open device lock file " + path_ + ": " + std::strerror(errno), 7);
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder;
    char buf[64] = {};
    if (::pread(fd_, buf, sizeof(buf) - 1, 0) > 0) holder = buf;
    ::close(fd_);
    fd_ = -1;
    std::ostringstream msg;
    msg << "tpu device " << device << " (" << platform << " platform";
    if (host != device)
      msg << ", host device " << host << " of LOCAL_RANK " << std::getenv("LOCAL_RANK");
    msg << ") is in use";
    pid_t pid = std::atoi(holder.c_str());
    if (pid > 0) {
      msg << " by process " << pid;
      std::string cmd = command_line(pid);
      if (!cmd.empty()) msg << " (" << cmd << ")";
    }
    msg << ". A device belongs to one process at a time; stop that process or "
           "run one process per device (lock file: "
        << path_ << ").";
    throw Error(msg.str(), 9);
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    ssize_t ignored = ::pwrite(fd_, pid.data(), pid.size(), 0);
    (void)ignored;
  }
}

DeviceLock::~DeviceLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

}  // namespace torch_tpu::runtime
