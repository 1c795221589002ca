// The _foreach_* operators (torch.optim's multi-tensor paths). Each applies an
// elementwise rule to every tensor of its lists, exactly as PyTorch's CPU
// kernels call the single-tensor operator per tensor, but all in one program:
// an optimizer step is a handful of launches whatever the number of
// parameters.
#include <algorithm>
#include <cmath>
#include <string_view>

#include "lower/elementwise.h"
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

using hlo::Comparison;
using ET = ElementType;

// A string usable as a template argument: ties a foreach operator to its
// elementwise rule without a table lookup by name at run time.
template <size_t N>
struct Literal {
  char text[N];
  constexpr Literal(const char (&s)[N]) { std::copy_n(s, N, text); }
};

// Calls `rule` once per tensor. `pattern` says how each argument feeds the
// calls: 'L' a list (element i goes to call i), 'S' shared by every call.
std::vector<Value> apply(Context& c, const Args& a, RuleFn rule, std::string_view pattern) {
  std::vector<Value> results;
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    std::vector<Arg> args(pattern.size());
    for (size_t j = 0; j < pattern.size(); ++j) {
      args[j].is_operand = true;
      std::optional<Operand> operand;
      if (pattern[j] == 'L') {
        operand = a.operand_list(j).at(i);
      } else if (!a.is_none(j)) {
        operand = a.operand(j);
      }
      args[j].operands.push_back(std::move(operand));
    }
    Context one(c.b, c.op_name(), c.precision(), c.platform(), {c.output(i)});
    results.push_back(rule(one, Args(std::move(args))).at(0));
  }
  return results;
}

template <Literal Op, Literal Pattern>
std::vector<Value> foreach_op(Context& c, const Args& a) {
  static const RuleFn rule = elementwise::rule(Op.text);
  return apply(c, a, rule, Pattern.text);
}

// _foreach_copy(self, src, non_blocking) -> self_out: src converted to each
// self's dtype and broadcast to its shape.
std::vector<Value> foreach_copy(Context& c, const Args& a) {
  std::vector<Value> src = a.tensors(1);
  std::vector<Value> out;
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    const Shape& shape = c.output(i);
    out.push_back(broadcast_to(c.b, convert(c.b, src.at(i), shape.type), shape.dims));
  }
  return out;
}

std::vector<Value> foreach_zero(Context& c, const Args& a) {
  std::vector<Value> out;
  for (size_t i = 0; i < c.num_outputs(); ++i) out.push_back(c.b.full(c.output(i), 0));
  return out;
}

// _foreach_max(self): the maximum of each tensor (NaN if it holds one).
std::vector<Value> foreach_max(Context& c, const Args& a) {
  Builder& b = c.b;
  std::vector<Value> out;
  for (const Value& x : a.tensors(0)) out.push_back(reduce_max(b, x, all_dims(x.rank())));
  return out;
}

// _foreach_norm.Scalar(self, ord=2, dtype=None)
std::vector<Value> foreach_norm(Context& c, const Args& a) {
  std::vector<Value> xs = a.tensors(0);
  const Value& ord = a.tensor(1);
  std::optional<ET> dtype = a.dtype(2);
  std::vector<Value> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    ET type = dtype ? *dtype : xs[i].type();
    if (!is_floating(type) && !is_complex(type)) {
      throw Unsupported("_foreach_norm of " + std::string(short_name(type)));
    }
    out.push_back(vector_norm(c.b, convert(c.b, xs[i], type), ord, all_dims(xs[i].rank())));
  }
  return out;
}

}  // namespace

// Binary: the Scalar overloads share one number, ScalarList pairs a number
// with each tensor, List pairs tensors, Tensor shares a one-element tensor.
TPU_LOWERING((foreach_op<"add.Tensor", "LS">), "_foreach_add.Scalar");
TPU_LOWERING((foreach_op<"add.Tensor", "LLS">), "_foreach_add.List");
TPU_LOWERING((foreach_op<"add.Tensor", "LL">), "_foreach_add.ScalarList");
TPU_LOWERING((foreach_op<"add.Tensor", "LSS">), "_foreach_add.Tensor");
TPU_LOWERING((foreach_op<"sub.Tensor", "LS">), "_foreach_sub.Scalar");
TPU_LOWERING((foreach_op<"sub.Tensor", "LLS">), "_foreach_sub.List");
TPU_LOWERING((foreach_op<"sub.Tensor", "LL">), "_foreach_sub.ScalarList");
TPU_LOWERING((foreach_op<"mul.Tensor", "LS">), "_foreach_mul.Scalar", "_foreach_mul.Tensor");
TPU_LOWERING((foreach_op<"mul.Tensor", "LL">), "_foreach_mul.List", "_foreach_mul.ScalarList");
TPU_LOWERING((foreach_op<"div.Tensor", "LS">), "_foreach_div.Scalar", "_foreach_div.Tensor");
TPU_LOWERING((foreach_op<"div.Tensor", "LL">), "_foreach_div.List", "_foreach_div.ScalarList");
TPU_LOWERING((foreach_op<"maximum", "LL">), "_foreach_maximum.List");
TPU_LOWERING((foreach_op<"minimum", "LL">), "_foreach_minimum.List");
// PyTorch computes the Scalar forms of maximum/minimum with clamp_min/max.
TPU_LOWERING((foreach_op<"clamp_min", "LS">), "_foreach_maximum.Scalar",
             "_foreach_clamp_min.Scalar");
