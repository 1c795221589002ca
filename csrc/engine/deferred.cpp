#include "engine/deferred.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend.h"
#include "engine/captured_graph.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/program.h"

namespace torch_tpu::engine {

// A storage in a pending graph. Recorded views point at `shadow`, which holds
// the storage's size and the buffer it had before the graph: the graph owns
// that value until it is materialised, so freeing the storage meanwhile is
// safe.
struct PendingSlot {
  StorageSlot shadow;
  StorageSlot* live = nullptr;  // the tensors' storage; null once freed
  int index = 0;
  bool written = false;
};

struct RecordedOp {
  OpCall call;  // its views point at shadows
  Signature sig;
  std::vector<int> storage_of;  // graph storage of each of sig.slots
  hlo::Precision precision;
  RandomState random;
  uint64_t id = 0;  // the signature's id (OpInfo)
};

// A capture's ops, as a replay appends them again. Its storages are numbered
// in the order the ops first use them (the order a graph adopts them in, so a
// replay's pending graph has the capture's key); the ops' views and
// signatures point at no slot until appended.
struct RecordedGraph {
  enum class Role : uint8_t { Input, Fresh, Constant, Temporary };
  struct Storage {
    Role role = Role::Temporary;
    int index = 0;      // Input: which input; Fresh: which new storage
    size_t nbytes = 0;  // Temporary
    // Constant: a slot of the graph's own holding the value it read.
    std::unique_ptr<StorageSlot> constant;
  };
  struct Op {
    RecordedOp op;
    std::vector<int> storage;       // per sig.slots entry
    std::vector<int> view_storage;  // per device view (for_each_view's order)
  };
  std::vector<Storage> storages;
  std::vector<Op> ops;
  uint64_t start_offset = 0;  // the generator's offset when the capture began
};

namespace {

std::atomic<int> g_mode{static_cast<int>(EagerMode::Strict)};

// Visits the device views of a call: its device inputs, then its targets
// (a target without a slot, a result nobody asked for, too).
template <typename Fn>
void for_each_view(OpCall& call, Fn&& fn) {
  for (CallArg& arg : call.args) {
    for (auto& in : arg.inputs) {
      if (in && in->on_device) fn(in->view);
    }
  }
  for (TensorView& t : call.targets) fn(t);
}

// Ops whose signatures, in a row, identify a point of a repeating sequence.
constexpr size_t kRepeatWindow = 8;
// In a loop that reads nothing back (sampling tokens on the device), graphs of
// at least this many ops are cut where the loop repeats: one or a few
// iterations, a program each phase, rather than graphs of thousands of ops
// whose compile time (about 10 ms an op on XLA's CPU backend) no loop repays.
constexpr size_t kLoopGraphOps = 64;

struct Graph {
  std::deque<PendingSlot> slots;  // stable addresses: views point into them
  std::deque<RecordedOp> ops;
  std::string key;  // the ops' signature ids and storage maps, in order
  // Signature ids of the last ops recorded on the device (across graphs),
  // and those that preceded this graph's first op: when the recent ones come
  // round to the start's again, the work repeats (a loop iteration, a step)
  // and a cut there makes every repetition the same cached graph.
  std::deque<uint64_t> recent;
  std::deque<uint64_t> start;
  // The windows of signatures in this graph (hashed); whether the newest one
  // came before in it (the graph holds a repetition).
  std::unordered_set<uint64_t> windows;
  bool recurred = false;
  // Set by a cut where the work repeats or at the size limit, cleared by any
  // other (a host read, a step, a synchronisation): the device is running a
  // loop that reads nothing back.
  bool looping = false;
  // The compiled graphs appended since the last materialisation: a second
  // call of one is the next iteration of a loop (a training step), which
  // starts a graph of its own, so every iteration is the same program.
  std::vector<const RecordedGraph*> appended;
  // A capture (torch.compile) is recording from op `capture_start` on (a
  // capture alone starts an empty graph); `broken` says what cut it.
  bool capturing = false;
  bool capture_alone = false;
  // Host data copied to the device during the capture is a constant of the graph
  // (begin_capture's `uploads_are_constants`).
  bool capture_uploads_constant = false;
  size_t capture_start = 0;
  std::string broken;
  RandomState* generator = nullptr;
  uint64_t start_offset = 0;
  // The thread launching this graph's program through a device group, which
  // lets go of the backend mutex while the group's ranks meet: until it is
  // back, other threads leave the device's graph alone.
  std::atomic<std::thread::id> launching{};
};

// Pending graphs by device; guarded by the backend mutex. A deque: growing
// it for a new device keeps the others' graphs where they are (a rank waiting
// for its group lets go of the mutex while it holds its graph). Leaked: they
// hold buffers, which must outlive every static destructor.
std::deque<Graph>& graphs() {
  static auto* g = new std::deque<Graph>();
  return *g;
}

Graph& graph_of(int device) {
  auto& g = graphs();
  if (static_cast<int>(g.size()) <= device) g.resize(device + 1);
  Graph& graph = g[device];
  const std::thread::id me = std::this_thread::get_id();
  while (graph.launching.load() != std::thread::id() && graph.launching.load() != me) {
    Backend::get().mutex().unlocked_while(
        [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
  }
  return graph;
}

// Marks `g` as launched by this thread while it exists.
struct LaunchingGraph {
  explicit LaunchingGraph(Graph& g) : g(g) { g.launching = std::this_thread::get_id(); }
  ~LaunchingGraph() { g.launching = std::thread::id(); }
  Graph& g;
};

// What recording needs to know of an op before it runs: whether its rule
// accepts the inputs and how many random offsets it draws. Found by lowering
// the op alone (no compile), once per signature. `id` stands for the
// signature in graph keys, which stay small however long the signatures are;
// ids are never reused, so clearing the table only costs recompiles.
struct OpInfo {
  std::string unsupported;
  int64_t random_consumed = 0;
  uint64_t id = 0;
};

const OpInfo& op_info(const OpCall& call, const Signature& sig, hlo::Precision precision) {
  static auto* infos = new std::unordered_map<std::string, OpInfo>();
  auto it = infos->find(sig.key);
  if (it != infos->end()) return it->second;
  if (infos->size() > 100000) infos->clear();
  static uint64_t next_id = 0;
  OpInfo info;
  info.id = next_id++;
  try {
    ProgramBuilder builder(storages_of(sig));
    info.random_consumed = builder.emit({&call, &sig, nullptr, precision, {}}, 0);
  } catch (const lower::Unsupported& e) {
    info.unsupported = e.what();
  }
  return infos->emplace(sig.key, std::move(info)).first->second;
}

PendingSlot& adopt(Graph& g, StorageSlot* slot) {
  if (slot->pending) return *slot->pending;
  PendingSlot& ps = g.slots.emplace_back();
  ps.shadow.device = slot->device;
  ps.shadow.nbytes = slot->nbytes;
  ps.shadow.buffer = std::move(slot->buffer);
  ps.shadow.producer = slot->producer;
  ps.live = slot;
  ps.index = static_cast<int>(g.slots.size()) - 1;
  slot->pending = &ps;
  return ps;
}

// "fused program of 57 ops: aten::mm, aten::add.Tensor, ..." (distinct names
// in order): asynchronous failures of the program are reported under it.
std::string program_name(const Graph& g) {
  std::vector<const std::string*> names;
  for (const RecordedOp& op : g.ops) {
    bool seen = false;
    for (const std::string* n : names) seen |= *n == *op.call.name;
    if (!seen) names.push_back(op.call.name);
  }
  std::string out = "fused program of " + std::to_string(g.ops.size()) + " ops:";
  for (size_t i = 0; i < names.size() && i < 12; ++i) out += (i ? ", " : " ") + *names[i];
  if (names.size() > 12) out += ", ...";
  return out;
}

const char* reason_name(FlushReason reason) {
  switch (reason) {
    case FlushReason::HostRead:
      return "host_read";
    case FlushReason::Synchronize:
      return "synchronize";
    case FlushReason::SizeLimit:
      return "size_limit";
    case FlushReason::Step:
      return "step";
    case FlushReason::ModeSwitch:
      return "mode_switch";
    case FlushReason::Storage:
      return "storage";
    case FlushReason::Event:
      return "event";
    case FlushReason::Repeat:
      return "repeat";
    case FlushReason::Collective:
      return "collective";
  }
  return "";
}

// Sees the program of a graph (null: the graph has no outputs) before it runs.
using ProgramInspector = std::function<void(const Program*, const std::vector<ProgramOp>&)>;

void flush_graph(int device, FlushReason reason, const ProgramInspector& inspect = nullptr) {
  Graph& g = graph_of(device);
  g.looping = reason == FlushReason::Repeat || reason == FlushReason::SizeLimit;
  if (g.ops.empty()) {
    if (inspect) inspect(nullptr, {});
    return;
  }
  if (g.capturing && !inspect && g.broken.empty()) {
    g.broken = std::string("its ops were materialised (") + reason_name(reason) + ")";
  }
  Backend& backend = Backend::get();

  std::vector<const StorageSlot*> storages;
  std::vector<bool> keep;
  std::string key = std::move(g.key);
  for (const PendingSlot& ps : g.slots) {
    storages.push_back(&ps.shadow);
    keep.push_back(ps.live && ps.written);
    key.append(reinterpret_cast<const char*>(&ps.shadow.nbytes), sizeof(size_t));
    key.push_back(static_cast<char>(ps.shadow.element_type()));
    key.push_back(static_cast<char>(keep.back()));
  }
  std::vector<ProgramOp> ops;
  for (const RecordedOp& op : g.ops) {
    ops.push_back({&op.call, &op.sig, &op.storage_of, op.precision, op.random});
  }

  auto release = [&](const std::function<runtime::BufferPtr(const PendingSlot&)>& written) {
    for (PendingSlot& ps : g.slots) {
      if (!ps.live) continue;
      ps.live->pending = nullptr;
      if (!ps.written)
        ps.live->buffer = std::move(ps.shadow.buffer);
      else if (written)
        ps.live->buffer = written(ps);
    }
    g.slots.clear();
    g.ops.clear();
    g.appended.clear();
    g.windows.clear();
    g.recurred = false;
    g.start = g.recent;
  };

  metrics().count_materialization(reason_name(reason));
  if (std::find(keep.begin(), keep.end(), true) == keep.end()) {
    if (inspect) inspect(nullptr, ops);
    release(nullptr);  // no value of the graph is still referenced
    return;
  }
  try {
    const Program& program = cached_program(key, [&] {
      ProgramBuilder builder(storages);
      std::vector<int> final_write(storages.size(), -1);
      for (size_t i = 0; i < ops.size(); ++i) {
        for (int local : ops[i].sig->target_slot) {
          int s = local < 0 ? -1 : ops[i].storage(local);
          if (s >= 0 && keep[s]) final_write[s] = static_cast<int>(i);
        }
      }
      builder.mark_outputs(std::move(final_write));
      for (size_t i = 0; i < ops.size(); ++i) builder.emit(ops[i], static_cast<int>(i));
      return builder.finish(interned(program_name(g)), keep);
    });
    if (inspect) inspect(&program, ops);
    LaunchingGraph launching(g);
    runtime::Launch launch = launch_program(program, device, storages, ops);
    for (size_t i = 0; i < program.output_slots.size(); ++i) {
      StorageSlot* live = g.slots[program.output_slots[i]].live;
      live->buffer = std::move(launch.outputs[i]);
      live->producer = program.name;
    }
    release(nullptr);
    backend.track(device, std::move(launch.done), program.name, program.executable);
  } catch (const std::exception& e) {
    // The written storages can never get their values: reading them raises
    // this failure.
    std::string message = std::string("materialising pending tpu ops failed: ") + e.what();
    release([&](const PendingSlot& ps) {
      ElementType t = ps.shadow.buffer ? ps.shadow.element_type() : ElementType::U8;
      int64_t n = static_cast<int64_t>(ps.shadow.nbytes) / element_size(t);
      return backend.client().error_buffer(message, t, {n}, device);
    });
    throw;
  }
}

}  // namespace

StorageSlot::~StorageSlot() {
  if (!pending) return;
  std::lock_guard<EngineMutex> lock(Backend::get().mutex());
  if (pending) pending->live = nullptr;
}

EagerMode eager_mode() { return static_cast<EagerMode>(g_mode.load()); }

void set_eager_mode(EagerMode mode) {
  if (Backend::started()) {
    std::lock_guard<EngineMutex> lock(Backend::get().mutex());
    flush(-1, FlushReason::ModeSwitch);
  }
  g_mode = static_cast<int>(mode);
  Backend::set_launch_blocking(mode == EagerMode::Debug);
}

int max_graph_ops() {
  static const int limit = [] {
    const char* v = std::getenv("TORCH_TPU_DEFER_MAX_OPS");
    return v && std::atoi(v) > 0 ? std::atoi(v) : 2048;
  }();
  return limit;
}

namespace {

// Keys the graph by the op just recorded.
void note_recorded(Graph& g, const RecordedOp& op) {
  g.key.append(reinterpret_cast<const char*>(&op.id), sizeof(op.id));
  g.key.append(reinterpret_cast<const char*>(op.storage_of.data()),
               op.storage_of.size() * sizeof(int));
  metrics().deferred_ops++;
  g.recent.push_back(op.id);
  if (g.recent.size() > kRepeatWindow) g.recent.pop_front();
  if (g.recent.size() < kRepeatWindow) return;
  uint64_t window = 0;
  for (uint64_t id : g.recent) window = (window ^ id) * 0x100000001b3ULL;
  g.recurred = !g.windows.insert(window).second;
}

// Materialises the graph at its size limit, or where the work repeats: where
// the recorded ops come round to those that preceded the graph (the next
// iteration of a loop: every repetition is then the same cached graph), or to
// a point inside the graph (its work changed: that point starts the graphs
// after). From half the size limit, so that a training step with repeated
// layers stays whole; in a loop that reads nothing back, from kLoopGraphOps
// (inside the graph, from four times that: a start that recurs later keeps the
// graphs alike).
void cut_if_due(Graph& g, int device) {
  if (g.capturing) return;  // a capture is one program, however long
  const size_t size = g.ops.size(), limit = static_cast<size_t>(max_graph_ops());
  const size_t from = g.looping ? std::min(kLoopGraphOps, limit / 2) : limit / 2;
  const size_t inside_from = g.looping ? std::min(4 * kLoopGraphOps, limit / 2) : limit / 2;
  const bool at_start = g.start.size() == kRepeatWindow && g.recent == g.start;
  if (size >= limit) {
    flush(device, FlushReason::SizeLimit);
  } else if ((size >= from && at_start) || (size >= inside_from && g.recurred)) {
    flush(device, FlushReason::Repeat);
  }
}

}  // namespace

bool holds_buffer(const StorageSlot& slot) {
  return slot.pending ? static_cast<bool>(slot.pending->shadow.buffer)
                      : static_cast<bool>(slot.buffer);
}

// Eager collectives run alone (executor.cpp: run_collective); a capture
// keeps its collectives (a compiled graph is the same on every rank).
void record(OpCall&& call) {
  hlo::Precision prec = precision();
  Signature sig = signature(call, prec);
  const OpInfo& info = op_info(call, sig, prec);
  if (!info.unsupported.empty()) throw lower::Unsupported(info.unsupported);

  Graph& g = graph_of(call.device);
  RecordedOp& op = g.ops.emplace_back();
  if (call.random) {
    op.random = *call.random;
    call.random->offset += info.random_consumed;
  }
  op.call = std::move(call);
  op.precision = prec;
  op.id = info.id;
  op.storage_of.reserve(sig.slots.size());
  for (SlotUse& use : sig.slots) {
    PendingSlot& ps = adopt(g, use.slot);
    op.storage_of.push_back(ps.index);
    use.slot = &ps.shadow;
  }
  // The copy's views and signature point at the shadows and the copy's inputs.
  op.sig = std::move(sig);
  op.sig.inputs.clear();
  for (CallArg& arg : op.call.args) {
    for (auto& in : arg.inputs) {
      if (!in) continue;
      if (in->on_device) in->view.slot = &in->view.slot->pending->shadow;
      op.sig.inputs.push_back(&*in);
    }
  }
  for (TensorView& t : op.call.targets) {
    if (!t.slot) continue;
    PendingSlot* ps = t.slot->pending;
    ps->written = true;
    t.slot = &ps->shadow;
  }
  note_recorded(g, op);
  cut_if_due(g, op.call.device);
}

void flush(int device, FlushReason reason) {
  if (!Backend::started()) return;
  std::lock_guard<EngineMutex> lock(Backend::get().mutex());
  if (device >= 0) {
    flush_graph(device, reason);
    return;
  }
  for (size_t d = 0; d < graphs().size(); ++d) flush_graph(static_cast<int>(d), reason);
}

void synchronize(int device) {
  if (!Backend::started()) return;
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  flush(device, FlushReason::Synchronize);
  backend.synchronize(device);
}

void CompletionMark::set_now() {
  nanos_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
               .count();
}

int64_t CompletionMark::wait() const {
  // The launch's own wait may return just before PJRT runs its callbacks.
  while (nanos_.load() < 0) std::this_thread::yield();
  return earlier_ ? std::max(nanos_.load(), earlier_->wait()) : nanos_.load();
}

std::shared_ptr<CompletionMark> mark_completion(int device) {
  static auto* last = new std::unordered_map<int, std::shared_ptr<CompletionMark>>();
  Backend& backend = Backend::get();
  std::lock_guard<EngineMutex> lock(backend.mutex());
  flush(device, FlushReason::Event);
  std::shared_ptr<CompletionMark>& previous = (*last)[device];
  auto mark = std::make_shared<CompletionMark>(previous && !previous->done() ? previous : nullptr);
  backend.when_done(device, [mark] { mark->set_now(); });
  previous = mark;
  return mark;
}

// ---------------------------------------------------------------- capture

void note_unrecorded(int device, const char* what) {
  if (!capturing(device)) return;
  Graph& g = graph_of(device);
  if (g.broken.empty()) g.broken = what;
}

void note_upload(int device) {
  if (!capturing(device) || graph_of(device).capture_uploads_constant) return;
  note_unrecorded(device,
                  "it copies host data to the device (a CPU fallback or a tensor constant)");
}

bool capturing(int device) {
  auto& g = graphs();
  return device >= 0 && device < static_cast<int>(g.size()) && g[device].capturing;
}

void begin_capture(int device, RandomState* generator, bool alone, bool uploads_are_constants) {
  std::lock_guard<EngineMutex> lock(Backend::get().mutex());
  if (alone) flush(device, FlushReason::Synchronize);
  Graph& g = graph_of(device);
  g.capturing = true;
  g.capture_alone = alone;
  g.capture_uploads_constant = uploads_are_constants;
  g.capture_start = g.ops.size();
  g.broken.clear();
  g.generator = generator;
  g.start_offset = generator->offset;
}

namespace {

// The input whose storage `live` is (-1: none).
int input_index(const std::vector<TensorView>& inputs, const StorageSlot* live) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].slot == live) return static_cast<int>(k);
  }
  return -1;
}

