// The PyTorch face of torch.compile's captured programs (engine/captured_graph):
// tensors in, tensors out.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "aten/torch_headers.h"
#include "engine/captured_graph.h"

namespace torch_tpu::aten {

// `alone`, `uploads_are_constants`: as engine::begin_capture.
void begin_capture(c10::DeviceIndex device, bool alone, bool uploads_are_constants);
// Throws engine::CaptureError when the recorded call cannot be replayed.
std::shared_ptr<engine::CapturedGraph> end_capture(c10::DeviceIndex device,
                                                   const std::vector<at::Tensor>& inputs,
                                                   const std::vector<at::Tensor>& outputs);
// The graph's tensor outputs for `inputs`, or nullopt when an input's layout
// differs from the captured one.
std::optional<std::vector<at::Tensor>> replay(const engine::CapturedGraph& graph,
                                              const std::vector<at::Tensor>& inputs);

}  // namespace torch_tpu::aten
