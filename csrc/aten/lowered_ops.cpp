// Every operator with a lowering rule runs through one boxed kernel: it reads
// the dispatcher stack against the operator's schema, asks PyTorch's meta
// kernel for the results' shapes, dtypes and errors (so messages and type
// promotion are PyTorch's own), and hands the engine an OpCall. In-place and
// out= variants are derived from the functional rule and write its results
// into their mutated arguments.
#include "aten/lowered_ops.h"

#include <ATen/native/Resize.h>
#include <c10/util/strides.h>

#include <memory>
#include <unordered_map>

#include "aten/argument_checks.h"
#include "aten/bounded.h"
#include "aten/cpu_fallback.h"
#include "aten/data_dependent.h"
#include "aten/device.h"
#include "aten/generator.h"
#include "aten/memory_overlap.h"
#include "aten/meta_errors.h"
#include "aten/tensor_bridge.h"
#include "aten/tensor_lists.h"
#include "engine/deferred.h"
#include "engine/executor.h"
#include "runtime/plugin.h"

namespace torch_tpu::aten {

namespace {

// What PyTorch's meta kernel says about a call's results.
using TensorMeta = ResultLayout;
struct MetaResult {
  ReturnLayouts returns;  // per return: its tensor(s)
  std::vector<bool> is_list;
  // Sizes the mutated arguments have after the call (out= tensors get resized).
  std::vector<std::vector<std::vector<int64_t>>> mutated_sizes;
  // The CPU's kernel is not defined for the call's dtypes (cpu_dtypes).
  std::optional<CpuRejection> cpu_rejects;
};
// Shared with the cache: a cache hit copies nothing.
using MetaPtr = std::shared_ptr<const MetaResult>;

struct Binding {
  const lower::Rule* rule = nullptr;
  std::string name;               // "aten::add.out"
  std::vector<size_t> rule_args;  // schema arguments passed to the rule
  std::vector<size_t> mutated;    // schema arguments written, in order
  std::vector<int> return_alias;  // per return: index into `mutated`, or -1
  int generator_arg = -1;
  OverlapRule overlap;
  // arange/range/linspace/logspace(..., out): an out with as many elements as
  // the result keeps its shape, as on the CPU.
  bool out_keeps_shape = false;
  bool has_tensor_inputs = false;  // else a factory: scalars may shape the result
  // linalg's *_ex ops: with check_errors set, a nonzero `info` raises, as on the CPU.
  int check_errors_arg = -1, info_return = -1;
  ArgumentRewrite rewrite = nullptr;
  ArgumentCheck argument_check = nullptr;
  // An out= variant's functional form (add for add.out).
  const struct Binding* functional = nullptr;
  std::optional<c10::OperatorHandle> functional_op;
  // Meta results by argument signature: the meta kernel runs once per signature.
  mutable std::mutex meta_mutex;
  mutable std::unordered_map<std::string, MetaPtr> meta_cache;
};

std::unordered_map<std::string, Binding>& bindings() {
  static std::unordered_map<std::string, Binding> table;
  return table;
}

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool is_write(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }

// Arguments some kernels write although their schema does not say so: the
// running statistics (running_mean, running_var) of native_batch_norm in
// training and of SyncBatchNorm's kernels.
bool written_without_annotation(const std::string& op, size_t arg) {
  if (op == "aten::native_batch_norm" || op == "aten::native_batch_norm.out" ||
      op == "aten::batch_norm_gather_stats" || op == "aten::batch_norm_gather_stats_with_counts") {
    return arg == 3 || arg == 4;
  }
  return op == "aten::batch_norm_update_stats" && (arg == 1 || arg == 2);
}

void init_binding(Binding& b, const c10::FunctionSchema& schema, const lower::Rule* rule,
                  const std::vector<size_t>& rule_args) {
  b.rule = rule;
  b.name = full_name(schema.operator_name());
  b.rule_args = rule_args;
  b.rewrite = find_argument_rewrite(b.name);
  b.argument_check = find_argument_check(b.name);
  b.overlap = overlap_rule(b.name);
  b.out_keeps_shape = b.name == "aten::arange.start_out" || b.name == "aten::range.out" ||
                      b.name == "aten::linspace.out" || b.name == "aten::logspace.out";
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_write(args[i]) || written_without_annotation(b.name, i)) b.mutated.push_back(i);
    if (args[i].name() == "check_errors") b.check_errors_arg = static_cast<int>(i);
    const auto& type = args[i].real_type();
    if (!is_write(args[i]) && (type->isSubtypeOf(*c10::TensorType::get()) ||
                               type->isSubtypeOf(*c10::OptionalType::ofTensor()) ||
                               type->isSubtypeOf(*c10::ListType::ofTensors()) ||
                               type->isSubtypeOf(*c10::ListType::ofOptionalTensors()))) {
      b.has_tensor_inputs = true;
    }
    if (args[i].type()->kind() == c10::TypeKind::OptionalType &&
        args[i].type()->castRaw<c10::OptionalType>()->getElementType()->kind() ==
            c10::TypeKind::GeneratorType) {
      b.generator_arg = static_cast<int>(i);
    }
  }
  for (const auto& ret : schema.returns()) {
    if (ret.name() == "info") b.info_return = static_cast<int>(b.return_alias.size());
    int alias = -1;
    if (ret.alias_info() && ret.alias_info()->isWrite()) {
      for (size_t m = 0; m < b.mutated.size(); ++m) {
        const auto* info = args[b.mutated[m]].alias_info();
        if (info && info->beforeSets() == ret.alias_info()->beforeSets()) {
          alias = static_cast<int>(m);
        }
      }
    }
    b.return_alias.push_back(alias);
  }
}

