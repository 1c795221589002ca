// A minimal test harness for the torch-free layers: TEST(...) registers a
// function; CHECK macros throw with the failing expression and location.
#pragma once

#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace torch_tpu::testing {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

std::vector<TestCase>& registry();

struct Register {
  Register(const char* name, std::function<void()> body) {
    registry().push_back({name, std::move(body)});
  }
};

// Thrown by SKIP_UNLESS: the test does not apply to this platform.
struct Skipped {
  std::string reason;
};

[[noreturn]] inline void fail(const std::string& what, const char* file, int line) {
  std::ostringstream s;
  s << file << ":" << line << ": " << what;
  throw std::runtime_error(s.str());
}

}  // namespace torch_tpu::testing

#define TPU_CAT2(a, b) a##b
#define TPU_CAT(a, b) TPU_CAT2(a, b)
#define TEST(name)                                                                             \
  static void TPU_CAT(test_, name)();                                                          \
  static ::torch_tpu::testing::Register TPU_CAT(register_, name)(#name, TPU_CAT(test_, name)); \
  static void TPU_CAT(test_, name)()

#define SKIP_UNLESS(cond, reason)                             \
  do {                                                        \
    if (!(cond)) throw ::torch_tpu::testing::Skipped{reason}; \
  } while (0)

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) ::torch_tpu::testing::fail("CHECK(" #cond ")", __FILE__, __LINE__); \
  } while (0)

#define CHECK_EQ(a, b)                                          \
  do {                                                          \
    auto&& va = (a);                                            \
    auto&& vb = (b);                                            \
    if (!(va == vb)) {                                          \
      std::ostringstream s_;                                    \
      s_ << "CHECK_EQ(" #a ", " #b "): " << va << " != " << vb; \
      ::torch_tpu::testing::fail(s_.str(), __FILE__, __LINE__); \
    }                                                           \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                     \
  do {                                                            \
    double va = (a), vb = (b);                                    \
    if (!(std::fabs(va - vb) <= (tol))) {                         \
      std::ostringstream s_;                                      \
      s_ << "CHECK_NEAR(" #a ", " #b "): " << va << " vs " << vb; \
      ::torch_tpu::testing::fail(s_.str(), __FILE__, __LINE__);   \
    }                                                             \
  } while (0)

#define CHECK_THROWS(expr, substring)                                                         \
  do {                                                                                        \
    bool thrown_ = false;                                                                     \
    try {                                                                                     \
      (void)(expr);                                                                           \
    } catch (const std::exception& e_) {                                                      \
      thrown_ = true;                                                                         \
      if (std::string(e_.what()).find(substring) == std::string::npos) {                      \
        ::torch_tpu::testing::fail(std::string("unexpected message: ") + e_.what(), __FILE__, \
                                   __LINE__);                                                 \
      }                                                                                       \
    }                                                                                         \
    if (!thrown_) ::torch_tpu::testing::fail("no exception from " #expr, __FILE__, __LINE__); \
  } while (0)
