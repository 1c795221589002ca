#include "aten/cpu_fallback.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>

#include "engine/metrics.h"

namespace torch_tpu::aten {

namespace {

FallbackMode mode_from_env() {
  const char* v = std::getenv("TORCH_TPU_FALLBACK");
  std::string s = v ? v : "warn";
  if (s == "error") return FallbackMode::Error;
  if (s == "silent") return FallbackMode::Silent;
  return FallbackMode::Warn;
}

std::atomic<FallbackMode> g_mode{mode_from_env()};

std::string op_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  cpu_fallback(op, stack);
}

}  // namespace

void set_fallback_mode(FallbackMode mode) { g_mode = mode; }
FallbackMode fallback_mode() { return g_mode; }

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason) {
  std::string name = op_name(op);
  std::string why = reason.empty() ? name + " has no tpu lowering"
                                   : name + " is not lowered for these arguments (" + reason + ")";
  FallbackMode mode = g_mode;
  TORCH_CHECK_NOT_IMPLEMENTED(mode != FallbackMode::Error, why,
                              " and TORCH_TPU_FALLBACK=error forbids running it on the CPU");
  engine::metrics().count_fallback(name);
  if (mode == FallbackMode::Warn) {
    static std::mutex mutex;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(name).second) {
      TORCH_WARN(why,
                 "; it runs on the CPU (inputs copied to the host "
                 "and back). Set TORCH_TPU_FALLBACK=silent to hide this warning or "
                 "=error to forbid fallbacks.");
    }
  }
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

}  // namespace torch_tpu::aten
