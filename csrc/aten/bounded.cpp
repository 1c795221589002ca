#include "aten/bounded.h"

#include <ATen/ops/linear_native.h>
#include <ATen/ops/matmul_native.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "aten/allocator.h"
#include "aten/tensor_bridge.h"
#include "aten/tensor_lists.h"
#include "engine/captured_graph.h"
#include "engine/deferred.h"
#include "engine/storage_ops.h"

namespace torch_tpu::aten {

namespace {

int64_t product(const engine::Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

engine::StorageSlot* whole_slot(const at::Tensor& t) {
  // Tensor subclasses (FakeTensor while torch.compile traces) hold no slot.
  if (!is_tpu(t) || !t.has_storage() || t.key_set().has(c10::DispatchKey::Python) ||
      !t.storage().data_ptr().get_context()) {
    return nullptr;
  }
  SlotAddress at = storage_slot(*t.storage().unsafeGetStorageImpl());
  return at.byte_offset == 0 ? at.slot : nullptr;
}

std::optional<engine::TensorView> refuse(std::string* why, const char* reason) {
  if (why) *why = reason;
  return std::nullopt;
}

// Set once a storage gets bounds: until then no call looks for them.
std::atomic<bool> g_bounds_used{false};

// The varying dimensions alive, as (size, bound) -> how many: a new tensor a
// factory makes at such a size takes the bound (plan_fresh_at_bounds). Never
// destroyed: storages are released until the very end of the process.
auto* g_varying_mutex = new std::mutex();
auto* g_varying = new std::map<std::pair<int64_t, int64_t>, int64_t>();

// The largest bound of a varying dimension of size `size` alive, or 0.
int64_t varying_bound(int64_t size) {
  std::lock_guard<std::mutex> lock(*g_varying_mutex);
  auto it = g_varying->lower_bound({size + 1, 0});
  return it != g_varying->begin() && (--it)->first.first == size ? it->first.second : 0;
}

// Whether a varying dimension of this size and bound is alive.
bool varying_alive(int64_t size, int64_t bound) {
  std::lock_guard<std::mutex> lock(*g_varying_mutex);
  return g_varying->count({size, bound}) > 0;
}

}  // namespace

void store_bounds(engine::StorageSlot& slot, engine::Bounds bounds) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < bounds.varies.size(); ++d) {
    if (bounds.varies[d]) dims.emplace_back(bounds.sizes[d], bounds.bounds[d]);
  }
  {
    std::lock_guard<std::mutex> lock(*g_varying_mutex);
    for (const auto& key : dims) ++(*g_varying)[key];
  }
  bounds.alive = std::shared_ptr<const void>(nullptr, [dims](const void*) {
    std::lock_guard<std::mutex> lock(*g_varying_mutex);
    for (const auto& key : dims) {
      if (--(*g_varying)[key] == 0) g_varying->erase(key);
    }
  });
  slot.bounds = std::move(bounds);
  g_bounds_used = true;
}

namespace {

// Set while a call reruns at its own sizes (WithoutBounds).
thread_local bool g_without_bounds = false;

// The slot of a tensor that is all of its storage, contiguous, and never
// written: one that can still take bounds before its first write.
engine::StorageSlot* unwritten_whole_slot(const at::Tensor& t) {
  engine::StorageSlot* slot = whole_slot(t);
  if (!slot || slot->buffer || slot->bounds || engine::is_pending(*slot) || !t.is_contiguous() ||
      t.storage_offset() != 0 ||
      static_cast<size_t>(t.numel()) * t.element_size() != slot->nbytes) {
    return nullptr;
  }
  return slot;
}

}  // namespace

bool has_bounds(const at::Tensor& t) {
  engine::StorageSlot* slot = whole_slot(t);
  return slot && slot->bounds;
}

