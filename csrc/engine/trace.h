// Spans of the engine's own work (compiling a program, launching it, moving
// data between host and device, waiting) for a profiler. The PyTorch layer
// installs hooks that make them torch.profiler events, so a first call's
// compile shows as its own event instead of in its op's time. Without hooks,
// or while no profiler listens, a span costs a branch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch_tpu::engine {

enum class DeviceWork { Program, DeviceToHost };

struct TraceHooks {
  // Whether a profiler listens now (checked before a span builds its name).
  bool (*active)() = nullptr;
  // Starts a span; returns what end() receives.
  void* (*begin)(const std::string& name) = nullptr;
  void (*end)(void* span) = nullptr;
  // Work was queued on a device (a program, a copy to the host). Returns what
  // to run when the device has finished it (possibly more than once: the first
  // run counts), or nothing when no profiler records device work. Called on the
  // thread that queued it.
  std::function<void()> (*device_work)(DeviceWork kind, int device,
                                       const std::string& name) = nullptr;
};

void set_trace_hooks(TraceHooks hooks);

// For a profiler's device rows: `finished` runs once the device has done it.
std::function<void()> trace_device_work(DeviceWork kind, int device, const std::string& name);

// A piece of one device's work as the host saw it: when it was queued and when
// PJRT reported it done (-1: not reported).
struct DeviceWorkTimes {
  int64_t queued = 0, finished = -1;
};
struct DeviceSpan {
  int64_t start = 0, end = -1;  // end -1: not known to have ended
};

// When each piece of a device's work (given in the order it was queued) ran. The
// device runs its work in that order, but PJRT reports completions late and out of
// order: a piece ended no later than any piece queued after it ended (one not
// reported yet has ended once a later one has), and started when it was queued or
// when the one before it ended, whichever was later.
std::vector<DeviceSpan> device_timeline(const std::vector<DeviceWorkTimes>& queue);

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
