#include "aten/generator.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/GeneratorImpl.h>

#include <deque>
#include <mutex>

#include "aten/device.h"

namespace torch_tpu::aten {

// The seed a fresh generator starts from, as CUDA's (torch.initial_seed()).
constexpr uint64_t kDefaultSeed = 67280421310721ULL;

TpuGenerator::TpuGenerator(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {
  state_.seed = kDefaultSeed;
}

void TpuGenerator::set_current_seed(uint64_t seed) {
  state_.seed = seed;
  state_.offset = 0;
}

uint64_t TpuGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom(true);
  set_current_seed(s);
  return s;
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  auto state = at::empty({16}, at::kByte);
  std::memcpy(state.data_ptr(), &state_.seed, 8);
  std::memcpy(state.data_ptr<uint8_t>() + 8, &state_.offset, 8);
  return state.getIntrusivePtr();
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor");
  TORCH_CHECK(new_state.numel() == 16, "tpu RNG state must have 16 bytes, got ", new_state.numel());
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&state_.seed, bytes, 8);
  std::memcpy(&state_.offset, bytes + 8, 8);
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* copy = new TpuGenerator(device().index());
  copy->state_ = state_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::deque<at::Generator> generators;
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) device = 0;
  while (static_cast<c10::DeviceIndex>(generators.size()) <= device) {
    generators.push_back(
        at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(generators.size())));
  }
  return generators[device];
}

}  // namespace torch_tpu::aten