namespace {

// A slice of a varying dimension keeps either how many entries fewer it has
// than the stored size (`x[:, 1:]`, `torch.diff`: its size follows the stored
// one) or its own size (`x[:, -k:]`, `x[:, :k]`: a window over a growing
// sequence, read at its size from an offset the program takes as an operand).
// One call cannot tell them apart, so the calls before decide: a slice of one
// size over stored sizes that differ is a window. The first call follows.
// Either way the values are the slice's; only which calls share a program
// differs.
bool seen_as_window(const at::Tensor& t, const engine::Bounds& stored, int64_t at,
                    int64_t shorter) {
  std::string window = std::to_string(at), follows;
  for (size_t e = 0; e < stored.bounds.size(); ++e) {
    window += (stored.varies[e] ? "v" : ",") + std::to_string(stored.bounds[e]);
  }
  follows = window + "|" + std::to_string(shorter);
  window += "|" + std::to_string(static_cast<int>(t.scalar_type()));
  for (int64_t s : t.sizes()) window += "," + std::to_string(s);
  static std::mutex mutex;
  static auto* first = new std::unordered_map<std::string, int64_t>();
  std::lock_guard<std::mutex> lock(mutex);
  const int64_t n = stored.sizes[at];
  auto seen_at_another = [&](const std::string& key) {
    return first->emplace(key, n).first->second != n;
  };
  const bool follows_seen = seen_at_another(follows);
  return seen_at_another("w" + window) && !follows_seen;
}

// `t` as a view of the padded layout of `stored`, the tensor its storage
// holds, read at the bounds; nullopt (with the reason in `why`) when `t`
// cannot be read so: a view that merges, splits or slices a varying
// dimension, or one whose dimensions are ambiguous because a varying size is
// 0 or 1.
std::optional<engine::TensorView> place_view(const at::Tensor& t, engine::StorageSlot* slot,
                                             const engine::Bounds& stored, std::string* why) {
  const engine::Dims& z = stored.sizes;
  const auto rank = static_cast<int64_t>(z.size());
  engine::Dims cs = engine::contiguous_strides(z), ps = engine::contiguous_strides(stored.bounds);

  engine::TensorView v;
  v.slot = slot;
  v.dtype = element_type(t.scalar_type());
  v.stored = stored;
  const bool whole = t.sizes().vec() == z && t.is_contiguous() && t.storage_offset() == 0;
  if (whole) {
    // The stored tensor itself: its varying dimensions are its own.
    v.sizes = stored.bounds;
    v.strides = ps;
    for (int64_t e = 0; e < rank; ++e) v.follows.push_back(stored.varies[e] ? e : -1);
    return v;
  }
  // A view: each of its dimensions is placed by its stride among the stored
  // tensor's compact strides, which sizes 0 and 1 make ambiguous.
  std::vector<int64_t> big;  // stored dimensions of size > 1, outermost first
  for (int64_t e = 0; e < rank; ++e) {
    if (stored.varies[e] && z[e] <= 1) return refuse(why, "a varying size is 0 or 1");
    if (z[e] == 0) return refuse(why, "the tensor is empty");
    if (z[e] > 1) big.push_back(e);
  }
  int64_t rest = t.storage_offset();
  v.offset = 0;
  std::vector<int64_t> start(rank, 0);  // where the view starts in each stored dimension
  for (int64_t e : big) {
    start[e] = rest / cs[e];
    rest %= cs[e];
    // A position inside a varying dimension (x[:, -1]) is an offset operand.
    if (start[e] >= z[e]) return refuse(why, "the view's offset does not follow the stored layout");
    v.offset += start[e] * ps[e];
  }
  std::vector<bool> followed(rank, false);
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t size = t.size(d), stride = t.stride(d);
    v.follows.push_back(-1);
    if (size == 1 || stride == 0) {
      v.sizes.push_back(size);
      v.strides.push_back(0);
      continue;
    }
    // The stored dimension the stride steps along: cs[e] <= stride < cs[e] * z[e].
    int64_t at = -1;
    for (int64_t e : big) {
      if (stride >= cs[e] && stride % cs[e] == 0 && stride / cs[e] < z[e]) at = e;
    }
    if (at < 0) return refuse(why, "the view's strides do not follow the stored layout");
    int64_t step = stride / cs[at];
    if (stored.varies[at]) {
      // Whole, or a slice as many entries shorter as it starts late at most
      // (`narrow(d, 1, n - 1)`): read at the bound that much shorter, its valid
      // entries lead.
      const int64_t shorter = z[at] - size;
      const bool late = start[at] > shorter && t.numel() > 0;  // an empty view reads nothing
      if (step != 1 || shorter < 0 || late || followed[at]) {
        return refuse(why, "the view splits, slices or repeats a varying dimension");
      }
      if (shorter > 0 && seen_as_window(t, stored, at, shorter)) {
        v.sizes.push_back(size);
        v.strides.push_back(ps[at]);
        continue;
      }
      followed[at] = true;
      v.follows.back() = static_cast<int>(at);
      if (shorter > 0) {
        v.shorter_by.resize(static_cast<size_t>(t.dim()), 0);
        v.shorter_by[d] = shorter;
      }
      v.sizes.push_back(stored.bounds[at] - shorter);
      v.strides.push_back(ps[at]);
      continue;
    }
    // Inside one static dimension, or whole static dimensions merged.
    if (step * (size - 1) >= z[at]) {
      int64_t span = z[at];
      auto it = std::find(big.begin(), big.end(), at);
      while (span < size && it != big.begin()) {
        --it;
        if (stored.varies[*it]) return refuse(why, "the view merges a varying dimension");
        span *= z[*it];
      }
      if (step != 1 || span != size)
        return refuse(why, "the view's strides do not follow the stored layout");
    }
    v.sizes.push_back(size);
    v.strides.push_back(ps[at] * step);
  }
  return v;
}

bool is_contiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// The dimensions of a dense tensor in memory order (outermost first), or
// nullopt when its strides are not a permutation of contiguous ones. Sizes of
// 1 keep their place.
std::optional<std::vector<int64_t>> memory_order(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  if (is_contiguous(sizes, strides)) return order;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return sizes[a] > 1 && sizes[b] > 1 && strides[a] > strides[b];
  });
  int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (sizes[*it] != 1 && strides[*it] != expected) return std::nullopt;
    expected *= sizes[*it];
  }
  return order;
}

