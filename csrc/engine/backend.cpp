#include "engine/backend.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/data_checks.h"
#include "engine/metrics.h"
#include "engine/trace.h"
#include "runtime/compile_options.h"
#include "runtime/crash_note.h"
#include "runtime/visible_devices.h"

namespace torch_tpu::engine {

namespace {

std::mutex& start_mutex() {
  static std::mutex m;
  return m;
}

BackendConfig& mutable_config() {
  static BackendConfig config = [] {
    BackendConfig c;
    const char* platform = std::getenv("TORCH_TPU_PLATFORM");
    const char* plugin = std::getenv("TORCH_TPU_PLUGIN");
    const char* devices = std::getenv("TORCH_TPU_NUM_DEVICES");
    c.platform = platform && *platform && std::strcmp(platform, "auto") != 0 ? platform : "cpu";
    c.plugin_path = plugin ? plugin : "";
    c.cpu_devices = devices && *devices ? std::atoi(devices) : 1;
    return c;
  }();
  return config;
}

// Never destroyed: at process exit, tensors still holding device buffers are
// freed after static destructors run, and they need the client alive.
std::unique_ptr<Backend>& instance() {
  static auto* backend = new std::unique_ptr<Backend>();
  return *backend;
}

// Pending launches kept per device before the oldest is awaited: bounds host
// run-ahead, like a device queue.
constexpr size_t kMaxInFlight = 64;
// Scalar buffers kept; the cache is cleared when it grows past this.
constexpr size_t kMaxScalars = 4096;

}  // namespace

void Backend::configure(BackendConfig config) {
  std::lock_guard<std::mutex> lock(start_mutex());
  if (instance()) {
    const BackendConfig& now = mutable_config();
    if (now.platform != config.platform || now.plugin_path != config.plugin_path) {
      throw runtime::Error("the tpu backend already runs on " + now.platform +
                               "; it cannot be reconfigured in this process",
                           9);
    }
    return;
  }
  config.job = std::move(mutable_config().job);  // set by join_job, maybe before
  mutable_config() = std::move(config);
}

const BackendConfig& Backend::config() { return mutable_config(); }

bool Backend::join_job(BackendConfig::Job job) {
  std::lock_guard<std::mutex> lock(start_mutex());
  if (instance()) return false;
  mutable_config().job = std::move(job);
  return true;
}

bool Backend::started() {
  std::lock_guard<std::mutex> lock(start_mutex());
  return instance() != nullptr;
}

Backend& Backend::get() {
  auto& backend = instance();
  // Before any engine lock: the parent's threads may have held them at fork.
  if (backend && runtime::forked_child()) throw runtime::Error(runtime::kForkedChild, 9);
  if (backend) return *backend;
  std::lock_guard<std::mutex> lock(start_mutex());
  // Starting again would repeat the failure (and the plugin's own logging of it).
  static std::unique_ptr<runtime::Error> failure;
  if (failure) throw *failure;
  if (!backend) {
    try {
      backend.reset(new Backend());
    } catch (const runtime::Error& e) {
      failure = std::make_unique<runtime::Error>(e);
      throw;
    }
  }
  return *backend;
}

int Backend::visible_device_count() {
  // Read without get(): a process forked after the start still counts the
  // devices (PyTorch seeds them all in DataLoader workers).
  if (Backend* backend = instance().get()) return backend->device_count();
  const BackendConfig& c = config();
  if (c.plugin_path.empty()) return 0;
  if (c.platform == "cpu") return std::max(1, c.cpu_devices);
  static const int census = runtime::count_visible_devices(c.platform);
  return census;
}

namespace {

std::unique_ptr<runtime::Client> start_client(const BackendConfig& c) {
  runtime::CrashNote note("the " + c.platform + " platform's PJRT plugin " + c.plugin_path +
                          " crashed while starting; TORCH_TPU_PLATFORM=cpu runs the tpu device "
                          "on the CPU instead (see README: Devices and platforms)");
  runtime::load_libraries(c.libraries);
  const runtime::Plugin& plugin = runtime::Plugin::load(c.plugin_path);
  runtime::ClientOptions options;
  options.cpu_device_count = std::max(1, c.cpu_devices);

  if (c.job) {
    options.node_id = c.job->node_id;
    options.num_nodes = c.job->num_nodes;
    options.key_value_store = c.job->key_value_store;
    if (c.job->local_device >= 0) options.visible_devices = {c.job->local_device};
  }
  return std::make_unique<runtime::Client>(plugin, c.platform, options);
}

}  // namespace

Backend::Backend() {
  const BackendConfig& c = config();
  if (c.plugin_path.empty()) {
    throw runtime::Error(
        "the tpu device is unavailable: " +
            (c.problem.empty() ? "no PJRT plugin found for the " + c.platform + " platform"
                               : c.problem) +
            " (see README: TORCH_TPU_PLATFORM, TORCH_TPU_PLUGIN)",
        5);
  }
  try {
    client_ = start_client(c);
  } catch (const runtime::Error& e) {
    throw runtime::Error("the tpu device could not start on the " + c.platform +
                             " platform (PJRT plugin " + c.plugin_path + "): " + e.what(),
                         e.code());
  }
  const runtime::Plugin& plugin = client_->plugin();
  for (int i = 0; i < client_->device_count(); ++i) {
    locks_.push_back(std::make_unique<runtime::DeviceLock>(c.platform, i, client_->device_count()));
  }
  pending_.resize(client_->device_count());
  check_codes_.resize(client_->device_count());
  check_code_unread_.resize(client_->device_count());

  // Every program rounds each op's result to its dtype, as PyTorch does: XLA's
  // default keeps bf16/f16 intermediates of a fused program in f32, so a
  // DeferAndFuse graph would differ from the same ops run one by one.
  runtime::CompileOptions compile_options;
  compile_options.bool_overrides.emplace_back("xla_allow_excess_precision", false);
  full_options_ = compile_options;
  // Fast: for programs that run in microseconds anyway (program.cpp). Measured
  // on the CPU plugin: xla_backend_optimization_level=0 compiles single-op
  // programs in 30 ms rather than 46 and runs the demo CNN 2.5x slower;
  // disabling LLVM's expensive passes, the thunk runtime or parallel codegen
  // changed compile times by under 10%. Level 0 forms no fused multiply-adds:
  // a program's results may differ from the optimised one's in the last bit,
  // so the choice is made by the program alone, never switched at run time.
  // TORCH_TPU_FAST_COMPILE=0 compiles every program optimised.
  const char* fast = std::getenv("TORCH_TPU_FAST_COMPILE");
  fast_compile_ = !fast || std::string(fast) != "0";
  compile_options.int_overrides.emplace_back("xla_backend_optimization_level", 0);
  fast_options_ = compile_options;

  std::error_code error;
  auto plugin_file = std::filesystem::path(c.plugin_path);
  std::string identity = c.platform + "\n" + c.plugin_path + "\n" +
                         std::to_string(std::filesystem::file_size(plugin_file, error)) + "\n" +
                         plugin.version_string() + "\n" + plugin.attribute("xla_version") + "\n" +
                         client_->platform_version() + "\n" + CompileCache::host_cpu();
  disk_cache_ = std::make_unique<CompileCache>(CompileCache::default_dir(), identity);
}

void Backend::check_device(int device) const {
  if (device < 0 || device >= device_count()) {
    throw runtime::Error("tpu:" + std::to_string(device) + " does not exist: the " + platform() +
                             " platform has " + std::to_string(device_count()) + " device(s)" +
                             (platform() == "cpu" ? " (set TORCH_TPU_NUM_DEVICES for more)" : ""),
                         3);
  }
}

// TORCH_TPU_DUMP_DIR=<dir> writes every compiled program there, numbered in
// compile order, headed by the name of what it runs, to read what an op lowered to.
void dump_program(const std::string& mlir, const std::string& name) {
  static const char* dir = std::getenv("TORCH_TPU_DUMP_DIR");
  if (!dir || !*dir) return;
  static std::atomic<int64_t> count{0};
  std::ofstream(std::string(dir) + "/program_" + std::to_string(count++) + ".mlir")
      << "// " << name << "\n"
      << mlir;
}

std::shared_ptr<runtime::Executable> Backend::compile(const std::string& mlir, bool fast,
                                                      const std::string& name,
                                                      const std::vector<int64_t>& replica_devices) {
  TraceSpan span("tpu::compile", name);
  dump_program(mlir, name);
  fast = fast && fast_compile_;
  runtime::CompileOptions compile_options = fast ? fast_options_ : full_options_;
  compile_options.replica_devices = replica_devices;
  const std::string options = compile_options.serialize();
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start)
        .count();
  };
  if (std::optional<std::string> bytes = disk_cache_->load(mlir, options)) {
    // Null for a stale or corrupt entry: compiled again below, which replaces it.
    if (auto executable = client_->try_deserialize(*bytes)) {
      metrics().persistent_cache_hits++;
      metrics().compile_nanos += elapsed();
      return executable;
    }
  }
  std::shared_ptr<runtime::Executable> executable;
  try {
    executable = client_->compile(mlir, options);
  } catch (const runtime::Error& e) {
    // XLA's message names a line of the program; the user needs the op.
    throw runtime::Error(name + ": " + e.what(), e.code());
  }
  metrics().compiles++;
  if (fast) metrics().fast_compiles++;
  metrics().compile_nanos += elapsed();
  if (disk_cache_->enabled() && serializable_) {
    try {
      disk_cache_->store(mlir, options, executable->serialize());
    } catch (const runtime::Error&) {
      serializable_ = false;  // this plugin cannot serialize: keep compiling
    }
  }
  return executable;
}

