#include "fixture.h"
#include "harness.h"

using namespace torch_tpu;
using hlo::Builder;
using hlo::Shape;
using hlo::Value;
using testing::run_program;
using testing::upload_f32;

namespace {

Shape f32(std::vector<int64_t> dims) { return Shape{ElementType::F32, std::move(dims)}; }

hlo::RegionFn adder() {
  return [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
    return {r.add(a[0], a[1])};
  };
}

}  // namespace

TEST(hlo_module_text_has_public_main) {
  Builder b;
  auto x = b.parameter(f32({2}));
  std::string text = b.module_text({b.neg(x)});
  CHECK(text.find("func.func public @main(%arg0: tensor<2xf32>)") != std::string::npos);
  CHECK(text.find("\"stablehlo.negate\"(%arg0)") != std::string::npos);
}

TEST(hlo_constants_are_exact) {
  Builder b;
  auto third = b.constant(1.0 / 3.0, ElementType::F32);
  auto big = b.constant_int(-123456789012345, ElementType::S64);
  auto half = b.convert(b.constant(0.1, ElementType::F64), ElementType::F32);
  auto out = run_program(b, {third, big, half}, {});
  CHECK_EQ(static_cast<float>(out[0][0]), 1.0f / 3.0f);
  CHECK_EQ(out[1][0], -123456789012345.0);
  CHECK_EQ(static_cast<float>(out[2][0]), 0.1f);
}

TEST(hlo_elementwise_broadcast_and_compare) {
  Builder b;
  auto x = b.parameter(f32({2, 3}));
  auto row = b.parameter(f32({3}));
  auto rowb = b.broadcast_in_dim(row, {2, 3}, {1});
  auto sum = b.add(x, rowb);
  auto gt = b.compare(sum, b.full(f32({2, 3}), 10.0), hlo::Comparison::GT);
  auto picked = b.select(gt, sum, b.full(f32({2, 3}), -1.0));
  auto xb = upload_f32({1, 2, 3, 4, 5, 6}, {2, 3});
  auto rb = upload_f32({10, 0, 5}, {3});
  auto out = run_program(b, {picked}, {xb.get(), rb.get()});
  std::vector<double> expect{11, -1, -1, 14, -1, 11};
  CHECK(out[0] == expect);
}

TEST(hlo_transpose_slice_reshape_concat_pad) {
  Builder b;
  auto x = b.parameter(f32({2, 3}));
  auto t = b.transpose(x, {1, 0});              // 3x2
  auto s = b.slice(t, {1, 0}, {3, 2}, {1, 1});  // rows 1..2
  auto r = b.reshape(s, {4});
  auto c = b.concatenate({r, b.full(f32({1}), 9.0)}, 0);  // 5
  auto p = b.pad(c, b.constant(0.0, ElementType::F32), {1}, {0}, {0});
  auto out = run_program(b, {p}, {upload_f32({1, 2, 3, 4, 5, 6}, {2, 3}).get()});
  std::vector<double> expect{0, 2, 5, 3, 6, 9};
  CHECK(out[0] == expect);
}

TEST(hlo_dynamic_slice_and_update) {
  Builder b;
  auto x = b.parameter(f32({6}));
  auto at = b.parameter(Shape{ElementType::S64, {}});
  auto window = b.dynamic_slice(x, {at}, {2});
  auto doubled = b.add(window, window);
  auto updated = b.dynamic_update_slice(x, doubled, {at});
  int64_t two = 2;
  auto idx = testing::test_client().buffer_from_host(&two, ElementType::S64, {}, 0);
  auto out = run_program(b, {updated}, {upload_f32({1, 2, 3, 4, 5, 6}, {6}).get(), idx.get()});
  std::vector<double> expect{1, 2, 6, 8, 5, 6};
  CHECK(out[0] == expect);
}

TEST(hlo_reduce_and_argmax_pair) {
  Builder b;
  auto x = b.parameter(f32({2, 3}));
  auto sum = b.reduce({x}, {b.constant(0.0, ElementType::F32)}, {1}, adder())[0];
  auto idx = b.iota(Shape{ElementType::S64, {2, 3}}, 1);
  auto max =
      b.reduce({x, idx}, {b.constant(-1e30, ElementType::F32), b.constant_int(0, ElementType::S64)},
               {1}, [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                 auto take_left = r.compare(a[0], a[2], hlo::Comparison::GE);
                 return {r.select(take_left, a[0], a[2]), r.select(take_left, a[1], a[3])};
               });
  auto out = run_program(b, {sum, max[0], max[1]}, {upload_f32({1, 5, 3, 4, 2, 6}, {2, 3}).get()});
  CHECK((out[0] == std::vector<double>{9, 12}));
  CHECK((out[1] == std::vector<double>{5, 6}));
  CHECK((out[2] == std::vector<double>{1, 2}));
}

