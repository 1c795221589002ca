#include "fixture.h"
#include "harness.h"
#include "lower/helpers.h"

using namespace torch_tpu;
using lower::Category;
using lower::Operand;
using E = ElementType;

namespace {

Operand operand(E type, Category category) {
  Operand o;
  o.dtype = type;
  o.category = category;
  return o;
}

}  // namespace

TEST(lower_promote_types_matches_pytorch) {
  CHECK(lower::promote_types(E::U8, E::S8) == E::S16);
  CHECK(lower::promote_types(E::U8, E::S16) == E::S16);
  CHECK(lower::promote_types(E::Pred, E::F16) == E::F16);
  CHECK(lower::promote_types(E::S32, E::F32) == E::F32);
  CHECK(lower::promote_types(E::S64, E::F16) == E::F16);
  CHECK(lower::promote_types(E::F16, E::BF16) == E::F32);
  CHECK(lower::promote_types(E::F32, E::F64) == E::F64);
  CHECK(lower::promote_types(E::S64, E::C64) == E::C64);
  CHECK(lower::promote_types(E::F64, E::C64) == E::C128);
  CHECK(lower::promote_types(E::U8, E::U8) == E::U8);
}

TEST(lower_result_type_follows_categories) {
  // int32 tensor + Python float -> float32
  auto t_i32 = operand(E::S32, Category::Tensor);
  auto py_float = operand(E::F32, Category::WrappedNumber);
  CHECK(lower::result_type({&t_i32, &py_float}) == E::F32);
  // float16 tensor + Python float stays float16
  auto t_f16 = operand(E::F16, Category::Tensor);
  CHECK(lower::result_type({&t_f16, &py_float}) == E::F16);
  // float32 tensor + zero-dim float64 tensor stays float32
  auto t_f32 = operand(E::F32, Category::Tensor);
  auto z_f64 = operand(E::F64, Category::ZeroDim);
  CHECK(lower::result_type({&t_f32, &z_f64}) == E::F32);
  // int32 tensor + zero-dim float64 tensor -> float64 (higher category wins)
  CHECK(lower::result_type({&t_i32, &z_f64}) == E::F64);
  // int8 tensor + zero-dim int64 tensor stays int8
  auto t_i8 = operand(E::S8, Category::Tensor);
  auto z_i64 = operand(E::S64, Category::ZeroDim);
  CHECK(lower::result_type({&t_i8, &z_i64}) == E::S8);
  // bool tensor + Python int -> int64
  auto t_bool = operand(E::Pred, Category::Tensor);
  auto py_int = operand(E::S64, Category::WrappedNumber);
  CHECK(lower::result_type({&t_bool, &py_int}) == E::S64);
}

TEST(lower_shape_helpers) {
  CHECK((lower::broadcast_shapes({3, 1, 5}, {4, 1}) == hlo::Dims{3, 4, 5}));
  CHECK_THROWS(lower::broadcast_shapes({3}, {4}), "cannot be broadcast");
  CHECK((lower::reduction_dims({-1, 0}, 3) == hlo::Dims{0, 2}));
  CHECK((lower::reduction_dims({}, 2) == hlo::Dims{0, 1}));
  CHECK((lower::reduced_shape({2, 3, 4}, {1}, true) == hlo::Dims{2, 1, 4}));
  CHECK((lower::reduced_shape({2, 3, 4}, {1}, false) == hlo::Dims{2, 4}));
  CHECK_THROWS(lower::wrap_dim(3, 3), "out of range");
}

