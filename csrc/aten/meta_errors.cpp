#include "aten/meta_errors.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aten/tensor_lists.h"

namespace torch_tpu::aten {

namespace {

namespace py = pybind11;

// A message given as a tuple of strings (addcdiv's meta kernel returns one to
// torch._check, which prints it) is their concatenation, as the CPU's
// TORCH_CHECK joins its arguments.
std::string message_of(py::handle value) {
  std::string message = py::str(value).cast<std::string>();
  if (message.rfind("('", 0) != 0) return message;
  try {
    py::object parts = py::module_::import("ast").attr("literal_eval")(message);
    if (!py::isinstance<py::tuple>(parts)) return message;
    std::string joined;
    for (py::handle part : parts) joined += py::str(part).cast<std::string>();
    return joined;
  } catch (const py::error_already_set&) {
    return message;
  }
}

// torch.float32 by its Python name ("float32").
c10::ScalarType scalar_type(const std::string& python_name) {
  py::object dtype = py::module_::import("torch").attr(python_name.c_str());
  TORCH_INTERNAL_ASSERT(THPDtype_Check(dtype.ptr()), python_name, " is not a dtype");
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

// Ops whose CPU kernels do not word an out= dtype they cannot cast into as
// TensorIterator does: linear algebra's checkLinalgCompatibleDtype (by the name
// it gives the op), or a structured kernel's own out check ("").
const char* own_out_check(const std::string& op) {
  static const std::unordered_map<std::string, const char*> names = {
      {"aten::cholesky_inverse", "cholesky_inverse"},
      {"aten::cholesky_solve", "cholesky_solve"},
      {"aten::linalg_pinv", "linalg.pinv"},
      {"aten::_linalg_eigh", ""},
  };
  auto it = names.find(op);
  return it == names.end() ? nullptr : it->second;
}

// The CPU's wording of an out= cast that is not allowed.
std::string cpu_wording(const std::string& message, const std::string& op) {
  static const std::regex unsafe_cast(
      "Attempting to cast from torch\\.(\\w+) to out tensor with dtype torch\\.(\\w+), but this "
      "can't be cast because it is not safe!");
  std::smatch m;
  if (!std::regex_search(message, m, unsafe_cast)) return message;
  c10::ScalarType from = scalar_type(m[1]), to = scalar_type(m[2]);
  const char* own = own_out_check(op);
  if (own && *own) {
    return std::string(own) + ": Expected result to be safely castable from " +
           c10::toString(from) + " dtype, but got result with dtype " + c10::toString(to);
  }
  if (own) {  // caffe2's type names: "float", "int", "c10::complex<float>"
    return "Expected out tensor to have dtype " +
           std::string(c10::scalarTypeToTypeMeta(from).name()) + ", but got " +
           std::string(c10::scalarTypeToTypeMeta(to).name()) + " instead";
  }
  return "result type " + std::string(c10::toString(from)) +
         " can't be cast to the desired output type " + c10::toString(to);
}

// The CPU's form of a meta kernel's Python error: AssertionError (linalg's
// squareCheckInputs) becomes RuntimeError, as the CPU's TORCH_CHECK raises it;
// a RuntimeError keeps its type, in the CPU's words. Nullopt: raise the error
// as it is.
std::optional<std::string> cpu_form(py::handle type, py::handle value, const std::string& op) {
  if (!type || !value) return std::nullopt;
  const bool assertion = PyErr_GivenExceptionMatches(type.ptr(), PyExc_AssertionError);
  const bool runtime = PyErr_GivenExceptionMatches(type.ptr(), PyExc_RuntimeError) &&
                       !PyErr_GivenExceptionMatches(type.ptr(), PyExc_NotImplementedError);
  if (!assertion && !runtime) return std::nullopt;
  std::string cpu = cpu_wording(message_of(value), op);
  if (runtime && cpu == py::str(value).cast<std::string>()) return std::nullopt;
  return cpu;
}

}  // namespace

namespace {

// Host copies of a call's tpu tensors with their layouts; tensors sharing a
// storage share one copy of it, and a tensor passed twice is one copy, so the
// CPU's overlap checks (by storage, and by identity) see the aliasing.
struct HostCopies {
  std::vector<std::pair<const c10::StorageImpl*, at::Tensor>> storages;
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> tensors;