// ---------------------------------------------------------------- inputs

lower::Category category_of(const at::Tensor& t) {
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) return lower::Category::WrappedNumber;
  return t.dim() == 0 ? lower::Category::ZeroDim : lower::Category::Tensor;
}

// Python numbers promote as the default dtype of their kind.
ElementType wrapped_dtype(const c10::Scalar& s) {
  if (s.isBoolean()) return ElementType::Pred;
  if (s.isIntegral(false)) return ElementType::S64;
  if (s.isComplex()) {
    return element_type(c10::toComplexType(c10::typeMetaToScalarType(at::get_default_dtype())));
  }
  return element_type(c10::typeMetaToScalarType(at::get_default_dtype()));
}

engine::HostScalar host_scalar(const c10::Scalar& s, bool wide) {
  if (s.isBoolean()) return engine::HostScalar::of_bool(s.toBool());
  if (s.isIntegral(false)) return engine::HostScalar::of_int(s.toLong(), ElementType::S64);
  if (s.isComplex()) {
    auto c = s.toComplexDouble();
    return engine::HostScalar::of_complex(c.real(), c.imag(),
                                          wide ? ElementType::C128 : ElementType::C64);
  }
  return engine::HostScalar::of_double(s.toDouble(), wide ? ElementType::F64 : ElementType::F32);
}

struct CallBuilder {
  const Binding& binding;
  c10::DeviceIndex device = -1;
  bool wide = false;                     // the op computes in 64-bit floats: scalars travel as f64
  const BoundedPlan* bounded = nullptr;  // operands read at their bounds

  std::optional<engine::Input> tensor_input(const at::Tensor& t, const char* arg_name) {
    if (!t.defined()) return std::nullopt;
    engine::Input in;
    in.category = category_of(t);
    if (is_tpu(t)) {
      const engine::TensorView* at_bounds = bounded ? bounded->view(t) : nullptr;
      in.view = at_bounds ? *at_bounds : view_of(t);
      in.dtype = in.view.dtype;
      return in;
    }
    // CPU zero-dim tensors (and Python numbers wrapped as tensors) are scalars.
    c10::Scalar value = t.item();
    in.on_device = false;
    in.dtype = in.category == lower::Category::WrappedNumber ? wrapped_dtype(value)
                                                             : element_type(t.scalar_type());
    in.scalar = host_scalar(value, wide);
    return in;
  }

  engine::Input scalar_input(const c10::Scalar& s) {
    engine::Input in;
    in.on_device = false;
    in.category = lower::Category::WrappedNumber;
    in.dtype = wrapped_dtype(s);
    in.scalar = host_scalar(s, wide);
    return in;
  }

  engine::CallArg arg(const c10::Argument& schema_arg, const c10::IValue& v) {
    engine::CallArg a;
    const c10::TypePtr& type = schema_arg.real_type();
    c10::TypePtr elem = type;
    if (type->kind() == c10::TypeKind::OptionalType) {
      elem = type->castRaw<c10::OptionalType>()->getElementType();
    }
    const char* name = schema_arg.name().c_str();
    switch (elem->kind()) {
      case c10::TypeKind::TensorType:
        a.is_operand = true;
        a.inputs.push_back(v.isNone() ? std::nullopt : tensor_input(v.toTensor(), name));
        return a;
      case c10::TypeKind::FloatType:
        if (!binding.rule->float_operand || schema_arg.name() != binding.rule->float_operand) break;
        [[fallthrough]];
      case c10::TypeKind::NumberType:
        a.is_operand = true;
        a.inputs.push_back(v.isNone() ? std::nullopt
                                      : std::optional<engine::Input>(scalar_input(v.toScalar())));
        return a;
      case c10::TypeKind::ListType: {
        auto inner = elem->castRaw<c10::ListType>()->getElementType();
        bool optional_inner = inner->kind() == c10::TypeKind::OptionalType;
        if (optional_inner) inner = inner->castRaw<c10::OptionalType>()->getElementType();
        if (inner->kind() == c10::TypeKind::TensorType) {
          a.is_operand = a.is_list = true;
          for (const c10::IValue& item : v.toListRef()) {
            a.inputs.push_back(item.isNone() ? std::nullopt : tensor_input(item.toTensor(), name));
          }
          return a;
        }
        if (inner->kind() == c10::TypeKind::NumberType) {
          a.is_operand = a.is_list = true;
          for (const c10::IValue& item : v.toListRef())
            a.inputs.push_back(scalar_input(item.toScalar()));
          return a;
        }
        break;
      }
      default:
        break;
    }
    a.value = static_value(elem, v);
    return a;
  }

