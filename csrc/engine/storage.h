// What a `tpu` storage holds: a slot for an immutable device buffer. Writes
// replace the buffer; every tensor viewing the storage sees the new value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "hlo/builder.h"
#include "runtime/client.h"

namespace torch_tpu::engine {

using hlo::Dims;

struct PendingSlot;

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

  int64_t numel() const;
  bool is_contiguous() const;
  // Elements in the slot when read as `dtype`.
  int64_t storage_numel() const;
  // Covers the whole storage contiguously from offset 0.
  bool is_whole_storage() const;
};

Dims contiguous_strides(const Dims& sizes);

}  // namespace torch_tpu::engine
