// StableHLO written outside the project (a JAX function lowered by JAX, a
// hand-written module) called from our programs as functions: the custom
// kernels of torch_tpu.kernels.
#pragma once

#include <string>

namespace torch_tpu::lower {

struct ExternalModule {
  std::string entry;      // the function to call
  std::string functions;  // its func.func ops and those it calls, symbols renamed apart
};

// Makes `module` callable as torch_tpu::stablehlo_call(inputs, id). `id` names
// the module's content (the same text has the same id in every process).
void add_external_module(const std::string& id, ExternalModule module);

}  // namespace torch_tpu::lower