TEST(hlo_dot_general_batched) {
  Builder b;
  auto lhs = b.parameter(f32({1, 2, 3}));
  auto rhs = b.parameter(f32({1, 3, 1}));
  hlo::DotDims d{{0}, {0}, {2}, {1}};
  auto y = b.dot_general(lhs, rhs, d, hlo::Precision::Highest, ElementType::F32);
  CHECK((y.dims() == hlo::Dims{1, 2, 1}));
  auto out = run_program(
      b, {y},
      {upload_f32({1, 2, 3, 4, 5, 6}, {1, 2, 3}).get(), upload_f32({1, 1, 1}, {1, 3, 1}).get()});
  CHECK((out[0] == std::vector<double>{6, 15}));
}

TEST(hlo_convolution_nchw) {
  Builder b;
  auto x = b.parameter(f32({1, 1, 3, 3}));
  auto w = b.parameter(f32({1, 1, 2, 2}));
  hlo::ConvDims d{0, 1, {2, 3}, 0, 1, {2, 3}, 0, 1, {2, 3}};
  hlo::ConvConfig c;
  auto y = b.convolution(x, w, d, c, hlo::Precision::Highest, ElementType::F32);
  CHECK((y.dims() == hlo::Dims{1, 1, 2, 2}));
  auto out = run_program(b, {y},
                         {upload_f32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}).get(),
                          upload_f32({1, 0, 0, 1}, {1, 1, 2, 2}).get()});
  CHECK((out[0] == std::vector<double>{6, 8, 12, 14}));
}

TEST(hlo_gather_and_scatter_add) {
  Builder b;
  auto x = b.parameter(f32({5}));
  auto idx = b.parameter(Shape{ElementType::S32, {3, 1}});
  hlo::GatherDims g{{}, {0}, {0}, 1};
  auto picked = b.gather(x, idx, g, {1});
  hlo::ScatterDims s{{}, {0}, {0}, 1};
  auto added = b.scatter(x, idx, picked, s, adder());
  int32_t ids[] = {4, 0, 4};
  auto ib = testing::test_client().buffer_from_host(ids, ElementType::S32, {3, 1}, 0);
  auto out = run_program(b, {picked, added}, {upload_f32({1, 2, 3, 4, 5}, {5}).get(), ib.get()});
  CHECK((out[0] == std::vector<double>{5, 1, 5}));
  CHECK((out[1] == std::vector<double>{2, 2, 3, 4, 15}));
}

TEST(hlo_sort_with_payload) {
  Builder b;
  auto keys = b.parameter(f32({4}));
  auto payload = b.iota(Shape{ElementType::S32, {4}}, 0);
  auto sorted = b.sort({keys, payload}, 0, true,
                       [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                         return {r.compare(a[0], a[1], hlo::Comparison::LT)};
                       });
  auto out = run_program(b, sorted, {upload_f32({3, 1, 2, 0}, {4}).get()});
  CHECK((out[0] == std::vector<double>{0, 1, 2, 3}));
  CHECK((out[1] == std::vector<double>{3, 1, 2, 0}));
}

TEST(hlo_reduce_window_max_pool) {
  Builder b;
  auto x = b.parameter(f32({4}));
  hlo::Window w{{2}, {2}, {}, {}, {}};
  auto y = b.reduce_window({x}, {b.constant(-1e30, ElementType::F32)}, w,
                           [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                             return {r.max(a[0], a[1])};
                           })[0];
  auto out = run_program(b, {y}, {upload_f32({1, 3, 2, 0}, {4}).get()});
  CHECK((out[0] == std::vector<double>{3, 2}));
}

TEST(hlo_rng_bit_generator_is_deterministic) {
  auto draw = [] {
    Builder b;
    auto state = b.parameter(Shape{ElementType::U64, {2}});
    auto [next, bits] = b.rng_bit_generator(state, Shape{ElementType::U32, {4}});
    uint64_t seed[2] = {42, 0};
    auto sb = testing::test_client().buffer_from_host(seed, ElementType::U64, {2}, 0);
    return run_program(b, {bits}, {sb.get()})[0];
  };
  auto first = draw();
  CHECK(first == draw());
  CHECK(first[0] != first[1]);
}

