#include "aten/captured_graph.h"

#include "aten/bounded.h"
#include "aten/generator.h"
#include "aten/tensor_bridge.h"

namespace torch_tpu::aten {

namespace {

std::vector<engine::TensorView> views_of(const std::vector<at::Tensor>& tensors) {
  std::vector<engine::TensorView> views;
  for (const at::Tensor& t : tensors) {
    if (!is_tpu(t)) {
      throw std::invalid_argument("a compiled tpu graph takes tpu tensors, got one on " +
                                  t.device().str());
    }
    views.push_back(view_of(t));
  }
  return views;
}

// A tensor of the graph that is not on tpu (a CPU scalar would be baked into
// the program), or an empty string.
std::string off_device(const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& outputs) {
  for (const auto* list : {&inputs, &outputs}) {
    for (const at::Tensor& t : *list) {
      if (!is_tpu(t)) {
        return std::string(list == &inputs ? "it takes" : "it returns") + " a tensor on " +
               t.device().str();
      }
    }
  }
  return "";
}

engine::RandomState* generator_state(c10::DeviceIndex device) {
  return at::check_generator<TpuGenerator>(default_generator(device))->state();
}

}  // namespace

void begin_capture(c10::DeviceIndex device, bool alone, bool uploads_are_constants) {
  at::Generator gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  engine::begin_capture(device, generator_state(device), alone, uploads_are_constants);
}

std::shared_ptr<engine::CapturedGraph> end_capture(c10::DeviceIndex device,
                                                   const std::vector<at::Tensor>& inputs,
                                                   const std::vector<at::Tensor>& outputs) {
  std::string problem = off_device(inputs, outputs);
  if (problem.empty()) return engine::end_capture(device, views_of(inputs), views_of(outputs));
  // End the recording all the same: the call's work runs, nothing is kept.
  try {
    engine::end_capture(device, {}, {});
  } catch (const engine::CaptureError&) {
  }
  throw engine::CaptureError(problem);
}

// A recorded graph's replay: its ops join the pending graph; its new storages
// are tensors made here, which they write.
std::optional<std::vector<at::Tensor>> append(const engine::CapturedGraph& graph,
                                              const std::vector<at::Tensor>& inputs) {
  auto device = static_cast<c10::DeviceIndex>(graph.device);
  std::vector<at::Tensor> bases(graph.new_storage_nbytes.size());
  std::vector<engine::StorageSlot*> fresh;
  for (const engine::CapturedOutput& o : graph.outputs) {
    if (o.input >= 0) continue;
    at::Tensor& b = bases.at(o.new_storage);
    if (b.defined()) continue;
    int64_t numel =
        static_cast<int64_t>(graph.new_storage_nbytes[o.new_storage]) / element_size(o.view.dtype);
    b = empty_tpu({numel}, scalar_type(o.view.dtype), device);
  }
  for (const at::Tensor& b : bases) fresh.push_back(slot_of(b));
  {
    at::Generator gen = default_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    if (!graph.append(views_of(inputs), fresh, generator_state(device))) return std::nullopt;
  }
  std::vector<at::Tensor> outputs;
  for (const engine::CapturedOutput& o : graph.outputs) {
    const engine::TensorView& v = o.view;
    outputs.push_back(o.input >= 0
                          ? inputs[o.input].as_strided(v.sizes, v.strides, v.offset)
                          : over_storage_of(bases[o.new_storage], v.sizes, v.strides, v.offset));
  }
  return outputs;
}

std::optional<std::vector<at::Tensor>> replay(const engine::CapturedGraph& graph,
                                              const std::vector<at::Tensor>& inputs) {
  if (graph.recorded) return append(graph, inputs);
  auto device = static_cast<c10::DeviceIndex>(graph.device);
  std::optional<std::vector<runtime::BufferPtr>> fresh;
  {
    at::Generator gen = default_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    fresh = graph.replay(views_of(inputs), generator_state(device));
  }
  if (!fresh) return std::nullopt;
  // Storages the program wrote at bounds take them, as they did when captured.
  std::vector<const engine::Bounds*> fresh_bounds(fresh->size());
  for (size_t i = 0; i < graph.output_bounds.size(); ++i) {
    const std::optional<engine::Bounds>& bounds = graph.output_bounds[i];
    if (graph.output_input[i] >= 0) {
      engine::StorageSlot& slot = *slot_of(inputs[graph.output_input[i]]);
      if (bounds) {
        store_bounds(slot, *bounds);
      } else {
        slot.bounds.reset();
      }
    } else if (bounds) {
      fresh_bounds[graph.output_storage[i]] = &*bounds;
    }
  }
  // One tensor per new storage; outputs are tensors over it (or views of an input).
  std::vector<at::Tensor> bases(fresh->size());
  std::vector<at::Tensor> outputs;
  for (const engine::CapturedOutput& o : graph.outputs) {
    const engine::TensorView& v = o.view;
    if (o.input >= 0) {
      outputs.push_back(inputs[o.input].as_strided(v.sizes, v.strides, v.offset));
      continue;
    }
    at::Tensor& b = bases[o.new_storage];
    if (!b.defined()) {
      int64_t numel =
          static_cast<int64_t>(graph.new_storage_nbytes[o.new_storage]) / element_size(v.dtype);
      b = empty_tpu({numel}, scalar_type(v.dtype), device);
      slot_of(b)->buffer = (*fresh)[o.new_storage];
      if (fresh_bounds[o.new_storage]) store_bounds(*slot_of(b), *fresh_bounds[o.new_storage]);
    }
    outputs.push_back(over_storage_of(b, v.sizes, v.strides, v.offset));
  }
  return outputs;
}

}  // namespace torch_tpu::aten
