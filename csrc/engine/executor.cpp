#include "engine/executor.h"

#include <atomic>
#include <cstdlib>
#include <functional>
#include <list>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend.h"
#include "engine/metrics.h"
#include "engine/view_layout.h"
#include "lower/helpers.h"

namespace torch_tpu::engine {

namespace {

std::atomic<int> g_precision{static_cast<int>(hlo::Precision::Default)};

// ---------------------------------------------------------------- signature

// The storages an op touches, each once (aliases share one program operand).
struct SlotUse {
  StorageSlot* slot;
  bool read = false;
};

struct Signature {
  std::vector<SlotUse> slots;
  std::vector<const Input*> inputs;  // flattened, in argument order
  std::vector<int> input_slot;       // slot index per device input (-1: scalar)
  std::vector<int> target_slot;
  std::string key;
};

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
    put_dims(v.strides);
    put(v.offset == 0);
  }

 private:
  std::string& out_;
};

int slot_index(std::vector<SlotUse>& slots, StorageSlot* slot) {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].slot == slot) return static_cast<int>(i);
  }
  slots.push_back({slot});
  return static_cast<int>(slots.size()) - 1;
}

Signature signature(const OpCall& call) {
  Signature sig;
  KeyWriter k(sig.key);
  k.put_str(call.name);
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
      sig.inputs.push_back(&*in);
      if (in->on_device) {
        int s = slot_index(sig.slots, in->view.slot);
        sig.slots[s].read = true;
        sig.input_slot.push_back(s);
        k.put(s);
        k.put_view(in->view);
      } else {
        sig.input_slot.push_back(-1);
        k.put(in->scalar.type);
      }
    }
  }
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
  if (call.rule->precision) k.put(g_precision.load());
  return sig;
}

// ---------------------------------------------------------------- plan

struct Param {
  enum class Source : uint8_t { Storage, InputOffset, TargetOffset, Scalar, Random };
  Source source;
  int index;
  ElementType type;  // offsets: index type
};

// Op names, kept for the life of the process: storages point at the name of
// the op that last wrote them (failures name it), which may outlive its plan.
const std::string* interned(const std::string& name) {
  static auto* names = new std::unordered_set<std::string>();
  return &*names->insert(name).first;
}

struct Plan {
  const std::string* op = nullptr;  // the name failures are reported under
  std::shared_ptr<runtime::Executable> executable;
  std::vector<Param> params;
  std::vector<int> written_slots;  // program output i -> slot index
  std::vector<int> donor_param;    // program output i -> aliased param or -1
  int64_t random_consumed = 0;
  std::string unsupported;  // the rule declined these inputs
};

