// Shared client for the C++ tests: the plugin named by $TORCH_TPU_PLUGIN, for
// the platform $TORCH_TPU_PLATFORM (default cpu; the Makefile sets both from
// the platform selection). The CPU platform gets two devices.
#pragma once

#include <string>
#include <vector>

#include "hlo/builder.h"
#include "runtime/client.h"
#include "runtime/compile_options.h"

namespace torch_tpu::testing {

const std::string& test_platform();
runtime::Client& test_client();

// Compiles `b` returning `results`, runs it on device 0 with `inputs` and
// returns each output copied to the host as doubles.
std::vector<std::vector<double>> run_program(hlo::Builder& b,
                                             const std::vector<hlo::Value>& results,
                                             const std::vector<runtime::Buffer*>& inputs);

runtime::BufferPtr upload_f32(const std::vector<float>& data, const std::vector<int64_t>& dims);

}  // namespace torch_tpu::testing