void Backend::drain(int device, size_t keep) {
  auto& queue = pending_.at(device);
  while (queue.size() > keep) {
    Pending p = std::move(queue.front());
    queue.pop_front();
    std::string status = p.done.await_status();
    if (p.finished) p.finished();
    if (!status.empty()) {
      queue.clear();
      // The error code may come from the failed launch: programs after it
      // start from a clean one rather than fail on it too.
      check_codes_[device] = nullptr;
      check_code_unread_[device] = false;
      throw runtime::Error("asynchronous execution of " + *p.op + " failed on tpu: " + status, 13);
    }
  }
}

runtime::Launch Backend::launch(const runtime::Executable& executable, int device,
                                const std::vector<runtime::Buffer*>& inputs,
                                const std::vector<int64_t>& non_donatable, int launch_id) {
  runtime::Launch launch = executable.execute(device, inputs, non_donatable, launch_id);
  metrics().executions++;
  return launch;
}

std::vector<runtime::Launch> Backend::launch_replicas(
    const runtime::Executable& executable, const std::vector<std::vector<runtime::Buffer*>>& inputs,
    const std::vector<int64_t>& non_donatable) {
  std::vector<runtime::Launch> launches = executable.execute_replicas(inputs, non_donatable);
  metrics().executions += static_cast<int64_t>(launches.size());
  return launches;
}

