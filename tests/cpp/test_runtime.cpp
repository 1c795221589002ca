#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "fixture.h"
#include "harness.h"
#include "runtime/crash_note.h"
#include "runtime/device_lock.h"
#include "runtime/visible_devices.h"

using namespace torch_tpu;
using torch_tpu::testing::test_client;

TEST(runtime_plugin_reports_version_and_platform) {
  auto& client = test_client();
  CHECK_EQ(client.platform_name(), testing::test_platform());
  CHECK(client.plugin().minor_version() >= 40);
  CHECK(!client.plugin().attribute("stablehlo_current_version").empty());
  CHECK(client.device_count() >= 1);
  if (testing::test_platform() == "cpu") CHECK_EQ(client.device_count(), 2);
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
  SKIP_UNLESS(test_client().device_count() >= 2, "one device");
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
  SKIP_UNLESS(test_client().device_count() >= 2, "one device");
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
// made behind its back shows; other platforms copy it), released once, after
// the last use.
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
  if (testing::test_platform() == "cpu") {
    CHECK_EQ(back[15], 200.0f);
    CHECK_EQ(released.load(), 0);
  }
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

TEST(runtime_cuda_visible_devices_follow_the_driver_rules) {
  CHECK_EQ(runtime::cuda_visible_count(nullptr, 4), 4);
  CHECK_EQ(runtime::cuda_visible_count("", 4), 0);
  CHECK_EQ(runtime::cuda_visible_count("1,3", 4), 2);
  CHECK_EQ(runtime::cuda_visible_count("0, 2", 4), 2);
  CHECK_EQ(runtime::cuda_visible_count("2,7,1", 4), 1);   // stops at the first out of range
  CHECK_EQ(runtime::cuda_visible_count("0,-1,1", 4), 1);  // and at a negative one
  CHECK_EQ(runtime::cuda_visible_count("1gpu,0", 4), 2);  // leading digits count
  CHECK_EQ(runtime::cuda_visible_count("0,0", 4), 0);     // a repeat hides all
  CHECK_EQ(runtime::cuda_visible_count("GPU-6f2a", 4), -1);
}

TEST(runtime_tpu_chips_are_counted_from_device_files) {
  char dir[] = "/tmp/torch_tpu_dev_XXXXXX";
  CHECK(mkdtemp(dir) != nullptr);
  std::string dev = dir;
  CHECK_EQ(runtime::tpu_visible_count(nullptr, dev), 0);
  for (const char* name : {"/vfio", "/vfio/0", "/vfio/1", "/vfio/vfio"}) {
    CHECK(mkdir((dev + name).c_str(), 0700) == 0);
  }
  CHECK_EQ(runtime::tpu_visible_count(nullptr, dev), 2);
  for (const char* name : {"/accel0", "/accel1", "/accel2"}) {
    CHECK(mkdir((dev + name).c_str(), 0700) == 0);
  }
  CHECK_EQ(runtime::tpu_visible_count(nullptr, dev), 3);
  CHECK_EQ(runtime::tpu_visible_count("0", dev), 1);
  CHECK_EQ(runtime::tpu_visible_count("0,1", dev), 2);
  std::filesystem::remove_all(dev);
}

// A crash while a CrashNote is alive prints the note, then dies of the same
// signal; once the note is gone, nothing is printed.
TEST(runtime_crash_note_is_printed_before_a_fatal_signal) {
  for (bool alive : {true, false}) {
    int pipe_fds[2];
    CHECK(pipe(pipe_fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipe_fds[1], STDERR_FILENO);
      {
        runtime::CrashNote gone("not this one");
      }
      std::optional<runtime::CrashNote> note;
      if (alive) note.emplace("starting the test plugin");
      raise(SIGSEGV);
      _exit(0);
    }
    close(pipe_fds[1]);
    std::string out;
    char buf[256];
    for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
    close(pipe_fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    CHECK_EQ(out.find("torch_tpu: starting the test plugin") != std::string::npos, alive);
    CHECK(out.find("not this one") == std::string::npos);
  }
}

namespace {

// x + the other replicas' x, and this replica's index, on every device.
std::shared_ptr<runtime::Executable> replicated_sum(int replicas) {
  hlo::Builder b;
  auto x = b.parameter({ElementType::F32, {3}});
  hlo::Dims all;
  for (int r = 0; r < replicas; ++r) all.push_back(r);
  auto sum = b.all_reduce(x, {all}, [](hlo::Builder& r, const std::vector<hlo::Value>& v) {
    return std::vector<hlo::Value>{r.add(v[0], v[1])};
  });
  auto id = b.convert(b.replica_id(), ElementType::F32);
  runtime::CompileOptions options;
  for (int r = 0; r < replicas; ++r) {
    options.replica_devices.push_back(test_client().global_id(replicas - 1 - r));
  }
  return test_client().compile(b.module_text({sum, id}), options.serialize());
}

std::vector<float> read_f32(const runtime::Buffer& buffer) {
  std::vector<float> out(buffer.element_count());
  buffer.to_host(out.data()).await("read back");
  return out;
}

}  // namespace

// A program of two replicas, the second on device 0: launched on both at
// once, each replica reads its own arguments and the all-reduce sums them.
TEST(runtime_replicated_program_launched_on_all_devices_at_once) {
  SKIP_UNLESS(test_client().device_count() >= 2, "one device");
  auto exe = replicated_sum(2);
  CHECK(exe->devices() == std::vector<int>({1, 0}));
  std::vector<float> a{1, 2, 3}, b{10, 20, 30};
  auto on1 = test_client().buffer_from_host(a.data(), ElementType::F32, {3}, 1);
  auto on0 = test_client().buffer_from_host(b.data(), ElementType::F32, {3}, 0);
  auto launches = exe->execute_replicas({{on1.get()}, {on0.get()}});
  CHECK_EQ(launches.size(), 2u);
  for (auto& l : launches) l.done.await("replicated launch");
  CHECK_EQ(launches[0].outputs[0]->device(), 1);
  CHECK_EQ(launches[1].outputs[0]->device(), 0);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> sum = read_f32(*launches[r].outputs[0]);
    std::vector<float> id = read_f32(*launches[r].outputs[1]);
    CHECK_EQ(sum[2], 33.0f);
    CHECK_EQ(id[0], static_cast<float>(r));
  }
}

// Several processes launch one device each: launches of one execution meet
// by their launch id, whichever thread makes them and in whatever order.
TEST(runtime_replicated_program_launched_one_device_at_a_time) {
  SKIP_UNLESS(test_client().device_count() >= 2, "one device");
  auto exe = replicated_sum(2);
  for (int launch_id = 1; launch_id <= 3; ++launch_id) {
    std::vector<float> got[2];
    std::vector<std::thread> threads;
    for (int device = 0; device < 2; ++device) {
      threads.emplace_back([&, device] {
        std::vector<float> x{float(device), float(launch_id), 1};
        auto in = test_client().buffer_from_host(x.data(), ElementType::F32, {3}, device);
        auto launch = exe->execute(device, {in.get()}, {}, launch_id);
        launch.done.await("per-device launch");
        got[device] = read_f32(*launch.outputs[0]);
      });
    }
    for (auto& t : threads) t.join();
    for (int device = 0; device < 2; ++device) {
      CHECK_EQ(got[device][0], 1.0f);
      CHECK_EQ(got[device][1], 2.0f * launch_id);
    }
  }
}

// Each collective of the builder on two replicas (device d holds d*10 + i).
TEST(runtime_collectives_run_across_replicas) {
  SKIP_UNLESS(test_client().device_count() >= 2, "one device");
  const hlo::Builder::ReplicaGroups groups{{0, 1}};
  auto add = [](hlo::Builder& r, const std::vector<hlo::Value>& v) {
    return std::vector<hlo::Value>{r.add(v[0], v[1])};
  };
  hlo::Builder b;
  auto x = b.parameter({ElementType::F32, {4}});
  auto gathered = b.all_gather(x, 0, groups);
  auto scattered = b.reduce_scatter(x, 0, groups, add);
  auto exchanged = b.all_to_all(x, 0, 0, groups);
  auto shifted = b.collective_permute(x, {{0, 1}});
  runtime::CompileOptions options;
  options.replica_devices = {test_client().global_id(0), test_client().global_id(1)};
  auto exe = test_client().compile(b.module_text({gathered, scattered, exchanged, shifted}),
                                   options.serialize());
  std::vector<runtime::BufferPtr> in;
  for (int d = 0; d < 2; ++d) {
    std::vector<float> v{d * 10.f, d * 10.f + 1, d * 10.f + 2, d * 10.f + 3};
    in.push_back(test_client().buffer_from_host(v.data(), ElementType::F32, {4}, d));
  }
  auto launches = exe->execute_replicas({{in[0].get()}, {in[1].get()}});
  for (auto& l : launches) l.done.await("collectives");
  std::vector<float> g1 = read_f32(*launches[1].outputs[0]);
  CHECK(g1 == std::vector<float>({0, 1, 2, 3, 10, 11, 12, 13}));
  std::vector<float> s0 = read_f32(*launches[0].outputs[1]), s1 = read_f32(*launches[1].outputs[1]);
  CHECK(s0 == std::vector<float>({10, 12}));
  CHECK(s1 == std::vector<float>({14, 16}));
  std::vector<float> a0 = read_f32(*launches[0].outputs[2]), a1 = read_f32(*launches[1].outputs[2]);
  CHECK(a0 == std::vector<float>({0, 1, 10, 11}));
  CHECK(a1 == std::vector<float>({2, 3, 12, 13}));
  std::vector<float> p0 = read_f32(*launches[0].outputs[3]), p1 = read_f32(*launches[1].outputs[3]);
  CHECK(p0 == std::vector<float>({0, 0, 0, 0}));
  CHECK(p1 == std::vector<float>({0, 1, 2, 3}));
}

namespace {

class MemoryKeyValues : public runtime::KeyValueStore {
 public:
  std::optional<std::string> get(const std::string& key, std::chrono::milliseconds) override {
    return try_get(key);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  void put(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
};

}  // namespace

// On one GPU with TORCH_TPU_MOCK_NCCL=1 (tools/device_check.py): the client of
// node 0 of a mocked two-node job compiles a program of two replicas and runs
// this node's on its GPU (NCCL mocked: the other replica is not there).
TEST(runtime_mock_nccl_runs_a_two_replica_all_reduce_on_one_gpu) {
  const char* mock = std::getenv("TORCH_TPU_MOCK_NCCL");
  SKIP_UNLESS(testing::test_platform() == "cuda" && mock && std::string(mock) == "1",
              "TORCH_TPU_MOCK_NCCL=1 on the cuda platform");
  runtime::ClientOptions options;
  options.node_id = 0;
  options.num_nodes = 2;
  options.key_value_store = std::make_shared<MemoryKeyValues>();
  options.visible_devices = {0};
  options.mock_nccl = true;
  options.mock_topology = "1x2x1";
  runtime::Client client(test_client().plugin(), "cuda", options);
  CHECK_EQ(client.device_count(), 1);
  hlo::Builder b;
  auto x = b.parameter({ElementType::F32, {4}});
  auto sum = b.all_reduce(x, {{0, 1}}, [](hlo::Builder& r, const std::vector<hlo::Value>& v) {
    return std::vector<hlo::Value>{r.add(v[0], v[1])};
  });
  runtime::CompileOptions compile;
  compile.replica_devices = {0, 1};
  auto exe = client.compile(b.module_text({sum}), compile.serialize());
  std::vector<float> data{1, 2, 3, 4};
  auto in = client.buffer_from_host(data.data(), ElementType::F32, {4}, 0);
  auto launch = exe->execute(0, {in.get()}, {}, /*launch_id=*/1);
  launch.done.await("mocked two-replica all-reduce");
  CHECK_EQ(launch.outputs[0]->element_count(), 4);
}
