// Whole-storage operations that need no lowering rule: growing or shrinking a
// storage, moving whole storages between host and device.
#pragma once

#include <functional>
#include <string>

#include "engine/op_call.h"
#include "engine/storage.h"

namespace torch_tpu::engine {

// Changes the slot's size, keeping the leading bytes (new bytes read as 0).
// The caller updates allocator statistics.
void resize_storage(StorageSlot& slot, size_t nbytes);

// Replaces the slot's contents with `numel` elements of `type` from the host.
// With `release`, the device may use the host memory in place (the CPU
// platform does) until `release` runs, on any thread; the memory must stay
// alive and unchanged until then.
void upload_storage(StorageSlot& slot, const void* data, ElementType type, int64_t numel,
                    std::function<void()> release = nullptr);

// Writes `src` into `dst` on the same device, converting the dtype and
// broadcasting like Tensor.copy_; failures are reported under `op`.
void copy_view(const TensorView& src, const TensorView& dst, const std::string& op);
// That copy as an op call (for callers that run it themselves).
OpCall copy_call(const TensorView& src, const TensorView& dst, const std::string& op);

// Copies the view, densely in row-major order, into `dst` (blocking).
void download_view(const TensorView& view, void* dst);

// Replaces the slot's buffer with a copy of another device's storage.
void copy_storage_across_devices(StorageSlot& dst, const StorageSlot& src);

}  // namespace torch_tpu::engine