// An output's geometry and the input it is a view of (-1: a new storage, which
// the caller numbers).
CapturedOutput output_of(const TensorView& out, const std::vector<TensorView>& inputs) {
  CapturedOutput o;
  o.view = out;
  o.view.slot = nullptr;
  o.input = input_index(inputs, out.slot);
  return o;
}

// Fills `cg` from the graph about to run as `program`, or says why it cannot
// be replayed.
std::string describe_capture(CapturedGraph& cg, const Graph& g, const Program* program,
                             const std::vector<ProgramOp>& ops,
                             const std::vector<TensorView>& inputs,
                             const std::vector<TensorView>& outputs) {
  auto input_of = [&](const StorageSlot* live) { return input_index(inputs, live); };
  std::vector<int> new_storage(g.slots.size(), -1);
  for (const ProgramOp& op : ops) {
    if (op.call->group) cg.group = op.call->group;
  }
  if (program) {
    cg.program = *program;
    for (const Param& p : program->params) {
      CapturedGraph::ParamValue v;
      const ProgramOp* op = p.source == Param::Source::Storage ? nullptr : &ops[p.op];
      switch (p.source) {
        case Param::Source::Storage: {
          const PendingSlot& ps = g.slots[p.index];
          v.input = ps.live ? input_of(ps.live) : -1;
          v.kind = v.input >= 0 ? CapturedGraph::ParamValue::Kind::Input
                                : CapturedGraph::ParamValue::Kind::Constant;
          v.constant = v.input >= 0 ? nullptr : ps.shadow.buffer;
          break;
        }
        case Param::Source::InputOffset:
        case Param::Source::TargetOffset: {
          int64_t offset = p.source == Param::Source::InputOffset
                               ? op->sig->inputs[p.index]->view.offset
                               : op->call->targets[p.index].offset;
          v.host = offset_scalar(offset, p.type);
          break;
        }
        case Param::Source::Scalar:
          v.host = op->sig->inputs[p.index]->scalar;
          break;
        case Param::Source::Random:
          if (op->call->random != g.generator) {
            return "a random op draws from a generator other than the device's default";
          }
          v.kind = CapturedGraph::ParamValue::Kind::Random;
          v.random_delta = op->random.offset - g.start_offset;
          break;
        case Param::Source::Checks:  // launch_with's
          v.kind = CapturedGraph::ParamValue::Kind::Constant;
          break;
        case Param::Source::InputSize:
        case Param::Source::TargetSize: {
          // Fixed by the layouts: the inputs' sizes and bounds are the
          // replay's key, and every other size follows from them.
          const int32_t size = stored_size(p, *op);
          v.host.type = ElementType::S32;
          std::memcpy(v.host.bytes, &size, sizeof size);
          break;
        }
      }
      cg.params.push_back(std::move(v));
    }
    for (int s : program->output_slots) {
      const PendingSlot& ps = g.slots[s];
      std::optional<Bounds>& bounds = cg.output_bounds.emplace_back();
      if (ps.live && ps.live->bounds) {
        bounds = *ps.live->bounds;
        bounds->alive = nullptr;
      }
      int k = input_of(ps.live);
      cg.output_input.push_back(k);
      cg.output_storage.push_back(k >= 0 ? -1 : static_cast<int>(cg.new_storage_nbytes.size()));
      if (k < 0) {
        new_storage[s] = static_cast<int>(cg.new_storage_nbytes.size());
        cg.new_storage_nbytes.push_back(ps.shadow.nbytes);
      }
    }
  }
  for (const TensorView& out : outputs) {
    CapturedOutput o = output_of(out, inputs);
    if (o.input < 0) {
      const PendingSlot* ps = out.slot->pending;
      if (!ps || !ps->written) return "it returns a tensor the graph does not compute";
      o.new_storage = new_storage[ps->index];
    } else if (inputs[o.input].dtype != out.dtype) {
      return "it returns a view of an input with another dtype";
    }
    cg.outputs.push_back(o);
  }
  for (const PendingSlot& ps : g.slots) {
    if (ps.live && ps.written && input_of(ps.live) < 0 && new_storage[ps.index] < 0) {
      return "it writes a tensor that is neither an input nor an output";
    }
  }
  return "";
}