Plan build(const OpCall& call, const Signature& sig) {
  Backend& backend = Backend::get();
  hlo::Builder b;
  Plan plan;
  plan.op = interned(call.name);
  auto add_param = [&](const hlo::Shape& shape, Param p) {
    plan.params.push_back(p);
    return b.parameter(shape);
  };

  // Current value of each storage: a parameter, zeros (never written), or
  // what this op wrote.
  std::vector<std::optional<Value>> storage(sig.slots.size());
  std::vector<int> storage_param(sig.slots.size(), -1);
  auto first_dtype = [&](int s) {
    for (size_t i = 0; i < sig.inputs.size(); ++i) {
      if (sig.input_slot[i] == s) return sig.inputs[i]->view.dtype;
    }
    for (size_t i = 0; i < call.targets.size(); ++i) {
      if (sig.target_slot[i] == s) return call.targets[i].dtype;
    }
    return ElementType::U8;
  };
  for (size_t s = 0; s < sig.slots.size(); ++s) {
    if (!sig.slots[s].read) continue;
    StorageSlot* slot = sig.slots[s].slot;
    if (slot->buffer) {
      hlo::Shape shape{slot->element_type(),
                       {static_cast<int64_t>(slot->nbytes) / element_size(slot->element_type())}};
      storage_param[s] = static_cast<int>(plan.params.size());
      storage[s] = add_param(shape, {Param::Source::Storage, static_cast<int>(s), shape.type});
    } else {
      ElementType t = first_dtype(static_cast<int>(s));
      storage[s] = b.full({t, {static_cast<int64_t>(slot->nbytes) / element_size(t)}}, 0);
    }
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
      size_t i = next_input++;
      lower::Operand op;
      op.dtype = in->dtype;
      op.category = in->category;
      if (in->on_device) {
        const TensorView& v = in->view;
        ViewLayout layout = classify(v);
        std::optional<Value> offset;
        ElementType itype = index_type(v.storage_numel());
        if (layout.needs_offset()) {
          offset = add_param({itype, {}}, {Param::Source::InputOffset, static_cast<int>(i), itype});
        }
        Value flat = reinterpret(b, *storage[sig.input_slot[i]], v.dtype);
        op.value = read_view(b, flat, v, layout, offset);
      } else {
        op.value = add_param({in->scalar.type, {}},
                             {Param::Source::Scalar, static_cast<int>(i), in->scalar.type});
      }
      a.operands.push_back(op);
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
  lower::Context ctx(b, call.name, static_cast<hlo::Precision>(g_precision.load()),
                     backend.platform(), expected);
  if (call.rule->random) {
    ctx.set_rng_state(
        add_param({ElementType::U64, {2}}, {Param::Source::Random, 0, ElementType::U64}));
  }
  std::vector<Value> results;
  try {
    results = call.rule->fn(ctx, lower::Args(std::move(args)));
  } catch (const lower::Unsupported& e) {
    plan.unsupported = e.what();
    return plan;
  }
  if (results.size() != call.targets.size()) {
    throw std::logic_error("lowering of " + call.name + " returned " +
                           std::to_string(results.size()) + " results, expected " +
                           std::to_string(call.targets.size()));
  }
  plan.random_consumed = ctx.random_consumed();

  // Write each result into its target view.
  std::vector<bool> written(sig.slots.size(), false);
  std::vector<ElementType> written_type(sig.slots.size());
  for (size_t j = 0; j < call.targets.size(); ++j) {
    const TensorView& t = call.targets[j];
    if (!t.slot) continue;
    Value value = lower::convert(b, results[j], t.dtype);
    if (value.dims() != t.sizes) {
      throw std::logic_error("lowering of " + call.name + " produced " +
                             hlo::to_string(value.shape) + " for result " + std::to_string(j) +
                             ", expected " + hlo::to_string(hlo::Shape{t.dtype, t.sizes}));
    }
    int s = sig.target_slot[j];
    ViewLayout layout = classify(t);
    if (layout.kind == ViewLayout::Kind::Empty) continue;
    std::optional<Value> offset;
    ElementType itype = index_type(t.storage_numel());
    if (layout.needs_offset()) {
      offset = add_param({itype, {}}, {Param::Source::TargetOffset, static_cast<int>(j), itype});
    }
    if (layout.kind == ViewLayout::Kind::Dense && layout.covers_storage) {
      storage[s] = write_view(b, value, t, layout, offset, value);
    } else {
      ElementType kept = storage[s]->type();
      Value old = reinterpret(b, *storage[s], t.dtype);
      storage[s] = reinterpret(b, write_view(b, old, t, layout, offset, value), kept);
    }
    written[s] = true;
  }

  std::vector<Value> outputs;
  for (size_t s = 0; s < sig.slots.size(); ++s) {
    if (!written[s]) continue;
    int out = static_cast<int>(outputs.size());
    outputs.push_back(*storage[s]);
    plan.written_slots.push_back(static_cast<int>(s));
    int param = storage_param[s];
    bool donate = param >= 0 && b.parameters()[param] == storage[s]->shape;
    if (donate) b.alias_output(param, out);
    plan.donor_param.push_back(donate ? param : -1);
  }
  plan.executable = backend.compile(b.module_text(outputs), /*fast=*/true);
  return plan;
}

// Compiled plans by signature, least recently used first out. Bounded because
// every executable keeps its code mapped (three memory maps each on the CPU
// plugin): a long process compiling ever new shapes would run out of maps
// (vm.max_map_count, 65530 by default) and LLVM fails to allocate.
// TORCH_TPU_PROGRAM_CACHE_SIZE sets the bound (default 4096).
class PlanCache {
 public:
  PlanCache() {
    const char* size = std::getenv("TORCH_TPU_PROGRAM_CACHE_SIZE");
    if (size && std::atoll(size) > 0) capacity_ = static_cast<size_t>(std::atoll(size));
  }

  // The plan for `key`, built by `build` on a miss.
  const Plan& get(const std::string& key, const std::function<Plan()>& build) {
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      metrics().cache_hits++;
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
    metrics().cache_misses++;
    Plan plan = build();
    order_.push_front(key);
    it = plans_.emplace(key, std::make_pair(std::move(plan), order_.begin())).first;
    if (plans_.size() > capacity_) {
      plans_.erase(order_.back());
      order_.pop_back();
    }
    return it->second.first;
  }

 private:
  size_t capacity_ = 4096;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, std::pair<Plan, std::list<std::string>::iterator>> plans_;
};

// Leaked on purpose: executables must outlive every static destructor.
PlanCache& plans() {
  static auto* cache = new PlanCache();
  return *cache;
}

}  // namespace

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