  static lower::Static static_value(const c10::TypePtr& type, const c10::IValue& v) {
    if (v.isNone()) return lower::None{};
    switch (type->kind()) {
      case c10::TypeKind::ScalarTypeType:
        return element_type(static_cast<at::ScalarType>(v.toInt()));
      case c10::TypeKind::LayoutType:
      case c10::TypeKind::MemoryFormatType:
      case c10::TypeKind::DeviceObjType:
      case c10::TypeKind::GeneratorType:
        return lower::None{};
      default:
        break;
    }
    if (v.isBool()) return v.toBool();
    if (v.isInt()) return v.toInt();
    if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
    if (v.isDouble()) return v.toDouble();
    if (v.isString()) return std::string(v.toStringRef());
    if (v.isIntList()) return v.toIntVector();
    if (v.isDoubleList()) return v.toDoubleVector();
    if (v.isBoolList()) {
      lower::BoolList out;
      for (bool b : v.toBoolList()) out.push_back(b);
      return out;
    }
    if (v.isList()) {  // SymInt[]
      lower::IntList out;
      for (const auto& item : v.toListRef()) {
        out.push_back(item.isSymInt() ? item.toSymInt().guard_int(__FILE__, __LINE__)
                                      : item.toInt());
      }
      return out;
    }
    TORCH_CHECK(false, "tpu: unsupported argument of type ", type->str());
  }
};

// ---------------------------------------------------------------- meta

// A meta tensor with the layout of `t`; tensors sharing a storage get meta
// tensors sharing one, so PyTorch's overlap checks see the aliasing.
struct MetaConverter {
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> storages;

  at::Tensor convert(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (!is_tpu(t)) {
      // Python numbers stay CPU tensors (PyTorch expects them there); other CPU
      // scalars become meta tensors, because some Python meta rules refuse to
      // mix devices.
      if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
      return at::empty({}, t.options().device(c10::kMeta));
    }
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    c10::Storage* storage = nullptr;
    for (auto& [key, s] : storages) {
      if (key == impl) storage = &s;
    }
    if (!storage) {
      storages.emplace_back(impl,
                            c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                                         c10::GetAllocator(c10::kMeta), true));
      storage = &storages.back().second;
    }
    auto meta = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(*storage), c10::DispatchKeySet(c10::DispatchKey::Meta), t.dtype());
    meta.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return meta;
  }

  // Factories (tril_indices, kaiser_window, ...) name the device: on tpu they
  // would allocate, and their meta kernels run real programs.
  c10::IValue convert(const c10::IValue& v) {
    return retargeted(v, [this](const at::Tensor& t) { return convert(t); }, c10::kMeta);
  }
};

// The values of a lazily conjugated or negated tensor, computed by lowered ops
// on its raw values (resolve_conj would dispatch back here).
at::Tensor values_of(const at::Tensor& t) {
  if (t.is_conj()) return at::_conj_physical(values_of(at::_conj(t)));
  if (t.is_neg()) return at::neg(at::_neg_view(t));
  return t;
}

// Some operators (mm, dot, clone, ...) receive lazily conjugated or negated
// inputs: PyTorch lets kernels fold those bits into BLAS calls. Rules see
// values, so inputs are resolved first.
void resolve_math_bits(torch::jit::Stack& stack, size_t num_args, const Binding& binding) {
  const size_t first = stack.size() - num_args;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& v = stack[first + i];
    if (!v.isTensor() ||
        std::find(binding.mutated.begin(), binding.mutated.end(), i) != binding.mutated.end()) {
      continue;
    }
    const at::Tensor& t = v.toTensor();
    if (t.defined() && (t.is_conj() || t.is_neg())) v = values_of(t);
  }
}

// ---------------------------------------------------------------- meta cache