void Backend::track(int device, runtime::Event done, const std::string* op,
                    std::shared_ptr<runtime::Executable> executable) {
  // Stamped by whichever comes first: the event's callback, or a wait for it
  // (drain), after which PJRT may still not have run the callback.
  std::function<void()> finished = trace_device_work(DeviceWork::Program, device, *op);
  if (finished) done.on_ready(finished);
  pending_[device].push_back({std::move(done), op, std::move(executable), std::move(finished)});
  drain(device, launch_blocking() ? 0 : kMaxInFlight);
  if (launch_blocking()) raise_failed_checks(device);
}

runtime::BufferPtr Backend::check_code(int device) {
  runtime::BufferPtr& code = check_codes_.at(device);
  if (!code) {
    const int64_t zeros[2] = {0, 0};
    code = client_->buffer_from_host(zeros, ElementType::S64, {2}, device);
  }
  return code;
}

void Backend::set_check_code(int device, runtime::BufferPtr code) {
  check_codes_.at(device) = std::move(code);
  check_code_unread_.at(device) = true;
}

void Backend::raise_failed_checks(int device) {
  if (device < 0) {
    for (int d = 0; d < device_count(); ++d) raise_failed_checks(d);
    return;
  }
  if (!check_code_unread_.at(device)) return;
  check_code_unread_[device] = false;
  int64_t code[2] = {0, 0};
  // A failed launch leaves no code; its failure is reported by its own wait.
  if (!check_codes_[device]->to_host(code).await_status().empty()) {
    check_codes_[device] = nullptr;
    return;
  }
  if (code[0] != 0) check_codes_[device] = nullptr;  // the next program starts clean
  metrics().device_to_host_transfers++;
  metrics().device_to_host_bytes += sizeof(code);
  raise_data_check(code);
}

