// Copies into, out of and between `tpu` tensors, and reading scalars.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>

#include "aten/bounded.h"
#include "aten/device.h"
#include "aten/tensor_bridge.h"
#include "engine/captured_graph.h"
#include "engine/deferred.h"
#include "engine/executor.h"
#include "engine/storage_ops.h"

namespace torch_tpu::aten {

namespace {

// Writes `src` (a tpu tensor on the same device) into `dst`, converting and
// broadcasting like copy_.
void copy_on_device(const at::Tensor& dst, const at::Tensor& src) {
  engine::TensorView d = view_of(dst), s = view_of(src);
  if (d.slot == s.slot && d.sizes == s.sizes && d.strides == s.strides && d.offset == s.offset &&
      d.dtype == s.dtype) {
    return;
  }
  if (copy_at_bounds(dst, src)) return;
  // Buffers are immutable: a whole-storage copy shares the source buffer
  // (unless a pending graph owns either value, or a capture records the
  // device: then the copy joins the graph).
  if (!engine::is_pending(*d.slot) && !engine::is_pending(*s.slot) &&
      !engine::capturing(d.slot->device) && d.is_whole_storage() && s.is_whole_storage() &&
      d.sizes == s.sizes && d.dtype == s.dtype && d.slot->nbytes == s.slot->nbytes &&
      (!s.slot->buffer || s.slot->element_type() == s.dtype)) {
    d.slot->buffer = s.slot->buffer;
    return;
  }
  engine::copy_view(s, d, "aten::copy_");
}

// A tpu tensor holding `src` (a CPU tensor) converted to `dtype`.
at::Tensor upload(const at::Tensor& src, at::ScalarType dtype, c10::DeviceIndex device) {
  at::Tensor host = src.to(dtype).contiguous();
  at::Tensor t = empty_tpu(host.sizes(), dtype, device);
  engine::upload_storage(*slot_of(t), host.data_ptr(), element_type(dtype), host.numel());
  return t;
}

// An alias of `t` without the lazy conjugate and negative bits: its raw values.
at::Tensor raw_values(const at::Tensor& t) {
  at::Tensor raw = t.is_conj() ? at::_conj(t) : t;
  return raw.is_neg() ? at::_neg_view(raw) : raw;
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.defined() && src.defined(), "copy_: undefined tensor");
  auto shape = at::infer_size(self.sizes(), src.sizes());
  TORCH_CHECK(c10::IntArrayRef(shape) == self.sizes(), "output with shape ", self.sizes(),
              " doesn't match the broadcast shape ", shape);
  if (self.numel() == 0) return self;

  if (is_tpu(self) && is_tpu(src)) {
    if (self.device() == src.device()) {
      at::assert_no_internal_overlap(self);
      at::assert_no_partial_overlap(self, src);
      copy_on_device(self, src);
    } else {
      // Move a dense copy across, then write it into place.
      at::Tensor dense =
          src.is_contiguous() && view_of(src).is_whole_storage() ? src : src.contiguous();
      at::Tensor moved = empty_tpu(dense.sizes(), dense.scalar_type(), self.device().index());
      engine::copy_storage_across_devices(*slot_of(moved), *slot_of(dense));
      copy_on_device(self, moved);
    }
  } else if (is_tpu(self)) {
    TORCH_CHECK(src.device().is_cpu(), "copy_ from ", src.device(), " to tpu is not supported");
    at::Tensor staged = upload(raw_values(src), self.scalar_type(), self.device().index());
    copy_on_device(self, staged);
  } else {
    TORCH_CHECK(self.device().is_cpu(), "copy_ from tpu to ", self.device(), " is not supported");
    engine::TensorView view = view_of(src);
    if (self.is_contiguous() && self.scalar_type() == src.scalar_type() &&
        self.sizes() == src.sizes()) {
      raising_data_checks([&] { engine::download_view(view, self.data_ptr()); });
    } else {
      at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU));
      raising_data_checks([&] { engine::download_view(view, host.data_ptr()); });
      raw_values(self).copy_(host);
    }
  }
  // The copy moved raw values; like CUDA's copy, fix up the lazy bits after.
  if (self.is_conj() != src.is_conj()) self.conj_physical_();
  if (self.is_neg() != src.is_neg()) self.neg_();
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor out = dst;
  copy_(out, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  raising_data_checks([&] { engine::download_view(view_of(self), host.data_ptr()); });
  return host.item();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
}

}  // namespace torch_tpu::aten