  at::Tensor convert(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    for (const auto& [key, copy] : tensors) {
      if (key == t.unsafeGetTensorImpl()) return copy;
    }
    tensors.emplace_back(t.unsafeGetTensorImpl(), copy_of(t));
    return tensors.back().second;
  }

  at::Tensor copy_of(const at::Tensor& t) {
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    const at::Tensor* host = nullptr;
    for (const auto& [key, copy] : storages) {
      if (key == impl) host = &copy;
    }
    if (!host) {
      const int64_t elements = static_cast<int64_t>(t.storage().nbytes() / t.itemsize());
      at::Tensor whole = at::empty({0}, t.options()).set_(t.storage(), 0, {elements}, {1});
      // A fresh host allocation (a copy of no bytes has no address, which
      // overlap checks take for no memory).
      storages.emplace_back(impl, at::empty({elements}, t.options().device(c10::kCPU)));
      storages.back().second.copy_(whole);
      host = &storages.back().second;
    }
    at::Tensor copy = host->as_strided(t.sizes(), t.strides(), t.storage_offset());
    if (t.is_conj()) copy = copy.conj();
    if (t.is_neg()) copy = at::_neg_view(copy);
    return copy;
  }

  c10::IValue convert(const c10::IValue& v) {
    if (v.isGenerator()) return c10::IValue();  // a tpu generator; the CPU's default
    return retargeted(v, [this](const at::Tensor& t) { return convert(t); }, c10::kCPU);
  }
};

// Holds the warnings of a call, to give them only if the call raises.
class HeldWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { held_.push_back(warning); }
  void give(c10::WarningHandler* to) {
    for (const c10::Warning& w : held_) to->process(w);
  }

