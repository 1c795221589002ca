#include "runtime/visible_devices.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

namespace torch_tpu::runtime {

namespace {

// Calls `name` (int (*)(Args...)) in the library `handle`; -1 if it is missing.
template <class... Args>
int call_symbol(void* handle, const char* name, Args... args) {
  auto fn = reinterpret_cast<int (*)(Args...)>(handle ? dlsym(handle, name) : nullptr);
  return fn ? fn(args...) : -1;
}

// NVML reads the devices from the kernel driver without initialising CUDA,
// which keeps fork() safe for the process (PyTorch counts the same way).
int nvml_device_count() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml || call_symbol(nvml, "nvmlInit_v2") != 0) return -1;
  unsigned int count = 0;
  int status = call_symbol(nvml, "nvmlDeviceGetCount_v2", &count);
  call_symbol(nvml, "nvmlShutdown");
  return status == 0 ? static_cast<int>(count) : -1;
}

int driver_device_count() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int count = 0;
  if (!cuda || call_symbol(cuda, "cuInit", 0u) != 0) return 0;
  return call_symbol(cuda, "cuDeviceGetCount", &count) == 0 ? count : 0;
}

}  // namespace

int cuda_visible_count(const char* visible, int physical) {
  if (visible == nullptr) return physical;
  std::stringstream entries(visible);
  std::string entry;
  std::set<long> seen;
  while (std::getline(entries, entry, ',')) {
    entry.erase(0, entry.find_first_not_of(" \t"));
    if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) return -1;
    // Like strtoul: leading digits count, the rest of the entry is ignored.
    if (entry.empty() || !std::isdigit(static_cast<unsigned char>(entry[0]))) break;
    long ordinal = std::strtol(entry.c_str(), nullptr, 10);
    if (ordinal >= physical) break;
    if (!seen.insert(ordinal).second) return 0;
  }
  return static_cast<int>(seen.size());
}

int tpu_visible_count(const char* visible_chips, const std::string& dev_dir) {
  if (visible_chips != nullptr && *visible_chips != '\0') {
    return 1 + static_cast<int>(
                   std::count(visible_chips, visible_chips + std::strlen(visible_chips), ','));
  }
  namespace fs = std::filesystem;
  std::error_code error;
  int accel = 0, vfio = 0;
  for (const auto& entry : fs::directory_iterator(dev_dir, error)) {
    if (entry.path().filename().string().rfind("accel", 0) == 0) ++accel;
  }
  for (const auto& entry : fs::directory_iterator(fs::path(dev_dir) / "vfio", error)) {
    std::string name = entry.path().filename().string();
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) ++vfio;
  }
  return accel > 0 ? accel : vfio;
}

int count_visible_devices(const std::string& platform) {
  if (platform == "tpu") return tpu_visible_count(std::getenv("TPU_VISIBLE_CHIPS"), "/dev");
  if (platform != "cuda") return 0;
  int physical = nvml_device_count();
  int visible =
      physical < 0 ? -1 : cuda_visible_count(std::getenv("CUDA_VISIBLE_DEVICES"), physical);
  return visible >= 0 ? visible : driver_device_count();
}

}  // namespace torch_tpu::runtime