// What record_graph says of a capture of bounded sizes: the graph is captured
// alone (a program of its own, whose replay restores the bounds).
constexpr const char* kBoundedCapture = "it runs at bounded sizes";

// Fills `cg` with the ops the capture recorded (from g.capture_start on), or
// says why a replay could not append them.
std::string record_graph(CapturedGraph& cg, const Graph& g, const std::vector<TensorView>& inputs,
                         const std::vector<TensorView>& outputs) {
  using Role = RecordedGraph::Role;
  auto rg = std::make_shared<RecordedGraph>();
  rg->start_offset = g.start_offset;
  std::vector<int> local(g.slots.size(), -1);  // graph storage -> the capture's
  std::vector<const PendingSlot*> pending_of;
  auto storage = [&](int index) {
    if (local[index] < 0) {
      local[index] = static_cast<int>(pending_of.size());
      pending_of.push_back(&g.slots[index]);
    }
    return local[index];
  };
  std::vector<bool> written;
  for (size_t i = g.capture_start; i < g.ops.size(); ++i) {
    RecordedGraph::Op& t = rg->ops.emplace_back();
    t.op = g.ops[i];
    for (size_t u = 0; u < t.op.sig.slots.size(); ++u) {
      t.storage.push_back(storage(t.op.storage_of[u]));
    }
    // A view's slot is one of the signature's (its shadow in the graph).
    auto storage_of_view = [&](const StorageSlot* shadow) {
      for (size_t u = 0; u < t.op.sig.slots.size(); ++u) {
        if (t.op.sig.slots[u].slot == shadow) return t.storage[u];
      }
      throw std::logic_error("a recorded view outside its signature's storages");
    };
    bool bounded = false;
    for_each_view(t.op.call, [&](TensorView& v) {
      bounded |= v.bounded() || v.stored.has_value();
      t.view_storage.push_back(v.slot ? storage_of_view(v.slot) : -1);
      v.slot = nullptr;
    });
    for (SlotUse& use : t.op.sig.slots) use.slot = nullptr;
    t.op.sig.inputs.clear();  // pointed into the original's arguments
    if (bounded) return kBoundedCapture;
    written.resize(pending_of.size(), false);
    for (size_t j = 0; j < t.op.call.targets.size(); ++j) {
      int s = t.op.sig.target_slot[j];
      if (s >= 0) written[t.storage[s]] = true;
    }
    if (t.op.call.random && t.op.call.random != g.generator) {
      return "a random op draws from a generator other than the device's default";
    }
  }
  written.resize(pending_of.size(), false);
  for (const PendingSlot* ps : pending_of) {
    if (ps->live && ps->live->bounds) return kBoundedCapture;
  }
  std::vector<const StorageSlot*> fresh;  // new storages, in the outputs' order
  for (const TensorView& out : outputs) {
    CapturedOutput o = output_of(out, inputs);
    if (o.input < 0) {
      const int s = out.slot->pending ? local[out.slot->pending->index] : -1;
      if (s < 0 || !written[s]) {
        return "it returns a tensor the graph does not compute";
      }
      auto at = std::find(fresh.begin(), fresh.end(), out.slot);
      o.new_storage = static_cast<int>(at - fresh.begin());
      if (at == fresh.end()) {
        fresh.push_back(out.slot);
        cg.new_storage_nbytes.push_back(out.slot->nbytes);
      }
    } else if (inputs[o.input].dtype != out.dtype) {
      return "it returns a view of an input with another dtype";
    }
    cg.outputs.push_back(o);
  }
  for (size_t s = 0; s < pending_of.size(); ++s) {
    const PendingSlot& ps = *pending_of[s];
    RecordedGraph::Storage& st = rg->storages.emplace_back();
    int k = ps.live ? input_index(inputs, ps.live) : -1;
    auto f = std::find(fresh.begin(), fresh.end(), ps.live);
    if (k >= 0) {
      st.role = Role::Input;
      st.index = k;
    } else if (ps.live && f != fresh.end()) {
      st.role = Role::Fresh;
      st.index = static_cast<int>(f - fresh.begin());
    } else if (written[s]) {
      if (ps.live) return "it writes a tensor that is neither an input nor an output";
      st.role = Role::Temporary;
      st.nbytes = ps.shadow.nbytes;
    } else if (ps.written) {
      return "it reads a tensor computed before it that it does not take as an input";
    } else {
      // A tensor the graph holds (its value is the shadow's: nothing wrote it).
      st.role = Role::Constant;
      st.constant = std::make_unique<StorageSlot>();
      st.constant->device = ps.shadow.device;
      st.constant->nbytes = ps.shadow.nbytes;
      st.constant->buffer = ps.shadow.buffer;
    }
  }
  cg.recorded = std::move(rg);
  return "";
}

}  // namespace

