#include "runtime/memory_maps.h"

#include <cstdio>
#include <cstdlib>

namespace torch_tpu::runtime {

int64_t memory_maps() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int64_t lines = 0;
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) {
    for (size_t i = 0; i < n; ++i) lines += chunk[i] == '\n';
  }
  std::fclose(f);
  return lines;
}

int64_t memory_map_limit() {
  static const int64_t limit = [] {
    if (const char* env = std::getenv("TORCH_TPU_MEMORY_MAP_LIMIT"))
      return std::atoll(env) > 0 ? static_cast<int64_t>(std::atoll(env)) : int64_t{-1};
    std::FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r");
    if (!f) return int64_t{-1};
    long long value = -1;
    if (std::fscanf(f, "%lld", &value) != 1) value = -1;
    std::fclose(f);
    return static_cast<int64_t>(value);
  }();
  return limit;
}

}  // namespace torch_tpu::runtime
