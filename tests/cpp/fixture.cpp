#include "fixture.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace torch_tpu::testing {

const std::string& test_platform() {
  static const std::string platform = [] {
    const char* name = std::getenv("TORCH_TPU_PLATFORM");
    return std::string(name && *name && std::strcmp(name, "auto") != 0 ? name : "cpu");
  }();
  return platform;
}

runtime::Client& test_client() {
  static std::unique_ptr<runtime::Client> client = [] {
    const char* path = std::getenv("TORCH_TPU_PLUGIN");
    if (!path || !*path) {
      throw std::runtime_error("set TORCH_TPU_PLUGIN to a PJRT plugin (make cpp-test does)");
    }
    runtime::ClientOptions options;
    options.cpu_device_count = 2;
    return std::make_unique<runtime::Client>(runtime::Plugin::load(path), test_platform(), options);
  }();
  return *client;
}

namespace {

template <class T>
std::vector<double> widen(const std::vector<char>& bytes) {
  std::vector<double> out(bytes.size() / sizeof(T));
  for (size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
  return out;
}

std::vector<double> to_doubles(const runtime::Buffer& buffer) {
  std::vector<char> bytes(buffer.byte_size());
  buffer.to_host(bytes.data()).await("copy to host");
  switch (buffer.type()) {
    case ElementType::F32:
      return widen<float>(bytes);
    case ElementType::F64:
      return widen<double>(bytes);
    case ElementType::S32:
      return widen<int32_t>(bytes);
    case ElementType::S64:
      return widen<int64_t>(bytes);
    case ElementType::U8:
    case ElementType::Pred:
      return widen<uint8_t>(bytes);
    case ElementType::S8:
      return widen<int8_t>(bytes);
    case ElementType::U32:
      return widen<uint32_t>(bytes);
    case ElementType::U64:
      return widen<uint64_t>(bytes);
    default:
      throw std::runtime_error("to_doubles: unsupported type");
  }
}

}  // namespace

std::vector<std::vector<double>> run_program(hlo::Builder& b,
                                             const std::vector<hlo::Value>& results,
                                             const std::vector<runtime::Buffer*>& inputs) {
  auto& client = test_client();
  auto exe = client.compile(b.module_text(results), runtime::CompileOptions{}.serialize());
  auto launch = exe->execute(0, inputs);
  launch.done.await("test program");
  std::vector<std::vector<double>> out;
  for (auto& buffer : launch.outputs) out.push_back(to_doubles(*buffer));
  return out;
}

runtime::BufferPtr upload_f32(const std::vector<float>& data, const std::vector<int64_t>& dims) {
  return test_client().buffer_from_host(data.data(), ElementType::F32, dims, 0);
}

}  // namespace torch_tpu::testing