void append_recorded(const RecordedGraph& rg, int device, const std::vector<TensorView>& inputs,
                     const std::vector<StorageSlot*>& fresh, RandomState* generator) {
  using Role = RecordedGraph::Role;
  Graph& g = graph_of(device);
  if (std::find(g.appended.begin(), g.appended.end(), &rg) != g.appended.end()) {
    flush(device, FlushReason::Repeat);
  }
  g.appended.push_back(&rg);
  std::vector<PendingSlot*> slots(rg.storages.size(), nullptr);
  auto slot = [&](int s) -> PendingSlot& {
    if (slots[s]) return *slots[s];
    const RecordedGraph::Storage& st = rg.storages[s];
    switch (st.role) {
      case Role::Input:
        return *(slots[s] = &adopt(g, inputs[st.index].slot));
      case Role::Fresh:
        return *(slots[s] = &adopt(g, fresh[st.index]));
      case Role::Constant:
        return *(slots[s] = &adopt(g, st.constant.get()));
      case Role::Temporary:
        break;
    }
    PendingSlot& ps = g.slots.emplace_back();
    ps.shadow.device = device;
    ps.shadow.nbytes = st.nbytes;
    ps.index = static_cast<int>(g.slots.size()) - 1;
    return *(slots[s] = &ps);
  };
  for (const RecordedGraph::Op& t : rg.ops) {
    RecordedOp& op = g.ops.emplace_back(t.op);
    for (size_t i = 0; i < t.storage.size(); ++i) {
      PendingSlot& ps = slot(t.storage[i]);
      op.storage_of[i] = ps.index;
      op.sig.slots[i].slot = &ps.shadow;
    }
    size_t v = 0;
    for_each_view(op.call, [&](TensorView& view) {
      int s = t.view_storage[v++];
      if (s >= 0) view.slot = &slot(s).shadow;
    });
    for (CallArg& arg : op.call.args) {
      for (auto& in : arg.inputs) {
        if (in) op.sig.inputs.push_back(&*in);
      }
    }
    for (int s : op.sig.target_slot) {
      if (s >= 0) slots[t.storage[s]]->written = true;
    }
    if (op.call.random) {
      op.call.random = generator;
      op.random = {generator->seed, generator->offset + (t.op.random.offset - rg.start_offset)};
    }
    note_recorded(g, op);
  }
  cut_if_due(g, device);
  if (eager_mode() == EagerMode::Debug) flush(device, FlushReason::Synchronize);
}

