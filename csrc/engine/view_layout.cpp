#include "engine/view_layout.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace torch_tpu::engine {

ViewLayout classify(const TensorView& view) {
  ViewLayout layout;
  int64_t rank = static_cast<int64_t>(view.sizes.size());
  if (view.numel() == 0) {
    layout.kind = ViewLayout::Kind::Empty;
    return layout;
  }
  for (int64_t i = 0; i < rank; ++i) {
    if (view.sizes[i] == 1) continue;
    if (view.strides[i] == 0) {
      layout.broadcasts = true;
    } else {
      layout.order.push_back(i);
    }
  }
  std::stable_sort(layout.order.begin(), layout.order.end(),
                   [&](int64_t a, int64_t c) { return view.strides[a] > view.strides[c]; });
  int64_t expected = 1;
  for (auto it = layout.order.rbegin(); it != layout.order.rend(); ++it) {
    if (view.strides[*it] != expected) {
      layout.kind = ViewLayout::Kind::Gather;
      layout.order.clear();
      return layout;
    }
    expected *= view.sizes[*it];
  }
  layout.block_numel = expected;
  layout.covers_storage = view.offset == 0 && expected == view.storage_numel();
  return layout;
}

ElementType index_type(int64_t storage_numel) {
  return storage_numel < (int64_t{1} << 31) ? ElementType::S32 : ElementType::S64;
}

Value reinterpret(Builder& b, const Value& x, ElementType type) {
  if (x.type() == type) return x;
  if (type == ElementType::Pred) {
    return b.compare(x, b.full(x.shape, 0), hlo::Comparison::NE);
  }
  if (x.type() == ElementType::Pred) return reinterpret(b, b.convert(x, ElementType::U8), type);
  int64_t n = x.dim(0);
  // Complex storage is pairs of reals (XLA does not bitcast complex types).
  if (is_complex(x.type())) {
    Value re = b.reshape(b.real(x), {n, 1}), im = b.reshape(b.imag(x), {n, 1});
    return reinterpret(b, b.reshape(b.concatenate({re, im}, 1), {2 * n}), type);
  }
  if (is_complex(type)) {
    ElementType part = complex_component(type);
    int64_t count = n * element_size(x.type()) / element_size(type);
    Value pairs = b.reshape(reinterpret(b, x, part), {count, 2});
    Value re = b.slice(pairs, {0, 0}, {pairs.dim(0), 1}, {1, 1});
    Value im = b.slice(pairs, {0, 1}, {pairs.dim(0), 2}, {1, 1});
    return b.complex(b.reshape(re, {pairs.dim(0)}), b.reshape(im, {pairs.dim(0)}));
  }
  int from = element_size(x.type()), to = element_size(type);
  if (from == to) return b.bitcast_convert(x, type);
  if (to < from) return b.reshape(b.bitcast_convert(x, type), {n * (from / to)});
  return b.bitcast_convert(b.reshape(x, {n / (to / from), to / from}), type);
}

namespace {

// Sizes of the dense dims in index order, and the permutation from stride
// order to index order.
struct DenseShape {
  Dims by_stride;  // sizes in decreasing-stride order
  Dims by_index;   // the same dims in increasing index order
  Dims to_index;   // transpose permutation: by_stride -> by_index
};

DenseShape dense_shape(const TensorView& view, const ViewLayout& layout) {
  DenseShape s;
  Dims sorted = layout.order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d : layout.order) s.by_stride.push_back(view.sizes[d]);
  for (int64_t d : sorted) {
    s.by_index.push_back(view.sizes[d]);
    auto pos = std::find(layout.order.begin(), layout.order.end(), d) - layout.order.begin();
    s.to_index.push_back(pos);
  }
  return s;
}

Dims inverse(const Dims& perm) {
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

// Flat storage index of every element of the view, shape sizes + [1].
Value gather_indices(Builder& b, const TensorView& view, ElementType itype, const Value& offset) {
  hlo::Shape shape{itype, view.sizes};
  Value idx = b.broadcast_in_dim(offset, view.sizes, {});
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] == 1 || view.strides[d] == 0) continue;
    Value term = b.mul(b.iota(shape, static_cast<int64_t>(d)),
                       b.full(shape, static_cast<double>(view.strides[d])));
    idx = b.add(idx, term);
  }
  Dims with_vector = view.sizes;
  with_vector.push_back(1);
  return b.reshape(idx, with_vector);
}

}  // namespace

