// Page-locked host memory as PyTorch sees it: `pin_memory()` and
// `DataLoader(pin_memory=True)` allocate here, `is_pinned()` asks here, and
// `torch.accelerator.empty_host_cache()` / `host_memory_stats()` reach it as the
// tpu device's `at::HostAllocator`. PJRT copies from any host buffer, so the
// memory is ordinary and nothing is cached; what matters is that pinned tensors
// report themselves pinned, as they do on CUDA.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torch_tpu::aten {

at::HostAllocator* pinned_memory_allocator();
bool is_pinned_memory(const void* data);

}  // namespace torch_tpu::aten
