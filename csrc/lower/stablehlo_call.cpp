#include "lower/stablehlo_call.h"

#include <mutex>
#include <unordered_map>

#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

std::mutex g_mutex;

std::unordered_map<std::string, ExternalModule>& modules() {
  static auto* table = new std::unordered_map<std::string, ExternalModule>();
  return *table;
}

// torch_tpu::stablehlo_call(Tensor[] inputs, str module) -> Tensor[]: the
// module's entry function on the inputs. Its results are what the op's meta
// kernel said they are (the kernel's Python side checked them against the
// module's signature).
std::vector<Value> stablehlo_call(Context& c, const Args& a) {
  ExternalModule module;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = modules().find(a.str(1));
    if (it == modules().end()) {
      throw std::invalid_argument("torch_tpu::stablehlo_call: no module " + a.str(1) +
                                  " was added in this process");
    }
    module = it->second;
  }
  std::vector<Shape> results;
  for (size_t i = 0; i < c.num_outputs(); ++i) results.push_back(c.output(i));
  return c.b.call(module.entry, module.functions, a.tensors(0), results);
}

}  // namespace

void add_external_module(const std::string& id, ExternalModule module) {
  std::lock_guard<std::mutex> lock(g_mutex);
  modules()[id] = std::move(module);
}

TPU_LOWERING(stablehlo_call, "torch_tpu::stablehlo_call");

}  // namespace torch_tpu::lower