Value read_view(Builder& b, const Value& storage, const TensorView& view, const ViewLayout& layout,
                const std::optional<Value>& offset) {
  hlo::Shape shape{storage.type(), view.sizes};
  switch (layout.kind) {
    case ViewLayout::Kind::Empty:
      return b.full(shape, 0);
    case ViewLayout::Kind::Gather: {
      int64_t rank = static_cast<int64_t>(view.sizes.size());
      Value idx = gather_indices(b, view, offset->type(), *offset);
      return b.gather(storage, idx, hlo::GatherDims{{}, {0}, {0}, rank}, {1});
    }
    case ViewLayout::Kind::Dense: {
      Value flat = layout.covers_storage
                       ? storage
                       : b.dynamic_slice(storage, {*offset}, {layout.block_numel});
      DenseShape s = dense_shape(view, layout);
      Value block = b.transpose(b.reshape(flat, s.by_stride), s.to_index);
      Dims kept(view.sizes.size(), 1);
      for (int64_t d : layout.order) kept[d] = view.sizes[d];
      Value v = b.reshape(block, kept);
      if (!layout.broadcasts) return v;
      Dims identity(view.sizes.size());
      std::iota(identity.begin(), identity.end(), 0);
      return b.broadcast_in_dim(v, view.sizes, identity);
    }
  }
  throw std::logic_error("unreachable");
}

Value uncompact(Builder& b, const Value& flat, const Bounds& stored,
                const std::vector<std::optional<Value>>& size) {
  const Dims& bounds = stored.bounds;
  const auto rank = static_cast<int64_t>(bounds.size());
  int64_t numel = 1, before_first = 1, varying = 0, last = -1;
  for (int64_t d = 0; d < rank; ++d) {
    numel *= bounds[d];
    if (!stored.varies[d]) continue;
    if (varying++ == 0) before_first = numel / bounds[d];
    last = d;
  }
  Value all = flat.dim(0) == numel ? flat : b.slice(flat, {0}, {numel}, {1});
  // One varying dimension, after dimensions of size 1: both layouts agree.
  if (varying == 1 && before_first == 1) return all;
  // The dimensions after the last varying one are a block both layouts share:
  // block i of the padded layout is block sum_d min(i_d, size_d - 1) * stride_d
  // (d up to the last varying one) of the compact one, whose strides are
  // products of the sizes. Positions past a size read a valid block;
  // set_valid_sizes masks them.
  int64_t block = 1;
  for (int64_t d = last + 1; d < rank; ++d) block *= bounds[d];
  Dims outer(bounds.begin(), bounds.begin() + last + 1);
  ElementType it = index_type(numel);
  hlo::Shape shape{it, outer};
  Value index = b.full(shape, 0);
  Value stride = b.constant(static_cast<double>(block), it);
  for (int64_t d = last; d >= 0; --d) {
    Value coord = b.iota(shape, d);
    Value extent = b.constant(static_cast<double>(bounds[d]), it);
    if (stored.varies[d]) {
      extent = b.convert(*size[d], it);
      coord = b.min(coord, b.broadcast_in_dim(b.sub(extent, b.constant(1, it)), outer, {}));
    }
    index = b.add(index, b.mul(coord, b.broadcast_in_dim(stride, outer, {})));
    stride = b.mul(stride, extent);
  }
  Dims with_vector = outer;
  with_vector.push_back(1);
  const auto n = static_cast<int64_t>(outer.size());
  Value blocks =
      b.gather(all, b.reshape(index, with_vector), hlo::GatherDims{{n}, {}, {0}, n}, {block});
  return b.reshape(blocks, {numel});
}