// The shape of a contiguous tensor of `total` elements that `t` is a plain
// strided view of: each of its dimensions of size > 1 steps along one
// dimension of that shape (outermost first, by stride).
std::optional<engine::Dims> covering_shape(const at::Tensor& t, int64_t total) {
  std::vector<int64_t> strides;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) strides.push_back(t.stride(d));
  }
  std::sort(strides.rbegin(), strides.rend());
  engine::Dims shape;
  int64_t outer = total;
  for (size_t k = 0; k < strides.size(); ++k) {
    if (strides[k] <= 0 || (k > 0 && strides[k] == strides[k - 1]) || outer % strides[k] != 0) {
      return std::nullopt;
    }
    shape.push_back(outer / strides[k]);
    outer = strides[k];
  }
  if (outer > 1 || shape.empty()) shape.push_back(outer);
  return shape;
}

// The bounds of the stored tensor's valid entries seen in the shape that `t`
// is a plain view of (x.view(-1, d) of a [b, n, d] tensor, its split back to
// [b, n, d'], a slice of the last dimension of that): the storage holds them
// first in row-major order, whatever the shape. A run of dimensions whose
// sizes multiply to those of a run of stored ones varies where a stored one
// does: one of them takes the run's bound, the one that can hold it with the
// others static (where several can, the one whose size varies at that bound
// in a live tensor: [3 * 16] split as [3, 16] under a bound of 48).
// Whichever it is, the values are the same; the choice decides which
// operands fit together at the bounds.
std::optional<engine::Bounds> reshaped_bounds(const at::Tensor& t, const engine::Bounds& stored) {
  const int64_t total = product(stored.sizes);
  if (total == 0 || t.storage_offset() >= total) return std::nullopt;
  std::optional<engine::Dims> shape = covering_shape(t, total);
  if (!shape || *shape == stored.sizes) return std::nullopt;
  engine::Bounds out{*shape, *shape, std::vector<bool>(shape->size(), false)};
  std::vector<size_t> view, kept;  // dimensions of size > 1
  for (size_t d = 0; d < out.sizes.size(); ++d) {
    if (out.sizes[d] > 1) view.push_back(d);
  }
  for (size_t e = 0; e < stored.sizes.size(); ++e) {
    if (stored.varies[e] && stored.sizes[e] <= 1) return std::nullopt;
    if (stored.sizes[e] > 1) kept.push_back(e);
  }
  size_t i = 0, j = 0;
  while (i < view.size() && j < kept.size()) {
    const size_t i0 = i, j0 = j;
    int64_t in_view = out.sizes[view[i++]], in_stored = stored.sizes[kept[j++]];
    while (in_view != in_stored) {
      if (in_view < in_stored) {
        if (i == view.size()) return std::nullopt;
        in_view *= out.sizes[view[i++]];
      } else {
        if (j == kept.size()) return std::nullopt;
        in_stored *= stored.sizes[kept[j++]];
      }
    }
    int64_t bound = 1, varying = 0;
    for (size_t k = j0; k < j; ++k) {
      bound *= stored.bounds[kept[k]];
      varying += stored.varies[kept[k]];
    }
    if (varying == 0) continue;
    std::vector<size_t> holders, alive;
    for (size_t k = i0; k < i; ++k) {
      const int64_t size = out.sizes[view[k]], others = in_view / size;
      if (bound % others != 0 || bound / others < size) continue;
      holders.push_back(view[k]);
      if (varying_alive(size, bound / others)) alive.push_back(view[k]);
    }
    if (holders.size() > 1) holders = alive;
    // Alive at the same size and bound ([3 * 3] as [3, 3]): the innermost, as
    // in [batch, length] (either gives the same values).
    if (holders.size() > 1 && out.sizes[holders.front()] == out.sizes[holders.back()]) {
      holders.erase(holders.begin(), holders.end() - 1);
    }
    if (holders.size() != 1 || (i - i0 > 1 && varying > 1)) return std::nullopt;
    out.bounds[holders[0]] = bound / (in_view / out.sizes[holders[0]]);
    out.varies[holders[0]] = true;
  }
  return out;
}

// `t` as a view of its storage's padded layout, read at the bounds (see
// place_view), or of the tensor of its own shape the storage also holds.
std::optional<engine::TensorView> bounded_view(const at::Tensor& t, std::string* why = nullptr) {
  engine::StorageSlot* slot = whole_slot(t);
  if (!slot || !slot->bounds) return refuse(why, "its storage has no bounds");
  std::optional<engine::TensorView> v = place_view(t, slot, *slot->bounds, why);
  if (v) return v;
  std::optional<engine::Bounds> reshaped = reshaped_bounds(t, *slot->bounds);
  return reshaped ? place_view(t, slot, *reshaped, why) : v;
}

engine::Bounds permuted(const engine::Bounds& b, const std::vector<int64_t>& order) {
  engine::Bounds out;
  for (int64_t d : order) {
    out.bounds.push_back(b.bounds[d]);
    out.sizes.push_back(b.sizes[d]);
    out.varies.push_back(b.varies[d]);
  }
  return out;
}

