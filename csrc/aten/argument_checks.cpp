#include "aten/argument_checks.h"

#include <ATen/ATen.h>
#include <ATen/native/DistributionTemplates.h>

#include <unordered_map>

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

void mm(Args a) {
  const at::Tensor &m1 = a[0].toTensor(), &m2 = a[1].toTensor();
  TORCH_CHECK(m1.dtype() == m2.dtype(),
              "expected m1 and m2 to have the same dtype, but got: ", m1.dtype(),
              " != ", m2.dtype());
}

// mv(self, vec) is addmv(vec-typed result, self, vec) on the CPU.
void mv(Args a) {
  TORCH_CHECK(dtype(a[0]) == dtype(a[1]), "addmv input tensors must have the same dtype, but got ",
              dtype(a[1]), ", ", dtype(a[0]), ", and ", dtype(a[1]));
}

// convolution, _convolution(input, weight, bias, ...)
void convolution(Args a) {
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
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type, "uniform bounds", [&] {
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

// bernoulli.p(self, p, generator)
void bernoulli_p(Args a) {
  double p = a[1].toDouble();
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
}

const std::unordered_map<std::string, ArgumentCheck>& checks() {
  static const std::unordered_map<std::string, ArgumentCheck> table = {
      {"aten::mm", mm},
      {"aten::addmm", addmm},
      {"aten::_addmm_activation", addmm},
      {"aten::addbmm", addmm},
      {"aten::mv", mv},
      {"aten::convolution", convolution},
      {"aten::_convolution", convolution},
      {"aten::pow.Tensor_Scalar", pow_scalar},
      {"aten::pow_.Scalar", pow_scalar},  // in place of pow.Tensor_Scalar
      {"aten::fill.Scalar", fill_value<1>},
      {"aten::masked_fill.Scalar", fill_value<2>},
      {"aten::index_fill.int_Scalar", fill_value<3>},
      {"aten::clamp", clamp_bounds},
      {"aten::clamp_min", clamp_bounds},
      {"aten::clamp_max", clamp_bounds},
      {"aten::random.from", random_from},
      {"aten::random.to", random_to},
      {"aten::uniform", uniform},
      {"aten::bernoulli.p", bernoulli_p},
      {"aten::bernoulli.float", bernoulli_p},
  };
  return table;
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