TEST(hlo_while_loop_counts) {
  Builder b;
  auto zero = b.constant_int(0, ElementType::S32);
  auto out = b.while_loop(
      {zero},
      [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
        return {r.compare(a[0], r.constant_int(5, ElementType::S32), hlo::Comparison::LT)};
      },
      [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
        return {r.add(a[0], r.constant_int(1, ElementType::S32))};
      });
  auto result = run_program(b, out, {});
  CHECK_EQ(result[0][0], 5.0);
}

// Elementwise ops on a reshape run on its source shape (XLA updates a buffer
// in place only without a reshape between), unless another operand would need
// index arithmetic to follow (a broadcast along a dimension).
TEST(hlo_elementwise_ops_run_on_the_source_of_a_reshape) {
  Builder b;
  auto x = b.parameter(f32({6}));
  auto row = b.parameter(f32({3}));
  auto grid = b.reshape(x, {2, 3});
  auto plus_one = b.add(grid, b.full(f32({2, 3}), 1.0));
  auto flat = b.reshape(plus_one, {6});
  auto rows = b.add(grid, b.broadcast_in_dim(row, {2, 3}, {1}));
  std::string text = b.module_text({flat, rows});
  CHECK(text.find("\"stablehlo.add\"(%arg0, %v") != std::string::npos);
  CHECK(text.find("(tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>") != std::string::npos);
  CHECK(text.find("(tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>") != std::string::npos);
  auto xb = upload_f32({1, 2, 3, 4, 5, 6}, {6});
  auto rb = upload_f32({10, 20, 30}, {3});
  auto out = run_program(b, {flat, rows}, {xb.get(), rb.get()});
  CHECK(out[0] == (std::vector<double>{2, 3, 4, 5, 6, 7}));
  CHECK(out[1] == (std::vector<double>{11, 22, 33, 14, 25, 36}));
}

// Bounded dynamism: a reduction over a dimension marked as holding 3 of its 8
// entries sums those 3, and static_size gives a buffer a static program reads
// (its valid entries first).
TEST(hlo_set_dimension_size_masks_reductions_and_static_size_returns_static_buffers) {
  Builder b;
  auto x = b.parameter(f32({8}));
  auto n = b.parameter(Shape{ElementType::S32, {}});
  auto valid = b.set_dimension_size(x, n, 0);
  CHECK(b.has_dynamic_sizes());
  auto sum = b.reduce({valid}, {b.constant(0.0, ElementType::F32)}, {0}, adder())[0];
  auto doubled = b.static_size(b.add(valid, valid));
  auto xb = upload_f32({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  int32_t three = 3;
  auto nb = testing::test_client().buffer_from_host(&three, ElementType::S32, {}, 0);
  auto exe = testing::test_client().compile(b.module_text({sum, doubled}),
                                            runtime::CompileOptions{}.serialize());
  auto launch = exe->execute(0, {xb.get(), nb.get()});
  launch.done.await("dynamic program");
  Builder reader;
  auto y = reader.parameter(f32({8}));
  auto out = run_program(reader, {reader.add(y, y)}, {launch.outputs[1].get()});
  CHECK_EQ(out[0][0], 4.0);
  CHECK_EQ(out[0][2], 12.0);
  float total = 0;
  launch.outputs[0]->to_host(&total).await("sum");
  CHECK_EQ(total, 6.0f);
}

// A function written elsewhere (generic form, as torch_tpu.kernels passes JAX's), called
// twice: it enters the module once and both calls run it.
TEST(hlo_call_of_an_external_function) {
  const std::string functions =
      R"("func.func"() <{function_type = (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>, )"
      R"(sym_name = "k1_main", sym_visibility = "private"}> ({
  ^bb0(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>):
    %0 = "stablehlo.multiply"(%arg0, %arg1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "func.return"(%0) : (tensor<3xf32>) -> ()
  }) : () -> ())";
  Builder b;
  auto x = b.parameter(f32({3}));
  auto y = b.parameter(f32({3}));
  auto once = b.call("k1_main", functions, {x, y}, {f32({3})})[0];
  auto twice = b.call("k1_main", functions, {once, y}, {f32({3})})[0];
  auto result = b.add(twice, x);
  std::string text = b.module_text({result});
  CHECK_EQ(text.find("sym_name = \"k1_main\""), text.rfind("sym_name = \"k1_main\""));
  auto out = run_program(b, {result},
                         {upload_f32({1, 2, 3}, {3}).get(), upload_f32({2, 3, 4}, {3}).get()});
  std::vector<double> expect{5, 20, 51};
  CHECK(out[0] == expect);
}
