// What a `tpu` storage holds: a slot for an immutable device buffer. Writes
// replace the buffer; every tensor viewing the storage sees the new value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hlo/builder.h"
#include "runtime/client.h"

namespace torch_tpu::engine {

using hlo::Dims;

struct PendingSlot;

// Bounded dynamism (design.md): a storage holding a tensor whose varying
// dimensions have upper bounds. Its buffer is sized for the bounds and holds
// the valid entries first, in row-major order (XLA's dynamic padder compacts
// them so), which makes the tensor an ordinary contiguous one to PyTorch.
struct Bounds {
  Dims bounds;               // of every dimension
  Dims sizes;                // the stored tensor's sizes (at most the bounds)
  std::vector<bool> varies;  // the dimensions whose size varies
  // Held while these bounds exist (in the slot or in views of it), for whoever
  // counts the varying sizes alive (aten/bounded).
  std::shared_ptr<const void> alive;
};

struct StorageSlot {
  int device = 0;
  size_t nbytes = 0;
  // Null until the first write: reads of an unwritten storage see zeros.
  runtime::BufferPtr buffer;
  // The op that wrote `buffer` (for messages about failed launches).
  const std::string* producer = nullptr;
  // Set while a deferred graph (DeferAndFuse) holds the slot's value: the
  // buffer is then the graph's until it is materialised.
  PendingSlot* pending = nullptr;
  // Set while the buffer holds a tensor of bounded varying sizes.
  std::optional<Bounds> bounds;

  // A slot freed while pending leaves its graph (its value is no longer an
  // output of the graph).
  ~StorageSlot();

  // Element type of `buffer` (valid when it is set).
  ElementType element_type() const { return buffer ? buffer->type() : ElementType::Invalid; }
};

// A strided tensor over a storage slot (what PyTorch calls a view).
struct TensorView {
  StorageSlot* slot = nullptr;
  ElementType dtype = ElementType::Invalid;
  Dims sizes;
  Dims strides;
  int64_t offset = 0;
  // A view of a storage with bounds, read at the bounds: `sizes`, `strides` and
  // `offset` place it in the storage's padded layout (contiguous at
  // `stored->bounds`), and `follows[d]` is the varying storage dimension view
  // dimension d runs along (-1: none). Programs take the varying sizes as
  // operands. Empty `follows`: an ordinary view.
  std::optional<Bounds> stored;
  std::vector<int> follows;
  // Per view dimension following a varying one: how many fewer valid entries it
  // has than that stored dimension (a slice, `torch.diff`'s `narrow(d, 1, n - 1)`).
  // Empty: none fewer.
  std::vector<int64_t> shorter_by;

  bool bounded() const { return !follows.empty(); }
  int64_t numel() const;
  bool is_contiguous() const;
  // Elements in the slot when read as `dtype`.
  int64_t storage_numel() const;
  // Covers the whole storage contiguously from offset 0.
  bool is_whole_storage() const;
};

Dims contiguous_strides(const Dims& sizes);

// Same dtype, sizes, strides and offset (in whichever storages).
bool same_layout(const TensorView& a, const TensorView& b);

}  // namespace torch_tpu::engine
