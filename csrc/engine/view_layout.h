// Kernels read views by materialising them inside the program: a program
// takes a storage's whole flat buffer and derives the dense operand from
// (sizes, strides, offset): reshape/transpose/broadcast when the view is a
// dense block of the storage, a gather otherwise. Writes to views go back the
// same way (dynamic_update_slice or scatter).
#pragma once

#include <optional>
#include <vector>

#include "engine/storage.h"

namespace torch_tpu::engine {

using hlo::Builder;
using hlo::Value;

struct ViewLayout {
  enum class Kind : uint8_t { Empty, Dense, Gather };
  Kind kind = Kind::Dense;
  // Dense: the view is the whole storage from offset 0 (no offset operand).
  bool covers_storage = false;
  // Dense: dimensions with size > 1 and nonzero stride, by decreasing stride.
  Dims order;
  // Dense: elements in the dense block the view spans.
  int64_t block_numel = 1;
  bool broadcasts = false;

  bool needs_offset() const {
    return kind == Kind::Gather || (kind == Kind::Dense && !covers_storage);
  }
};

ViewLayout classify(const TensorView& view);

// Index type used for offsets and gathers into a storage of `numel` elements.
ElementType index_type(int64_t storage_numel);

// `storage` is the flat storage value, already reinterpreted as view.dtype.
Value read_view(Builder& b, const Value& storage, const TensorView& view, const ViewLayout& layout,
                const std::optional<Value>& offset);
Value write_view(Builder& b, const Value& storage, const TensorView& view, const ViewLayout& layout,
                 const std::optional<Value>& offset, const Value& value);

// Bounded dynamism. The padded layout (row-major at the bounds) of the flat
// value of a storage with `stored` bounds, whose valid entries lead it
// compactly; `size[e]` is the s32 size of varying dimension e.
Value uncompact(Builder& b, const Value& flat, const Bounds& stored,
                const std::vector<std::optional<Value>>& size);
// The flat value of a storage with bounds that bounded view `view` (a dense
// view of all of it) holds `value`: the valid entries first, in row-major
// order of the storage's dimensions; `size` as for uncompact.
Value compact(Builder& b, const Value& value, const TensorView& view,
              const std::vector<std::optional<Value>>& size);
// `value` (bounded view `view` at its bounds) with the sizes of its varying
// dimensions set, so that XLA masks what lies past them.
Value set_valid_sizes(Builder& b, const Value& value, const TensorView& view,
                      const std::vector<std::optional<Value>>& size);

// Reinterprets the bits of the flat (rank-1) storage value `x` as `type`;
// widths may differ (a float32 storage read as bytes has 4x the elements).
Value reinterpret(Builder& b, const Value& x, ElementType type);

}  // namespace torch_tpu::engine
