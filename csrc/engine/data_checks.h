// Checks on data that programs compute (lower::DataCheck): an index out of
// range, an invalid probability. A program with checks carries an error code
// from program to program on its device (s64[2]: the id of the first check
// that failed since the code was last read, and its value), so nothing waits
// per op; the code is read where the host waits anyway (a download,
// synchronize, and every op in the debug eager mode), and a failure is raised
// there as the CPU's exception, naming the op. The device stays usable: the
// results of the failed op are unspecified, like CUDA's after a device-side
// assert, but the process is not.
#pragma once

#include <cstdint>
#include <string>

#include "lower/lowering.h"
#include "runtime/plugin.h"

namespace torch_tpu::engine {

// A failed data check; the PyTorch layer raises it as IndexError or
// RuntimeError.
class DataCheckFailure : public runtime::Error {
 public:
  DataCheckFailure(const std::string& message, bool index_error)
      : runtime::Error(message, 3), index_error_(index_error) {}
  bool index_error() const { return index_error_; }

 private:
  bool index_error_;
};

// The id a program's error code gives `check` of `op`: a hash of what it
// reports, so the same program has the same text in every process (programs
// persist on disk), remembered to report it.
int64_t register_data_check(const std::string& op, const lower::DataCheck& check);

// Throws the failure that the error code (id, value) reports; returns for 0.
void raise_data_check(const int64_t code[2]);

}  // namespace torch_tpu::engine