// ---------------------------------------------------------------- execute

void set_precision(hlo::Precision p) { g_precision = static_cast<int>(p); }
hlo::Precision precision() { return static_cast<hlo::Precision>(g_precision.load()); }

void execute(const OpCall& call) {
  Backend& backend = Backend::get();
  std::lock_guard<std::recursive_mutex> lock(backend.mutex());
  Signature sig = signature(call);
  for (const SlotUse& use : sig.slots) {
    if (use.slot->device != call.device) {
      throw std::invalid_argument(call.name +
                                  ": tensors on tpu:" + std::to_string(use.slot->device) +
                                  " and tpu:" + std::to_string(call.device) + " in one op");
    }
  }

  const Plan& plan = plans().get(sig.key, [&] { return build(call, sig); });
  if (!plan.unsupported.empty()) throw lower::Unsupported(plan.unsupported);

  std::vector<runtime::BufferPtr> held;
  std::vector<runtime::Buffer*> inputs;
  std::vector<bool> donatable(plan.params.size(), false);
  for (size_t p = 0; p < plan.params.size(); ++p) {
    const Param& param = plan.params[p];
    runtime::BufferPtr buffer;
    switch (param.source) {
      case Param::Source::Storage:
        // Only the slot holds it: nobody else can observe the donation.
        donatable[p] = sig.slots[param.index].slot->buffer.use_count() == 1;
        buffer = sig.slots[param.index].slot->buffer;
        break;
      case Param::Source::InputOffset:
      case Param::Source::TargetOffset: {
        int64_t offset = param.source == Param::Source::InputOffset
                             ? sig.inputs[param.index]->view.offset
                             : call.targets[param.index].offset;
        int32_t offset32 = static_cast<int32_t>(offset);
        buffer = backend.scalar_buffer(call.device, param.type,
                                       param.type == ElementType::S32
                                           ? static_cast<const void*>(&offset32)
                                           : static_cast<const void*>(&offset));
        break;
      }
      case Param::Source::Scalar:
        buffer =
            backend.scalar_buffer(call.device, param.type, sig.inputs[param.index]->scalar.bytes);
        break;
      case Param::Source::Random: {
        uint64_t state[2] = {call.random->seed, call.random->offset};
        buffer = backend.client().buffer_from_host(state, ElementType::U64, {2}, call.device);
        call.random->offset += plan.random_consumed;
        break;
      }
    }
    inputs.push_back(buffer.get());
    held.push_back(std::move(buffer));
  }
  std::vector<int64_t> non_donatable;
  for (int param : plan.donor_param) {
    if (param >= 0 && !donatable[param]) non_donatable.push_back(param);
  }

  runtime::Launch launch = backend.launch(*plan.executable, call.device, inputs, non_donatable);
  for (size_t i = 0; i < plan.written_slots.size(); ++i) {
    StorageSlot* slot = sig.slots[plan.written_slots[i]].slot;
    slot->buffer = std::move(launch.outputs[i]);
    slot->producer = plan.op;
  }
  held.clear();
  backend.track(call.device, std::move(launch.done), call.name, plan.executable);
}

}  // namespace torch_tpu::engine
