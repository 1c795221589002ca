// Bounded dynamism in eager execution (design.md): tensors whose varying
// dimensions have upper bounds live in storages sized for the bounds, and ops
// on them run programs computed at the bounds, one for every size.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aten/torch_headers.h"
#include "engine/storage.h"

namespace torch_tpu::aten {

// Whether `t`'s storage holds a tensor of bounded varying sizes.
bool has_bounds(const at::Tensor& t);

// A dense tensor of `sizes` and `strides` whose storage holds the elements of
// `bounds` (given in the tensor's dimension order) and records them: the
// result of an op computed at the bounds.
at::Tensor empty_bounded(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                         const engine::Bounds& bounds, at::ScalarType dtype,
                         c10::DeviceIndex device);

// The view of `t` (from empty_bounded) that a program writes at the bounds.
engine::TensorView bounded_target(const at::Tensor& t);

// copy_(dst, src) of a source of bounded sizes into a new tensor of its sizes
// (to(), contiguous(), a type conversion): `dst` takes the bounds and the copy
// runs at them. False, having done nothing, where that does not apply.
bool copy_at_bounds(const at::Tensor& dst, const at::Tensor& src);

// Gives `slot` `bounds` (its buffer holds a tensor laid out for them), counted
// among the varying sizes alive.
void store_bounds(engine::StorageSlot& slot, engine::Bounds bounds);

// torch_tpu.mark_dynamic in eager: `t` (contiguous, from offset 0, over a
// storage of at least `bounds`' elements holding its values first) records
// that its dimensions `varies` vary up to `bounds`.
void set_bounds(const at::Tensor& t, c10::IntArrayRef bounds, const std::vector<bool>& varies);

// `t` written at its own sizes: its storage keeps its bounds only when `t` is
// all of the stored tensor's valid entries in row-major order (any other write
// may lay it out anew).
void written_at_own_sizes(const at::Tensor& t);

// Results of `cat` whose size along the concatenated dimension has been seen
// to change get bounds (a power of two), so that a tensor grown by
// concatenation, token by token (a key-value cache), keeps one bound for many
// sizes; and a tensor a factory makes at the size of a varying dimension of a
// live tensor (arange(n) position ids, masks) takes its bound. On unless
// TORCH_TPU_AUTOMATIC_BOUNDS=0 or set off here.
void set_automatic_bounds(bool on);
bool automatic_bounds();

// What a meta kernel says of a tensor result.
struct ResultLayout {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
};
// Per return of an op, its tensor(s).
using ReturnLayouts = std::vector<std::vector<std::optional<ResultLayout>>>;

// How a call with operands of bounded varying size runs at the bounds.
struct BoundedPlan {
  struct Operand {
    const c10::TensorImpl* tensor;
    engine::TensorView view;   // at the bounds
    std::vector<bool> varies;  // per dimension of the view: its size varies
  };
  // The call's tensors read at the bounds (written ones included): views of
  // bounded storages, and broadcast ones stretched along the varying sizes.
  std::vector<Operand> inputs;
  // Per return, per tensor: the bounds of a new result, nullopt for one of
  // static size (or a return that is a written argument).
  std::vector<std::vector<std::optional<engine::Bounds>>> results;
  // The lowering that computes the call at the bounds, when not the op's own.
  const char* rule = nullptr;

  const engine::TensorView* view(const at::Tensor& t) const;
};

// Warns, once per operator and cause, that `op` runs at each size of its
// bounded operands and why, when it has done so at two sizes.
void warn_per_size(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   const std::string& why);

// While one lives, calls on this thread run at their operands' own sizes (an
// op whose lowering turned out not to work at the bounds reruns so).
class WithoutBounds {
 public:
  WithoutBounds();
  ~WithoutBounds();

 private:
  bool was_;
};

// The call's plan, or nullopt when no operand has bounds or when the call
// runs at its own sizes (with a warning, once per operator, saying why).
// `real` is the meta kernel's word on the call, `meta_at` runs it on other
// arguments (nullopt when it refuses them); `written` are the arguments the
// op writes and `return_alias` the written argument each return is (-1: new).
std::optional<BoundedPlan> plan_bounded(
    const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, const ReturnLayouts& real,
    const std::vector<size_t>& written, const std::vector<int>& return_alias,
    const std::function<std::optional<ReturnLayouts>(c10::ArrayRef<c10::IValue>)>& meta_at);

}  // namespace torch_tpu::aten
