#include "engine/executor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/captured_graph.h"
#include "engine/deferred.h"
#include "engine/program.h"
#include "engine/storage_ops.h"

namespace torch_tpu::engine {

namespace {

std::atomic<int> g_precision{static_cast<int>(hlo::Precision::Default)};

// A program reads and writes views in place, so each layout of an op's operands
// (transposed, sliced, broadcast, inside a larger storage) is a program of its
// own. Past this many layouts of one op at one shape, new layouts are copied to
// and from dense temporaries around the op's dense program instead: the
// copies' programs depend on one view each and serve every op.
constexpr int kLayoutsPerShape = 8;

// A view the program reads or writes inside its storage (not the whole of it).
bool in_storage(const TensorView& v) { return v.slot && v.numel() > 0 && !v.is_whole_storage(); }

bool reads_or_writes_views(const OpCall& call) {
  bool views = false;
  for (const CallArg& arg : call.args) {
    for (const auto& in : arg.inputs) {
      if (!in || !in->on_device) continue;
      // A view at bounds reads a padded layout no dense copy holds.
      if (in->view.bounded()) return false;
      views |= in_storage(in->view);
    }
  }
  for (const TensorView& t : call.targets) {
    if (t.bounded()) return false;
    views |= in_storage(t);
  }
  return views;
}

// Counts the call's new layout (a program about to be compiled); true past the bound.
bool too_many_layouts(const OpCall& call) {
  static const lower::Rule* copy_rule = lower::find_rule("_tpu_copy");
  // A collective's program must be the same on every rank: never one of two forms.
  if (call.rule == copy_rule || call.group || !reads_or_writes_views(call)) return false;
  static auto* layouts = new std::unordered_map<std::string, int>();
  return (*layouts)[shape_key(call)]++ >= kLayoutsPerShape;
}

void run_now(const OpCall& call);

template <typename T>
bool store_as(int32_t i, unsigned char* out) {
  const T v = static_cast<T>(i);
  std::memcpy(out, &v, sizeof v);
  return true;
}

// `s` stored as `type`, when it converts exactly (0, 1, small counts); false
// otherwise (the program converts it, as XLA does).
bool stored_exactly(const HostScalar& s, ElementType type, unsigned char* out) {
  double v = 0;
  switch (s.type) {
    case ElementType::F32: {
      float f;
      std::memcpy(&f, s.bytes, sizeof f);
      v = f;
      break;
    }
    case ElementType::F64:
      std::memcpy(&v, s.bytes, sizeof v);
      break;
    case ElementType::S64: {
      int64_t i;
      std::memcpy(&i, s.bytes, sizeof i);
      if (i < -(int64_t{1} << 24) || i > (int64_t{1} << 24)) return false;
      v = static_cast<double>(i);
      break;
    }
    case ElementType::Pred:
      v = s.bytes[0] ? 1 : 0;
      break;
    default:
      return false;
  }
  if (!(v == static_cast<double>(static_cast<int32_t>(v)))) return false;  // NaN, fractions
  const auto i = static_cast<int32_t>(v);
  switch (type) {
    case ElementType::F32:
      return store_as<float>(i, out);
    case ElementType::F64:
      return store_as<double>(i, out);
    case ElementType::S32:
      return store_as<int32_t>(i, out);
    case ElementType::S64:
      return store_as<int64_t>(i, out);
    case ElementType::Pred:
      if (i != 0 && i != 1) return false;
      out[0] = static_cast<unsigned char>(i);
      return true;
    default:
      return false;
  }
}

// A fill (or zero_) of a whole one-element storage with a host scalar
// (backward()'s seed, an optimizer's step counter) takes a cached device
// constant: no program.
bool filled_with_constant(const OpCall& call) {
  static const lower::Rule* fill = lower::find_rule("fill.Scalar");
  static const lower::Rule* zero = lower::find_rule("zero");
  if ((call.rule != fill && call.rule != zero) || call.targets.size() != 1) return false;
  const TensorView& t = call.targets[0];
  if (!t.slot || t.bounded() || t.slot->bounds || t.numel() != 1 || !t.is_whole_storage()) {
    return false;
  }
  HostScalar value = HostScalar::of_int(0, ElementType::S64);
  if (call.rule == fill) {
    if (call.args.size() != 2) return false;
    const auto& in = call.args[1].inputs;
    if (in.size() != 1 || !in[0] || in[0]->on_device) return false;
    value = in[0]->scalar;
  }
  unsigned char bytes[8];
  if (!stored_exactly(value, t.dtype, bytes)) return false;
  t.slot->buffer = Backend::get().element_buffer(call.device, t.dtype, bytes);
  t.slot->producer = call.name;
  return true;
}

// Dense storages of their own for views of a call, alive as long as this.
class DenseTemporaries {
 public:
  explicit DenseTemporaries(int device) : device_(device) {}
  TensorView operator()(const TensorView& v) {
    auto nbytes = static_cast<size_t>(v.numel() * element_size(v.dtype));
    slots_.push_back(std::make_unique<StorageSlot>(StorageSlot{device_, nbytes, nullptr}));
    return TensorView{slots_.back().get(), v.dtype, v.sizes, contiguous_strides(v.sizes), 0};
  }

