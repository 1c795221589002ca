#include "engine/storage_ops.h"

#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include "engine/backend.h"
#include "engine/deferred.h"
#include "engine/executor.h"
#include "engine/program.h"
#include "engine/view_layout.h"
#include "lower/lowering.h"

namespace torch_tpu::engine {

namespace {

// Cached programs of the storage ops, by their shape signature. Compiled
// optimised: they copy whole storages, and are rare.
std::shared_ptr<runtime::Executable> cached(const std::string& key,
                                            const std::function<std::string()>& text) {
  static auto* programs = new std::map<std::string, std::shared_ptr<runtime::Executable>>();
  auto& exe = (*programs)[key];
  if (!exe) exe = Backend::get().compile(text(), /*fast=*/false, key);
  return exe;
}

}  // namespace

void resize_storage(StorageSlot& slot, size_t nbytes) {
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  materialize(slot, FlushReason::Storage);
  slot.bounds.reset();  // its tensor is laid out anew
  if (nbytes == 0 || slot.nbytes == 0) {
    // Emptied, or grown from empty (FSDP2 frees each unsharded parameter
    // between its uses, 170 times a TorchTitan step): nothing is kept, so no
    // program runs; a slot without a buffer reads as zeros. The pending graph
    // ran all the same: a reshard ends a layer's work, so each layer is a
    // graph of its own, the same for every layer (compiled once). Fused across
    // layers instead, TorchTitan's second step recompiled graphs of all the
    // layers at once, 19 s against 10 s.
    if (slot.buffer) note_unrecorded(slot.device, "it resizes a storage");
    slot.buffer = nullptr;
    slot.nbytes = nbytes;
    return;
  }
  if (!slot.buffer || nbytes == slot.nbytes) {
    slot.nbytes = nbytes;
    return;
  }
  note_unrecorded(slot.device, "it resizes a storage");
  ElementType type = slot.element_type();
  int64_t old_n = slot.buffer->element_count();
  int64_t new_n = static_cast<int64_t>(nbytes) / element_size(type);
  std::string key = "resize" + std::to_string(static_cast<int>(type)) + ":" +
                    std::to_string(old_n) + ":" + std::to_string(new_n);
  auto exe = cached(key, [&] {
    hlo::Builder b;
    auto x = b.parameter({type, {old_n}});
    hlo::Value y = new_n <= old_n ? b.slice(x, {0}, {new_n}, {1})
                                  : b.pad(x, b.constant(0, type), {0}, {new_n - old_n}, {0});
    return b.module_text({y});
  });
  runtime::Launch launch = backend.launch(*exe, slot.device, {slot.buffer.get()}, {});
  slot.buffer = std::move(launch.outputs[0]);
  slot.nbytes = nbytes;
  static const std::string* const resize = interned("resize_");
  backend.track(slot.device, std::move(launch.done), resize);
}

void upload_storage(StorageSlot& slot, const void* data, ElementType type, int64_t numel,
                    std::function<void()> release) {
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  if (static_cast<size_t>(numel * element_size(type)) != slot.nbytes) {
    throw std::logic_error("upload_storage: size mismatch");
  }
  materialize(slot, FlushReason::Storage);
  note_upload(slot.device);
  slot.buffer = backend.upload(data, type, {numel}, slot.device, std::move(release));
}

namespace {

// Storages up to this size are downloaded whole to read any view of them;
// up to the larger one, when the view holds a quarter of the storage or more.
constexpr size_t kHostGatherBytes = size_t{1} << 20;
constexpr size_t kHostGatherMaxBytes = size_t{64} << 20;

bool gathered_on_host(const TensorView& view) {
  const size_t nbytes = view.slot->nbytes;
  const size_t view_bytes = static_cast<size_t>(view.numel()) * element_size(view.dtype);
  return !view.bounded() && element_size(view.slot->element_type()) == element_size(view.dtype) &&
         (nbytes <= kHostGatherBytes ||
          (nbytes <= kHostGatherMaxBytes && nbytes <= 4 * view_bytes));
}

// Copies the elements of `view` from its storage's bytes `storage` to `dst`,
// densely in row-major order, a row at a time.
void gather_on_host(const TensorView& view, const unsigned char* storage, unsigned char* dst) {
  const size_t item = element_size(view.dtype);
  const size_t rank = view.sizes.size();
  const bool rows = rank > 0 && view.strides[rank - 1] == 1;
  const size_t outer = rows ? rank - 1 : rank;  // dimensions stepped one by one
  const size_t run = rows ? static_cast<size_t>(view.sizes[rank - 1]) * item : item;
  std::vector<int64_t> index(outer, 0);
  const int64_t runs = view.numel() * static_cast<int64_t>(item) / static_cast<int64_t>(run);
  for (int64_t n = 0; n < runs; ++n) {
    int64_t at = view.offset;
    for (size_t d = 0; d < outer; ++d) at += index[d] * view.strides[d];
    std::memcpy(dst + n * run, storage + at * item, run);
    for (size_t d = outer; d-- > 0;) {
      if (++index[d] < view.sizes[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

void download_view(const TensorView& view, void* dst) {
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  int64_t numel = view.numel();
  if (numel == 0) return;
  note_unrecorded(view.slot->device, "it reads device values on the host");
  materialize(*view.slot, FlushReason::HostRead);
  if (!view.slot->buffer) {  // never written: zeros
    std::memset(dst, 0, numel * element_size(view.dtype));
    return;
  }
  std::string what = "reading a tpu tensor produced by " +
                     (view.slot->producer ? *view.slot->producer : std::string("a transfer"));
  if (view.is_whole_storage() && view.slot->element_type() == view.dtype) {
    backend.download(*view.slot->buffer, dst, what);
    return;
  }
  // A tensor of bounded varying size leads its storage: the storage comes over
  // whole and the tensor is its prefix (a device copy would be a program per size).
  if (view.slot->bounds && view.offset == 0 && view.is_contiguous() &&
      view.slot->element_type() == view.dtype) {
    std::vector<unsigned char> whole(view.slot->nbytes);
    backend.download(*view.slot->buffer, whole.data(), what);
    std::memcpy(dst, whole.data(), numel * element_size(view.dtype));
    return;
  }
  // A view of a small storage, or of much of a large one, comes over with its
  // whole storage and is gathered on the host: a device copy would compile a
  // program per layout (tests reading slices and transposes back, each once).
  if (gathered_on_host(view)) {
    std::vector<unsigned char> whole(view.slot->nbytes);
    backend.download(*view.slot->buffer, whole.data(), what);
    gather_on_host(view, whole.data(), static_cast<unsigned char*>(dst));
    return;
  }
  // Materialise the view densely on the device first.
  StorageSlot dense{view.slot->device, static_cast<size_t>(numel * element_size(view.dtype)),
                    nullptr};
  copy_view(view, {&dense, view.dtype, view.sizes, contiguous_strides(view.sizes), 0},
            "copy to host");
  materialize(dense, FlushReason::HostRead);
  backend.download(*dense.buffer, dst, what);
}

void copy_view(const TensorView& src, const TensorView& dst, const std::string& op) {
  execute(copy_call(src, dst, op));
}

OpCall copy_call(const TensorView& src, const TensorView& dst, const std::string& op) {
  OpCall call;
  call.name = interned(op);
  call.rule = lower::find_rule("_tpu_copy");
  call.device = dst.slot->device;
  CallArg arg;
  arg.is_operand = true;
  Input in;
  in.view = src;
  in.dtype = src.dtype;
  arg.inputs.push_back(in);
  call.args.push_back(arg);
  call.targets.push_back(dst);
  return call;
}

void copy_storage_across_devices(StorageSlot& dst, const StorageSlot& src) {
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  note_unrecorded(src.device, "it copies between devices");
  note_unrecorded(dst.device, "it copies between devices");
  materialize(src, FlushReason::Storage);
  materialize(dst, FlushReason::Storage);
  dst.buffer = src.buffer ? backend.copy_to_device(*src.buffer, dst.device) : nullptr;
}

}  // namespace torch_tpu::engine
