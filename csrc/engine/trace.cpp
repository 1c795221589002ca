#include "engine/trace.h"

namespace torch_tpu::engine {

namespace {
TraceHooks g_hooks;
}

void set_trace_hooks(TraceHooks hooks) { g_hooks = hooks; }

std::function<void()> trace_device_work(DeviceWork kind, int device, const std::string& name) {
  if (!g_hooks.device_work) return {};
  return g_hooks.device_work(kind, device, name);
}

TraceSpan::TraceSpan(const char* what, const std::string& subject) {
  if (!g_hooks.active || !g_hooks.active()) return;
  span_ =
      g_hooks.begin(subject.empty() ? std::string(what) : std::string(what) + "(" + subject + ")");
}

TraceSpan::~TraceSpan() {
  if (span_) g_hooks.end(span_);
}

}  // namespace torch_tpu::engine
