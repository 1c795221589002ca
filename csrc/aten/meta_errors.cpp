#include "aten/meta_errors.h"

#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

namespace torch_tpu::aten {

void rethrow_meta_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (python_error& e) {
    std::string message;
    {
      pybind11::gil_scoped_acquire gil;
      e.persist();  // takes the Python error indicator into `e`
      if (!e.type || !PyErr_GivenExceptionMatches(e.type, PyExc_AssertionError)) throw;
      message = e.what();
    }
    TORCH_CHECK(false, message);
  } catch (pybind11::error_already_set& e) {
    std::string message;
    {
      pybind11::gil_scoped_acquire gil;
      if (!e.matches(PyExc_AssertionError)) throw;
      message = pybind11::str(e.value());
    }
    TORCH_CHECK(false, message);
  }
}

}  // namespace torch_tpu::aten