// A signature of the arguments that determines what the meta kernel says:
// layouts, dtypes, static values, and which tensors share a storage (with
// their offsets). None when the call cannot be cached (it is then always
// checked).
std::optional<std::string> meta_key(const Binding& binding, const c10::FunctionSchema& schema,
                                    c10::ArrayRef<c10::IValue> args) {
  std::string key;
  key.reserve(256);  // most calls' keys fit: no regrowth
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  // Integer division and Python floats take the default dtype.
  put(c10::typeMetaToScalarType(c10::get_default_dtype()));
  auto put_ints = [&](c10::IntArrayRef v) {
    put(v.size());
    key.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  };
  c10::SmallVector<const c10::StorageImpl*, 8> storages;
  // Per tpu tensor: the first tensor with its storage, and its offset.
  c10::SmallVector<std::pair<int64_t, int64_t>, 8> aliasing;
  bool shared = false;
  auto put_tensor = [&](const at::Tensor& t) {
    if (!t.defined()) return put('u');
    if (!is_tpu(t)) {
      put('c');
      put(t.scalar_type());
      put(t.unsafeGetTensorImpl()->is_wrapped_number());
      put_ints(t.sizes());
      return;
    }
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    int first =
        static_cast<int>(std::find(storages.begin(), storages.end(), impl) - storages.begin());
    shared |= first < static_cast<int>(storages.size());
    storages.push_back(impl);
    aliasing.emplace_back(first, t.storage_offset());
    put('t');
    put(t.scalar_type());
    put(t.device().index());
    put_ints(t.sizes());
    put_ints(t.strides());
    put(t.storage().nbytes());
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    c10::TypePtr type = schema.arguments()[i].real_type();
    if (type->kind() == c10::TypeKind::OptionalType) {
      type = type->castRaw<c10::OptionalType>()->getElementType();
    }
    if (v.isTensor()) {
      put_tensor(v.toTensor());
    } else if (v.isTensorList()) {
      put('L');
      put(v.toTensorList().size());
      for (const at::Tensor& t : v.toTensorList()) put_tensor(t);
    } else if (v.isOptionalTensorList()) {
      put('O');
      for (const auto& item : v.toOptionalTensorList()) {
        std::optional<at::Tensor> t = item;
        if (t)
          put_tensor(*t);
        else
          put('n');
      }
    } else if (v.isNone()) {
      put('N');
    } else if (type->kind() == c10::TypeKind::NumberType) {
      // A Scalar argument is a runtime operand: only its kind shapes the call.
      c10::Scalar sc = v.toScalar();
      put('s');
      put(sc.type());
      // Factories (arange) derive their result's size from scalar values.
      if (!binding.has_tensor_inputs) {
        if (sc.isIntegral(false))
          put(sc.toLong());
        else if (sc.isFloatingPoint())
          put(sc.toDouble());
        else
          return std::nullopt;
      }
    } else if (v.isBool()) {
      put('b');
      put(v.toBool());
    } else if (v.isInt()) {
      put('i');
      put(v.toInt());
    } else if (v.isDouble()) {
      put('d');
      put(v.toDouble());
    } else if (v.isString()) {
      put('S');
      key += v.toStringRef();
      put('\0');
    } else if (v.isIntList()) {
      put('I');
      put_ints(v.toIntList().vec());
    } else if (v.isDoubleList()) {
      put('D');
      for (double d : v.toDoubleList()) put(d);
    } else if (v.isBoolList()) {
      put('B');
      for (bool b : v.toBoolList()) put(b);
    } else if (v.isList()) {
      put('l');
      for (const auto& item : v.toListRef()) {
        if (item.isScalar()) {
          put(item.toScalar().type());
        } else {
          return std::nullopt;
        }
      }
    } else if (v.isDevice()) {
      put('v');
      put(v.toDevice().index());
    } else if (v.isGenerator()) {
      put('g');
    } else {
      return std::nullopt;
    }
  }
  // Overlap checks depend on which tensors share a storage and where they
  // start in it.
  if (shared) {
    key.append(reinterpret_cast<const char*>(aliasing.data()),
               aliasing.size() * sizeof(aliasing[0]));
  }
  return key;
}

std::vector<std::optional<TensorMeta>> tensor_metas(const c10::IValue& v) {
  std::vector<std::optional<TensorMeta>> out;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined()) {
      out.push_back(std::nullopt);  // e.g. a gradient the output mask did not ask for
    } else {
      out.push_back(TensorMeta{t.sizes().vec(), t.strides().vec(), t.scalar_type()});
    }
  };
  if (v.isTensor()) {
    add(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) add(t);
  }
  return out;
}

// Runs PyTorch's meta kernel (which raises PyTorch's own errors for invalid
// calls); nullopt when the operator has no meta kernel.
// Sizes of each tensor of `v`.
std::vector<std::vector<int64_t>> sizes_of(const c10::IValue& v) {
  std::vector<std::vector<int64_t>> sizes;
  for_each_tensor(v, [&](const at::Tensor& t) { sizes.push_back(t.sizes().vec()); });
  return sizes;
}

// What an in-place operator with no meta kernel (_fused_adam_.tensor_lr)
// does to shapes: nothing. Its results are its mutated arguments, unresized.
// nullopt for other operators (out= arguments may be resized).
std::optional<MetaResult> in_place_meta(const Binding& binding, const c10::FunctionSchema& schema,
                                        c10::ArrayRef<c10::IValue> args) {
  for (size_t m : binding.mutated) {
    if (schema.arguments()[m].kwarg_only()) return std::nullopt;
  }
  MetaResult result;
  for (int alias : binding.return_alias) {
    if (alias < 0) return std::nullopt;
    const c10::IValue& v = args[binding.mutated[alias]];
    result.is_list.push_back(!v.isTensor());
    result.returns.push_back(tensor_metas(v));
  }
  for (size_t m : binding.mutated) result.mutated_sizes.push_back(sizes_of(args[m]));
  return result;
}

// PyTorch's meta kernels take a meta tensor for a CUDA one (device_hint) and
// raise CUDA's nondeterminism alerts (histc, median with indices); tpu's
// programs are deterministic, so the alerts are off while a meta kernel runs.
class MetaDeterminism {
 public:
  MetaDeterminism()
      : on_(at::globalContext().deterministicAlgorithms()),
        warn_only_(at::globalContext().deterministicAlgorithmsWarnOnly()) {
    if (on_) at::globalContext().setDeterministicAlgorithms(false, false);
  }
  ~MetaDeterminism() {
    if (on_) at::globalContext().setDeterministicAlgorithms(true, warn_only_);
  }

 private:
  bool on_, warn_only_;
};

const c10::OperatorName multi_margin_loss{"aten::multi_margin_loss", ""};

// Where PyTorch's meta kernel shapes a result otherwise than the CPU's kernel:
// its decomposition of multi_margin_loss gives the unreduced loss of one sample
// the shape [1] (atleast_2d's batch), the CPU's kernel the target's shape.
void reshape_as_cpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                    MetaResult& result) {
  if (op.operator_name() != multi_margin_loss || args[5].toInt() != at::Reduction::None) return;
  std::optional<TensorMeta>& loss = result.returns[0][0];
  loss->sizes = args[1].toTensor().sizes().vec();
  c10::DimVector strides = c10::contiguous_strides(loss->sizes);
  loss->strides.assign(strides.begin(), strides.end());
}

