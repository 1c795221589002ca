// Spans of the engine's own work (compiling a program, launching it, moving
// data between host and device, waiting) for a profiler. The PyTorch layer
// installs hooks that make them torch.profiler events, so a first call's
// compile shows as its own event instead of in its op's time. Without hooks,
// or while no profiler listens, a span costs a branch.
#pragma once

#include <functional>
#include <string>

namespace torch_tpu::engine {

enum class DeviceWork { Program, DeviceToHost };

struct TraceHooks {
  // Whether a profiler listens now (checked before a span builds its name).
  bool (*active)() = nullptr;
  // Starts a span; returns what end() receives.
  void* (*begin)(const std::string& name) = nullptr;
  void (*end)(void* span) = nullptr;
  // Work was queued on a device (a program, a copy to the host). Returns what
  // to run when the device has finished it, or nothing when no profiler
  // records device work. Called on the thread that queued it.
  std::function<void()> (*device_work)(DeviceWork kind, int device,
                                       const std::string& name) = nullptr;
};

void set_trace_hooks(TraceHooks hooks);

// For a profiler's device rows: `finished` runs once the device has done it.
std::function<void()> trace_device_work(DeviceWork kind, int device, const std::string& name);

class TraceSpan {
 public:
  // "tpu::compile" and "aten::mm" make the event "tpu::compile(aten::mm)".
  TraceSpan(const char* what, const std::string& subject);
  explicit TraceSpan(const char* what) : TraceSpan(what, std::string()) {}
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  ~TraceSpan();

 private:
  void* span_ = nullptr;
};

}  // namespace torch_tpu::engine
