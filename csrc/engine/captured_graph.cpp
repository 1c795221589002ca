#include "engine/captured_graph.h"

#include <mutex>

#include "engine/backend.h"
#include "engine/deferred.h"

namespace torch_tpu::engine {

namespace {

bool same_bounds(const std::optional<Bounds>& a, const std::optional<Bounds>& b) {
  if (!a || !b) return !a && !b;
  return a->bounds == b->bounds && a->sizes == b->sizes && a->varies == b->varies;
}

}  // namespace

int first_sharing_storage(const std::vector<TensorView>& views, size_t k) {
  for (size_t j = 0; j < k; ++j) {
    if (views[j].slot == views[k].slot) return static_cast<int>(j);
  }
  return static_cast<int>(k);
}

bool CapturedGraph::matches(const std::vector<TensorView>& args) const {
  if (args.size() != inputs.size()) return false;
  for (size_t k = 0; k < args.size(); ++k) {
    const StorageSlot& slot = *args[k].slot;
    if (slot.device != device || !same_layout(args[k], inputs[k]) ||
        slot.nbytes != input_nbytes[k] || holds_buffer(slot) != input_had_buffer[k] ||
        first_sharing_storage(args, k) != input_alias[k] ||
        !same_bounds(slot.bounds, input_bounds[k])) {
      return false;
    }
  }
  return true;
}

bool CapturedGraph::append(const std::vector<TensorView>& args,
                           const std::vector<StorageSlot*>& fresh, RandomState* generator) const {
  std::lock_guard<EngineMutex> lock(Backend::get().mutex());
  if (!matches(args)) return false;
  append_recorded(*recorded, device, args, fresh, generator);
  generator->offset += random_consumed;
  return true;
}

std::optional<std::vector<runtime::BufferPtr>> CapturedGraph::replay(
    const std::vector<TensorView>& args, RandomState* generator) const {
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  for (const TensorView& a : args) {
    if (a.slot->device == device) materialize(*a.slot, FlushReason::Storage);
  }
  if (!matches(args)) return std::nullopt;
  std::vector<runtime::BufferPtr> fresh(new_storage_nbytes.size());
  if (!program) return fresh;

  std::vector<runtime::BufferPtr> buffers;
  for (const ParamValue& v : params) {
    switch (v.kind) {
      case ParamValue::Kind::Input:
        buffers.push_back(args[v.input].slot->buffer);
        break;
      case ParamValue::Kind::Constant:
        buffers.push_back(v.constant);
        break;
      case ParamValue::Kind::Host:
        buffers.push_back(backend.scalar_buffer(device, v.host.type, v.host.bytes));
        break;
      case ParamValue::Kind::Random:
        buffers.push_back(
            random_state_buffer(device, generator->seed, generator->offset + v.random_delta));
        break;
    }
  }
  runtime::Launch launch = launch_with(*program, device, std::move(buffers), group);
  generator->offset += random_consumed;
  for (size_t i = 0; i < launch.outputs.size(); ++i) {
    if (output_input[i] >= 0) {
      StorageSlot* slot = args[output_input[i]].slot;
      slot->buffer = std::move(launch.outputs[i]);
      slot->producer = program->name;
    } else {
      fresh[output_storage[i]] = std::move(launch.outputs[i]);
    }
  }
  backend.track(device, std::move(launch.done), program->name, program->executable);
  return fresh;
}

}  // namespace torch_tpu::engine