TPU_LOWERING((foreach_op<"clamp_min", "LL">), "_foreach_maximum.ScalarList",
             "_foreach_clamp_min.ScalarList", "_foreach_clamp_min.List");
TPU_LOWERING((foreach_op<"clamp_max", "LS">), "_foreach_minimum.Scalar",
             "_foreach_clamp_max.Scalar");
TPU_LOWERING((foreach_op<"clamp_max", "LL">), "_foreach_minimum.ScalarList",
             "_foreach_clamp_max.ScalarList", "_foreach_clamp_max.List");
TPU_LOWERING((foreach_op<"pow.Tensor_Tensor", "LL">), "_foreach_pow.List");
TPU_LOWERING((foreach_op<"pow.Tensor_Scalar", "LS">), "_foreach_pow.Scalar");
TPU_LOWERING((foreach_op<"pow.Tensor_Scalar", "LL">), "_foreach_pow.ScalarList");
TPU_LOWERING((foreach_op<"pow.Scalar", "SL">), "_foreach_pow.ScalarAndTensor");

// Ternary. The `Tensor scalars` overloads are left to PyTorch's composite
// kernel: their 1-D scalars tensor must be on the CPU, which it reads into
// numbers and passes to addcmul/addcdiv (lowered) per tensor.
TPU_LOWERING((foreach_op<"addcmul", "LLLS">), "_foreach_addcmul.Scalar");
TPU_LOWERING((foreach_op<"addcmul", "LLLL">), "_foreach_addcmul.ScalarList");
TPU_LOWERING((foreach_op<"addcdiv", "LLLS">), "_foreach_addcdiv.Scalar");
TPU_LOWERING((foreach_op<"addcdiv", "LLLL">), "_foreach_addcdiv.ScalarList");
TPU_LOWERING((foreach_op<"lerp.Tensor", "LLL">), "_foreach_lerp.List");
TPU_LOWERING((foreach_op<"lerp.Scalar", "LLS">), "_foreach_lerp.Scalar");
TPU_LOWERING((foreach_op<"lerp.Scalar", "LLL">), "_foreach_lerp.ScalarList");

// Unary
TPU_LOWERING((foreach_op<"abs", "L">), "_foreach_abs");
TPU_LOWERING((foreach_op<"acos", "L">), "_foreach_acos");
TPU_LOWERING((foreach_op<"asin", "L">), "_foreach_asin");
TPU_LOWERING((foreach_op<"atan", "L">), "_foreach_atan");
TPU_LOWERING((foreach_op<"ceil", "L">), "_foreach_ceil");
TPU_LOWERING((foreach_op<"cos", "L">), "_foreach_cos");
TPU_LOWERING((foreach_op<"cosh", "L">), "_foreach_cosh");
TPU_LOWERING((foreach_op<"erf", "L">), "_foreach_erf");
TPU_LOWERING((foreach_op<"erfc", "L">), "_foreach_erfc");
TPU_LOWERING((foreach_op<"exp", "L">), "_foreach_exp");
TPU_LOWERING((foreach_op<"expm1", "L">), "_foreach_expm1");
TPU_LOWERING((foreach_op<"floor", "L">), "_foreach_floor");
TPU_LOWERING((foreach_op<"frac", "L">), "_foreach_frac");
TPU_LOWERING((foreach_op<"log", "L">), "_foreach_log");
TPU_LOWERING((foreach_op<"log10", "L">), "_foreach_log10");
TPU_LOWERING((foreach_op<"log1p", "L">), "_foreach_log1p");
TPU_LOWERING((foreach_op<"log2", "L">), "_foreach_log2");
TPU_LOWERING((foreach_op<"neg", "L">), "_foreach_neg");
TPU_LOWERING((foreach_op<"reciprocal", "L">), "_foreach_reciprocal");
TPU_LOWERING((foreach_op<"round", "L">), "_foreach_round");
TPU_LOWERING((foreach_op<"rsqrt", "L">), "_foreach_rsqrt");
TPU_LOWERING((foreach_op<"sigmoid", "L">), "_foreach_sigmoid");
TPU_LOWERING((foreach_op<"sign", "L">), "_foreach_sign");
TPU_LOWERING((foreach_op<"sin", "L">), "_foreach_sin");
TPU_LOWERING((foreach_op<"sinh", "L">), "_foreach_sinh");
TPU_LOWERING((foreach_op<"sqrt", "L">), "_foreach_sqrt");
TPU_LOWERING((foreach_op<"tan", "L">), "_foreach_tan");
TPU_LOWERING((foreach_op<"tanh", "L">), "_foreach_tanh");
TPU_LOWERING((foreach_op<"trunc", "L">), "_foreach_trunc");

// Others
TPU_LOWERING(foreach_copy, "_foreach_copy");
TPU_LOWERING(foreach_zero, "_foreach_zero");
TPU_LOWERING(foreach_max, "_foreach_max");
TPU_LOWERING(foreach_norm, "_foreach_norm.Scalar");

}  // namespace torch_tpu::lower
