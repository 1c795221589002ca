// torch.profiler events for the engine's spans (engine/trace.h): compiles,
// launches, transfers and waits show under their own names ("tpu::compile(
// aten::mm)") inside the op that caused them, in tables and Chrome traces.
#include <ATen/record_function.h>

#include "aten/device_profiler.h"
#include "engine/trace.h"

namespace torch_tpu::aten {

namespace {

// The name outlives the RecordFunction, which refers to it.
struct Span {
  std::string name;
  at::RecordFunction record{at::RecordScope::USER_SCOPE};
};

bool listening() { return at::hasCallbacks(); }

void* begin(const std::string& name) {
  auto* span = new Span{name};
  if (!span->record.isActive()) {
    delete span;
    return nullptr;
  }
  span->record.before(std::string_view(span->name), c10::ArrayRef<const c10::IValue>());
  return span;
}

void end(void* span) { delete static_cast<Span*>(span); }

const bool installed = [] {
  engine::set_trace_hooks({listening, begin, end, record_device_work});
  return true;
}();

}  // namespace
}  // namespace torch_tpu::aten