// `ask_cpu`: an error is raised as the CPU's kernel raises it (see
// rethrow_meta_error); false for stand-ins of the call that are not the user's.
std::optional<MetaResult> run_meta(const Binding& binding, const c10::OperatorHandle& op,
                                   c10::ArrayRef<c10::IValue> args, bool ask_cpu) {
  MetaConverter meta;
  torch::jit::Stack meta_stack;
  for (const c10::IValue& v : args) meta_stack.push_back(meta.convert(v));
  // The generator never shapes results, and some meta kernels (exponential_'s
  // reference) refuse any generator.
  if (binding.generator_arg >= 0) meta_stack[binding.generator_arg] = c10::IValue();
  std::vector<c10::IValue> mutated;  // the meta stand-ins of written arguments
  for (size_t m : binding.mutated) mutated.push_back(meta_stack[m]);
  try {
    MetaDeterminism deterministic_meta;
    QuietMetaResizes quiet;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const c10::NotImplementedError&) {
    return in_place_meta(binding, op.schema(), args);
  } catch (...) {
    rethrow_meta_error(std::current_exception(), op, ask_cpu ? args : c10::ArrayRef<c10::IValue>());
  }
  MetaResult result;
  for (const c10::IValue& r : meta_stack) {
    result.is_list.push_back(!r.isTensor());
    result.returns.push_back(tensor_metas(r));
  }
  for (const c10::IValue& v : mutated) result.mutated_sizes.push_back(sizes_of(v));
  reshape_as_cpu(op, args, result);
  return result;
}

// Null when the operator has no meta kernel.
MetaPtr meta_results(const Binding& binding, const c10::OperatorHandle& op,
                     c10::ArrayRef<c10::IValue> args, bool ask_cpu = true) {
  std::optional<std::string> key = meta_key(binding, op.schema(), args);
  if (key) {
    std::lock_guard<std::mutex> lock(binding.meta_mutex);
    auto it = binding.meta_cache.find(*key);
    if (it != binding.meta_cache.end()) return it->second;
  }
  std::optional<MetaResult> result = run_meta(binding, op, args, ask_cpu);
  if (!result) return nullptr;
  // Random ops that draw from the CPU's default generator are not probed: the
  // probe would move it; nor rules that take the dtypes CUDA's kernels take.
  const lower::Rule* rule = binding.rule;
  if (rule && !rule->cuda_dtypes && !(rule->random && binding.generator_arg < 0)) {
    CpuDtypes cpu = cpu_dtypes(op, args);
    result->cpu_rejects = std::move(cpu.rejection);
    for (size_t r = 0; r < cpu.result_dtypes.size() && r < result->returns.size(); ++r) {
      for (size_t k = 0; k < cpu.result_dtypes[r].size() && k < result->returns[r].size(); ++k) {
        if (result->returns[r][k]) result->returns[r][k]->dtype = cpu.result_dtypes[r][k];
      }
    }
  }
  auto shared = std::make_shared<const MetaResult>(std::move(*result));
  if (key) {
    std::lock_guard<std::mutex> lock(binding.meta_mutex);
    binding.meta_cache.emplace(std::move(*key), shared);
  }
  return shared;
}

// ---------------------------------------------------------------- kernel

// TorchScript passes a `Tensor?[]` argument as a list of IValues; the rest
// of the kernel (and the CPU's) reads a list of optional tensors.
void type_tensor_lists(torch::jit::Stack& stack, const c10::FunctionSchema& schema) {
  const size_t num_args = schema.arguments().size();
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& v = stack[stack.size() - num_args + i];
    if (!v.isList() || v.isOptionalTensorList() || v.isTensorList()) continue;
    if (!schema.arguments()[i].real_type()->isSubtypeOf(*c10::ListType::ofOptionalTensors())) {
      continue;
    }
    c10::List<std::optional<at::Tensor>> typed;
    for (const c10::IValue& item : v.toListRef()) {
      typed.push_back(item.isNone() ? std::nullopt : std::optional<at::Tensor>(item.toTensor()));
    }
    v = typed;
  }
}

// TensorIterator lays out an out= tensor it resizes as the functional form's
// result (a permutation of its inputs' layout); PyTorch's meta kernels for the
// out= forms make it contiguous.
void lay_out_like_functional(const Binding& binding, c10::ArrayRef<c10::IValue> args, size_t m,
                             const at::Tensor& out) {
  if (!binding.functional || out.numel() == 0) return;
  MetaPtr meta = meta_results(*binding.functional, *binding.functional_op,
                              args.slice(0, binding.rule_args.size()));
  if (!meta || m >= meta->returns.size() || meta->is_list[m] || !meta->returns[m].at(0)) return;
  const TensorMeta& result = *meta->returns[m][0];
  const int64_t itemsize = static_cast<int64_t>(out.dtype().itemsize());
  if (out.sizes() != c10::IntArrayRef(result.sizes) ||
      static_cast<int64_t>(at::detail::computeStorageNbytes(result.sizes, result.strides,
                                                            itemsize)) != out.numel() * itemsize) {
    return;  // not a dense layout of the same elements
  }
  out.as_strided_(result.sizes, result.strides);
}