// Whether a result of this layout can hold bounded sizes: dense (a permutation
// of a contiguous layout) with each varying size's place in memory clear.
bool dense_at_bounds(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                     const engine::Bounds& bounds) {
  if (is_contiguous(sizes, strides)) return true;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (bounds.varies[d] && sizes[d] <= 1) return false;  // its place in memory is ambiguous
  }
  return memory_order(sizes, strides).has_value();
}

}  // namespace

at::Tensor empty_bounded(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                         const engine::Bounds& bounds, at::ScalarType dtype,
                         c10::DeviceIndex device) {
  c10::DeviceGuard guard(c10::Device(kTpu, device));
  const size_t nbytes = static_cast<size_t>(product(bounds.bounds)) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, tpu_allocator(), true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  store_bounds(*whole_slot(t), permuted(bounds, *memory_order(sizes, strides)));
  return t;
}

engine::TensorView bounded_target(const at::Tensor& t) {
  engine::StorageSlot* slot = whole_slot(t);
  const engine::Bounds& stored = *slot->bounds;
  std::vector<int64_t> order = *memory_order(t.sizes(), t.strides());
  engine::Dims padded = engine::contiguous_strides(stored.bounds);
  engine::TensorView v;
  v.slot = slot;
  v.dtype = element_type(t.scalar_type());
  v.stored = stored;
  v.sizes.resize(order.size());
  v.strides.resize(order.size());
  v.follows.resize(order.size());
  for (size_t at = 0; at < order.size(); ++at) {
    const int64_t d = order[at];
    v.sizes[d] = stored.bounds[at];
    v.strides[d] = padded[at];
    v.follows[d] = stored.varies[at] ? static_cast<int>(at) : -1;
  }
  return v;
}

bool copy_at_bounds(const at::Tensor& dst, const at::Tensor& src) {
  if (!g_bounds_used || dst.sizes() != src.sizes() || !has_bounds(src)) return false;
  engine::StorageSlot* slot = unwritten_whole_slot(dst);
  if (!slot || engine::capturing(slot->device)) return false;
  std::optional<engine::TensorView> from = bounded_view(src);
  // A view with no varying dimension (x[:, -1] of [b, n, d]) is copied at its sizes.
  if (!from ||
      std::none_of(from->follows.begin(), from->follows.end(), [](int e) { return e >= 0; }))
    return false;
  engine::Bounds bounds{from->sizes, dst.sizes().vec(), {}};
  for (int e : from->follows) bounds.varies.push_back(e >= 0);
  resize_storage_bytes(dst.storage().unsafeGetStorageImpl(),
                       static_cast<size_t>(product(bounds.bounds)) * dst.element_size());
  store_bounds(*slot, std::move(bounds));
  engine::copy_view(*from, bounded_target(dst), "aten::copy_");
  return true;
}

void set_bounds(const at::Tensor& t, c10::IntArrayRef bounds, const std::vector<bool>& varies) {
  engine::StorageSlot* slot = whole_slot(t);
  TORCH_CHECK(slot, "bounds are for tensors on tpu");
  TORCH_CHECK(t.is_contiguous() && t.storage_offset() == 0 &&
                  bounds.size() == static_cast<size_t>(t.dim()) && varies.size() == bounds.size(),
              "bounds are for a contiguous tensor at the start of its storage");
  engine::Bounds b{bounds.vec(), t.sizes().vec(), varies};
  // A dimension bounded by 1 cannot vary.
  for (size_t d = 0; d < varies.size(); ++d) b.varies[d] = varies[d] && bounds[d] > 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    TORCH_CHECK(b.sizes[d] <= b.bounds[d] && (varies[d] || b.sizes[d] == b.bounds[d]), "dimension ",
                d, " of size ", b.sizes[d], " is outside its bound ", b.bounds[d]);
  }
  TORCH_CHECK(product(b.bounds) * static_cast<int64_t>(t.element_size()) ==
                  static_cast<int64_t>(slot->nbytes),
              "the storage must hold the bounds' elements exactly");
  store_bounds(*slot, std::move(b));
}

void written_at_own_sizes(const at::Tensor& t) {
  if (!g_bounds_used) return;
  engine::StorageSlot* slot = whole_slot(t);
  if (!slot || !slot->bounds) return;
  // All the valid entries in row-major order, in any shape ([2, n, d] of a stored
  // [2 * n, d]): the storage keeps them where its bounds say.
  if (t.numel() == product(slot->bounds->sizes) && t.is_contiguous() && t.storage_offset() == 0)
    return;
  slot->bounds.reset();
}

// ---------------------------------------------------------------- plans

const engine::TensorView* BoundedPlan::view(const at::Tensor& t) const {
  for (const Operand& in : inputs) {
    if (in.tensor == t.unsafeGetTensorImpl()) return &in.view;
  }
  return nullptr;
}

