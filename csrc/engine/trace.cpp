#include "engine/trace.h"

#include <algorithm>

namespace torch_tpu::engine {

namespace {
TraceHooks g_hooks;
}

void set_trace_hooks(TraceHooks hooks) { g_hooks = hooks; }

std::function<void()> trace_device_work(DeviceWork kind, int device, const std::string& name) {
  if (!g_hooks.device_work) return {};
  return g_hooks.device_work(kind, device, name);
}

std::vector<DeviceSpan> device_timeline(const std::vector<DeviceWorkTimes>& queue) {
  std::vector<DeviceSpan> spans(queue.size());
  int64_t later_end = -1;
  for (size_t i = queue.size(); i-- > 0;) {
    const int64_t finished = queue[i].finished;
    if (finished >= 0 && (later_end < 0 || finished < later_end)) later_end = finished;
    spans[i].end = later_end;
  }
  int64_t free = 0;
  for (size_t i = 0; i < spans.size() && spans[i].end >= 0; ++i) {
    spans[i].start = std::min(std::max(queue[i].queued, free), spans[i].end);
    free = spans[i].end;
  }
  return spans;
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