std::shared_ptr<CapturedGraph> end_capture(int device, const std::vector<TensorView>& inputs,
                                           const std::vector<TensorView>& outputs) {
  std::lock_guard<EngineMutex> lock(Backend::get().mutex());
  Graph& g = graph_of(device);
  auto cg = std::make_shared<CapturedGraph>();
  cg->device = device;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorView& in = inputs[k];
    cg->inputs.push_back(in);
    cg->inputs.back().slot = nullptr;
    cg->input_nbytes.push_back(in.slot->nbytes);
    cg->input_had_buffer.push_back(holds_buffer(*in.slot));
    cg->input_alias.push_back(first_sharing_storage(inputs, k));
    std::optional<Bounds>& bounds = cg->input_bounds.emplace_back(in.slot->bounds);
    if (bounds) bounds->alive = nullptr;
  }
  std::string problem = g.broken;
  bool for_device = std::all_of(inputs.begin(), inputs.end(),
                                [&](const TensorView& v) { return v.slot->device == device; });
  if (!for_device) problem = "its inputs are on several devices";
  g.capturing = false;
  if (!g.capture_alone) {
    // The recorded work stays pending, to run with what follows it.
    if (problem.empty()) problem = record_graph(*cg, g, inputs, outputs);
    cg->random_consumed = g.generator->offset - g.start_offset;
    g.generator = nullptr;
    if (problem == kBoundedCapture) throw CaptureAlone(problem);
    if (!problem.empty()) throw CaptureError(problem);
    cut_if_due(g, device);
    if (eager_mode() == EagerMode::Debug) flush(device, FlushReason::Synchronize);
    return cg;
  }
  flush_graph(device, FlushReason::Synchronize,
              [&](const Program* program, const std::vector<ProgramOp>& ops) {
                if (problem.empty())
                  problem = describe_capture(*cg, g, program, ops, inputs, outputs);
              });
  cg->random_consumed = g.generator->offset - g.start_offset;
  g.generator = nullptr;
  if (!problem.empty()) throw CaptureError(problem);
  return cg;
}

}  // namespace torch_tpu::engine
