#include "engine/data_checks.h"

#include <mutex>
#include <unordered_map>

namespace torch_tpu::engine {

namespace {

struct Registered {
  std::string op;
  std::string message;
  bool index_error;
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::unordered_map<int64_t, Registered>& registry() {
  static auto* checks = new std::unordered_map<int64_t, Registered>();
  return *checks;
}

}  // namespace

int64_t register_data_check(const std::string& op, const lower::DataCheck& check) {
  bool index_error = check.error == lower::DataCheck::Error::Index;
  std::string what = op + '\0' + check.message + '\0' + (index_error ? 'I' : 'R');
  uint64_t hash = 14695981039346656037ull;  // FNV-1a: the same in every build
  for (unsigned char ch : what) hash = (hash ^ ch) * 1099511628211ull;
  // 31 bits: exact in every constant form; never 0 (the code of no failure).
  int64_t id = static_cast<int64_t>(hash & 0x7FFFFFFF) | 1;
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().emplace(id, Registered{op, check.message, index_error});
  return id;
}

void raise_data_check(const int64_t code[2]) {
  if (code[0] == 0) return;
  Registered check;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(code[0]);
    if (it == registry().end()) {
      throw runtime::Error(
          "a tpu program reported an unknown data check " + std::to_string(code[0]), 13);
    }
    check = it->second;
  }
  std::string message = check.message;
  int64_t value = code[1];
  const std::string size_placeholder = lower::kSizePlaceholder;
  auto size_at = message.find(size_placeholder);
  if (size_at != std::string::npos) {
    message.replace(size_at, size_placeholder.size(), std::to_string(value & 0xFFFFFFFF));
    value >>= 32;  // arithmetic: a negative index stays negative
  }
  auto at = message.find("{}");
  if (at != std::string::npos) message.replace(at, 2, std::to_string(value));
  throw DataCheckFailure(message + " (" + check.op +
                             ": checked on the tpu device, raised at the next synchronization)",
                         check.index_error);
}

}  // namespace torch_tpu::engine
