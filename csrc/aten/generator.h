// The `tpu` random generator: a seed and a counter offset. Random ops take
// both as program operands (stateless counter-based RNG inside XLA) and
// advance the offset by what they drew.
#pragma once

#include <ATen/core/Generator.h>

#include "engine/op_call.h"

namespace torch_tpu::aten {

class TpuGenerator : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return state_.seed; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { state_.offset = offset; }
  uint64_t get_offset() const override { return state_.offset; }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  engine::RandomState* state() { return &state_; }

 private:
  TpuGenerator* clone_impl() const override;
  engine::RandomState state_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
}  // namespace torch_tpu::aten
