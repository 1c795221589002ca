#include "harness.h"

#include <chrono>
#include <cstdio>
#include <cstring>

namespace torch_tpu::testing {

std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

}  // namespace torch_tpu::testing

// Runs every test (or those whose name contains argv[1]); exit status 1 if any
// failed.
int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : "";
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& test : torch_tpu::testing::registry()) {
    if (!std::strstr(test.name, filter)) continue;
    auto start = std::chrono::steady_clock::now();
    try {
      test.body();
      ++passed;
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      std::printf("[ OK ] %s (%.0f ms)\n", test.name, ms);
    } catch (const torch_tpu::testing::Skipped& skip) {
      ++skipped;
      std::printf("[SKIP] %s (%s)\n", test.name, skip.reason.c_str());
    } catch (const std::exception& e) {
      ++failed;
      std::printf("[FAIL] %s\n       %s\n", test.name, e.what());
    }
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