void warn_per_size(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   const std::string& why) {
  std::string sizes;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      for (int64_t s : t.sizes()) sizes += std::to_string(s) + ",";
      sizes += ";";
    });
  }
  static std::mutex mutex;
  static auto* first = new std::unordered_map<std::string, std::string>();
  std::lock_guard<std::mutex> lock(mutex);
  // At the second sizes the op runs at for this cause: one size may be a step
  // between two bounds (a slice that turns out to be a window).
  auto [seen, fresh] = first->emplace(op.schema().name() + why, sizes);
  if (fresh || seen->second == sizes) return;
  static auto* warned = new std::unordered_set<std::string>();
  if (!warned->insert(seen->first).second) return;
  // No source location: Python's handler reports the warning at the user's line,
  // without a "Triggered internally at" path inside the backend. c10's own handler
  // (ops called through torch.ops, as graph modules call them) logs the location
  // and throws on a null file: it gets this one.
  c10::WarningHandler* handler = c10::WarningUtils::get_warning_handler();
  const bool python = handler != nullptr && typeid(*handler) != typeid(c10::WarningHandler);
  c10::warn(c10::Warning(
      c10::UserWarning(), c10::SourceLocation{__func__, python ? nullptr : __FILE__, 0},
      c10::str(op.schema().name(), " on tpu compiles a program for each length of a tensor ",
               "whose length changes from call to call (", why,
               "); a loop that grows a sequence by a token compiles one a step. Padding to a few "
               "lengths, or torch.compile of the step, compiles fewer."),
      /*verbatim=*/false));
}

namespace {

// Operators whose results at the bounds hold their results at the sizes as
// leading entries along every dimension (XLA masks the padding in reductions
// and dot products); pointwise operators do too.
bool keeps_valid_entries(const c10::OperatorHandle& op) {
  static const std::unordered_set<std::string> names = {
      "aten::sum",
      "aten::mean",
      "aten::amax",
      "aten::amin",
      "aten::var",
      "aten::std",
      "aten::var_mean",
      "aten::std_mean",
      "aten::argmax",
      "aten::argmin",
      "aten::_softmax",
      "aten::_log_softmax",
      "aten::_safe_softmax",
      "aten::_softmax_backward_data",
      "aten::_log_softmax_backward_data",
      "aten::native_layer_norm",
      "aten::native_layer_norm_backward",
      "aten::mm",
      "aten::bmm",
      "aten::addmm",
      "aten::baddbmm",
      "aten::embedding",
      "aten::embedding_dense_backward",
      "aten::clone",
      "aten::_to_copy",
      "aten::copy_",
      "aten::where",
      "aten::masked_fill",
      "aten::masked_fill_",
      "aten::all",
      "aten::any",
      "aten::isin",
      "aten::tril",
      "aten::triu",
      "aten::cat",
      "aten::stack",
      "aten::cumsum",
      "aten::cumprod",
      "aten::index_select",
      "aten::index",  // negative indices count from the valid size (runtime_size)
      "aten::_unsafe_index",
      "aten::fill_",
      "aten::zero_",
      "aten::full_like",
      "aten::zeros_like",
      "aten::ones_like",
      "aten::empty_like",
      "aten::_unsafe_view",
  };
  return op.hasTag(at::Tag::pointwise) || names.count(op.schema().name()) > 0;
}

// A tensor over `t`'s storage with the sizes of operand `in` at the bounds
// (each varying one less by `shrink`): what the meta kernel sees.
at::Tensor at_bounds(const at::Tensor& t, const BoundedPlan::Operand& in, int64_t shrink) {
  engine::Dims sizes = in.view.sizes;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (in.varies[d]) sizes[d] -= shrink;
  }
  return over_storage_of(t, sizes, in.view.strides, in.view.offset);
}

// Whether `t` read with dimension d at `size` stays within its storage: a slice
// of a larger buffer (`pe[:x.size(0)]`, a causal mask's `bias[:, :, :n, :n]`).
bool storage_holds(const at::Tensor& t, int64_t d, int64_t size) {
  if (t.stride(d) <= 0) return false;
  int64_t last = t.storage_offset();
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (t.stride(k) < 0) return false;
    last += ((k == d ? size : t.size(k)) - 1) * t.stride(k);
  }
  return last < static_cast<int64_t>(t.storage().nbytes() / t.dtype().itemsize());
}

// `t` read with some dimensions at the bound that `bound_of(d)` gives dimension d
// (less than its size: none), so that it fits bounded operands there: its
// broadcast dimensions (stride 0: a sum's expanded gradient, a scalar made the
// size of a varying tensor), which have one value along them, and, with
// `slices`, dimensions its storage holds at the bound (a static buffer sliced to
// a varying length), whose entries past the size only meet padding. Nullopt when
// no dimension changes.
std::optional<BoundedPlan::Operand> stretched(const at::Tensor& t,
                                              const std::function<int64_t(int64_t)>& bound_of,
                                              bool slices = false) {
  if (!is_tpu(t) || t.dim() == 0) return std::nullopt;
  BoundedPlan::Operand in{t.unsafeGetTensorImpl(), view_of(t),
                          std::vector<bool>(static_cast<size_t>(t.dim()), false)};
  bool any = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) <= 1) continue;
    const int64_t bound = bound_of(d);
    if (bound < t.size(d)) continue;
    if (t.stride(d) != 0 && !(slices && storage_holds(t, d, bound))) continue;
    in.view.sizes[d] = bound;
    in.varies[d] = any = true;
  }
  if (!any) return std::nullopt;
  return in;
}