 private:
  std::vector<c10::Warning> held_;
};

// The dtype a message of AT_DISPATCH names ("..." not implemented for 'Int'),
// or "" for other errors.
std::string dispatch_dtype(const std::string& message) {
  static const std::regex not_implemented("\" not implemented for '([A-Za-z0-9]+)'");
  std::smatch m;
  return std::regex_search(message, m, not_implemented) ? m[1].str() : "";
}

// Half and BFloat16 kernels the CPU lacks, CUDA's have: tpu computes them
// natively, as CUDA does, and does not take the CPU's lack for an answer.
bool low_precision(const std::string& dtype) { return dtype == "Half" || dtype == "BFloat16"; }

// Whether a message is a kernel's refusal of one operand's dtype against
// another's: a `data_ptr<scalar_t>()` of the wrong type (nll_loss's Half class
// weights with Float inputs) or ATen's checkSameType (embedding_bag's
// per-sample weights). The dtypes alone decide it, on every device; but a
// CPU kernel that wants Half or BFloat16 where it finds Float wants the
// statistics it would have made in that dtype (layer norm's backward), which
// CUDA's kernels, as tpu's, make in float32.
bool mixed_dtypes(const std::string& message) {
  static const std::regex wrong_type(
      "expected scalar type ([A-Za-z0-9]+) but found ([A-Za-z0-9]+)");
  static const std::regex not_same(
      "Expected tensor for argument #[0-9]+ '[^']*' to have the same type as tensor for argument");
  std::smatch m;
  if (std::regex_search(message, m, wrong_type)) {
    return !(low_precision(m[1].str()) && m[2].str() == "Float");
  }
  return std::regex_search(message, not_same);
}

// Whether the CPU has PyTorch's own kernel for `op` to ask (torch_tpu's ops
// and CUDA-only ones have none).
bool has_cpu_kernel(const c10::OperatorHandle& op) {
  return op.schema().name().rfind("aten::", 0) == 0 &&
         op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
}

}  // namespace

void raise_cpu_error(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  if (!has_cpu_kernel(op)) return;
  // Reading the inputs is a synchronisation: an earlier op's failed data
  // check (a c10 error by now) is raised here, as at any other. Inputs the
  // device cannot give (the call's own execution failed) leave its error standing.
  torch::jit::Stack stack;
  HostCopies copies;
  try {
    for (const c10::IValue& v : args) stack.push_back(copies.convert(v));
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception&) {
    return;
  }
  c10::WarningHandler* previous = c10::WarningUtils::get_warning_handler();
  HeldWarnings held;
  try {
    c10::WarningUtils::WarningHandlerGuard guard(&held);
    op.callBoxed(stack);
  } catch (const c10::Error& e) {
    if (low_precision(dispatch_dtype(e.what_without_backtrace()))) return;
    held.give(previous);
    throw;
  } catch (...) {
    held.give(previous);
    throw;
  }
  // The CPU's result is sparse (embedding_bag's gradient with sparse=True): a
  // layout tpu does not have, which the meta kernel fails to describe otherwise.
  bool sparse = false;
  for (const c10::IValue& v : stack) {
    for_each_tensor(v, [&](const at::Tensor& t) { sparse |= t.defined() && t.is_sparse(); });
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!sparse, op.schema().name(),
                              ": its result is a sparse tensor, and sparse layouts are not "
                              "supported on tpu (embedding's and embedding_bag's sparse=True "
                              "gradients among them: use sparse=False)");
}

namespace {

// Drops the warnings of a probe.
class DroppedWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

// Stand-ins for a dtype probe on `device`: tensors of each tpu tensor's dtype
// and sizes (each size at most 2 with `shrink`), zero-filled on the CPU.
c10::IValue probe_stand_in(const c10::IValue& v, bool shrink, c10::Device device) {
  // A generator of its own: the probe leaves the CPU's default one as it was.
  if (v.isGenerator()) return device.is_cpu() ? at::detail::createCPUGenerator() : c10::IValue();
  auto stand_in = [&](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    std::vector<int64_t> sizes = t.sizes().vec();
    if (shrink) {
      for (int64_t& s : sizes) s = std::min<int64_t>(s, 2);
    }
    at::TensorOptions options = t.options().device(device);
    return device.is_cpu() ? at::zeros(sizes, options) : at::empty(sizes, options);
  };
  return retargeted(v, stand_in, device);
}

int64_t elements_of(c10::ArrayRef<c10::IValue> values) {
  int64_t n = 0;
  for (const c10::IValue& v : values) {
    for_each_tensor(v, [&](const at::Tensor& t) { n += t.defined() ? t.numel() : 0; });
  }
  return n;
}

// A probe is cheap: under 65536 elements in and out.
constexpr int64_t kProbeElements = 1 << 16;

// The dtypes and other static values that decide which of a kernel's dtype
// branches runs: tensors' dtypes (and whether they are empty: kernels return
// early for no elements), Python numbers' kinds, dtype, string and bool arguments.
std::string dtype_signature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::string key = op.schema().name() + "." + op.schema().overload_name();
  auto put = [&key](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  // Kernels take other paths (before their dtype dispatch) for 0-dim tensors
  // (cumsum copies one) and for none or one element.
  auto put_tensor = [&](const at::Tensor& t) {
    put(t.defined() ? t.scalar_type() : at::ScalarType::Undefined);
    put(t.defined() ? t.dim() : int64_t{-1});
    put(t.defined() ? std::min<int64_t>(t.numel(), 2) : int64_t{-1});
  };
  const auto& schema_args = op.schema().arguments();
  for (size_t i = 0; i < args.size() && i < schema_args.size(); ++i) {
    const c10::IValue& v = args[i];
    c10::TypePtr type = schema_args[i].real_type();
    if (type->kind() == c10::TypeKind::OptionalType) {
      type = type->castRaw<c10::OptionalType>()->getElementType();
    }
    put('a');
    if (v.isNone()) {
      put('n');
    } else if (v.isTensor() || v.isTensorList() || v.isOptionalTensorList()) {
      for_each_tensor(v, put_tensor);
    } else if (type->kind() == c10::TypeKind::ScalarTypeType) {
      put(v.toInt());  // a dtype= argument
    } else if (type->kind() == c10::TypeKind::NumberType) {
      put(v.toScalar().type());  // a Python number: its kind
    } else if (v.isBool()) {
      put(v.toBool());
    } else if (v.isString()) {
      key += v.toStringRef();
      put('\0');
    }
  }
  return key;
}

// Half or BFloat16 in a call: `tensors` (its tensors' dtypes) or `requested` (a
// dtype argument, as _softmax_backward_data's input_dtype). The CPU's kernels type
// some results of those otherwise than CUDA's, and tpu's (layer and batch norm's
// statistics: the input's dtype on the CPU, float32 on CUDA), and refuse some
// CUDA's take (a half_to_float softmax's Float gradient: "expected scalar type
// Float but found Half" on the CPU).
struct LowPrecision {
  bool tensors = false, requested = false;
};
LowPrecision low_precision_in(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  auto low = [](at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; };
  LowPrecision found;
  const auto& schema_args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      found.tensors |= t.defined() && low(t.scalar_type());
    });
    if (i < schema_args.size() && args[i].isInt()) {
      c10::TypePtr type = schema_args[i].real_type();
      if (type->kind() == c10::TypeKind::OptionalType) {
        type = type->castRaw<c10::OptionalType>()->getElementType();
      }
      found.requested |= type->kind() == c10::TypeKind::ScalarTypeType &&
                         low(static_cast<at::ScalarType>(args[i].toInt()));
    }
  }
  return found;
}

