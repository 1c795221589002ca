// The process's memory mappings against the kernel's limit. Each executable of
// XLA's CPU backend keeps its code mapped, several mappings a kernel; a process
// that reaches vm.max_map_count fails allocations anywhere (XLA aborts while
// compiling, or a segfault), so compiled programs are dropped well before it.
#pragma once

#include <cstdint>

namespace torch_tpu::runtime {

// The number of memory mappings of this process, or -1 where unknown.
int64_t memory_maps();

// The most mappings a process may have (vm.max_map_count, or
// TORCH_TPU_MEMORY_MAP_LIMIT), or -1 where unknown.
int64_t memory_map_limit();

}  // namespace torch_tpu::runtime
