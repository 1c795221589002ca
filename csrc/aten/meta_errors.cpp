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

// "float32" (of torch.float32) -> Float, the name the CPU's messages use.
std::string scalar_type_name(const std::string& python_name) {
  py::object dtype = py::module_::import("torch").attr(python_name.c_str());
  if (!THPDtype_Check(dtype.ptr())) return python_name;
  return c10::toString(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
}

// Linear algebra ops whose CPU kernels check out= with checkLinalgCompatibleDtype,
// by the name they give it.
const char* linalg_out_check_name(const std::string& op) {
  static const std::unordered_map<std::string, const char*> names = {
      {"aten::cholesky_inverse", "cholesky_inverse"},
      {"aten::cholesky_solve", "cholesky_solve"},
      {"aten::linalg_pinv", "linalg.pinv"},
  };
  auto it = names.find(op);
  return it == names.end() ? nullptr : it->second;
}

// The CPU's wording of an out= cast that is not allowed (TensorIterator's, or
// linear algebra's own).
std::string cpu_wording(const std::string& message, const std::string& op) {
  static const std::regex unsafe_cast(
      "Attempting to cast from torch\\.(\\w+) to out tensor with dtype torch\\.(\\w+), but this "
      "can't be cast because it is not safe!");
  std::smatch m;
  if (!std::regex_search(message, m, unsafe_cast)) return message;
  std::string from = scalar_type_name(m[1]), to = scalar_type_name(m[2]);
  if (const char* linalg = linalg_out_check_name(op)) {
    return std::string(linalg) + ": Expected result to be safely castable from " + from +
           " dtype, but got result with dtype " + to;
  }
  return "result type " + from + " can't be cast to the desired output type " + to;
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

}  // namespace torch_tpu::aten