namespace {
std::atomic<bool> g_launch_blocking{false};
}

void Backend::set_launch_blocking(bool blocking) { g_launch_blocking = blocking; }
bool Backend::launch_blocking() { return g_launch_blocking; }

runtime::BufferPtr Backend::scalar_buffer(int device, ElementType type, const void* value) {
  return cached_constant(scalars_, device, type, value, {});
}

runtime::BufferPtr Backend::element_buffer(int device, ElementType type, const void* value) {
  return cached_constant(elements_, device, type, value, {1});
}

runtime::BufferPtr Backend::cached_constant(std::map<ScalarKey, runtime::BufferPtr>& cache,
                                            int device, ElementType type, const void* value,
                                            const std::vector<int64_t>& dims) {
  ScalarKey key{};  // zeroed: bytes past the value's compare equal
  std::memcpy(key.data(), &device, sizeof(device));
  key[sizeof(device)] = static_cast<char>(type);
  std::memcpy(key.data() + sizeof(device) + 1, value, element_size(type));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxScalars) cache.clear();
  auto buffer = client_->buffer_from_host(value, type, dims, device);
  cache[key] = buffer;
  return buffer;
}

runtime::BufferPtr Backend::upload(const void* data, ElementType type,
                                   const std::vector<int64_t>& dims, int device,
                                   std::function<void()> release) {
  TraceSpan span("tpu::host_to_device");
  auto buffer = release ? client_->buffer_using_host(data, type, dims, device, std::move(release))
                        : client_->buffer_from_host(data, type, dims, device);
  metrics().host_to_device_transfers++;
  metrics().host_to_device_bytes += buffer->byte_size();
  return buffer;
}

void Backend::download(const runtime::Buffer& buffer, void* dst, const std::string& op) {
  TraceSpan span("tpu::device_to_host", op);
  runtime::Event done = buffer.to_host(dst);
  std::function<void()> finished = trace_device_work(DeviceWork::DeviceToHost, buffer.device(), op);
  std::string status = done.await_status();
  // Stamped here rather than by a callback of the event: PJRT may run those after
  // the wait returns, and a profile that ends at the read would miss the copy.
  if (finished) finished();
  metrics().device_to_host_transfers++;
  metrics().device_to_host_bytes += buffer.byte_size();
  if (!status.empty()) {
    // The value was produced by a failed launch: report the launch.
    synchronize(buffer.device());
    throw runtime::Error(op + " failed: " + status, 13);
  }
  raise_failed_checks(buffer.device());
}

runtime::BufferPtr Backend::copy_to_device(const runtime::Buffer& buffer, int device) {
  return client_->copy_to_device(buffer, device);
}

void Backend::when_done(int device, std::function<void()> fn) {
  const auto& queue = pending_.at(device);
  if (queue.empty()) {
    fn();
  } else {
    queue.back().done.on_ready(std::move(fn));
  }
}

void Backend::synchronize(int device) {
  TraceSpan span("tpu::synchronize");
  if (device < 0) {
    for (int d = 0; d < device_count(); ++d) drain(d, 0);
  } else {
    drain(device, 0);
  }
  raise_failed_checks(device);
}

}  // namespace torch_tpu::engine