// The results' dtypes where the CPU's kernel types some otherwise than the meta
// kernel (empty where none): the CPU's, but for floating results of calls with
// Half or BFloat16 (`low_precision`), which keep CUDA's (the meta kernel's).
// Integer results always take the CPU's: embedding_bag's offset2bag and bag
// sizes are int64 on the CPU for int32 indices with int64 offsets, and its
// backward takes nothing else.
std::vector<std::vector<at::ScalarType>> cpu_result_dtypes(
    std::vector<std::vector<at::ScalarType>> meta,
    const std::vector<std::vector<at::ScalarType>>& cpu, bool low_precision) {
  bool differ = false;
  for (size_t r = 0; r < meta.size() && r < cpu.size(); ++r) {
    for (size_t k = 0; k < meta[r].size() && k < cpu[r].size(); ++k) {
      if (meta[r][k] == cpu[r][k] || cpu[r][k] == at::ScalarType::Undefined ||
          meta[r][k] == at::ScalarType::Undefined ||
          (low_precision && at::isFloatingType(cpu[r][k]) && at::isFloatingType(meta[r][k]))) {
        continue;
      }
      meta[r][k] = cpu[r][k];
      differ = true;
    }
  }
  return differ ? meta : std::vector<std::vector<at::ScalarType>>{};
}

// What a probe learnt: a verdict (a refusal or none), or nothing.
struct Probed {
  bool decided = false;
  CpuDtypes verdict;
};

// The dtypes of the tensors of each value of `stack` (Undefined for none).
std::vector<std::vector<at::ScalarType>> dtypes_of(const torch::jit::Stack& stack) {
  std::vector<std::vector<at::ScalarType>> out;
  for (const c10::IValue& v : stack) {
    out.emplace_back();
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      out.back().push_back(t.defined() ? t.scalar_type() : at::ScalarType::Undefined);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) out.back().push_back(t.scalar_type());
    }
  }
  return out;
}

Probed probe(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  if (!has_cpu_kernel(op)) return {true, {}};
  // Large inputs shrink to at most 2 per dimension. Results sized by other
  // arguments (a factory's, pad's, repeat's) do not: the meta kernel says how
  // large the probe's would be, and a large one is not probed (nor the
  // signature decided: a later call may be small).
  const bool shrink = elements_of(args) > kProbeElements;
  DroppedWarnings dropped;
  c10::WarningUtils::WarningHandlerGuard guard(&dropped);
  std::optional<torch::jit::Stack> meta_results;
  try {
    QuietMetaResizes quiet;  // a Python meta kernel's resize warning, as in run_meta
    torch::jit::Stack meta;
    for (const c10::IValue& v : args) meta.push_back(probe_stand_in(v, shrink, c10::kMeta));
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
    if (elements_of(meta) > kProbeElements) return {};
    meta_results = std::move(meta);
  } catch (python_error& e) {
    py::gil_scoped_acquire gil;
    e.persist();
    if (shrink) return {true, std::nullopt};  // shrunk shapes that do not fit
  } catch (...) {
    // Data-dependent ops (unique) have no meta kernel; their results are
    // no larger than their inputs.
    if (shrink) return {true, std::nullopt};
  }
  try {
    torch::jit::Stack stack;
    for (const c10::IValue& v : args) stack.push_back(probe_stand_in(v, shrink, c10::kCPU));
    op.callBoxed(stack);
    Probed accepted{true, {}};
    if (meta_results) {
      const LowPrecision low = low_precision_in(op, args);
      accepted.verdict.result_dtypes = cpu_result_dtypes(dtypes_of(*meta_results), dtypes_of(stack),
                                                         low.tensors || low.requested);
    }
    return accepted;
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    if (mixed_dtypes(message) && !low_precision_in(op, args).requested) {
      return {true, {CpuRejection{false, message}, {}}};
    }
    const std::string dtype = dispatch_dtype(message);
    if (dtype.empty() || low_precision(dtype)) return {true, {}};
    return {
        true,
        {CpuRejection{dynamic_cast<const c10::NotImplementedError*>(&e) != nullptr, message}, {}}};
  } catch (python_error& e) {
    py::gil_scoped_acquire gil;
    e.persist();  // takes the indicator: the probe decides nothing
  } catch (...) {
  }
  return {true, {}};
}

}  // namespace

