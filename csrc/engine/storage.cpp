#include "engine/storage.h"

#include <algorithm>

namespace torch_tpu::engine {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

int64_t TensorView::storage_numel() const {
  return static_cast<int64_t>(slot->nbytes) / element_size(dtype);
}

bool TensorView::is_whole_storage() const {
  return offset == 0 && numel() == storage_numel() && is_contiguous();
}

bool same_layout(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset;
}

Dims contiguous_strides(const Dims& sizes) {
  Dims strides(sizes.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

}  // namespace torch_tpu::engine
