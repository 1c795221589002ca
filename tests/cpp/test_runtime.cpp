#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "fixture.h"
#include "harness.h"
#include "runtime/device_lock.h"

using namespace torch_tpu;
using torch_tpu::testing::test_client;

TEST(runtime_plugin_reports_version_and_platform) {
  auto& client = test_client();
  CHECK_EQ(client.platform_name(), std::string("cpu"));
  CHECK(client.plugin().minor_version() >= 40);
  CHECK(!client.plugin().attribute("stablehlo_current_version").empty());
  CHECK_EQ(client.device_count(), 2);
  CHECK(!client.device_info(0).kind.empty());
}

TEST(runtime_host_device_round_trip) {
  std::vector<float> data{1, 2, 3, 4, 5, 6};
  auto buffer = testing::upload_f32(data, {2, 3});
  CHECK_EQ(buffer->byte_size(), 24u);
  std::vector<float> back(6);
  buffer->to_host(back.data()).await("round trip");
  for (int i = 0; i < 6; ++i) CHECK_EQ(back[i], data[i]);
}

TEST(runtime_device_to_device_copy) {
  auto buffer = testing::upload_f32({7, 8}, {2});
  auto copy = test_client().copy_to_device(*buffer, 1);
  CHECK_EQ(copy->device(), 1);
  std::vector<float> back(2);
  copy->to_host(back.data()).await("copy back");
  CHECK_EQ(back[1], 8.0f);
}

TEST(runtime_compile_error_carries_plugin_message) {
  CHECK_THROWS(
      test_client().compile("module { this is not mlir }", runtime::CompileOptions{}.serialize()),
      "XLA compilation failed");
}

TEST(runtime_execute_on_second_device_with_donation) {
  hlo::Builder b;
  auto x = b.parameter({ElementType::F32, {3}});
  b.alias_output(0, 0);
  auto y = b.add(x, x);
  auto exe = test_client().compile(b.module_text({y}), runtime::CompileOptions{}.serialize());
  std::vector<float> data{1, 2, 3};
  auto input = test_client().buffer_from_host(data.data(), ElementType::F32, {3}, 1);
  auto launch = exe->execute(1, {input.get()});
  launch.done.await("donating launch");
  CHECK_EQ(launch.outputs[0]->device(), 1);
  std::vector<float> back(3);
  launch.outputs[0]->to_host(back.data()).await("copy back");
  CHECK_EQ(back[2], 6.0f);
}

// A buffer using host memory: on the CPU platform the memory itself (a change
// made behind its back shows), released once, after the last use.
TEST(runtime_buffer_using_host_uses_the_memory_until_released) {
  hlo::Builder b;
  auto x = b.parameter({ElementType::F32, {16}});
  auto exe =
      test_client().compile(b.module_text({b.add(x, x)}), runtime::CompileOptions{}.serialize());
  alignas(64) static float data[16];
  for (int i = 0; i < 16; ++i) data[i] = static_cast<float>(i);
  std::atomic<int> released{0};
  auto input =
      test_client().buffer_using_host(data, ElementType::F32, {16}, 0, [&] { released++; });
  data[15] = 100;
  auto launch = exe->execute(0, {input.get()});
  launch.done.await("launch");
  std::vector<float> back(16);
  launch.outputs[0]->to_host(back.data()).await("copy back");
  CHECK_EQ(back[15], 200.0f);
  CHECK_EQ(released.load(), 0);
  input.reset();
  for (int i = 0; i < 1000 && !released.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_EQ(released.load(), 1);
}

TEST(runtime_device_lock_names_holder) {
  setenv("TORCH_TPU_LOCK_DIR", "/tmp", 1);
  runtime::DeviceLock lock("cpptest", 3, 4);
  pid_t child = fork();
  if (child == 0) {
    // A second process must be refused with a message naming the holder.
    try {
      runtime::DeviceLock again("cpptest", 3, 4);
      _exit(1);
    } catch (const runtime::Error& e) {
      std::string msg = e.what();
      _exit(msg.find("in use by process " + std::to_string(getppid())) != std::string::npos ? 0
                                                                                            : 2);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_EQ(WEXITSTATUS(status), 0);
}

TEST(runtime_device_lock_is_per_host_device_under_a_launcher) {
  // torchrun gives each process its device as tpu:0; on the CPU platform
  // local rank r's devices are r*devices + i, so ranks do not collide.
  unsetenv("LOCAL_RANK");
  CHECK_EQ(runtime::DeviceLock::host_device("cpu", 1, 2), 1);
  setenv("LOCAL_RANK", "3", 1);
  CHECK_EQ(runtime::DeviceLock::host_device("cpu", 1, 2), 7);
  CHECK_EQ(runtime::DeviceLock::host_device("tpu", 1, 2), 1);
  setenv("LOCAL_RANK", "x", 1);
  bool refused = false;
  try {
    runtime::DeviceLock::host_device("cpu", 0, 1);
  } catch (const runtime::Error& e) {
    refused = std::string(e.what()).find("LOCAL_RANK=x") != std::string::npos;
  }
  CHECK(refused);
  unsetenv("LOCAL_RANK");
}