// An out= call whose out tensors differ in dtype from its functional form's
// results computes that form and casts it into out, as TensorIterator's out=
// kernels do: out's dtype never changes the computation (two float16 33000s
// add to inf in a float64 out too); so do outs with a conjugate or negative
// bit. False when the dtypes agree, the common case, which the rule writes
// into out directly.
bool computed_apart_from_out(const Binding& binding, torch::jit::Stack* stack,
                             c10::ArrayRef<c10::IValue> args) {
  if (!binding.functional) return false;
  const size_t n = binding.rule_args.size();
  MetaPtr meta = meta_results(*binding.functional, *binding.functional_op, args.slice(0, n));
  if (!meta || meta->returns.size() != binding.mutated.size()) return false;
  for (int alias : binding.return_alias) {
    if (alias < 0) return false;
  }
  bool differs = false;
  for (size_t m = 0; m < binding.mutated.size(); ++m) {
    const c10::IValue& out = args[binding.mutated[m]];
    if (!out.isTensor() || meta->is_list[m] || !meta->returns[m].at(0)) return false;
    const at::Tensor& o = out.toTensor();
    // An out= view with a conjugate or negative bit (the linalg ops' Conjugate and
    // Negative dispatch falls through to here) takes its values through copy_.
    differs |= o.scalar_type() != meta->returns[m][0]->dtype || o.is_conj() || o.is_neg();
  }
  if (!differs) return false;
  for (size_t m = 0; m < binding.mutated.size(); ++m) {
    at::ScalarType from = meta->returns[m][0]->dtype;
    at::ScalarType to = args[binding.mutated[m]].toTensor().scalar_type();
    TORCH_CHECK(at::canCast(from, to), "result type ", from,
                " can't be cast to the desired output type ", to);
  }
  torch::jit::Stack functional(args.begin(), args.begin() + n);
  binding.functional_op->callBoxed(functional);
  std::vector<c10::IValue> outs;
  for (size_t m = 0; m < binding.mutated.size(); ++m) {
    at::Tensor out = args[binding.mutated[m]].toTensor();
    const at::Tensor& result = functional.at(m).toTensor();
    if (out.sizes() != result.sizes()) {
      at::native::resize_output(out, result.sizes());
      lay_out_like_functional(binding, args, m, out);
    }
    out.copy_(result);
    outs.emplace_back(out);
  }
  torch::jit::drop(*stack, args.size());
  for (int alias : binding.return_alias) stack->push_back(outs.at(alias));
  return true;
}

// "aten::_linalg_solve_ex.result" -> the CPU's "linalg.solve_ex: The diagonal element 2 is zero..."
void check_linalg_errors(const std::string& op, const at::Tensor& info) {
  std::string api = op.substr(6, op.find('.', 6) - 6);  // past "aten::"
  if (api[0] == '_') api.erase(0, 1);
  if (api.rfind("linalg_", 0) == 0) api[6] = '.';
  at::_linalg_check_errors(info, api, /*is_matrix=*/info.dim() == 0);
}

const c10::OperatorName abs_out{"aten::abs", "out"};

// The binding of `op`, found by the address of its schema: a lookup by name
// would build the name's string for every op run.
const Binding& binding_of(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const c10::FunctionSchema*, const Binding*> by_schema;
  const c10::FunctionSchema* schema = &op.schema();
  auto it = by_schema.find(schema);
  if (it != by_schema.end()) return *it->second;
  const Binding& binding = bindings().at(full_name(op.operator_name()));
  by_schema.emplace(schema, &binding);
  return binding;
}

