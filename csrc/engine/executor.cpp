#include "engine/executor.h"

#include <atomic>

#include "engine/backend.h"
#include "engine/captured_graph.h"
#include "engine/deferred.h"
#include "engine/program.h"

namespace torch_tpu::engine {

namespace {

std::atomic<int> g_precision{static_cast<int>(hlo::Precision::Default)};

// Strict eager: the op is a program of its own, compiled once per signature.
void run_now(const OpCall& call) {
  Backend& backend = Backend::get();
  hlo::Precision prec = precision();
  Signature sig = signature(call, prec);
  std::vector<const StorageSlot*> storages = storages_of(sig);
  const Program& program = cached_program(sig.key, [&] {
    ProgramBuilder builder(storages);
    Program declined;
    try {
      builder.emit({&call, &sig, nullptr, prec, {}}, 0);
    } catch (const lower::Unsupported& e) {
      declined.unsupported = e.what();
      return declined;
    }
    return builder.finish(interned(call.name), std::vector<bool>(storages.size(), true));
  });
  if (!program.unsupported.empty()) throw lower::Unsupported(program.unsupported);

  ProgramOp op{&call, &sig, nullptr, prec, {}};
  if (call.random) op.random = *call.random;
  runtime::Launch launch = launch_program(program, call.device, storages, {op});
  if (call.random) call.random->offset += program.random_consumed;
  for (size_t i = 0; i < program.output_slots.size(); ++i) {
    StorageSlot* slot = sig.slots[program.output_slots[i]].slot;
    slot->buffer = std::move(launch.outputs[i]);
    slot->producer = program.name;
  }
  backend.track(call.device, std::move(launch.done), call.name, program.executable);
}

}  // namespace

void set_precision(hlo::Precision p) { g_precision = static_cast<int>(p); }
hlo::Precision precision() { return static_cast<hlo::Precision>(g_precision.load()); }

void execute(OpCall&& call) {
  Backend& backend = Backend::get();
  std::lock_guard<std::recursive_mutex> lock(backend.mutex());
  auto check_device = [&](const TensorView& v) {
    if (v.slot && v.slot->device != call.device) {
      throw std::invalid_argument(call.name + ": tensors on tpu:" + std::to_string(v.slot->device) +
                                  " and tpu:" + std::to_string(call.device) + " in one op");
    }
  };
  for (const CallArg& arg : call.args) {
    for (const auto& in : arg.inputs) {
      if (in && in->on_device) check_device(in->view);
    }
  }
  for (const TensorView& t : call.targets) check_device(t);

  if (eager_mode() == EagerMode::DeferAndFuse || capturing(call.device)) {
    record(std::move(call));
  } else {
    run_now(call);
  }
}

}  // namespace torch_tpu::engine
