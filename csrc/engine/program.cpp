#include "engine/program.h"

#include <algorithm>
#include <cstdlib>
#include <list>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend.h"
#include "engine/data_checks.h"
#include "engine/metrics.h"
#include "engine/trace.h"
#include "engine/view_layout.h"
#include "lower/helpers.h"
#include "runtime/memory_maps.h"

namespace torch_tpu::engine {

namespace {

// ---------------------------------------------------------------- signature

class KeyWriter {
 public:
  explicit KeyWriter(std::string& out) : out_(out) {}
  template <class T>
  void put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_dims(const Dims& d) {
    put(static_cast<uint8_t>(d.size()));
    out_.append(reinterpret_cast<const char*>(d.data()), d.size() * sizeof(int64_t));
  }
  void put_str(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void put_static(const lower::Static& v) {
    put(static_cast<uint8_t>(v.index()));
    std::visit(
        [this](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, lower::None>) {
          } else if constexpr (std::is_same_v<T, std::string>) {
            put_str(x);
          } else if constexpr (std::is_same_v<T, lower::IntList>) {
            put_dims(x);
          } else if constexpr (std::is_same_v<T, lower::FloatList>) {
            put(static_cast<uint32_t>(x.size()));
            for (double d : x) put(d);
          } else if constexpr (std::is_same_v<T, lower::BoolList>) {
            put(static_cast<uint32_t>(x.size()));
            for (bool b : x) put(b);
          } else {
            put(x);
          }
        },
        v);
  }
  void put_view(const TensorView& v) {
    put(v.dtype);
    put_dims(v.sizes);
    // A dimension of size 1 is read at no stride: views differing there (x[:, -1]
    // of a growing x) share the program.
    put(static_cast<uint8_t>(v.strides.size()));
    for (size_t d = 0; d < v.strides.size(); ++d) put(v.sizes[d] == 1 ? int64_t{0} : v.strides[d]);
    put(v.offset == 0);
    put(static_cast<uint8_t>(v.follows.size()));
    if (!v.bounded()) return;
    put_dims(v.stored->bounds);
    for (bool varies : v.stored->varies) put(varies);
    for (int e : v.follows) put(static_cast<int8_t>(e));
    put_dims(v.shorter_by);
  }

 private:
  std::string& out_;
};

bool has_bounded_view(const OpCall& call) {
  for (const CallArg& arg : call.args) {
    for (const auto& in : arg.inputs) {
      if (in && in->on_device && in->view.bounded()) return true;
    }
  }
  for (const TensorView& t : call.targets) {
    if (t.bounded()) return true;
  }
  return false;
}

int slot_index(std::vector<SlotUse>& slots, StorageSlot* slot) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].slot == slot) return static_cast<int>(i);
  }
  slots.push_back({slot});
  return static_cast<int>(slots.size()) - 1;
}

// The op, its static arguments and each operand's kind and types; `put_input` adds what
// else keys an operand.
void put_call(KeyWriter& k, const OpCall& call,
              const std::function<void(const Input&)>& put_input) {
  k.put_str(*call.name);
  k.put(call.rule);
  for (const CallArg& arg : call.args) {
    k.put(static_cast<uint8_t>(arg.is_operand | (arg.is_list << 1)));
    if (!arg.is_operand) {
      k.put_static(arg.value);
      continue;
    }
    k.put(static_cast<uint32_t>(arg.inputs.size()));
    for (const auto& in : arg.inputs) {
      k.put(static_cast<uint8_t>(in ? 1 + in->on_device : 0));
      if (!in) continue;
      k.put(in->dtype);
      k.put(in->category);
      if (!in->on_device) k.put(in->scalar.type);
      put_input(*in);
    }
  }
}

}  // namespace