// The bound of a varying dimension of `bounded` that broadcasting lines up with
// dimension d of `t` and that has its size, or 0.
int64_t aligned_bound(const at::Tensor& t, int64_t d,
                      const std::vector<BoundedPlan::Operand>& bounded) {
  const int64_t from_end = t.dim() - d;
  for (const BoundedPlan::Operand& b : bounded) {
    const int64_t e = static_cast<int64_t>(b.varies.size()) - from_end;
    if (e < 0 || !b.varies[e] || b.view.follows[e] < 0) continue;
    if (b.tensor->sizes()[e] == t.size(d)) return b.view.sizes[e];
  }
  return 0;
}

std::atomic<bool> g_automatic{[] {
  const char* env = std::getenv("TORCH_TPU_AUTOMATIC_BOUNDS");
  return !(env && std::string(env) == "0");
}()};

// The bound a cat's result takes when it outgrows its operands' bounds. Each
// new bound is a program per op (strict) or per fused graph: starting at 64
// rather than 16 spares a generation two of them (the tiny Llama's 32 tokens
// from 7 in defer_and_fuse: 14 programs in 13.8 s -> 8 in 5.2 s), padding at
// most 64 rows of a small cache.
int64_t power_of_two_at_least(int64_t n) {
  int64_t p = 64;
  while (p < n) p *= 2;
  return p;
}

// cat(tensors, dim): its dimension (wrapped by the result's rank).
int64_t cat_dim(c10::ArrayRef<c10::IValue> args, size_t rank) {
  int64_t dim = args.size() > 1 && args[1].isInt() ? args[1].toInt() : 0;
  auto r = static_cast<int64_t>(rank);
  return r > 0 ? (dim % r + r) % r : 0;
}

// The operands of a cat that count (a legacy empty 1-d operand does not).
std::vector<at::Tensor> cat_operands(c10::ArrayRef<c10::IValue> args, size_t rank) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorList()) {
    if (static_cast<size_t>(t.dim()) == rank) out.push_back(t);
  }
  return out;
}

// A cat along a dimension that varies (or, with automatic bounds, has been
// seen to change), computed at a bound the result keeps while it fits: the
// largest operand bound, or else a power of two.
std::optional<BoundedPlan> plan_cat_at_bounds(BoundedPlan plan, c10::ArrayRef<c10::IValue> args,
                                              const ReturnLayouts& real, std::string* why) {
  const ResultLayout& out = *real.at(0).at(0);
  const int64_t dim = cat_dim(args, out.sizes.size());
  int64_t offset = 0, need = out.sizes[dim], kept = 0;
  for (const at::Tensor& t : cat_operands(args, out.sizes.size())) {
    const engine::TensorView* v = plan.view(t);
    for (const BoundedPlan::Operand& in : plan.inputs) {
      if (in.tensor != t.unsafeGetTensorImpl()) continue;
      for (size_t d = 0; d < in.varies.size(); ++d) {
        if (in.varies[d] && static_cast<int64_t>(d) != dim) {
          *why = "it concatenates tensors that vary along another dimension too";
          return std::nullopt;
        }
      }
    }
    const int64_t at_bound = v ? v->sizes[dim] : t.size(dim);
    need = std::max(need, offset + at_bound);
    if (v) kept = std::max(kept, at_bound);
    offset += t.size(dim);
  }
  if (!is_contiguous(out.sizes, out.strides)) {
    *why = "its result is not contiguous";
    return std::nullopt;
  }
  engine::Bounds bounds{out.sizes, out.sizes, std::vector<bool>(out.sizes.size(), false)};
  bounds.bounds[dim] = need <= kept ? kept : power_of_two_at_least(need);
  bounds.varies[dim] = true;
  plan.results = {{std::move(bounds)}};
  plan.rule = "_tpu_cat_at_bounds";
  return plan;
}

// Automatic bounds: whether this cat's result size along its dimension differs
// from the first one of a cat of the same operand shapes otherwise.
bool seen_changing(c10::ArrayRef<c10::IValue> args, const ReturnLayouts& real) {
  if (!g_automatic || real.size() != 1 || real[0].size() != 1 || !real[0][0]) return false;
  const ResultLayout& out = *real[0][0];
  if (out.sizes.empty()) return false;
  const int64_t dim = cat_dim(args, out.sizes.size());
  if (out.sizes[dim] < 2) return false;
  std::string key = std::to_string(dim);
  for (const at::Tensor& t : cat_operands(args, out.sizes.size())) {
    if (!is_tpu(t)) return false;
    key += "|" + std::to_string(static_cast<int>(t.scalar_type()));
    for (int64_t d = 0; d < t.dim(); ++d) key += "," + std::to_string(d == dim ? -1 : t.size(d));
  }
  static std::mutex mutex;
  static auto* first = new std::unordered_map<std::string, int64_t>();
  std::lock_guard<std::mutex> lock(mutex);
  // Against the first size: cats of one shape in several places (each layer's
  // keys and values) all see the change.
  return first->emplace(key, out.sizes[dim]).first->second != out.sizes[dim];
}