TEST(lower_registered_rule_runs_on_the_plugin) {
  // cat([a, b], dim=1) through the rule table, as the engine would call it.
  const lower::Rule* rule = lower::find_rule("cat");
  CHECK(rule != nullptr);
  hlo::Builder b;
  auto a = b.parameter({E::F32, {2, 1}});
  auto c = b.parameter({E::F32, {2, 2}});
  lower::Arg list;
  list.is_operand = list.is_list = true;
  list.operands = {Operand{a, E::F32, Category::Tensor}, Operand{c, E::F32, Category::Tensor}};
  lower::Arg dim;
  dim.value = int64_t{1};
  lower::Context ctx(b, "aten::cat", hlo::Precision::Highest, "cpu", {{E::F32, {2, 3}}});
  auto out = rule->fn(ctx, lower::Args({list, dim}));
  CHECK_EQ(out.size(), 1u);
  auto ab = testing::upload_f32({1, 2}, {2, 1});
  auto cb = testing::upload_f32({3, 4, 5, 6}, {2, 2});
  auto result = testing::run_program(b, out, {ab.get(), cb.get()});
  CHECK((result[0] == std::vector<double>{1, 3, 4, 2, 5, 6}));
}

TEST(lower_every_rule_name_is_unique_and_has_a_function) {
  auto names = lower::rule_names();
  CHECK(names.size() > 20);
  auto duplicates = lower::duplicate_rule_names();
  if (!duplicates.empty()) testing::fail("registered twice: " + duplicates[0], __FILE__, __LINE__);
  for (const auto& name : names) CHECK(lower::find_rule(name)->fn != nullptr);
}

namespace {

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The program of mm([4,8] x [8,3]) of `type` at `precision` on `platform`.
std::string mm_program(E type, hlo::Precision precision, const std::string& platform) {
  hlo::Builder b;
  Operand x{b.parameter({type, {4, 8}}), type, Category::Tensor};
  Operand y{b.parameter({type, {8, 3}}), type, Category::Tensor};
  lower::Context ctx(b, "aten::mm", precision, platform, {{type, {4, 3}}});
  lower::Arg lhs, rhs;
  lhs.is_operand = rhs.is_operand = true;
  lhs.operands = {x};
  rhs.operands = {y};
  return b.module_text(lower::find_rule("mm")->fn(ctx, lower::Args({lhs, rhs})));
}

}  // namespace

// A TPU's float32 arithmetic spelled out for matrix units that ignore
// precision_config: products of bfloat16 operands summed in float32 (a GPU's
// tensor cores), one for DEFAULT, three for HIGH; HIGHEST multiplies float32.
TEST(lower_f32_products_are_bf16_dots_with_f32_sums) {
  const std::string bf16_dot = "(tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xf32>";
  const std::string f32_dot = "(tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>";
  // XLA's CPU runtime has no BF16 x BF16 = F32 library product: there the bfloat16
  // operands are widened to float32 first (the same exact products and sums).
  const std::string widened = "(tensor<4x8xbf16>) -> tensor<4x8xf32>";
  for (const char* platform : {"cuda", "cpu"}) {
    const bool cpu = std::string(platform) == "cpu";
    std::string fast = mm_program(E::F32, hlo::Precision::Default, platform);
    CHECK_EQ(count(fast, bf16_dot), cpu ? 0 : 1);
    CHECK_EQ(count(fast, f32_dot), cpu ? 1 : 0);
    CHECK_EQ(count(fast, widened), cpu ? 1 : 0);
    std::string high = mm_program(E::F32, hlo::Precision::High, platform);
    CHECK_EQ(count(high, cpu ? f32_dot : bf16_dot), 3);
    std::string exact = mm_program(E::F32, hlo::Precision::Highest, platform);
    CHECK_EQ(count(exact, bf16_dot), 0);
    CHECK_EQ(count(exact, f32_dot), 1);
    CHECK(exact.find("precision HIGHEST") != std::string::npos);
    // Half types go to the matrix units as they are, summing in float32.
    std::string half = mm_program(E::BF16, hlo::Precision::Default, platform);
    CHECK_EQ(count(half, cpu ? f32_dot : bf16_dot), 1);
  }
  // A TPU is asked for its own arithmetic.
  std::string tpu = mm_program(E::F32, hlo::Precision::Default, "tpu");
  CHECK_EQ(count(tpu, f32_dot), 1);
  CHECK(tpu.find("precision DEFAULT") != std::string::npos);
}