Signature signature(const OpCall& call, hlo::Precision precision) {
  Signature sig;
  // Most calls fit: the key and the lists then grow without reallocating (the
  // host's work per op is counted in mallocs).
  sig.key.reserve(512);
  sig.slots.reserve(4);
  sig.inputs.reserve(4);
  sig.input_slot.reserve(4);
  sig.target_slot.reserve(2);
  KeyWriter k(sig.key);
  put_call(k, call, [&](const Input& in) {
    sig.inputs.push_back(&in);
    if (!in.on_device) {
      sig.input_slot.push_back(-1);
      return;
    }
    int s = slot_index(sig.slots, in.view.slot);
    sig.slots[s].read = true;
    sig.input_slot.push_back(s);
    k.put(s);
    k.put_view(in.view);
  });
  for (const TensorView& t : call.targets) {
    if (!t.slot) {  // a result nobody asked for (e.g. a masked-out gradient)
      sig.target_slot.push_back(-1);
      k.put(-1);
      continue;
    }
    int s = slot_index(sig.slots, t.slot);
    sig.target_slot.push_back(s);
    k.put(s);
    k.put_view(t);
    ViewLayout layout = classify(t);
    bool whole = layout.kind == ViewLayout::Kind::Dense && layout.covers_storage;
    if (!whole && layout.kind != ViewLayout::Kind::Empty) {
      sig.slots[s].read = true;  // a partial write keeps the rest
    }
  }
  for (const SlotUse& use : sig.slots) {
    k.put(use.slot->nbytes);
    k.put(use.slot->element_type());
    k.put(use.read);
  }
  if (call.rule->precision) k.put(precision);
  if (call.group) k.put_dims(call.group.group->device_ids());
  return sig;
}

std::string shape_key(const OpCall& call) {
  std::string key;
  KeyWriter k(key);
  put_call(k, call, [&](const Input& in) {
    if (!in.on_device) return;
    k.put(in.view.dtype);
    k.put_dims(in.view.sizes);
  });
  for (const TensorView& t : call.targets) {
    k.put(t.dtype);
    k.put_dims(t.sizes);
  }
  return key;
}

std::vector<const StorageSlot*> storages_of(const Signature& sig) {
  std::vector<const StorageSlot*> storages;
  for (const SlotUse& use : sig.slots) storages.push_back(use.slot);
  return storages;
}

const std::string* interned(const std::string& name) {
  static auto* names = new std::unordered_set<std::string>();
  return &*names->insert(name).first;
}

// ---------------------------------------------------------------- builder

struct ProgramBuilder::State {
  hlo::Builder b;
  std::vector<const StorageSlot*> storages;
  // Current value of each storage: its initial buffer (a parameter), zeros
  // (never written) or what an emitted op wrote; created on first use.
  std::vector<std::optional<Value>> value;
  std::vector<int> param_of;  // storage -> its parameter, or -1
  std::vector<bool> written;
  // The storage's current value has static sizes even in a program with
  // bounded ones (a compacted result).
  std::vector<bool> static_value;
  std::vector<Param> params;
  int64_t first_random = -1;
  std::vector<int> final_write;  // see mark_outputs; empty: none marked
  struct Check {
    Value failed, value;
    int64_t id;
  };
  std::vector<Check> checks;             // of every op emitted, in order
  std::vector<int64_t> replica_devices;  // of the collectives' group
  int collectives = 0;

  Value param(const hlo::Shape& shape, Param p) {
    params.push_back(p);
    return b.parameter(shape);
  }

  // The sizes of the varying dimensions of the storage bounded view `v` reads
  // or writes, as operands (`source` InputSize or TargetSize).
  std::vector<std::optional<Value>> stored_sizes(const TensorView& v, Param::Source source, int op,
                                                 int index) {
    std::vector<std::optional<Value>> size(v.stored->bounds.size());
    for (size_t e = 0; e < size.size(); ++e) {
      if (!v.stored->varies[e]) continue;
      Param p{source, op, index, ElementType::S32};
      p.dim = static_cast<int>(e);
      size[e] = param({ElementType::S32, {}}, p);
    }
    return size;
  }

  // The storage's current value; `type` gives the zeros of a never-written one a type.
  Value& current(int s, ElementType type) {
    if (!value[s]) {
      const StorageSlot* slot = storages[s];
      if (slot->buffer) {
        ElementType t = slot->element_type();
        param_of[s] = static_cast<int>(params.size());
        value[s] = param({t, {static_cast<int64_t>(slot->nbytes) / element_size(t)}},
                         {Param::Source::Storage, 0, s, t});
      } else {
        value[s] = b.full({type, {static_cast<int64_t>(slot->nbytes) / element_size(type)}}, 0);
      }
    }
    return *value[s];
  }
};

ProgramBuilder::ProgramBuilder(std::vector<const StorageSlot*> storages)
    : state_(std::make_unique<State>()) {
  size_t n = storages.size();
  state_->storages = std::move(storages);
  state_->value.resize(n);
  state_->param_of.assign(n, -1);
  state_->written.assign(n, false);
  state_->static_value.assign(n, false);
}

