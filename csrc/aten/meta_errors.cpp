#include "aten/meta_errors.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>

#include <optional>
#include <regex>
#include <string>
#include <unordered_map>

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

void rethrow_meta_error(std::exception_ptr error, const c10::OperatorName& op) {
  std::optional<std::string> message;
  try {
    std::rethrow_exception(error);
  } catch (python_error& e) {
    {
      py::gil_scoped_acquire gil;
      e.persist();  // takes the Python error indicator into `e`
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
