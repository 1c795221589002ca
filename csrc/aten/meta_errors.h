// Errors of PyTorch's Python meta kernels, as the CPU's kernels raise them.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_tpu::aten {

// Rethrows `error`, a failure of operator `op`'s meta kernel on `args`, as the CPU's
// kernel raises it. Where the meta kernel is Python (PyTorch's references and
// decompositions), the CPU's kernel is asked first: it runs on host copies of the
// arguments (their data read from the device, as an error is raised at the op anyway),
// and its error, type and message, is raised. The Python meta kernels word many errors
// otherwise (they print torch.Size and torch.float32, check broadcasting in their own
// words, check in another order); a C++ meta kernel is the CPU kernel's own structured
// check, and is not asked again. Only where the CPU accepts the call is the meta
// kernel's error raised, as follows (and where `args` is empty: stand-ins of a call,
// not the user's). Some of
// PyTorch's Python meta kernels check arguments with `raise AssertionError`
// (squareCheckInputs of linalg) where the CPU's kernels raise RuntimeError (TORCH_CHECK):
// those become RuntimeError, with the meta kernel's message. Messages the Python
// references word otherwise (an unsafe cast into out=) or give as a tuple of strings
// take the CPU's words; `op` is the operator whose meta kernel failed.
[[noreturn]] void rethrow_meta_error(std::exception_ptr error, const c10::OperatorHandle& op,
                                     c10::ArrayRef<c10::IValue> args);

// Runs the CPU's kernel of `op` on host copies of `args` (tensors sharing a storage
// share its copy; a tpu generator or device becomes the CPU's): raises the CPU's
// error, type and message, or returns when the CPU accepts the call (raising
// NotImplementedError where the CPU's result is sparse, a layout tpu does not
// have). For calls
// already known to fail: it waits for the device and reads every input.
void raise_cpu_error(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

// The CPU's refusal of a call's dtypes.
struct CpuRejection {
  bool not_implemented;  // NotImplementedError (AT_DISPATCH's), else RuntimeError
  std::string message;
  [[noreturn]] void raise() const;
};

// Whether the CPU's kernel of `op` is defined for the dtypes of `args`: where it is
// not (AT_DISPATCH's `"foo_cpu" not implemented for 'Int'`), tpu raises the CPU's
// error rather than computing what the CPU refuses. Learnt from the CPU's kernel
// itself, once per dtype signature (the op, its tensors' dtypes, ranks and element counts (none,
// one, more), its numbers' kinds, its dtype, string and bool arguments), by running it on
// zero-filled host stand-ins of the tensors: their own sizes, or at most 2 each when the call has
// over 65536 elements (a probe whose shapes then do not fit decides nothing); a call
// whose stand-ins' results the meta kernel sizes over 65536 elements (a factory's) is
// not probed, and its signature not decided. Only an
// AT_DISPATCH refusal counts, and a refusal of one operand's dtype against another's
// ("expected scalar type Float but found Half"); any other outcome accepts, so the probe never
// refuses what the CPU accepts (a kernel that returns early for no elements, before its dtype
// dispatch, is probed with empty stand-ins). Half and BFloat16 are accepted where the CPU has no
// kernel for them: CUDA's kernels have, and tpu computes them natively.
//
// The same probe gives the dtypes of the CPU's results: where PyTorch's meta kernel
// types a result otherwise (binary_cross_entropy's reference promotes a Float loss
// by a Double weight; the CPU's kernel keeps the input's dtype), the CPU's dtypes
// are the results' (`result_dtypes`, per return and tensor; empty: the meta
// kernel's are right): integer results always, floating ones except in calls with
// Half or BFloat16 tensors or dtype arguments, whose statistics the CPU keeps in
// those dtypes and CUDA, as tpu, in float32.
struct CpuDtypes {
  std::optional<CpuRejection> rejection;
  std::vector<std::vector<at::ScalarType>> result_dtypes;
};
CpuDtypes cpu_dtypes(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

// cpu_dtypes' refusal for tpu's own kernels outside the lowered table (the
// data-dependent ops): raises the CPU's refusal of the dtypes of `args`, a call
// of `op` ("aten::_unique2") overload `overload`.
void refuse_as_cpu(const char* op, const char* overload, std::vector<c10::IValue> args);

// Drops, while it lives, the warnings meta kernels give when they resize an out=
// tensor (PyTorch's Python references word them otherwise, and a cached meta result
// would give them once): the kernel warns at its own resize, on every call, as the
// CPU's. Other warnings pass.
class QuietMetaResizes {
 public:
  QuietMetaResizes();
  ~QuietMetaResizes();
  QuietMetaResizes(const QuietMetaResizes&) = delete;
  QuietMetaResizes& operator=(const QuietMetaResizes&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace torch_tpu::aten