void lowered_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Binding& binding = binding_of(op);
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  type_tensor_lists(*stack, schema);
  if (binding.rewrite) binding.rewrite(*stack, num_args);
  resolve_math_bits(*stack, num_args, binding);
  auto args = torch::jit::last(*stack, num_args);
  // The CPU's checks of the arguments first: an op's own words for mixed devices
  // (indexing, block_diag) come before the generic device check, as on CUDA.
  if (binding.argument_check) binding.argument_check(args);

  // Device of the op; CPU tensors are only allowed as zero-dim scalars.
  c10::DeviceIndex device = -1;
  bool wide = false;
  for (size_t i = 0; i < num_args; ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (is_tpu(t)) {
        if (device < 0) device = t.device().index();
        TORCH_CHECK(t.device().index() == device,
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, tpu:",
                    static_cast<int>(device), " and ", t.device(), "! (when checking argument ",
                    schema.arguments()[i].name(), " in method ", binding.name, ")");
        at::ScalarType st = t.scalar_type();
        wide |= st == at::kDouble || st == at::kComplexDouble;
      } else {
        TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(),
                    "Expected all tensors to be on the same device, but got ",
                    schema.arguments()[i].name(), " is on ", t.device(),
                    ", different from other tensors on tpu (when checking argument in method ",
                    binding.name, ")");
      }
    });
  }
  if (device < 0) device = current_device();

  // PyTorch's meta kernel validates the call and describes the results.
  // TensorIterator checks memory overlap before the types, as here.
  check_memory_overlap(binding.overlap, args, binding.mutated);
  // PyTorch's reference abs wants out= of the result's exact dtype; ATen's
  // kernel casts |z| into a complex out too.
  if (op.operator_name() == abs_out && computed_apart_from_out(binding, stack, args)) return;
  MetaPtr meta = meta_results(binding, op, args);
  if (!meta) {
    cpu_fallback(op, stack);
    return;
  }
  if (meta->cpu_rejects) meta->cpu_rejects->raise();
  if (computed_apart_from_out(binding, stack, args)) return;

  // out= tensors take the sizes the meta kernel gave them, as PyTorch's out=
  // kernels resize them. An in-place op never resizes `self` (PyTorch's
  // reference meta kernels would, with a deprecation warning).
  for (size_t m = 0; m < binding.mutated.size(); ++m) {
    const bool in_place = !schema.arguments()[binding.mutated[m]].kwarg_only();
    size_t k = 0;
    for_each_tensor(args[binding.mutated[m]], [&](const at::Tensor& t) {
      const auto& sizes = meta->mutated_sizes[m].at(k++);
      if (t.sizes() == c10::IntArrayRef(sizes)) return;
      if (binding.out_keeps_shape && t.numel() == c10::multiply_integers(sizes)) return;
      TORCH_CHECK(!in_place, "output with shape ", t.sizes(), " doesn't match the broadcast shape ",
                  c10::IntArrayRef(sizes));
      at::native::resize_output(t, sizes);  // warns as the CPU does, on every call
      lay_out_like_functional(binding, args, m, t);
    });
  }

  // Operands of bounded varying size: the op runs at their bounds when it can.
  std::optional<BoundedPlan> bounded =
      plan_bounded(op, args, meta->returns, binding.mutated, binding.return_alias,
                   [&](c10::ArrayRef<c10::IValue> stand_in) -> std::optional<ReturnLayouts> {
                     try {
                       MetaPtr m = meta_results(binding, op, stand_in, /*ask_cpu=*/false);
                       return m ? std::optional<ReturnLayouts>(m->returns) : std::nullopt;
                     } catch (const std::exception&) {
                       return std::nullopt;
                     }
                   });

  // Results: the mutated arguments, or new tensors shaped like the meta
  // results.
  c10::SmallVector<at::Tensor, 4> targets;
  c10::SmallVector<c10::IValue, 2> returns;
  auto target_mutated = [&](size_t m) {
    for_each_tensor(args[binding.mutated[m]], [&](const at::Tensor& t) { targets.push_back(t); });
  };
  c10::SmallVector<bool, 4> mutated_returned(binding.mutated.size(), false);
  for (size_t r = 0; r < binding.return_alias.size(); ++r) {
    int alias = binding.return_alias[r];
    const auto& metas = meta->returns[r];
    if (alias >= 0) {
      mutated_returned[alias] = true;
      target_mutated(alias);
      returns.push_back(args[binding.mutated[alias]]);
      continue;
    }
    auto fresh = [&](size_t k) {
      const std::optional<TensorMeta>& m = metas.at(k);
      const engine::Bounds* bounds =
          bounded && bounded->results[r][k] ? &*bounded->results[r][k] : nullptr;
      at::Tensor t = !m       ? at::Tensor()
                     : bounds ? empty_bounded(m->sizes, m->strides, *bounds, m->dtype, device)
                              : empty_tpu(m->sizes, m->strides, m->dtype, device);
      targets.push_back(t);
      return t;
    };
    if (!meta->is_list[r]) {
      returns.emplace_back(fresh(0));
    } else {
      c10::List<at::Tensor> list;
      for (size_t k = 0; k < metas.size(); ++k) list.push_back(fresh(k));
      returns.emplace_back(list);
    }
  }
  for (size_t m = 0; m < binding.mutated.size(); ++m) {
    if (mutated_returned[m]) continue;
    target_mutated(m);
  }

  engine::OpCall call;
  call.name = &binding.name;
  call.rule = bounded && bounded->rule ? lower::find_rule(bounded->rule) : binding.rule;
  call.device = device;
  for (const at::Tensor& t : targets) wide |= t.defined() && t.scalar_type() == at::kDouble;
  CallBuilder builder{binding, device, wide, bounded ? &*bounded : nullptr};
  call.args.reserve(binding.rule_args.size());
  call.targets.reserve(targets.size());
  for (size_t i : binding.rule_args) {
    call.args.push_back(builder.arg(schema.arguments()[i], args[i]));
  }
  for (const at::Tensor& t : targets) {
    if (!t.defined()) {
      call.targets.emplace_back();
    } else if (bounded) {
      const engine::TensorView* written = bounded->view(t);
      call.targets.push_back(written ? *written : has_bounds(t) ? bounded_target(t) : view_of(t));
    } else {
      written_at_own_sizes(t);
      call.targets.push_back(view_of(t));
    }
  }
  std::optional<at::Generator> gen;
  std::unique_lock<std::mutex> gen_lock;
  if (binding.rule->random) {
    gen = binding.generator_arg >= 0 && !args[binding.generator_arg].isNone()
              ? args[binding.generator_arg].toGenerator()
              : default_generator(device);
    gen_lock = std::unique_lock<std::mutex>(gen->mutex());
    call.random = at::check_generator<TpuGenerator>(*gen)->state();
  }
  try {
    // The debug eager mode raises failed data checks at the op.
    raising_data_checks([&] { engine::execute(std::move(call)); });
  } catch (const lower::Unsupported& e) {
    if (gen_lock.owns_lock()) gen_lock.unlock();
    if (bounded) {  // the op runs again, at its operands' own sizes
      warn_per_size(op, args, e.what());
      WithoutBounds per_size;
      lowered_kernel(op, stack);
      return;
    }
    cpu_fallback(op, stack, e.what());
    return;
  } catch (const std::exception& e) {
    // A rule (std::logic_error) or the compiler (runtime::Error) refused the
    // call, an input no check above caught: where the CPU's kernel refuses it
    // too, its error says why. (Failed data checks are c10 errors by now.)
    if (!dynamic_cast<const std::logic_error*>(&e) && !dynamic_cast<const runtime::Error*>(&e)) {
      throw;
    }
    if (gen_lock.owns_lock()) gen_lock.unlock();
    raise_cpu_error(op, args);
    throw;
  }

  if (binding.check_errors_arg >= 0 && binding.info_return >= 0 &&
      args[binding.check_errors_arg].toBool()) {
    check_linalg_errors(binding.name, returns[binding.info_return].toTensor());
  }
  torch::jit::drop(*stack, num_args);
  for (auto& r : returns) stack->push_back(std::move(r));
}

}  // namespace