 private:
  int device_;
  std::vector<std::unique_ptr<StorageSlot>> slots_;
};

// The call on dense copies of its views, its results copied into its targets.
void run_on_dense_copies(const OpCall& call) {
  OpCall dense = call;
  DenseTemporaries temporary(call.device);
  for (CallArg& arg : dense.args) {
    for (auto& in : arg.inputs) {
      if (!in || !in->on_device || !in_storage(in->view)) continue;
      TensorView copy = temporary(in->view);
      copy_view(in->view, copy, *call.name);
      in->view = copy;
    }
  }
  for (TensorView& t : dense.targets) {
    if (in_storage(t)) t = temporary(t);
  }
  run_now(dense);
  for (size_t j = 0; j < call.targets.size(); ++j) {
    if (in_storage(call.targets[j])) copy_view(dense.targets[j], call.targets[j], *call.name);
  }
}

// Strict eager: the op is a program of its own, compiled once per signature.
void run_now(const OpCall& call) {
  Backend& backend = Backend::get();
  hlo::Precision prec = precision();
  Signature sig = signature(call, prec);
  if (!has_program(sig.key) && too_many_layouts(call)) return run_on_dense_copies(call);
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
    return builder.finish(interned(*call.name), std::vector<bool>(storages.size(), true));
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
  backend.track(call.device, std::move(launch.done), program.name, program.executable);
}

// A view whose storage's buffer holds another element type (a complex tensor
// seen as real pairs) is read through a bitcast of it.
bool retyped(const TensorView& v) {
  return v.slot && v.slot->buffer && v.slot->element_type() != v.dtype;
}

// An eager collective is a program of its own, the same on every rank: the
// pending graph is cut before it (every rank then runs the same programs,
// however its other work fused), and it reads and writes whole storages in
// buffers of their dtype, each read once: copies otherwise, since a rank's
// layouts, storage sizes (an op's result may be a view of a larger storage)
// and buffer history would shape its program. A storage never written,
// otherwise zeros folded into the program, gets a buffer of zeros.
void run_collective(const OpCall& call) {
  flush(call.device, FlushReason::Collective);
  Backend& backend = Backend::get();
  OpCall dense = call;
  DenseTemporaries temporary(call.device);
  std::vector<const StorageSlot*> read;
  std::vector<std::pair<TensorView, TensorView>> copied;  // view, its copy
  for (CallArg& arg : dense.args) {
    for (auto& in : arg.inputs) {
      if (!in || !in->on_device || !in->view.slot || in->view.numel() == 0) continue;
      const TensorView v = in->view;
      const bool repeated = std::find(read.begin(), read.end(), v.slot) != read.end();
      read.push_back(v.slot);
      if (in_storage(v) || retyped(v) || repeated) {
        in->view = temporary(v);
        run_now(copy_call(v, in->view, *call.name));
        copied.emplace_back(v, in->view);
      } else if (!v.slot->buffer) {
        auto zeros = std::make_shared<std::vector<unsigned char>>(v.slot->nbytes);
        v.slot->buffer =
            backend.upload(zeros->data(), v.dtype, {v.numel()}, call.device, [zeros] {});
      }
    }
  }
  // A result written over an operand that was copied goes to the copy (in
  // place, as where the operand needed no copy).
  for (TensorView& t : dense.targets) {
    auto same = std::find_if(copied.begin(), copied.end(), [&](const auto& c) {
      return c.first.slot == t.slot && same_layout(c.first, t);
    });
    if (same != copied.end()) {
      t = same->second;
    } else if (in_storage(t)) {
      t = temporary(t);
    }
  }
  run_now(dense);
  for (size_t j = 0; j < call.targets.size(); ++j) {
    if (dense.targets[j].slot != call.targets[j].slot) {
      run_now(copy_call(dense.targets[j], call.targets[j], *call.name));
    }
  }
}

}  // namespace

void set_precision(hlo::Precision p) { g_precision = static_cast<int>(p); }
hlo::Precision precision() { return static_cast<hlo::Precision>(g_precision.load()); }

void execute(OpCall&& call) {
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  // In strict and debug mode only compiled graphs are pending: an op on their
  // values materialises them first (it would otherwise be fused with them, and
  // every shape of the op would recompile the graphs' program).
  bool pending = false;
  auto check_device = [&](const TensorView& v) {
    if (v.slot && v.slot->device != call.device) {
      throw std::invalid_argument(*call.name +
                                  ": tensors on tpu:" + std::to_string(v.slot->device) +
                                  " and tpu:" + std::to_string(call.device) + " in one op");
    }
    pending |= v.slot && is_pending(*v.slot);
  };
  for (const CallArg& arg : call.args) {
    for (const auto& in : arg.inputs) {
      if (in && in->on_device) check_device(in->view);
    }
  }
  for (const TensorView& t : call.targets) check_device(t);

  if (call.group && !capturing(call.device)) {
    run_collective(call);
    return;
  }
  if (eager_mode() == EagerMode::DeferAndFuse || capturing(call.device)) {
    record(std::move(call));
    return;
  }
  if (pending) flush(call.device, FlushReason::Storage);
  if (!filled_with_constant(call)) run_now(call);
}

}  // namespace torch_tpu::engine
