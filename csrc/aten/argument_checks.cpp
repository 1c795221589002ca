#include "aten/argument_checks.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/GridSamplerUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_tpu::aten {

namespace {

using Args = c10::ArrayRef<c10::IValue>;

at::ScalarType dtype(const c10::IValue& v) { return v.toTensor().scalar_type(); }

// ---------------------------------------------------------------- products

// addmm, addbmm, _addmm_activation(self, mat1, mat2, ...), in the CPU's order.
void addmm(Args a) {
  TORCH_CHECK(dtype(a[0]) == dtype(a[2]), "self and mat2 must have the same dtype, but got ",
              dtype(a[0]), " and ", dtype(a[2]));
  TORCH_CHECK(dtype(a[1]) == dtype(a[2]), "mat1 and mat2 must have the same dtype, but got ",
              dtype(a[1]), " and ", dtype(a[2]));
}

// The shapes of mat1 @ mat2 (mm's `self` and `mat2`), in the CPU's words.
void multipliable(const at::Tensor& m1, const at::Tensor& m2) {
  TORCH_CHECK(m1.size(1) == m2.size(0), "mat1 and mat2 shapes cannot be multiplied (", m1.size(0),
              "x", m1.size(1), " and ", m2.size(0), "x", m2.size(1), ")");
}

// addmm, _addmm_activation: then the shapes.
void addmm_shapes(Args a) {
  addmm(a);
  const at::Tensor &m1 = a[1].toTensor(), &m2 = a[2].toTensor();
  TORCH_CHECK(m1.dim() == 2, "mat1 must be a matrix, got ", m1.dim(), "-D tensor");
  TORCH_CHECK(m2.dim() == 2, "mat2 must be a matrix, got ", m2.dim(), "-D tensor");
  multipliable(m1, m2);
}

// mm: the shapes before the dtypes, as the CPU.
void mm(Args a) {
  const at::Tensor &m1 = a[0].toTensor(), &m2 = a[1].toTensor();
  TORCH_CHECK(m1.dim() == 2, "self must be a matrix");
  TORCH_CHECK(m2.dim() == 2, "mat2 must be a matrix");
  multipliable(m1, m2);
  TORCH_CHECK(m1.dtype() == m2.dtype(),
              "expected m1 and m2 to have the same dtype, but got: ", m1.dtype(),
              " != ", m2.dtype());
}

// mv(self, vec) is addmv(vec-typed result, self, vec) on the CPU.
void mv(Args a) {
  TORCH_CHECK(dtype(a[0]) == dtype(a[1]), "addmv input tensors must have the same dtype, but got ",
              dtype(a[1]), ", ", dtype(a[0]), ", and ", dtype(a[1]));
}

// convolution, _convolution(input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups, ...): the CPU's check_shape_forward on
// the parameters first (XLA refuses a negative dilation when it compiles, and
// pads with a negative padding), then the dtypes.
void convolution(Args a) {
  auto any = [](const c10::IValue& list, auto bad) {
    for (int64_t v : list.toIntVector()) {
      if (bad(v)) return true;
    }
    return false;
  };
  auto negative = [](int64_t v) { return v < 0; };
  TORCH_CHECK(!any(a[4], negative), "negative padding is not supported");
  TORCH_CHECK(!any(a[7], negative), "negative output_padding is not supported");
  TORCH_CHECK(!any(a[3], [](int64_t v) { return v <= 0; }), "non-positive stride is not supported");
  TORCH_CHECK(!any(a[5], negative), "dilation should be greater than zero");
  const at::Tensor& input = a[0].toTensor();
  TORCH_CHECK(dtype(a[1]) == input.scalar_type(), "expected scalar type ", input.scalar_type(),
              " but found ", dtype(a[1]));
  if (!a[2].isNone()) {
    const at::Tensor& bias = a[2].toTensor();
    TORCH_CHECK(!bias.defined() || bias.dtype() == input.dtype(), "Input type (", input.dtype(),
                ") and bias type (", bias.dtype(), ") should be the same");
  }
}

// pow(self, exponent: Scalar)
void pow_scalar(Args a) {
  c10::Scalar exponent = a[1].toScalar();
  TORCH_CHECK(!(at::isIntegralType(dtype(a[0]), true) && exponent.isIntegral(true) &&
                exponent.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

// ---------------------------------------------------------------- fill values

// The value a kernel converts to the result's type: the CPU's conversion
// raises "value cannot be converted to type int8_t without overflow".
void converts(const c10::IValue& value, at::ScalarType result) {
  if (value.isNone()) return;
  c10::Scalar s = value.toScalar();
  AT_DISPATCH_V2(result, "fill value", AT_WRAP([&] { (void)s.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf, at::kBFloat16, at::kBool);
}

// fill_, masked_fill, index_fill: the value becomes self's type.
template <int value>
void fill_value(Args a) {
  converts(a[value], dtype(a[0]));
}

// clamp(self, min, max): the bounds become the promoted type.
void clamp_bounds(Args a) {
  TORCH_CHECK(a.size() < 3 || !a[1].isNone() || !a[2].isNone(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  const at::Tensor& self = a[0].toTensor();
  at::ScalarType result = self.scalar_type();
  for (int i : {1, 2}) {
    if (i < static_cast<int>(a.size()) && !a[i].isNone()) {
      result = c10::promoteTypes(result, at::result_type(self, a[i].toScalar()));
    }
  }
  for (int i : {1, 2}) {
    if (i < static_cast<int>(a.size())) converts(a[i], result);
  }
}

void clamp_tensor_bounds(Args a) {
  TORCH_CHECK(!a[1].isNone() || !a[2].isNone(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
}

// A scaling factor (alpha, beta) of a `result`-typed computation, as the
// CPU's alpha_check and check_addr_scalar.
void scale_fits(at::ScalarType result, const c10::Scalar& scale, const char* name) {
  TORCH_CHECK(!scale.isBoolean() || result == at::kBool, "Boolean ", name,
              " only supported for Boolean results.");
  TORCH_CHECK(at::isFloatingType(result) || at::isComplexType(result) || scale.isIntegral(true),
              "For integral input tensors, argument ", name,
              " must not be a floating point number.");
  TORCH_CHECK(at::isComplexType(result) || !scale.isComplex(),
              "For non-complex input tensors, argument ", name, " must not be a complex number.");
}

// add/sub(self, other, alpha) and rsub: the CPU's alpha_check on the result type.
void alpha(Args a) {
  const at::Tensor& self = a[0].toTensor();
  at::ScalarType result = a[1].isTensor() ? at::result_type(self, a[1].toTensor())
                                          : at::result_type(self, a[1].toScalar());
  scale_fits(result, a[2].toScalar(), "alpha");
}

// addr(self, vec1, vec2, beta, alpha)
void addr(Args a) {
  at::ScalarType result =
      c10::promoteTypes(dtype(a[0]), c10::promoteTypes(dtype(a[1]), dtype(a[2])));
  scale_fits(result, a[3].toScalar(), "beta");
  scale_fits(result, a[4].toScalar(), "alpha");
}

// ---------------------------------------------------------------- dtypes

// self op= operands (mul_, addcmul_): the operands' result type must cast to
// self's, as TensorIterator checks. Scalar arguments after the operands
// (addcmul's value) take no part.
template <int operands>
void in_place_casts(Args a) {
  at::native::ResultTypeState state;
  for (int i = 0; i < operands; ++i) {
    state = a[i].isTensor() ? at::native::update_result_type_state(a[i].toTensor(), state)
                            : at::native::update_result_type_state(a[i].toScalar(), state);
  }
  at::ScalarType result = at::native::result_type(state);
  TORCH_CHECK(c10::canCast(result, dtype(a[0])), "result type ", result,
              " can't be cast to the desired output type ", dtype(a[0]));
}

// add_/sub_(self, other, alpha): TensorIterator's cast into self, then alpha.
void in_place_alpha(Args a) {
  in_place_casts<2>(a);
  alpha(a);
}

// sub_(self, other, alpha): the CPU refuses bools before anything else.
void in_place_sub(Args a) {
  const bool self_bool = dtype(a[0]) == at::kBool;
  const bool other_bool = a[1].isTensor() ? dtype(a[1]) == at::kBool : a[1].toScalar().isBoolean();
  TORCH_CHECK(!(self_bool && other_bool),
              "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` "
              "or `logical_xor()` operator instead.");
  TORCH_CHECK(!self_bool && !other_bool,
              "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
              "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  in_place_alpha(a);
}

// addcdiv(self, tensor1, tensor2, value): no integer division, in the CPU's words.
void addcdiv(Args a) {
  TORCH_CHECK(!(at::isIntegralType(dtype(a[1]), true) && at::isIntegralType(dtype(a[2]), true)),
              "Integer division with addcdiv is no longer supported, and in a future  ",
              "release addcdiv will perform a true division of tensor1 and tensor2. ",
              "The historic addcdiv behavior can be implemented as ",
              "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) ",
              "for integer inputs and as ",
              "(input + value * tensor1 / tensor2) for float inputs. ",
              "The future addcdiv behavior is just the latter implementation: ",
              "(input + value * tensor1 / tensor2), for all dtypes.");
}

void addcdiv_in_place(Args a) {
  addcdiv(a);
  in_place_casts<3>(a);
}

// sort(self, ..., values, indices): the out tensors' types.
void sort_out(Args a) {
  auto expect = [](const c10::IValue& out, at::ScalarType type) {
    TORCH_CHECK(dtype(out) == type, "Expected out tensor to have dtype ",
                c10::scalarTypeToTypeMeta(type).name(), ", but got ",
                c10::scalarTypeToTypeMeta(dtype(out)).name(), " instead");
  };
  expect(a[a.size() - 2], dtype(a[0]));
  expect(a[a.size() - 1], at::kLong);
}

// index_add(self, dim, index, source, alpha)
void index_add(Args a) {
  TORCH_CHECK(dtype(a[0]) == dtype(a[3]), "index_add_(): self (", dtype(a[0]), ") and source (",
              dtype(a[3]), ") must have the same scalar type");
}

// ---------------------------------------------------------------- activations

// leaky_relu_backward(grad_output, self, negative_slope, self_is_result): the
// result of an in-place leaky_relu_ with a negative slope does not give back
// the input's signs.
void leaky_relu_backward(Args a) {
  TORCH_CHECK(!a[3].toBool() || a[2].toScalar().toDouble() >= 0,
              "In-place leakyReLu backward calculation is triggered with a negative slope which "
              "is not supported. This is caused by calling in-place forward function with a "
              "negative slope, please call out-of-place version instead. File an issue at "
              "https://github.com/pytorch/pytorch if you do require supporting in-place "
              "leakRelu backward calculation with negative slope");
}

// elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
void elu_backward(Args a) {
  TORCH_CHECK(!a[4].toBool() || a[1].toScalar().toDouble() >= 0,
              "In-place elu backward calculation is triggered with a negative slope which is not "
              "supported. This is caused by calling in-place forward function with a negative "
              "slope, please call out-of-place version instead.");
}

// ---------------------------------------------------------------- random

void random_range(const at::Tensor& self, int64_t from, std::optional<int64_t> to) {
  if (to) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from,
                " >= to=", *to);
  }
  at::native::templates::check_from_to_in_range(from, to ? *to - 1 : from, self.dtype());
}

// random_.from(self, from, to, generator)
void random_from(Args a) {
  random_range(a[0].toTensor(), a[1].toInt(), a[2].toOptional<int64_t>());
}

// random_.to(self, to, generator)
void random_to(Args a) { random_range(a[0].toTensor(), 0, a[1].toInt()); }

// uniform(self, from, to, generator), as uniform_impl_ checks it.
void uniform(Args a) {
  const at::Tensor& self = a[0].toTensor();
  double from = a[1].toDouble(), to = a[2].toDouble();
  at::ScalarType type = c10::toRealValueType(self.scalar_type());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type, "check_uniform_bounds", [&] {
    const auto dtype = caffe2::TypeMeta::fromScalarType(type);
    const auto min = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    const auto max = static_cast<double>(std::numeric_limits<scalar_t>::max());
    TORCH_CHECK(from >= min && from <= max, "from is out of bounds for ", dtype);
    TORCH_CHECK(to >= min && to <= max, "to is out of bounds for ", dtype);
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
                " > to=", to);
    TORCH_CHECK(to - from <= max, "uniform_ expects to-from <= std::numeric_limits<",
                toString(type), ">::max(), but found to=", to, " and from=", from,
                " which result in to-from to exceed the limit");
  });
}

// multinomial(self, num_samples, replacement, generator[, out]), in the CPU's order.
void multinomial(Args a) {
  const at::Tensor& self = a[0].toTensor();
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(
      at::isFloatingType(self.scalar_type()),
      "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  if (a.size() > 4) {
    TORCH_CHECK(dtype(a[4]) == at::kLong,
                "multinomial expects Long tensor out, got: ", dtype(a[4]));
  }
  const int64_t n_sample = a[1].toInt();
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n_categories = self.size(-1);
  TORCH_CHECK(a[2].toBool() || n_sample <= n_categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
}

// bernoulli.p(self, p, generator)
void bernoulli_p(Args a) {
  double p = a[1].toDouble();
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
}

// ---------------------------------------------------------------- empty tensors

// Reductions without an identity over a zero-size dimension: the CPU raises
// an IndexError naming the dimension (wrapped, except for amax/amin), where
// PyTorch's meta kernels raise a RuntimeError or let median and mode compute.
void check_reduced_dim(Args a, size_t dim_at, const char* name) {
  const at::Tensor& self = a[0].toTensor();
  if (self.numel() != 0) return;
  at::native::zero_numel_check_dims(self, at::maybe_wrap_dim(a[dim_at].toInt(), self.dim()), name);
}

// median.dim, nanmedian.dim, mode, max.dim, min.dim(self, dim, ...)
template <const char* name>
void reduction(Args a) {
  check_reduced_dim(a, 1, name);
}

// mode.values(self, dim, keepdim, values, indices): the CPU's output checks.
void mode_out(Args a) {
  at::ScalarType self = dtype(a[0]);
  TORCH_CHECK(dtype(a[3]) == self, "expected scalar type '", self, "' but got '", dtype(a[3]),
              "' for values output");
  TORCH_CHECK(dtype(a[4]) == at::kLong, "expected scalar type 'Long' but got '", dtype(a[4]),
              "' for indices output");
  check_reduced_dim(a, 1, "mode()");
}

// Reductions over a list of dims: the CPU's dim mask, a 64-bit set, refuses
// repeated dims and tensors of more than 64 dims, in its words (PyTorch's meta
// kernels word the first otherwise and let some reductions take the second).
void dim_list(const at::Tensor& self, const c10::IValue& dims) {
  if (dims.isNone()) return;
  c10::DimVector list = dims.isInt() ? c10::DimVector{dims.toInt()} : dims.toDimVector();
  if (!list.empty()) at::dim_list_to_bitset(list, self.dim());
}

// sum.dim_IntList, mean.dim, nansum, std/var(_mean).correction, logsumexp,
// prod.dim_int, count_nonzero.dim_IntList(self, dim, ...)
void reduced_dims(Args a) { dim_list(a[0].toTensor(), a[1]); }

// all, any (self, dim..., out): the CPU's result type, bool or (for uint8
// inputs' old behaviour) uint8.
template <const char* name>
void bool_result(Args a) {
  if (a.size() > 1) dim_list(a[0].toTensor(), a[1].isTensor() ? c10::IValue() : a[1]);
  if (a.size() < 2 || !a.back().isTensor()) return;
  at::ScalarType out = dtype(a.back());
  TORCH_CHECK(out == at::kBool || out == at::kByte, name,
              " only supports bool tensor for result, got: ", out);
}

constexpr char kAll[] = "all", kAny[] = "any";

// isposinf, isneginf (self, out): the CPU's out check.
template <const char* name>
void bool_out(Args a) {
  TORCH_CHECK(a.size() < 2 || dtype(a.back()) == at::kBool, name,
              " does not support non-boolean outputs.");
}

constexpr char kIsposinf[] = "isposinf", kIsneginf[] = "isneginf";

constexpr char kMedian[] = "median()", kMode[] = "mode()", kMax[] = "max()", kMin[] = "min()",
               kArgmax[] = "argmax()", kArgmin[] = "argmin()", kAmax[] = "amax()",
               kAmin[] = "amin()";

// kthvalue(self, k, dim, keepdim)
void kthvalue(Args a) { check_reduced_dim(a, 2, "kthvalue()"); }

// argmax, argmin(self, dim=None, keepdim)
template <const char* name>
void arg_reduction(Args a) {
  const at::Tensor& self = a[0].toTensor();
  dim_list(self, a[1]);
  if (!a[1].isNone()) return check_reduced_dim(a, 1, name);
  TORCH_CHECK_INDEX(self.numel() != 0, name,
                    ": Expected reduction dim to be specified for input.numel() == 0.");
}

// amax, amin(self, dim=[], keepdim)
template <const char* name>
void amax_amin(Args a) {
  const at::Tensor& self = a[0].toTensor();
  dim_list(self, a[1]);
  if (self.numel() == 0) at::native::zero_numel_check_dims(self, a[1].toDimVector(), name);
}

// aminmax(self, *, dim=None, keepdim)
void aminmax(Args a) {
  const at::Tensor& self = a[0].toTensor();
  if (self.numel() != 0) return;
  TORCH_CHECK(!a[1].isNone(),
              "aminmax(): cannot compute aminmax over an empty dimension as the operation has "
              "no identity.");
  check_reduced_dim(a, 1, "aminmax");
}

// aminmax.out(self, *, dim, keepdim, min, max): a structured kernel's outs
// have its results' dtype exactly.
void aminmax_out(Args a) {
  for (size_t out : {a.size() - 2, a.size() - 1}) {
    TORCH_CHECK(dtype(a[out]) == dtype(a[0]), "Expected out tensor to have dtype ",
                c10::scalarTypeToTypeMeta(dtype(a[0])).name(), ", but got ",
                c10::scalarTypeToTypeMeta(dtype(a[out])).name(), " instead");
  }
  aminmax(a);
}

// bucketize(self, boundaries, ...)
void bucketize(Args a) {
  const at::Tensor& boundaries = a[1].toTensor();
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(",
              boundaries.dim(), ")");
}

// The infinity and negative norms have no identity either. PyTorch's meta
// kernel checks this too, but the meta cache keeps its result for the next
// call with another `ord` (Scalar arguments are runtime operands).
void vector_norm_of_empty(const at::Tensor& self, const c10::IValue& ord, const c10::IValue& dims) {
  if (self.numel() != 0 || ord.isNone()) return;
  c10::Scalar p = ord.toScalar();
  double order = p.toDouble();
  if (!(order < 0 || order == std::numeric_limits<double>::infinity())) return;
  std::vector<int64_t> dim = dims.isNone() ? std::vector<int64_t>{} : dims.toIntVector();
  TORCH_CHECK(!dim.empty(), "linalg.vector_norm cannot compute the ", p,
              " norm on an empty tensor because the operation does not have an identity");
  for (int64_t d : dim) {
    TORCH_CHECK(self.size(d) != 0, "linalg.vector_norm cannot compute the ", p,
                " norm on the dimension ", d,
                "because this dimension is empty and the operation does not have an identity");
  }
}

// linalg_vector_norm(self, ord, dim, ...), norm.ScalarOpt_dim(_dtype)(self, p, dim, ...)
void vector_norm_dim(Args a) {
  dim_list(a[0].toTensor(), a[2]);
  vector_norm_of_empty(a[0].toTensor(), a[1], a[2]);
}

// norm.Scalar(self, p), norm.ScalarOpt_dtype(self, p, *, dtype): all elements.
void vector_norm_all(Args a) { vector_norm_of_empty(a[0].toTensor(), a[1], c10::IValue()); }

// index_select of a self of rank > 1 with no elements: the CPU refuses a
// zero-size `dim` before reading any index. (A 1-d one fails the rule's
// check of every index.)
void select_rows_of_empty(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  TORCH_CHECK(!(self.dim() > 1 && index.numel() > 0 && self.size(dim) == 0),
              "index_select(): self indexing axis dim should be positive");
}

bool is_index_type(const at::Tensor& index) {
  return index.scalar_type() == at::kLong || index.scalar_type() == at::kInt;
}

// neg, round, bitwise_not, conj_physical(self, ..., *, out): the CPU builds
// these without type promotion, so out must have self's dtype.
void out_of_self_dtype(Args a) {
  at::ScalarType self = dtype(a[0]), out = dtype(a.back());
  TORCH_CHECK(out == self, "Found dtype ", out, " but expected ", self);
}

// abs(complex self, *, out): a complex out runs TensorIterator's unary op,
// which wants self's dtype (a real out takes |z| cast).
void abs_out(Args a) {
  at::ScalarType self = dtype(a[0]), out = dtype(a.back());
  if (!c10::isComplexType(self) || !c10::isComplexType(out)) return;
  TORCH_CHECK(out == self, "Found dtype ", out, " but expected ", self);
}

void abs_in_place(Args a) {
  TORCH_CHECK(!c10::isComplexType(dtype(a[0])),
              "In-place abs is not supported for complex tensors.");
}

// frexp(self, *, mantissa, exponent), in the CPU's words (caffe2's dtype names).
void frexp_out(Args a) {
  auto name = [](at::ScalarType t) { return c10::scalarTypeToTypeMeta(t).name(); };
  at::ScalarType self = dtype(a[0]), mantissa = dtype(a[1]), exponent = dtype(a[2]);
  TORCH_CHECK(mantissa == self, "torch.frexp() expects mantissa to have dtype ", name(self),
              " but got ", name(mantissa));
  TORCH_CHECK(exponent == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              name(exponent));
}

void nan_to_num_out(Args a) {
  at::ScalarType self = dtype(a[0]), out = dtype(a.back());
  TORCH_CHECK(out == self, "nan_to_num: dtype of out: ", out, " should be same as input: ", self);
}

// heaviside(self, values[, out]): one dtype throughout.
void heaviside(Args a) {
  for (const c10::IValue& v : a) {  // self, values, out
    TORCH_CHECK(!v.isTensor() || !at::isComplexType(dtype(v)),
                "heaviside is not yet implemented for complex tensors.");
  }
  const bool same = dtype(a[0]) == dtype(a[1]) && (a.size() < 3 || dtype(a[2]) == dtype(a[0]));
  TORCH_CHECK(same, "heaviside is not yet implemented for tensors with different dtypes.");
}

// arange.start_out(start, end, step, *, out): the CPU's checks of the range,
// and its warning before it resizes an out of another element count.
void arange_out(Args a) {
  const at::Tensor& out = a[3].toTensor();
  const double start = a[0].toScalar().toDouble(), end = a[1].toScalar().toDouble(),
               step = a[2].toScalar().toDouble();
  TORCH_CHECK(step > 0 || step < 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(start) && std::isfinite(end), "unsupported range: ", a[0].toScalar(),
              " -> ", a[1].toScalar());
  TORCH_CHECK((step > 0 && end >= start) || (step < 0 && end <= start),
              "upper bound and lower bound inconsistent with step sign");
  const double size_d = std::ceil((end - start) / step);
  TORCH_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
              "invalid size, possible overflow?");
  if (out.numel() == 0) return;
  const auto size = static_cast<int64_t>(size_d);
  if (size == out.numel() || size < 0) return;
  TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
             " which does not match the computed number of elements ", size,
             ". Note that this may occur as a result of rounding error. The out tensor will be "
             "resized to a tensor of shape (",
             size, ",).");
}

// complex/polar(real|abs, imag|angle[, out]): two floating parts of one dtype,
// and an out of its complex type.
void complex_parts(Args a) {
  at::ScalarType first = dtype(a[0]), second = dtype(a[1]);
  auto floating = [](at::ScalarType t) {
    return t == at::kHalf || t == at::kFloat || t == at::kDouble;
  };
  TORCH_CHECK(floating(first) && floating(second),
              "Expected both inputs to be Half, Float or Double tensors but got ", first, " and ",
              second);
  TORCH_CHECK(first == second, "Expected object of scalar type ", first, " but got scalar type ",
              second, " for second argument");
  if (a.size() < 3) return;
  at::ScalarType out = dtype(a[2]), expected = c10::toComplexType(first);
  TORCH_CHECK(out == expected, "Expected object of scalar type ", expected, " but got scalar type ",
              out, " for argument 'out'");
}

// normal(mean, std: Tensor, ...): the CPU and CUDA read std to check it (CUDA
// synchronizes for it too).
template <int std_arg>
void normal_std_tensor(Args a) {
  const at::Tensor& std = a[std_arg].toTensor();
  TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
  TORCH_CHECK(std.numel() == 0 || at::min(std).ge(0).item<bool>(),
              "normal expects all elements of std >= 0.0");
}

// randperm(n, *, generator, out): n must be exact in out's floating type.
void randperm_out(Args a) {
  const int64_t n = a[0].toInt();
  const at::ScalarType type = dtype(a.back());
  if (at::isIntegralType(type, /*includeBool=*/false)) {
    // The CPU makes a scalar of n - 1 in the result type.
    const auto [largest, name] = type == at::kByte    ? std::pair{255.0, "uint8_t"}
                                 : type == at::kChar  ? std::pair{127.0, "int8_t"}
                                 : type == at::kShort ? std::pair{32767.0, "int16_t"}
                                 : type == at::kInt   ? std::pair{2147483647.0, "int32_t"}
                                                      : std::pair{9.2233720368547758e18, "int64_t"};
    TORCH_CHECK(static_cast<double>(n - 1) <= largest, "value cannot be converted to type ", name,
                " without overflow");
    return;
  }
  int digits = 0;
  if (type == at::kHalf) digits = 11;
  if (type == at::kBFloat16) digits = 8;
  if (type == at::kFloat) digits = 24;
  if (type == at::kDouble) digits = 53;
  if (digits == 0) return;
  const int64_t most = (int64_t(1) << digits) + 1;
  TORCH_CHECK(n <= most, "n cannot be greater than ", most, " for ", type, " type.");
}

// roll(self, shifts, dims): shifts, and as many dims, before any dim's range.
void roll(Args a) {
  const std::vector<int64_t> shifts = a[1].toIntVector(), dims = a[2].toIntVector();
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) return;  // rolls the flattened tensor
  TORCH_CHECK(shifts.size() == dims.size(),
              "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
}

// max_unpool2d/3d: which of two values unpooled to one position stays is the
// CPU's order, as for put_.
template <int dims>
void max_unpool(Args) {
  at::globalContext().alertNotDeterministic(dims == 2 ? "max_unpooling2d_forward_out"
                                                      : "max_unpooling3d_forward_out");
}

// index_fill(self, dim, index, value): a complex value only into complex self.
void index_fill_scalar(Args a) {
  TORCH_CHECK(!a[3].toScalar().isComplex() || at::isComplexType(dtype(a[0])),
              "index_fill_(): Converting complex Scalar to non-complex type is not supported");
  fill_value<3>(a);
}

// logcumsumexp(self, dim, *, out): out of self's dtype.
void logcumsumexp_out(Args a) {
  TORCH_CHECK(dtype(a[2]) == dtype(a[0]), "expected scalar_type ", dtype(a[0]), " but found ",
              dtype(a[2]));
}

// index_select(self, dim, index), after the checks of the meta kernel's
// that come first on the CPU.
void index_select(Args a) {
  const at::Tensor &self = a[0].toTensor(), &index = a[2].toTensor();
  if (index.dim() > 1 || !is_index_type(index)) return;
  select_rows_of_empty(self, at::maybe_wrap_dim(a[1].toInt(), self.dim()), index);
}

// embedding(weight, indices, ...) selects rows with index_select on the CPU.
void embedding(Args a) {
  const at::Tensor &weight = a[0].toTensor(), &indices = a[1].toTensor();
  if (weight.dim() == 2 && is_index_type(indices)) select_rows_of_empty(weight, 0, indices);
}

// _embedding_bag and _embedding_bag_forward_only(weight, indices, offsets, ...):
// the CPU's ranks (PyTorch's meta kernel does not check them).
void embedding_bag(Args a) {
  const at::Tensor &weight = a[0].toTensor(), &indices = a[1].toTensor(),
                   &offsets = a[2].toTensor();
  TORCH_CHECK(indices.dim() == 1 || indices.dim() == 2,
              "input has to be a 1D or 2D Tensor, but got Tensor of dimension ", indices.dim());
  if (indices.dim() == 1) {
    TORCH_CHECK(offsets.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ",
                offsets.dim());
  }
  TORCH_CHECK(weight.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ",
              weight.dim());
}

// The shape advanced indexing gives, as PyTorch's make_info finds it: the
// index tensors (long, int, or masks, which the rewrite has made indices but
// for the one mask of a masked fill) broadcast together; their shape replaces
// the indexed dimensions where those are adjacent, else comes first. None
// while a mask's count is unknown.
std::optional<std::vector<int64_t>> indexing_result_shape(
    const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  std::vector<at::Tensor> defined;
  std::vector<int64_t> indexed_dims;
  bool mask = false;
  for (size_t d = 0; d < indices.size(); ++d) {
    std::optional<at::Tensor> index = indices[d];
    if (!index || !index->defined()) continue;
    const at::ScalarType t = index->scalar_type();
    TORCH_CHECK_INDEX(t == at::kLong || t == at::kInt || t == at::kByte || t == at::kBool,
                      "tensors used as indices must be long, int, byte or bool tensors");
    mask |= t == at::kByte || t == at::kBool;
    defined.push_back(*index);
    indexed_dims.push_back(static_cast<int64_t>(d));
  }
  if (mask || defined.empty()) return std::nullopt;
  std::vector<int64_t> broadcast;
  try {
    for (const at::Tensor& index : defined) {
      broadcast = at::infer_size(broadcast, index.sizes());
    }
  } catch (const c10::Error&) {
    std::vector<std::string> shapes;
    for (const at::Tensor& index : defined) shapes.push_back(c10::str(index.sizes()));
    TORCH_CHECK_INDEX(false,
                      "shape mismatch: indexing tensors could not be broadcast together "
                      "with shapes ",
                      c10::Join(", ", shapes));
  }
  const bool adjacent =
      indexed_dims.back() - indexed_dims.front() + 1 == static_cast<int64_t>(indexed_dims.size());
  std::vector<int64_t> shape;
  if (!adjacent) shape = broadcast;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (adjacent && d == indexed_dims.front())
      shape.insert(shape.end(), broadcast.begin(), broadcast.end());
    if (std::find(indexed_dims.begin(), indexed_dims.end(), d) == indexed_dims.end()) {
      shape.push_back(self.size(d));
    }
  }
  return shape;
}

// index, index_put, _index_put_impl_ and their _unsafe forms (self, Tensor?[]
// indices, ...), with masks already made indices (but the one mask of a
// masked fill, whose count is data): the index types and shapes, then an index
// into a zero-size dimension, which can only be out of range and the CPU says
// before reading it.
void advanced_index(Args a) {
  const at::Tensor& self = a[0].toTensor();
  c10::List<std::optional<at::Tensor>> indices = a[1].toOptionalTensorList();
  for (const std::optional<at::Tensor>& index : indices) {
    TORCH_CHECK(
        !index || !index->defined() || index->device().is_cpu() || index->device() == self.device(),
        "indices should be either on ", at::kCPU, " or on the same device as the indexed tensor (",
        self.device(), ")");
  }
  indexing_result_shape(self, indices);
  bool into_empty = false;
  for (size_t d = 0; d < indices.size(); ++d) {
    std::optional<at::Tensor> index = indices[d];
    if (!index || !index->defined()) continue;
    if (index->scalar_type() == at::kBool || index->scalar_type() == at::kByte) return;
    if (index->numel() == 0) return;  // the broadcast indices select nothing
    into_empty |= static_cast<int64_t>(d) < self.dim() && self.size(d) == 0;
  }
  TORCH_CHECK_INDEX(!into_empty, "index is out of bounds for dimension with size 0");
}

void block_diag(Args a) {
  const std::vector<at::Tensor> tensors = a[0].toTensorVector();
  for (size_t k = 1; k < tensors.size(); ++k) {
    TORCH_CHECK(tensors[k].device() == tensors[0].device(),
                "torch.block_diag: input tensors must all be on the same device. Input 0 is on "
                "device ",
                tensors[0].device(), " and input ", k, " is on device ", tensors[k].device());
  }
}

// put(self, index, source, accumulate), as put_ checks before writing.
void put(Args a) {
  const at::Tensor &self = a[0].toTensor(), &index = a[1].toTensor(), &source = a[2].toTensor();
  TORCH_CHECK(index.scalar_type() == at::kLong,
              "put_(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "put_(): self and source expected to have the same dtype, but got self.dtype = ",
              self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(source.numel() == index.numel(),
                    "put_(): Expected source and index to have the same number of elements, "
                    "but got source.numel() = ",
                    source.numel(), ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0),
                    "put_(): Tried to put elements into an empty tensor");
  // Which of two values put at one index stays is the CPU's order.
  if (a.size() < 4 || !a[3].toBool()) at::globalContext().alertNotDeterministic("put_");
}

void boolean_mask(const char* op, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, op,
              " only supports boolean masks, but got mask with dtype ",
              c10::scalarTypeToTypeMeta(mask.scalar_type()).name());
}

// cat/stack(tensors, dim, out): the inputs' result type must cast to out's.
void concatenated_into(Args a) {
  if (a.size() < 3) return;  // no out=
  at::native::ResultTypeState state;
  for (const at::Tensor& t : a[0].toTensorList()) {
    state = at::native::update_result_type_state(t, state);
  }
  at::ScalarType out = dtype(a[2]);
  TORCH_CHECK_TYPE(c10::canCast(at::native::result_type(state), out),
                   "torch.cat(): input types can't be cast to the desired output type ", out);
}

// index_put(self, indices, values, accumulate), in make_index_put_iterator's
// order: the indices, the values' shape, then the types. The CPU writes one
// value through one mask with masked_fill_, which takes boolean masks only.
void index_put(Args a) {
  const at::Tensor &self = a[0].toTensor(), &values = a[2].toTensor();
  c10::List<std::optional<at::Tensor>> indices = a[1].toOptionalTensorList();
  if (std::optional<std::vector<int64_t>> shape = indexing_result_shape(self, indices)) {
    TORCH_CHECK(at::is_expandable_to(values.sizes(), *shape),
                "shape mismatch: value tensor of shape ", values.sizes(),
                " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(*shape));
  }
  TORCH_CHECK(dtype(a[0]) == dtype(a[2]),
              "Index put requires the source and destination dtypes match, got ", dtype(a[0]),
              " for the destination and ", dtype(a[2]), " for the source.");
  const bool accumulate = a.size() > 3 && a[3].toBool();
  if (!accumulate && indices.size() == 1 && values.numel() == 1) {
    std::optional<at::Tensor> index = indices[0];
    if (index && index->defined() && index->scalar_type() == at::kByte) {
      boolean_mask("masked_fill_", *index);
    }
  }
  advanced_index(a);
}

// masked_fill(self, mask, value)
void masked_fill_tensor(Args a) { boolean_mask("masked_fill_", a[1].toTensor()); }
void masked_fill_scalar(Args a) {
  masked_fill_tensor(a);
  fill_value<2>(a);
}

// masked_scatter(self, mask, source)
void masked_scatter(Args a) {
  const at::Tensor& mask = a[1].toTensor();
  if (mask.scalar_type() == at::kByte) {
    TORCH_WARN(
        "masked_scatter_ received a mask with dtype torch.uint8, this behavior is now "
        "deprecated,please use a mask with dtype torch.bool instead.");
  }
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
}

// index_copy(self, dim, index, source): the CPU's checks in its order, which
// raise IndexErrors where PyTorch's meta kernel raises RuntimeErrors.
void index_copy(Args a) {
  const at::Tensor &self = a[0].toTensor(), &index = a[2].toTensor(), &source = a[3].toTensor();
  const int64_t dim = at::maybe_wrap_dim(a[1].toInt(), self.dim());
  const int64_t n = index.numel();
  TORCH_CHECK_INDEX(index.dim() < 2, "index_copy_(): Index should have dimension 1 or 0 (got ",
                    index.dim(), ")");
  TORCH_CHECK_INDEX(source.dim() != 0 || n == 1,
                    "index_copy_(): When source is scalar, index should have one element (got ", n,
                    ")");
  TORCH_CHECK_INDEX(source.dim() == self.dim() || source.dim() == 0 || self.dim() == 0,
                    "index_copy_(): When source and destination are not scalars, their "
                    "dimensionality must match. Source dimensionality (",
                    source.dim(), "), destination dimensionality (", self.dim(), ")");
  TORCH_CHECK(index.scalar_type() == at::kLong,
              "index_copy_(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "index_copy_(): self and source expected to have the same dtype, but got (self) ",
              self.scalar_type(), " and (source) ", source.scalar_type());
  auto without_dim = [dim](std::vector<int64_t> sizes) {
    if (!sizes.empty()) sizes.erase(sizes.begin() + dim);
    return sizes;
  };
  std::vector<int64_t> self_slice = without_dim(self.sizes().vec());
  std::vector<int64_t> source_slice = without_dim(source.sizes().vec());
  TORCH_CHECK(self_slice == source_slice,
              "index_copy_(): Source/destination tensor must have same slice shapes. "
              "Destination slice shape: ",
              c10::Join(" ", self_slice), " at dimension ", dim,
              " and source slice shape: ", c10::Join(" ", source_slice), " at dimension 0.");
  TORCH_CHECK_INDEX(source.dim() == 0 || n == source.size(dim),
                    "index_copy_(): Number of indices (", n,
                    ") should be equal to source.size(dim) (", source.size(dim), ")");
}

// slice_scatter, select_scatter, diagonal_scatter(self, src, ...): the CPU
// takes the view of self the op writes (raising the view's own errors) and
// requires src to have its shape; PyTorch's meta kernels check neither. The
// view is taken of a meta stand-in.
at::Tensor meta_like(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

void scatters_into(const at::Tensor& view, const at::Tensor& src) {
  TORCH_CHECK(view.sizes() == src.sizes(),
              "expected src to have a size equal to the slice of self. src size = ", src.sizes(),
              ", slice size = ", view.sizes());
}

// slice_scatter(self, src, dim=0, start=None, end=None, step=1)
void slice_scatter(Args a) {
  scatters_into(meta_like(a[0].toTensor())
                    .slice(a[2].toInt(), a[3].toOptional<int64_t>(), a[4].toOptional<int64_t>(),
                           a[5].toInt()),
                a[1].toTensor());
}

// select_scatter(self, src, dim, index)
void select_scatter(Args a) {
  scatters_into(meta_like(a[0].toTensor()).select(a[2].toInt(), a[3].toInt()), a[1].toTensor());
}

// diagonal_scatter(self, src, offset=0, dim1=0, dim2=1)
void diagonal_scatter(Args a) {
  scatters_into(meta_like(a[0].toTensor()).diagonal(a[2].toInt(), a[3].toInt(), a[4].toInt()),
                a[1].toTensor());
}

// grid_sampler_2d/3d(input, grid, ...): among the CPU's checks, that the
// input has no empty spatial dimension.
void grid_sampler_2d(Args a) {
  const at::Tensor &input = a[0].toTensor(), &grid = a[1].toTensor();
  at::native::check_grid_sampler_common(input, grid);
  at::native::check_grid_sampler_2d(input, grid);
}

void grid_sampler_3d(Args a) {
  const at::Tensor &input = a[0].toTensor(), &grid = a[1].toTensor();
  at::native::check_grid_sampler_common(input, grid);
  at::native::check_grid_sampler_3d(input, grid, a[2].toInt());
}

// Batch statistics of no elements, in training: native_batch_norm and
// _native_batch_norm_legit(input, weight, bias, running_mean, running_var,
// training, ...), _native_batch_norm_legit.no_stats(input, weight, bias,
// training, ...); _batch_norm_with_update always trains (training < 0).
template <int training>
void batch_norm(Args a) {
  const at::Tensor& input = a[0].toTensor();
  if (training >= 0 && !a[training].toBool()) return;
  TORCH_CHECK(input.numel() != 0,
              "input tensor must have at least one element, but got input_sizes = ", input.sizes());
}

const std::unordered_map<std::string, ArgumentCheck>& checks() {
  static const std::vector<std::pair<std::string, ArgumentCheck>> entries = {
      {"aten::mm", mm},
      {"aten::addmm", addmm_shapes},
      {"aten::_addmm_activation", addmm_shapes},
      {"aten::addr", addr},
      {"aten::addbmm", addmm},
      {"aten::mv", mv},
      {"aten::convolution", convolution},
      {"aten::_convolution", convolution},
      {"aten::pow.Tensor_Scalar", pow_scalar},
      {"aten::pow_.Scalar", pow_scalar},  // in place of pow.Tensor_Scalar
      {"aten::fill.Scalar", fill_value<1>},
      {"aten::masked_fill.Scalar", masked_fill_scalar},
      {"aten::masked_fill.Tensor", masked_fill_tensor},
      {"aten::masked_scatter", masked_scatter},
      {"aten::index_fill.int_Scalar", index_fill_scalar},
      {"aten::logcumsumexp.out", logcumsumexp_out},
      {"aten::clamp", clamp_bounds},
      {"aten::cat", concatenated_into},
      {"aten::stack", concatenated_into},
      {"aten::leaky_relu_backward", leaky_relu_backward},
      {"aten::elu_backward", elu_backward},
      {"aten::add_.Tensor", in_place_alpha},
      {"aten::add_.Scalar", in_place_alpha},
      {"aten::sub_.Tensor", in_place_sub},
      {"aten::sub_.Scalar", in_place_sub},
      {"aten::mul_.Tensor", in_place_casts<2>},
      {"aten::mul_.Scalar", in_place_casts<2>},
      {"aten::addcmul_", in_place_casts<3>},
      {"aten::addcdiv", addcdiv},
      {"aten::addcdiv_", addcdiv_in_place},
      {"aten::sort.values", sort_out},
      {"aten::sort.values_stable", sort_out},
      {"aten::index_add", index_add},
      {"aten::add.Tensor", alpha},
      {"aten::add.Scalar", alpha},
      {"aten::sub.Tensor", alpha},
      {"aten::sub.Scalar", alpha},
      {"aten::rsub.Tensor", alpha},
      {"aten::rsub.Scalar", alpha},
      {"aten::clamp.Tensor", clamp_tensor_bounds},
      {"aten::clamp_min", clamp_bounds},
      {"aten::clamp_max", clamp_bounds},
      {"aten::random.from", random_from},
      {"aten::random.to", random_to},
      {"aten::uniform", uniform},
      {"aten::bernoulli.p", bernoulli_p},
      {"aten::bernoulli.float", bernoulli_p},
      // Out overloads not named "out" are listed too (functional_name keeps them).
      {"aten::median.dim", reduction<kMedian>},
      {"aten::median.dim_values", reduction<kMedian>},
      {"aten::nanmedian.dim", reduction<kMedian>},  // the CPU says median() too
      {"aten::nanmedian.dim_values", reduction<kMedian>},
      {"aten::mode", reduction<kMode>},
      {"aten::mode.values", mode_out},
      {"aten::sum.dim_IntList", reduced_dims},
      {"aten::mean.dim", reduced_dims},
      {"aten::nansum", reduced_dims},
      {"aten::std.correction", reduced_dims},
      {"aten::var.correction", reduced_dims},
      {"aten::std_mean.correction", reduced_dims},
      {"aten::var_mean.correction", reduced_dims},
      {"aten::logsumexp", reduced_dims},
      {"aten::prod.dim_int", reduced_dims},
      {"aten::count_nonzero.dim_IntList", reduced_dims},
      {"aten::all", bool_result<kAll>},  // all.out (self, dim, keepdim, out) too
      {"aten::all.dims", bool_result<kAll>},
      {"aten::all.all", bool_result<kAll>},  // all.all_out
      {"aten::any", bool_result<kAny>},
      {"aten::any.dims", bool_result<kAny>},
      {"aten::any.all", bool_result<kAny>},
      {"aten::isposinf", bool_out<kIsposinf>},  // isposinf.out
      {"aten::isneginf", bool_out<kIsneginf>},
      {"aten::kthvalue", kthvalue},
      {"aten::kthvalue.values", kthvalue},
      {"aten::max.dim", reduction<kMax>},
      {"aten::max.dim_max", reduction<kMax>},
      {"aten::min.dim", reduction<kMin>},
      {"aten::min.dim_min", reduction<kMin>},
      {"aten::argmax", arg_reduction<kArgmax>},
      {"aten::argmin", arg_reduction<kArgmin>},
      {"aten::amax", amax_amin<kAmax>},
      {"aten::amin", amax_amin<kAmin>},
      {"aten::aminmax", aminmax},
      {"aten::aminmax.out", aminmax_out},
      {"aten::bucketize.Tensor", bucketize},
      {"aten::bucketize.Scalar", bucketize},
      {"aten::multinomial", multinomial},
      {"aten::linalg_vector_norm", vector_norm_dim},
      {"aten::norm.ScalarOpt_dim", vector_norm_dim},
      {"aten::norm.ScalarOpt_dim_dtype", vector_norm_dim},
      {"aten::norm", vector_norm_dim},        // norm.out, the out= form of ScalarOpt_dim
      {"aten::norm.dtype", vector_norm_dim},  // norm.dtype_out, of ScalarOpt_dim_dtype
      {"aten::norm.Scalar", vector_norm_all},
      {"aten::norm.ScalarOpt_dtype", vector_norm_all},
      {"aten::arange.start_out", arange_out},
      {"aten::roll", roll},
      {"aten::max_unpool2d", max_unpool<2>},
      {"aten::max_unpool3d", max_unpool<3>},
      {"aten::complex", complex_parts},
      {"aten::polar", complex_parts},
      {"aten::normal.float_Tensor", normal_std_tensor<1>},
      {"aten::normal.Tensor_Tensor", normal_std_tensor<1>},
      {"aten::randperm.generator_out", randperm_out},
      {"aten::abs.out", abs_out},
      {"aten::abs_", abs_in_place},
      {"aten::frexp.Tensor_out", frexp_out},
      {"aten::neg.out", out_of_self_dtype},
      {"aten::round.out", out_of_self_dtype},
      {"aten::round.decimals_out", out_of_self_dtype},
      {"aten::bitwise_not.out", out_of_self_dtype},
      {"aten::conj_physical.out", out_of_self_dtype},
      {"aten::nan_to_num.out", nan_to_num_out},
      {"aten::heaviside", heaviside},
      {"aten::index_select", index_select},
      {"aten::embedding", embedding},
      {"aten::_embedding_bag", embedding_bag},
      {"aten::_embedding_bag_forward_only", embedding_bag},
      {"aten::index.Tensor", advanced_index},
      {"aten::block_diag", block_diag},
      {"aten::_unsafe_index.Tensor", advanced_index},
      {"aten::index_put", index_put},
      {"aten::_index_put_impl", index_put},
      {"aten::_unsafe_index_put", advanced_index},
      {"aten::put", put},
      {"aten::index_copy", index_copy},
      {"aten::slice_scatter", slice_scatter},
      {"aten::select_scatter", select_scatter},
      {"aten::diagonal_scatter", diagonal_scatter},
      {"aten::grid_sampler_2d", grid_sampler_2d},
      {"aten::grid_sampler_3d", grid_sampler_3d},
      {"aten::native_batch_norm", batch_norm<5>},
      {"aten::_native_batch_norm_legit", batch_norm<5>},
      {"aten::_native_batch_norm_legit.no_stats", batch_norm<3>},
      {"aten::_batch_norm_with_update", batch_norm<-1>},
  };
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, ArgumentCheck>();
    for (const auto& [name, check] : entries) {
      // One check per operator: a second entry would be dropped silently.
      TORCH_INTERNAL_ASSERT(t->emplace(name, check).second, "two argument checks for ", name);
    }
    return t;
  }();
  return *table;
}

}  // namespace

std::string functional_name(const std::string& name) {
  std::string base = name, overload;
  auto dot = name.find('.', 6);
  if (dot != std::string::npos) {
    base = name.substr(0, dot);
    overload = name.substr(dot + 1);
  }
  if (base.back() == '_' && base != "aten::_index_put_impl_") base.pop_back();
  if (base == "aten::_index_put_impl_") base = "aten::_index_put_impl";
  if (overload == "out") overload.clear();
  if (overload.size() > 4 && overload.compare(overload.size() - 4, 4, "_out") == 0) {
    overload.resize(overload.size() - 4);
  }
  return overload.empty() ? base : base + "." + overload;
}

ArgumentCheck find_argument_check(const std::string& op_name) {
  const auto& table = checks();
  auto it = table.find(op_name);
  if (it == table.end()) it = table.find(functional_name(op_name));
  return it == table.end() ? nullptr : it->second;
}

}  // namespace torch_tpu::aten