ProgramBuilder::~ProgramBuilder() = default;

bool ProgramBuilder::written(int storage) const { return state_->written[storage]; }

void ProgramBuilder::mark_outputs(std::vector<int> final_write) {
  state_->final_write = std::move(final_write);
}

int64_t ProgramBuilder::emit(const ProgramOp& op, int index) {
  State& st = *state_;
  hlo::Builder& b = st.b;
  const OpCall& call = *op.call;
  const Signature& sig = *op.sig;
  if (call.group) {
    const std::vector<int64_t>& devices = call.group.group->device_ids();
    if (st.collectives > 0 && st.replica_devices != devices) {
      throw lower::Unsupported("collectives of two device groups in one program");
    }
    st.replica_devices = devices;
    st.collectives++;
  }

  // Operands.
  std::vector<lower::Arg> args;
  size_t next_input = 0;
  for (const CallArg& arg : call.args) {
    lower::Arg a;
    a.value = arg.value;
    a.is_operand = arg.is_operand;
    a.is_list = arg.is_list;
    for (const auto& in : arg.inputs) {
      if (!in) {
        a.operands.push_back(std::nullopt);
        continue;
      }
      int i = static_cast<int>(next_input++);
      lower::Operand operand;
      operand.dtype = in->dtype;
      operand.category = in->category;
      if (in->on_device) {
        const TensorView& v = in->view;
        ViewLayout layout = classify(v);
        std::optional<Value> offset;
        ElementType itype = index_type(v.storage_numel());
        if (layout.needs_offset()) {
          offset = st.param({itype, {}}, {Param::Source::InputOffset, index, i, itype});
        }
        Value flat = reinterpret(b, st.current(op.storage(sig.input_slot[i]), v.dtype), v.dtype);
        if (v.bounded()) {
          std::vector<std::optional<Value>> size =
              st.stored_sizes(v, Param::Source::InputSize, index, i);
          Value padded = read_view(b, uncompact(b, flat, *v.stored, size), v, layout, offset);
          operand.value = call.rule->prefix ? padded : set_valid_sizes(b, padded, v, size);
        } else {
          operand.value = read_view(b, flat, v, layout, offset);
        }
      } else {
        operand.value =
            st.param({in->scalar.type, {}}, {Param::Source::Scalar, index, i, in->scalar.type});
      }
      a.operands.push_back(operand);
    }
    args.push_back(std::move(a));
  }

  // Discarded results still get a type (that of the first kept one) so rules
  // may compute every result and let the program drop the unused ones.
  ElementType kept_type = ElementType::F32;
  for (const TensorView& t : call.targets) {
    if (t.slot) {
      kept_type = t.dtype;
      break;
    }
  }
  std::vector<hlo::Shape> expected;
  for (const TensorView& t : call.targets) {
    expected.push_back(t.slot ? hlo::Shape{t.dtype, t.sizes} : hlo::Shape{kept_type, {}});
  }
  lower::Context ctx(b, *call.name, op.precision, Backend::get().platform(), expected);
  if (call.rule->random) {
    ctx.set_rng_state(
        st.param({ElementType::U64, {2}}, {Param::Source::Random, index, 0, ElementType::U64}));
  }
  const int64_t loops_before = b.loops_and_sorts();
  std::vector<Value> results;
  try {
    results = call.rule->fn(ctx, lower::Args(std::move(args)));
  } catch (const std::invalid_argument&) {
    // Meta kernels do not check every shape (embedding_dense_backward's
    // gradient against its indices): operands that do not fit together at
    // the bounds show as a shape the builder refuses.
    if (!has_bounded_view(call)) throw;
    throw lower::Unsupported("its operands do not fit together at the bounds");
  }
  if (b.loops_and_sorts() != loops_before && has_bounded_view(call) && !call.rule->prefix) {
    throw lower::Unsupported("its lowering loops or sorts, which XLA's padder cannot size");
  }
  if (results.size() != call.targets.size()) {
    throw std::logic_error("lowering of " + *call.name + " returned " +
                           std::to_string(results.size()) + " results, expected " +
                           std::to_string(call.targets.size()));
  }

  // Write each result into its target view.
  for (size_t j = 0; j < call.targets.size(); ++j) {
    const TensorView& t = call.targets[j];
    if (!t.slot) continue;
    Value value = lower::convert(b, results[j], t.dtype);
    if (value.dims() != t.sizes) {
      throw std::logic_error("lowering of " + *call.name + " produced " +
                             hlo::to_string(value.shape) + " for result " + std::to_string(j) +
                             ", expected " + hlo::to_string(hlo::Shape{t.dtype, t.sizes}));
    }
    if (t.bounded()) {
      // The whole storage, its valid entries first (XLA's own compaction, a
      // reshape of the sized value, is many times slower).
      int s = op.storage(sig.target_slot[j]);
      st.value[s] = compact(
          b, value, t, st.stored_sizes(t, Param::Source::TargetSize, index, static_cast<int>(j)));
      st.static_value[s] = true;
      st.written[s] = true;
      continue;
    }
    ViewLayout layout = classify(t);
    if (layout.kind == ViewLayout::Kind::Empty) continue;
    int s = op.storage(sig.target_slot[j]);
    std::optional<Value> offset;
    ElementType itype = index_type(t.storage_numel());
    if (layout.needs_offset()) {
      offset =
          st.param({itype, {}}, {Param::Source::TargetOffset, index, static_cast<int>(j), itype});
    }
    if (layout.kind == ViewLayout::Kind::Dense && layout.covers_storage) {
      st.value[s] = write_view(b, value, t, layout, offset, value);
    } else {
      Value& old = st.current(s, t.dtype);
      ElementType kept = old.type();
      old = reinterpret(b, write_view(b, reinterpret(b, old, t.dtype), t, layout, offset, value),
                        kept);
    }
    st.written[s] = true;
    // A returned value is stored anyway. Left to itself, XLA recomputes an
    // elementwise value inside each later fusion that reads it (AdamW's
    // moments inside its parameter update), reading its inputs again and
    // keeping the old buffer alive past the in-place write, which then
    // costs a copy. Behind a barrier, later ops read the stored value.
    if (!st.final_write.empty() && st.final_write[s] == index) {
      st.value[s] = b.optimization_barrier({*st.value[s]})[0];
    }
  }
  for (const lower::DataCheck& check : ctx.checks()) {
    st.checks.push_back({check.failed, check.value, register_data_check(*call.name, check)});
  }
  if (st.first_random < 0) st.first_random = ctx.random_consumed();
  return ctx.random_consumed();
}

