// The tensors of a dispatcher argument: a tensor, a tensor list or a list of
// optional tensors (undefined and absent ones skipped by for_each_tensor).
#pragma once

#include <functional>
#include <optional>

#include "aten/torch_headers.h"

namespace torch_tpu::aten {

// A template, not a std::function: every op runs it, and a capturing lambda
// in a std::function is an allocation.
template <typename Fn>
inline void for_each_tensor(const c10::IValue& v, Fn&& fn) {
  if (v.isTensor()) {
    fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) fn(t);
  } else if (v.isOptionalTensorList()) {
    for (const auto& item : v.toOptionalTensorList()) {
      std::optional<at::Tensor> t = item;
      if (t) fn(*t);
    }
  }
}

// `v` with each of its tensors replaced by fn's (other values as they are).
inline c10::IValue map_tensors(const c10::IValue& v,
                               const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (v.isTensor()) return fn(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(fn(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& item : v.toOptionalTensorList()) {
      std::optional<at::Tensor> t = item;
      out.push_back(t ? std::optional<at::Tensor>(fn(*t)) : std::nullopt);
    }
    return out;
  }
  return v;
}

// A call's argument `v` for running the call on another device: each tensor
// replaced by fn's, and a tpu device argument (factories name one) by `device`.
inline c10::IValue retargeted(const c10::IValue& v,
                              const std::function<at::Tensor(const at::Tensor&)>& fn,
                              c10::Device device) {
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return device;
  return map_tensors(v, fn);
}

}  // namespace torch_tpu::aten