Value compact(Builder& b, const Value& value, const TensorView& view,
              const std::vector<std::optional<Value>>& size) {
  const Bounds& stored = *view.stored;
  const Dims& bounds = stored.bounds;
  const auto rank = static_cast<int64_t>(bounds.size());
  // The storage's dimensions in order: the view's by decreasing stride.
  std::vector<int64_t> order(view.sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t c) { return view.strides[a] > view.strides[c]; });
  Value stored_order = b.transpose(value, order);
  if (stored_order.dims() != bounds) stored_order = b.reshape(stored_order, bounds);  // sizes 1
  int64_t numel = 1, last = -1;
  for (int64_t d = 0; d < rank; ++d) {
    numel *= bounds[d];
    if (stored.varies[d]) last = d;
  }
  // Block j of the compact layout (the dimensions after the last varying one
  // make a block) is at the coordinates j spells in the sizes.
  Dims outer(bounds.begin(), bounds.begin() + last + 1);
  int64_t blocks = 1;
  for (int64_t e : outer) blocks *= e;
  const ElementType it = ElementType::S32;
  Value j = b.iota({it, {blocks}}, 0);
  std::vector<Value> coords(outer.size());
  for (int64_t d = last; d >= 0; --d) {
    Value extent = stored.varies[d] ? b.broadcast_in_dim(*size[d], {blocks}, {})
                                    : b.full({it, {blocks}}, static_cast<double>(bounds[d]));
    Value coord = b.rem(j, extent);
    j = b.div(j, extent);
    coords[d] = b.reshape(b.min(coord, b.full({it, {blocks}}, static_cast<double>(bounds[d] - 1))),
                          {blocks, 1});
  }
  const auto n = static_cast<int64_t>(outer.size());
  Dims offset_dims, slice_sizes(n, 1), collapsed(n);
  std::iota(collapsed.begin(), collapsed.end(), 0);
  for (int64_t d = n; d < rank; ++d) {
    offset_dims.push_back(d - n + 1);
    slice_sizes.push_back(bounds[d]);
  }
  Value gathered = b.gather(stored_order, b.concatenate(coords, 1),
                            hlo::GatherDims{offset_dims, collapsed, collapsed, 1}, slice_sizes);
  return b.reshape(gathered, {numel});
}

Value set_valid_sizes(Builder& b, const Value& value, const TensorView& view,
                      const std::vector<std::optional<Value>>& size) {
  Value v = value;
  for (size_t d = 0; d < view.follows.size(); ++d) {
    if (view.follows[d] < 0) continue;
    Value n = *size[view.follows[d]];
    if (!view.shorter_by.empty() && view.shorter_by[d] > 0) {
      n = b.sub(n, b.constant_int(view.shorter_by[d], n.type()));
    }
    v = b.set_dimension_size(v, n, d);
  }
  return v;
}

Value write_view(Builder& b, const Value& storage, const TensorView& view, const ViewLayout& layout,
                 const std::optional<Value>& offset, const Value& value) {
  if (value.type() != storage.type()) throw std::logic_error("write_view: type mismatch");
  switch (layout.kind) {
    case ViewLayout::Kind::Empty:
      return storage;
    case ViewLayout::Kind::Gather: {
      int64_t rank = static_cast<int64_t>(view.sizes.size());
      Value idx = gather_indices(b, view, offset->type(), *offset);
      return b.scatter(
          storage, idx, value, hlo::ScatterDims{{}, {0}, {0}, rank},
          [](Builder&, const std::vector<Value>& a) -> std::vector<Value> { return {a[1]}; });
    }
    case ViewLayout::Kind::Dense: {
      // Elements of an expanded view share a location and hold equal values
      // (fill_, zero_ and threshold_ write such views; other ops refuse them
      // before they run): the first of each is written.
      Value written = value;
      if (layout.broadcasts) {
        Dims limits(view.sizes.size(), 1);
        for (int64_t d : layout.order) limits[d] = view.sizes[d];
        written = b.slice(value, Dims(view.sizes.size(), 0), limits, Dims(view.sizes.size(), 1));
      }
      DenseShape s = dense_shape(view, layout);
      Value by_index = b.reshape(written, s.by_index);
      Value flat = b.reshape(b.transpose(by_index, inverse(s.to_index)), {layout.block_numel});
      if (layout.covers_storage) return flat;
      return b.dynamic_update_slice(storage, flat, {*offset});
    }
  }
  throw std::logic_error("unreachable");
}

}  // namespace torch_tpu::engine