// Automatic bounds: a factory writing a whole new tensor (arange's out, the
// fill_ of zeros, ones and full) at sizes that varying dimensions of live
// tensors have makes it with their bounds: position ids and masks made from a varying
// size (`arange(seq_len)`) then meet the tensors they go with at one bound.
// A size that only happens to match costs a larger storage, never a value:
// tensors with bounds hold the same values.
std::optional<BoundedPlan> plan_fresh_at_bounds(const c10::OperatorHandle& op,
                                                c10::ArrayRef<c10::IValue> args,
                                                const ReturnLayouts& real,
                                                const std::vector<size_t>& written) {
  static const std::unordered_set<std::string> factories = {"aten::arange", "aten::fill_",
                                                            "aten::zero_"};
  if (!g_automatic || written.size() != 1 || !args[written[0]].isTensor() ||
      !factories.count(op.schema().name())) {
    return std::nullopt;
  }
  const at::Tensor& t = args[written[0]].toTensor();
  engine::StorageSlot* slot = unwritten_whole_slot(t);
  if (!slot || t.numel() == 0) return std::nullopt;
  engine::Bounds bounds{t.sizes().vec(), t.sizes().vec(), std::vector<bool>(t.dim(), false)};
  bool varies = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t bound = t.size(d) < 2 ? 0 : varying_bound(t.size(d));
    if (bound < t.size(d)) continue;
    bounds.bounds[d] = bound;
    bounds.varies[d] = varies = true;
  }
  if (!varies) return std::nullopt;
  resize_storage_bytes(t.storage().unsafeGetStorageImpl(),
                       static_cast<size_t>(product(bounds.bounds)) * t.element_size());
  store_bounds(*slot, std::move(bounds));
  BoundedPlan plan;
  engine::TensorView view = *bounded_view(t);
  std::vector<bool> along;
  for (int e : view.follows) along.push_back(e >= 0);
  plan.inputs.push_back({t.unsafeGetTensorImpl(), std::move(view), std::move(along)});
  for (const auto& r : real) plan.results.emplace_back(r.size());
  return plan;
}

// A pointwise op none of whose operands has bounds, each of them broadcast
// along a dimension of the size of a live varying one (mean's gradient,
// `grad.expand(sizes) / n`), has one value along it: it runs at that bound as
// factories do. Fills plan.inputs with them, stretched; false when that does
// not apply.
bool broadcasts_at_live_bounds(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                               const std::vector<size_t>& written, BoundedPlan& plan) {
  if (!g_automatic || !written.empty() || !op.hasTag(at::Tag::pointwise)) return false;
  bool all = true;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!all || !t.defined() || t.dim() == 0) return;
      auto in = stretched(t, [&](int64_t d) { return varying_bound(t.size(d)); });
      if (in) {
        plan.inputs.push_back(std::move(*in));
      } else {
        all = false;
      }
    });
  }
  if (!all) plan.inputs.clear();
  return !plan.inputs.empty();
}

// Operands that do not fit together at the bounds because a static size
// only happened to match a live varying one (a batch of 3 among lengths of
// 3, stretched or split with its bound): each varying dimension that meets a
// static one of its size in another operand (aligned from the last, as
// broadcasting does) is read at its size instead. False when none does.
bool demote_coincidences(std::vector<BoundedPlan::Operand>& inputs) {
  bool any = false;
  for (BoundedPlan::Operand& a : inputs) {
    for (const BoundedPlan::Operand& b : inputs) {
      const size_t ra = a.varies.size(), rb = b.varies.size();
      for (size_t k = 1; &a != &b && k <= std::min(ra, rb); ++k) {
        const size_t da = ra - k, db = rb - k;
        const int64_t size = a.tensor->sizes()[da];
        if (!a.varies[da] || b.varies[db] || size <= 1 || b.tensor->sizes()[db] != size) continue;
        a.view.sizes[da] = size;
        a.varies[da] = false;
        if (a.view.bounded()) a.view.follows[da] = -1;
        any = true;
      }
    }
  }
  return any;
}

