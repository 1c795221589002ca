// A last word before a fatal signal. Starting a plugin runs a great deal of
// foreign code (driver, CUDA libraries, XLA) that may crash the process instead
// of returning an error; while a CrashNote is alive such a crash first prints
// what was being done and how to avoid it, then takes its usual course (the
// previous handler: Python's faulthandler, or the default action).
#pragma once

#include <string>

namespace torch_tpu::runtime {

class CrashNote {
 public:
  explicit CrashNote(std::string note);
  CrashNote(const CrashNote&) = delete;
  CrashNote& operator=(const CrashNote&) = delete;
  ~CrashNote();

 private:
  std::string note_;
};

}  // namespace torch_tpu::runtime