void CpuRejection::raise() const {
  TORCH_CHECK_NOT_IMPLEMENTED(!not_implemented, message);
  TORCH_CHECK(false, message);
}

CpuDtypes cpu_dtypes(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  static std::mutex mutex;
  static std::unordered_map<std::string, CpuDtypes> verdicts;
  std::string key = dtype_signature(op, args);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = verdicts.find(key);
    if (it != verdicts.end()) return it->second;
  }
  Probed probed = probe(op, args);
  if (!probed.decided) return {};
  std::lock_guard<std::mutex> lock(mutex);
  verdicts.emplace(std::move(key), probed.verdict);
  return probed.verdict;
}

void refuse_as_cpu(const char* op, const char* overload, std::vector<c10::IValue> args) {
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
  std::optional<CpuRejection> rejection = cpu_dtypes(handle, args).rejection;
  if (rejection) rejection->raise();
}

void rethrow_meta_error(std::exception_ptr error, const c10::OperatorHandle& handle,
                        c10::ArrayRef<c10::IValue> args) {
  // A Python error's indicator goes into its exception before anything else runs.
  // Only PyTorch's Python meta kernels (its references and decompositions) are
  // asked about: a C++ meta kernel is the CPU kernel's own structured check.
  bool python = false;
  try {
    std::rethrow_exception(error);
  } catch (python_error& e) {
    py::gil_scoped_acquire gil;
    e.persist();
    python = true;
  } catch (py::error_already_set&) {
    python = true;
  } catch (...) {
  }
  if (python && !args.empty()) raise_cpu_error(handle, args);
  const c10::OperatorName& op = handle.operator_name();
  std::optional<std::string> message;
  try {
    std::rethrow_exception(error);
  } catch (python_error& e) {
    {
      py::gil_scoped_acquire gil;
      message = cpu_form(e.type, e.value, op.name);
    }
    if (!message) throw;
  } catch (py::error_already_set& e) {
    {
      py::gil_scoped_acquire gil;
      message = cpu_form(e.type(), e.value(), op.name);
    }
    if (!message) throw;
  }
  TORCH_CHECK(false, *message);
}

namespace {

constexpr char kResized[] = "An output with one or more elements was resized";

// C++ meta kernels' TORCH_WARN.
class ResizeWarningFilter final : public c10::WarningHandler {
 public:
  explicit ResizeWarningFilter(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().rfind(kResized, 0) != 0) next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

}  // namespace

// Python meta kernels' warnings.warn, filtered for the call's duration.
struct QuietMetaResizes::State {
  ResizeWarningFilter filter{c10::WarningUtils::get_warning_handler()};
  c10::WarningUtils::WarningHandlerGuard guard{&filter};
  py::object python;  // warnings.catch_warnings()
};

QuietMetaResizes::QuietMetaResizes() : state_(std::make_unique<State>()) {
  py::gil_scoped_acquire gil;
  py::module_ warnings = py::module_::import("warnings");
  state_->python = warnings.attr("catch_warnings")();
  state_->python.attr("__enter__")();
  warnings.attr("filterwarnings")("ignore", py::arg("message") = kResized);
}

QuietMetaResizes::~QuietMetaResizes() {
  py::gil_scoped_acquire gil;
  state_->python.attr("__exit__")(py::none(), py::none(), py::none());
  state_->python = py::object();
}

}  // namespace torch_tpu::aten