// ---------------------------------------------------------------- registration

namespace {

bool same_arguments(const std::vector<c10::Argument>& a, const std::vector<c10::Argument>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name() != b[i].name() || a[i].type()->str() != b[i].type()->str()) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> register_lowered_ops() {
  // One IMPL library per namespace: "aten", and "torch_tpu" for our own ops
  // (rule names "torch_tpu::op" name their namespace).
  static auto* libraries = new std::unordered_map<std::string, std::unique_ptr<torch::Library>>();
  auto library_for = [](const std::string& ns) {
    auto& library = (*libraries)[ns];
    if (!library) {
      library = std::make_unique<torch::Library>(torch::Library::IMPL, ns,
                                                 c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    }
    return library.get();
  };
  auto& dispatcher = c10::Dispatcher::singleton();
  std::unordered_map<std::string, std::vector<c10::OperatorName>> by_base;
  for (const auto& name : dispatcher.getAllOpNames()) by_base[name.name].push_back(name);

  std::vector<std::string> skipped;
  auto bind = [&](const c10::OperatorName& name, const lower::Rule* rule,
                  const std::optional<std::vector<c10::Argument>>& functional_args) {
    auto handle = dispatcher.findOp(name);
    if (!handle) return;
    std::string full = full_name(name);
    if (handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
      skipped.push_back(full);
      return;
    }
    const auto& schema = handle->schema();
    std::vector<size_t> rule_args;
    size_t n = functional_args ? functional_args->size() : schema.arguments().size();
    for (size_t i = 0; i < n; ++i) rule_args.push_back(i);
    init_binding(bindings()[full], schema, rule, rule_args);
    library_for(full.substr(0, full.find("::")))
        ->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&lowered_kernel>());
  };

  for (const std::string& rule_name : lower::rule_names()) {
    const lower::Rule* rule = lower::find_rule(rule_name);
    auto dot = rule_name.find('.');
    bool has_namespace = rule_name.find("::") != std::string::npos;
    std::string base = (has_namespace ? "" : "aten::") + rule_name.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : rule_name.substr(dot + 1);
    c10::OperatorName name{base, overload};
    auto functional = dispatcher.findOp(name);
    if (!functional) {
      skipped.push_back("(no such op) " + full_name(name));
      continue;
    }
    bind(name, rule, std::nullopt);
    if (base.back() == '_') continue;  // the rule is itself in-place
    const auto& fargs = functional->schema().arguments();
    // In-place variants take the same arguments; their overload name may
    // differ (pow_.Tensor is the in-place pow.Tensor_Tensor).
    for (const auto& inplace : by_base[base + "_"]) {
      auto handle = dispatcher.findOp(inplace);
      if (handle && same_arguments(handle->schema().arguments(), fargs)) {
        bind(inplace, rule, std::nullopt);
      }
    }
    for (const auto& candidate : by_base[base]) {
      auto handle = dispatcher.findOp(candidate);
      if (!handle || candidate == name) continue;
      std::vector<c10::Argument> non_out;
      for (const auto& a : handle->schema().arguments()) {
        if (!(a.kwarg_only() && is_write(a))) non_out.push_back(a);
      }
      bool is_out = non_out.size() < handle->schema().arguments().size();
      if (is_out && same_arguments(non_out, fargs)) {
        bind(candidate, rule, fargs);
        auto bound = bindings().find(full_name(candidate));
        auto functional_binding = bindings().find(full_name(name));
        // Reductions and scans (an argument `dim` or `dtype`) compute in out's
        // dtype on the CPU (sum of float32 into a float64 out accumulates in
        // float64): only the others compute apart from out.
        bool computes_in_out_dtype = false;
        for (const auto& a : fargs)
          computes_in_out_dtype |= a.name() == "dim" || a.name() == "dtype";
        if (!computes_in_out_dtype && bound != bindings().end() &&
            functional_binding != bindings().end()) {
          bound->second.functional = &functional_binding->second;
          bound->second.functional_op = *functional;
        }
      }
    }
  }
  return skipped;
}

std::vector<std::string> lowered_op_names() {
  std::vector<std::string> names;
  for (const auto& [name, binding] : bindings()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace torch_tpu::aten
