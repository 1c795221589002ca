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
