// The engine's view machinery against a host model of strided memory.
#include <cstdlib>
#include <numeric>

#include "engine/backend.h"
#include "engine/deferred.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/storage_ops.h"
#include "engine/trace.h"
#include "fixture.h"
#include "harness.h"

using namespace torch_tpu;
using engine::StorageSlot;
using engine::TensorView;

namespace {

struct ViewCase {
  const char* name;
  hlo::Dims sizes, strides;
  int64_t offset;
};

// Views of a 24-element storage covering each layout class.
const ViewCase kCases[] = {
    {"whole", {2, 3, 4}, {12, 4, 1}, 0},
    {"block", {2, 4}, {4, 1}, 8},
    {"transpose", {4, 6}, {1, 4}, 0},
    {"permuted_block", {3, 2}, {1, 3}, 5},
    {"broadcast", {3, 4}, {0, 1}, 4},
    {"strided", {3, 2}, {8, 3}, 1},
    {"diagonal",
     {4},
     {
         5,
     },
     0},
    {"scalar", {}, {}, 7},
    {"size_one_dims", {1, 4, 1}, {99, 2, 7}, 3},
};

void start_backend() {
  static bool started = [] {
    setenv("TORCH_TPU_LOCK_DIR", "/tmp/torch_tpu_cpp_test_locks", 1);
    engine::Backend::configure({testing::test_platform(), std::getenv("TORCH_TPU_PLUGIN"), 1, ""});
    return true;
  }();
  (void)started;
}

std::unique_ptr<StorageSlot> make_storage(const std::vector<float>& values) {
  start_backend();
  auto slot = std::make_unique<StorageSlot>();
  slot->nbytes = values.size() * sizeof(float);
  engine::upload_storage(*slot, values.data(), ElementType::F32, values.size());
  return slot;
}

TensorView view(StorageSlot* slot, const ViewCase& c) {
  return TensorView{slot, ElementType::F32, c.sizes, c.strides, c.offset};
}

// Host model: the storage index of every element of a view, row-major.
std::vector<int64_t> element_indices(const ViewCase& c) {
  std::vector<int64_t> out{c.offset};
  for (size_t d = 0; d < c.sizes.size(); ++d) {
    std::vector<int64_t> next;
    for (int64_t base : out) {
      for (int64_t i = 0; i < c.sizes[d]; ++i) next.push_back(base + i * c.strides[d]);
    }
    out = next;
  }
  return out;
}

std::vector<float> iota(size_t n, float start = 0) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST(engine_reads_every_view_layout) {
  auto storage = make_storage(iota(24));
  for (const auto& c : kCases) {
    TensorView v = view(storage.get(), c);
    std::vector<float> got(v.numel());
    engine::download_view(v, got.data());
    auto idx = element_indices(c);
    for (size_t i = 0; i < idx.size(); ++i) {
      if (got[i] != static_cast<float>(idx[i])) {
        testing::fail(std::string("view ") + c.name + " element " + std::to_string(i), __FILE__,
                      __LINE__);
      }
    }
  }
}

TEST(engine_writes_every_view_layout) {
  for (const auto& c : kCases) {
    if (std::string(c.name) == "broadcast") continue;  // overlapping writes are invalid
    auto storage = make_storage(iota(24));
    TensorView dst = view(storage.get(), c);
    auto values = iota(dst.numel(), 100);
    auto src_slot = make_storage(values);
    TensorView src{src_slot.get(), ElementType::F32, dst.sizes,
                   engine::contiguous_strides(dst.sizes), 0};
    engine::copy_view(src, dst, "test::copy");
    std::vector<float> expected = iota(24);
    auto idx = element_indices(c);
    for (size_t i = 0; i < idx.size(); ++i) expected[idx[i]] = values[i];
    std::vector<float> got(24);
    engine::download_view(TensorView{storage.get(), ElementType::F32, {24}, {1}, 0}, got.data());
    if (got != expected) testing::fail(std::string("write through ") + c.name, __FILE__, __LINE__);
  }
}

// DeferAndFuse: writes through every view layout, in order, become one
// program run at the read; sources freed while pending are safe.
TEST(engine_deferred_writes_run_as_one_program) {
  auto storage = make_storage(iota(24));
  std::vector<float> expected = iota(24);
  engine::set_eager_mode(engine::EagerMode::DeferAndFuse);
  int64_t before = engine::metrics().executions;
  for (const auto& c : kCases) {
    if (std::string(c.name) == "broadcast") continue;
    TensorView dst = view(storage.get(), c);
    auto values = iota(dst.numel(), 100 * (&c - kCases));
    auto src_slot = make_storage(values);  // freed at the end of the iteration
    engine::copy_view(
        {src_slot.get(), ElementType::F32, dst.sizes, engine::contiguous_strides(dst.sizes), 0},
        dst, "test::copy");
    auto idx = element_indices(c);
    for (size_t i = 0; i < idx.size(); ++i) expected[idx[i]] = values[i];
  }
  CHECK_EQ(engine::metrics().executions, before);
  std::vector<float> got(24);
  engine::download_view(TensorView{storage.get(), ElementType::F32, {24}, {1}, 0}, got.data());
  engine::set_eager_mode(engine::EagerMode::Strict);
  CHECK_EQ(engine::metrics().executions, before + 1);
  CHECK((got == expected));
}

TEST(engine_offsets_are_operands_not_recompiles) {
  auto storage = make_storage(iota(24));
  int64_t before = engine::metrics().compiles;
  for (int64_t offset = 0; offset < 16; offset += 4) {
    TensorView v{storage.get(), ElementType::F32, {2, 2}, {2, 1}, offset + 1};
    std::vector<float> got(4);
    engine::download_view(v, got.data());
    CHECK_EQ(got[0], static_cast<float>(offset + 1));
  }
  CHECK(engine::metrics().compiles - before <= 1);
}

TEST(engine_compile_error_names_what_the_program_runs) {
  start_backend();
  CHECK_THROWS(engine::Backend::get().compile("module { this is not mlir }", /*fast=*/false,
                                              "aten::frobnicate", {}),
               "aten::frobnicate: XLA compilation failed");
}

// A profile that ends as soon as the host has read a result may hold the copy's
// completion but not yet the program's (PJRT runs callbacks late): the program
// still gets its row, ended no later than the copy that followed it.
TEST(engine_device_timeline_orders_late_completions) {
  using engine::DeviceSpan;
  // queued at 10, 20, 30; the first reported late (at 50), the second not at all.
  std::vector<DeviceSpan> spans = engine::device_timeline({{10, 50}, {20, -1}, {30, 40}, {35, -1}});
  CHECK_EQ(spans.size(), size_t{4});
  CHECK_EQ(spans[0].start, int64_t{10});
  CHECK_EQ(spans[0].end, int64_t{40});
  CHECK_EQ(spans[1].start, int64_t{40});
  CHECK_EQ(spans[1].end, int64_t{40});
  CHECK_EQ(spans[2].start, int64_t{40});
  CHECK_EQ(spans[2].end, int64_t{40});
  CHECK_EQ(spans[3].end, int64_t{-1});  // nothing after it says it ended
  std::vector<DeviceSpan> apart = engine::device_timeline({{10, 15}, {20, 25}});
  CHECK((apart[1].start == 20 && apart[1].end == 25 && apart[0].end == 15));
}

TEST(engine_unwritten_storage_reads_as_zeros) {
  start_backend();
  StorageSlot slot;
  slot.nbytes = 16;
  std::vector<float> got(4, -1);
  engine::download_view(TensorView{&slot, ElementType::F32, {2, 2}, {1, 2}, 0}, got.data());
  CHECK((got == std::vector<float>{0, 0, 0, 0}));
}

TEST(engine_resize_keeps_contents) {
  auto storage = make_storage(iota(4));
  engine::resize_storage(*storage, 8 * sizeof(float));
  std::vector<float> got(8);
  engine::download_view(TensorView{storage.get(), ElementType::F32, {8}, {1}, 0}, got.data());
  CHECK((got == std::vector<float>{0, 1, 2, 3, 0, 0, 0, 0}));
  engine::resize_storage(*storage, 2 * sizeof(float));
  std::vector<float> small(2);
  engine::download_view(TensorView{storage.get(), ElementType::F32, {2}, {1}, 0}, small.data());
  CHECK((small == std::vector<float>{0, 1}));
}
