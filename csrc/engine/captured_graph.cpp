#include "engine/captured_graph.h"

#include <mutex>

#include "engine/backend.h"
#include "engine/deferred.h"

namespace torch_tpu::engine {

namespace {

bool same_layout(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset;
}

}  // namespace

std::optional<std::vector<runtime::BufferPtr>> CapturedGraph::replay(
    const std::vector<TensorView>& args, RandomState* generator) const {
  Backend& backend = Backend::get();
  std::lock_guard<std::recursive_mutex> lock(backend.mutex());
  if (args.size() != inputs.size()) return std::nullopt;
  for (const TensorView& a : args) {
    if (a.slot->device != device) return std::nullopt;
    materialize(*a.slot, FlushReason::Storage);
  }
  for (size_t k = 0; k < args.size(); ++k) {
    const StorageSlot& slot = *args[k].slot;
    int alias = static_cast<int>(k);
    for (size_t j = 0; j < k; ++j) {
      if (args[j].slot == args[k].slot) {
        alias = static_cast<int>(j);
        break;
      }
    }
    if (!same_layout(args[k], inputs[k]) || slot.nbytes != input_nbytes[k] ||
        static_cast<bool>(slot.buffer) != input_had_buffer[k] || alias != input_alias[k]) {
      return std::nullopt;
    }
  }
  std::vector<runtime::BufferPtr> fresh(new_storage_nbytes.size());
  if (!program) return fresh;

  std::vector<runtime::BufferPtr> held;
  std::vector<runtime::Buffer*> buffers;
  std::vector<bool> donatable(params.size(), false);
  for (size_t p = 0; p < params.size(); ++p) {
    const ParamValue& v = params[p];
    runtime::BufferPtr buffer;
    switch (v.kind) {
      case ParamValue::Kind::Input:
        buffer = args[v.input].slot->buffer;
        // Only the storage holds it: nobody else can observe the donation.
        donatable[p] = buffer.use_count() == 2;
        break;
      case ParamValue::Kind::Constant:
        buffer = v.constant;
        break;
      case ParamValue::Kind::Host:
        buffer = backend.scalar_buffer(device, v.host.type, v.host.bytes);
        break;
      case ParamValue::Kind::Random: {
        uint64_t state[2] = {generator->seed, generator->offset + v.random_delta};
        buffer = backend.client().buffer_from_host(state, ElementType::U64, {2}, device);
        break;
      }
    }
    buffers.push_back(buffer.get());
    held.push_back(std::move(buffer));
  }
  std::vector<int64_t> non_donatable;
  for (int param : program->donor_param) {
    if (param >= 0 && !donatable[param]) non_donatable.push_back(param);
  }
  runtime::Launch launch = backend.launch(*program->executable, device, buffers, non_donatable);
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
  backend.track(device, std::move(launch.done), *program->name, program->executable);
  return fresh;
}

}  // namespace torch_tpu::engine