namespace {

// Programs whose values are all small and whose work is linear in them run in
// microseconds at any optimisation level, and XLA compiles them a third
// faster at level 0 (the fast options, backend.cpp). Measured on the CPU
// plugin: an elementwise chain of 1,000 elements ran as fast at level 0, one
// of 16,384 four times slower.
constexpr int64_t kFastCompileElements = 4096;

bool compiles_fast(const hlo::Builder& b) {
  return !b.has_superlinear_ops() && b.largest_value() <= kFastCompileElements;
}

}  // namespace

Program ProgramBuilder::finish(const std::string* name, const std::vector<bool>& keep) {
  State& st = *state_;
  Program program;
  program.name = name;
  std::vector<Value> outputs;
  for (size_t s = 0; s < st.storages.size(); ++s) {
    if (!st.written[s] || !keep[s]) continue;
    int out = static_cast<int>(outputs.size());
    // Results of a program with bounded dynamic sizes are returned padded, so
    // that their buffers have the static size of their storage.
    const bool sized = st.b.has_dynamic_sizes() && !st.static_value[s];
    outputs.push_back(sized ? st.b.static_size(*st.value[s]) : *st.value[s]);
    program.output_slots.push_back(static_cast<int>(s));
    int param = st.param_of[s];
    bool donate = param >= 0 && st.b.parameters()[param] == st.value[s]->shape;
    if (donate) st.b.alias_output(param, out);
    program.donor_param.push_back(donate ? param : -1);
  }
  if (!st.checks.empty()) {
    const hlo::Shape code_shape{ElementType::S64, {2}};
    program.checks_param = static_cast<int>(st.params.size());
    Value incoming = st.param(code_shape, {Param::Source::Checks, 0, 0, ElementType::S64});
    hlo::Builder& b = st.b;
    Value code = b.full(code_shape, 0);
    for (auto it = st.checks.rbegin(); it != st.checks.rend(); ++it) {
      Value reported =
          b.concatenate({b.reshape(b.constant(static_cast<double>(it->id), ElementType::S64), {1}),
                         b.reshape(lower::convert(b, it->value, ElementType::S64), {1})},
                        0);
      code = b.select(b.broadcast_in_dim(it->failed, {2}, {}), reported, code);
    }
    Value earlier = b.compare(b.reshape(b.slice(incoming, {0}, {1}, {1}), {}),
                              b.constant(0, ElementType::S64), hlo::Comparison::NE);
    code = b.select(b.broadcast_in_dim(earlier, {2}, {}), incoming, code);
    st.b.alias_output(program.checks_param, static_cast<int>(outputs.size()));
    program.donor_param.push_back(program.checks_param);
    outputs.push_back(code);
  }
  program.params = std::move(st.params);
  program.random_consumed = std::max<int64_t>(st.first_random, 0);
  program.replica_devices = st.replica_devices;
  program.collectives = st.collectives;
  const std::string text = st.b.module_text(outputs);
  program.text_hash = std::hash<std::string>()(text);
  program.executable = Backend::get().compile(text, compiles_fast(st.b), *name, st.replica_devices);
  return program;
}