bool all_empty(const ReturnLayouts& real) {
  bool any = false;
  for (const auto& results : real) {
    for (const auto& r : results) {
      if (!r) continue;
      if (product(r->sizes) != 0) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace

std::optional<BoundedPlan> plan_bounded(
    const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, const ReturnLayouts& real,
    const std::vector<size_t>& written, const std::vector<int>& return_alias,
    const std::function<std::optional<ReturnLayouts>(c10::ArrayRef<c10::IValue>)>& meta_at) {
  static const c10::OperatorName cat{"aten::cat", ""};
  const bool is_cat = op.operator_name() == cat;
  if (!(g_bounds_used || (is_cat && g_automatic)) || g_without_bounds) {
    return std::nullopt;
  }
  BoundedPlan plan;
  std::string why;
  bool any = false, readable = true;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined() || !has_bounds(t)) return;
      any = true;
      std::optional<engine::TensorView> view = bounded_view(t, &why);
      if (view) {
        std::vector<bool> varies;
        for (int e : view->follows) varies.push_back(e >= 0);
        plan.inputs.push_back({t.unsafeGetTensorImpl(), std::move(*view), std::move(varies)});
      } else {
        readable = false;
      }
    });
  }
  // An empty result has no entries to compute at the bounds (the program read its
  // empty operands there, gathering from a dimension of size 0, which XLA refuses):
  // the call runs at its own sizes, where an empty result costs no program.
  if (all_empty(real)) return std::nullopt;
  if (!any) {
    if (is_cat && seen_changing(args, real)) return plan_cat_at_bounds(plan, args, real, &why);
    if (!g_bounds_used) return std::nullopt;
    if (!broadcasts_at_live_bounds(op, args, written, plan)) {
      return plan_fresh_at_bounds(op, args, real, written);
    }
  }
  auto per_size = [&](const std::string& reason) -> std::optional<BoundedPlan> {
    warn_per_size(op, args, reason);
    return std::nullopt;
  };
  if (!readable) return per_size(why);
  if (!keeps_valid_entries(op)) {
    return per_size("it is not known to keep the valid entries leading");
  }
  if (is_cat) {
    const int64_t dim = cat_dim(args, real.at(0).at(0)->sizes.size());
    bool along = false;
    for (const BoundedPlan::Operand& in : plan.inputs) along |= in.varies.at(dim);
    if (along) {
      std::optional<BoundedPlan> at_bounds = plan_cat_at_bounds(plan, args, real, &why);
      return at_bounds ? at_bounds : per_size(why);
    }
  }
  const std::vector<BoundedPlan::Operand> bounded = plan.inputs;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined() || plan.view(t)) return;
      auto bound_of = [&](int64_t d) { return aligned_bound(t, d, bounded); };
      if (auto in = stretched(t, bound_of, /*slices=*/true)) plan.inputs.push_back(std::move(*in));
    });
  }
  auto meta_with = [&](int64_t shrink) {
    std::vector<c10::IValue> stand_in;
    for (const c10::IValue& v : args) {
      stand_in.push_back(map_tensors(v, [&](const at::Tensor& t) {
        if (!t.defined()) return t;
        for (const BoundedPlan::Operand& in : plan.inputs) {
          if (in.tensor == t.unsafeGetTensorImpl()) return at_bounds(t, in, shrink);
        }
        return t;
      }));
    }
    return meta_at(stand_in);
  };
  std::optional<ReturnLayouts> bound = meta_with(0), below = meta_with(1);
  if ((!bound || !below) && demote_coincidences(plan.inputs)) {
    bound = meta_with(0);
    below = meta_with(1);
  }
  if (!bound || !below) return per_size("its operands do not fit together at the bounds");
  for (size_t w : written) {
    bool whole = true;
    for_each_tensor(args[w], [&](const at::Tensor& t) {
      const engine::TensorView* view = plan.view(t);
      // All of it in its stored order, static dimensions possibly split or
      // merged (bmm's [8, n, n] result written as [2, 4, n, n]).
      whole &= view && view->offset == 0 && product(view->sizes) == product(view->stored->bounds) &&
               is_contiguous(view->sizes, view->strides);
    });
    if (!whole) return per_size("it writes a tensor that is not all of a bounded one");
  }
  for (size_t r = 0; r < real.size(); ++r) {
    plan.results.emplace_back(real[r].size());
    if (return_alias[r] >= 0) continue;
    for (size_t k = 0; k < real[r].size(); ++k) {
      const auto &at = real[r][k], &b = (*bound)[r].at(k), &p = (*below)[r].at(k);
      if (!at || !b || !p) continue;
      engine::Bounds out{b->sizes, at->sizes, std::vector<bool>(at->sizes.size())};
      bool varies = false;
      if (b->sizes.size() != at->sizes.size() || p->sizes.size() != at->sizes.size()) {
        return per_size("its result's rank depends on the sizes");
      }
      for (size_t d = 0; d < at->sizes.size(); ++d) {
        out.varies[d] = b->sizes[d] != p->sizes[d];
        varies |= out.varies[d];
        if (at->sizes[d] > b->sizes[d] || (!out.varies[d] && at->sizes[d] != b->sizes[d])) {
          return per_size("its result's sizes do not follow its operands'");
        }
      }
      if (!varies) continue;
      if (!dense_at_bounds(at->sizes, at->strides, out)) {
        return per_size("its result's layout is not dense");
      }
      plan.results[r][k] = std::move(out);
    }
  }
  return plan;
}

WithoutBounds::WithoutBounds() : was_(g_without_bounds) { g_without_bounds = true; }
WithoutBounds::~WithoutBounds() { g_without_bounds = was_; }

void set_automatic_bounds(bool on) { g_automatic = on; }
bool automatic_bounds() { return g_automatic; }

}  // namespace torch_tpu::aten
