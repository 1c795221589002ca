// Page-locked host memory as PyTorch sees it: `pin_memory()` and
// `DataLoader(pin_memory=True)` allocate here and `is_pinned()` asks here.
// PJRT copies from any host buffer, so the memory is ordinary; what matters is
// that pinned tensors report themselves pinned, as they do on CUDA.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_tpu::aten {

c10::Allocator* pinned_memory_allocator();
bool is_pinned_memory(const void* data);

}  // namespace torch_tpu::aten