// ---------------------------------------------------------------- cache

namespace {

// Compiled programs by key, least recently used first out. Bounded because
// every executable keeps its code mapped (on the CPU plugin three memory maps a
// kernel, 6 to 40 a program): a long process compiling ever new shapes would run
// out of maps (vm.max_map_count, 65530 by default), and allocations then fail
// anywhere (XLA aborts while compiling). TORCH_TPU_PROGRAM_CACHE_SIZE sets the
// bound (default 4096); and every kMapCheckInterval compiles, a process past half
// its mapping limit drops the least recently used quarter of the programs and
// keeps the bound there (a dropped program compiles again, from the persistent
// cache, if it is needed again).
class ProgramCache {
 public:
  ProgramCache() {
    const char* size = std::getenv("TORCH_TPU_PROGRAM_CACHE_SIZE");
    if (size && std::atoll(size) > 0) capacity_ = static_cast<size_t>(std::atoll(size));
  }

  const Program& get(const std::string& key, const std::function<Program()>& build) {
    auto it = programs_.find(key);
    if (it != programs_.end()) {
      metrics().cache_hits++;
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
    metrics().cache_misses++;
    Program program = build();
    if (++compiles_ % kMapCheckInterval == 0) keep_maps_in_bounds();
    order_.push_front(key);
    it = programs_.emplace(key, std::make_pair(std::move(program), order_.begin())).first;
    while (programs_.size() > capacity_) drop_oldest();
    return it->second.first;
  }

  bool contains(const std::string& key) const { return programs_.count(key) > 0; }

 private:
  static constexpr size_t kMapCheckInterval = 32;

  void drop_oldest() {
    programs_.erase(order_.back());
    order_.pop_back();
  }

  void keep_maps_in_bounds() {
    const int64_t limit = runtime::memory_map_limit();
    if (limit <= 0 || runtime::memory_maps() < limit / 2) return;
    // Never below kMapCheckInterval: maps that are not the programs' would
    // otherwise shrink the cache to nothing, dropping the program being added.
    capacity_ = std::max(programs_.size() - programs_.size() / 4, kMapCheckInterval);
    while (programs_.size() > capacity_) drop_oldest();
  }

  size_t compiles_ = 0;
  size_t capacity_ = 4096;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, std::pair<Program, std::list<std::string>::iterator>> programs_;
};

ProgramCache& program_cache() {
  // Leaked on purpose: executables must outlive every static destructor.
  static auto* cache = new ProgramCache();
  return *cache;
}

}  // namespace

const Program& cached_program(const std::string& key, const std::function<Program()>& build) {
  return program_cache().get(key, build);
}

bool has_program(const std::string& key) { return program_cache().contains(key); }

// ---------------------------------------------------------------- launch

HostScalar offset_scalar(int64_t offset, ElementType type) {
  HostScalar s;
  s.type = type;
  int32_t offset32 = static_cast<int32_t>(offset);
  std::memcpy(s.bytes,
              type == ElementType::S32 ? static_cast<const void*>(&offset32)
                                       : static_cast<const void*>(&offset),
              element_size(type));
  return s;
}

runtime::BufferPtr random_state_buffer(int device, uint64_t seed, uint64_t offset) {
  uint64_t state[2] = {seed, offset};
  return Backend::get().client().buffer_from_host(state, ElementType::U64, {2}, device);
}

runtime::Launch launch_with(const Program& program, int device,
                            std::vector<runtime::BufferPtr> params, const GroupRank& group) {
  TraceSpan span("tpu::launch", *program.name);
  Backend& backend = Backend::get();
  if (program.checks_param >= 0) params[program.checks_param] = backend.check_code(device);
  std::vector<runtime::Buffer*> inputs;
  inputs.reserve(params.size());
  for (const runtime::BufferPtr& buffer : params) inputs.push_back(buffer.get());
  // A donor's buffer held only here and by its storage: nobody else can
  // observe the donation.
  std::vector<int64_t> non_donatable;
  for (int param : program.donor_param) {
    if (param >= 0 && params[param].use_count() != 2) non_donatable.push_back(param);
  }
  runtime::Launch launch;
  if (program.replica_devices.empty()) {
    launch = backend.launch(*program.executable, device, inputs, non_donatable);
  } else {
    if (!group) throw std::logic_error(*program.name + ": a program with collectives has no group");
    launch = group.group->launch(program, group.rank, device, std::move(params), non_donatable);
    metrics().program_collectives += program.collectives;
  }
  if (program.checks_param >= 0) {
    backend.set_check_code(device, std::move(launch.outputs.back()));
    launch.outputs.pop_back();
  }
  return launch;
}

runtime::Launch launch_program(const Program& program, int device,
                               const std::vector<const StorageSlot*>& storages,
                               const std::vector<ProgramOp>& ops) {
  Backend& backend = Backend::get();
  std::vector<runtime::BufferPtr> params;
  params.reserve(program.params.size());
  for (const Param& param : program.params) {
    switch (param.source) {
      case Param::Source::Storage:
        params.push_back(storages[param.index]->buffer);
        break;
      case Param::Source::InputOffset:
      case Param::Source::TargetOffset: {
        const ProgramOp& op = ops[param.op];
        int64_t offset = param.source == Param::Source::InputOffset
                             ? op.sig->inputs[param.index]->view.offset
                             : op.call->targets[param.index].offset;
        HostScalar s = offset_scalar(offset, param.type);
        params.push_back(backend.scalar_buffer(device, s.type, s.bytes));
        break;
      }
      case Param::Source::Scalar:
        params.push_back(backend.scalar_buffer(
            device, param.type, ops[param.op].sig->inputs[param.index]->scalar.bytes));
        break;
      case Param::Source::Random: {
        const RandomState& r = ops[param.op].random;
        params.push_back(random_state_buffer(device, r.seed, r.offset));
        break;
      }
      case Param::Source::Checks:
        params.push_back(nullptr);  // launch_with's
        break;
      case Param::Source::InputSize:
      case Param::Source::TargetSize: {
        const int32_t size = stored_size(param, ops[param.op]);
        params.push_back(backend.scalar_buffer(device, ElementType::S32, &size));
        break;
      }
    }
  }
  GroupRank group;
  for (const ProgramOp& op : ops) {
    if (op.call->group) group = op.call->group;
  }
  return launch_with(program, device, std::move(params), group);
}

int32_t stored_size(const Param& param, const ProgramOp& op) {
  const TensorView& v = param.source == Param::Source::InputSize ? op.sig->inputs[param.index]->view
                                                                 : op.call->targets[param.index];
  return static_cast<int32_t>(v.stored->sizes[param.dim]);
}

// ---------------------------------------------------------------- HostScalar

HostScalar HostScalar::of_double(double v, ElementType type) {
  HostScalar s;
  s.type = type;
  if (type == ElementType::F64) {
    std::memcpy(s.bytes, &v, 8);
  } else {
    float f = static_cast<float>(v);
    std::memcpy(s.bytes, &f, 4);
    s.type = ElementType::F32;
  }
  return s;
}

HostScalar HostScalar::of_int(int64_t v, ElementType type) {
  HostScalar s;
  s.type = ElementType::S64;
  std::memcpy(s.bytes, &v, 8);
  return s;
}

HostScalar HostScalar::of_bool(bool v) {
  HostScalar s;
  s.type = ElementType::Pred;
  s.bytes[0] = v;
  return s;
}

HostScalar HostScalar::of_complex(double re, double im, ElementType type) {
  HostScalar s;
  s.type = type == ElementType::C128 ? ElementType::C128 : ElementType::C64;
  if (s.type == ElementType::C128) {
    std::memcpy(s.bytes, &re, 8);
    std::memcpy(s.bytes + 8, &im, 8);
  } else {
    float parts[2] = {static_cast<float>(re), static_cast<float>(im)};
    std::memcpy(s.bytes, parts, 8);
  }
  return s;
}

}  // namespace torch_tpu::engine
