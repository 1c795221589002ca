// The process-wide device backend: one PJRT client for the chosen platform,
// the locks on its devices, compilation, launches and the bookkeeping of
// asynchronous work (errors surface at the next synchronisation, naming the
// op that failed).
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/compile_cache.h"
#include "engine/engine_mutex.h"
#include "runtime/client.h"
#include "runtime/compile_options.h"
#include "runtime/device_lock.h"

namespace torch_tpu::engine {

struct BackendConfig {
  std::string platform;     // "cpu", "cuda" or "tpu"
  std::string plugin_path;  // the PJRT plugin to load
  int cpu_devices = 1;      // devices of the CPU platform
  std::string problem;      // why no plugin can be used (reported on first use)
  // Shared libraries the plugin finds only once they are loaded (the CUDA
  // libraries of the nvidia-* wheels), loaded just before it.
  std::vector<std::string> libraries;
  // A process of a multi-process job (GPU, TPU): its client spans the job's
  // devices, the peers meeting in `key_value_store` (see Backend::join_job).
  struct Job {
    int64_t node_id = 0;
    int64_t num_nodes = 1;
    int64_t local_device = -1;  // the one local device the process uses (-1: all)
    std::string id;             // the same in every process of the job
    std::shared_ptr<runtime::KeyValueStore> key_value_store;
  };
  std::optional<Job> job;
};

class Backend {
 public:
  // Sets what `get()` will start. Without it, $TORCH_TPU_PLATFORM and
  // $TORCH_TPU_PLUGIN are used.
  static void configure(BackendConfig config);
  static const BackendConfig& config();
  // Makes the client, when it starts, one process's part of a multi-process
  // job: false when the backend has started already (its client is this
  // process's alone).
  static bool join_job(BackendConfig::Job job);
  // Starts the backend on first use (loads the plugin, locks the devices). A
  // backend that failed to start raises the same error on every later use.
  static Backend& get();
  static bool started();
  // Devices the platform shows, known without starting: the client's count
  // once started; before, the CPU platform's configured count or the
  // platform's own census (runtime/visible_devices.h); 0 without a plugin.
  static int visible_device_count();

  runtime::Client& client() { return *client_; }
  const std::string& platform() const { return config().platform; }
  int device_count() const { return client_->device_count(); }
  void check_device(int device) const;

  // Compiles MLIR text, counting compiles and compile time; finds it in the
  // persistent cache when an earlier process compiled it. `fast`: for fast
  // compilation rather than fast execution (XLA's optimisation level 0).
  // `name`: what the program is (for profilers), e.g. its op.
  // `replica_devices`: the global device ids a program with collectives runs
  // on, one replica each (runtime::CompileOptions).
  std::shared_ptr<runtime::Executable> compile(const std::string& mlir, bool fast,
                                               const std::string& name,
                                               const std::vector<int64_t>& replica_devices = {});
  // Launches asynchronously; the caller adopts the outputs, then passes the
  // completion event to track().
  // `launch_id`: the launch's part in one execution of a program of several
  // replicas launched device by device (runtime::Executable::execute).
  runtime::Launch launch(const runtime::Executable& executable, int device,
                         const std::vector<runtime::Buffer*>& inputs,
                         const std::vector<int64_t>& non_donatable, int launch_id = 0);
  // Launches a program of several replicas on all their devices at once
  // (inputs[i]: replica i's); one launch per replica, in replica order.
  std::vector<runtime::Launch> launch_replicas(
      const runtime::Executable& executable,
      const std::vector<std::vector<runtime::Buffer*>>& inputs,
      const std::vector<int64_t>& non_donatable);
  // Remembers that `op` completes with `done`; raises the failure of an
  // earlier launch when the queue is drained (always, under
  // TPU_LAUNCH_BLOCKING=1).
  // `executable` is kept until the launch completes (the plan cache may drop it).
  // `op` is an interned name (engine/program.h): it outlives the launch.
  void track(int device, runtime::Event done, const std::string* op,
             std::shared_ptr<runtime::Executable> executable = nullptr);
  // The data-check error code programs pass on (data_checks.h): zeros until
  // a program with checks ran since it was last read.
  runtime::BufferPtr check_code(int device);
  void set_check_code(int device, runtime::BufferPtr code);
  // Reads the code of `device` (-1: all), if programs updated it, and raises
  // the failure it reports (DataCheckFailure); waits for those programs.
  void raise_failed_checks(int device);

  // A device buffer holding one scalar (cached: scalars recur).
  runtime::BufferPtr scalar_buffer(int device, ElementType type, const void* value);
  // The same value as a one-element storage's buffer (shape [1]), cached too.
  runtime::BufferPtr element_buffer(int device, ElementType type, const void* value);

  // Copies `data` to the device; with `release`, the device may use the host
  // memory in place until `release` runs (see Client::buffer_using_host).
  runtime::BufferPtr upload(const void* data, ElementType type, const std::vector<int64_t>& dims,
                            int device, std::function<void()> release = nullptr);
  // Blocks until `buffer` is on the host in `dst`; raises pending failures.
  void download(const runtime::Buffer& buffer, void* dst, const std::string& op);
  runtime::BufferPtr copy_to_device(const runtime::Buffer& buffer, int device);

  // Waits for all launched work on `device` (-1: all devices) and raises the
  // first failure of asynchronous execution.
  void synchronize(int device);
  // Runs `fn` once the work launched on `device` so far is done (now, if it is).
  void when_done(int device, std::function<void()> fn);

  // Debug eager (TPU_LAUNCH_BLOCKING=1): every launch completes before the
  // next op, so a failure surfaces at the op that caused it.
  static void set_launch_blocking(bool blocking);
  static bool launch_blocking();

  // The engine-wide lock: ops from several threads (autograd's device thread,
  // user threads) serialise here.
  EngineMutex& mutex() { return mutex_; }

 private:
  Backend();
  struct Pending {
    runtime::Event done;
    const std::string* op;
    std::shared_ptr<runtime::Executable> executable;
    // A profiler's stamp of its end (trace_device_work), if one records it.
    std::function<void()> finished;
  };
  // Awaits the oldest launches of `device` until `keep` are in flight.
  void drain(int device, size_t keep);

  std::unique_ptr<runtime::Client> client_;
  std::vector<std::unique_ptr<runtime::DeviceLock>> locks_;
  std::vector<std::deque<Pending>> pending_;
  std::vector<runtime::BufferPtr> check_codes_;  // per device; null: zeros
  std::vector<bool> check_code_unread_;
  // Device, element type and value (at most 16 bytes): a key built without an
  // allocation, as every launch with a scalar operand looks one up.
  using ScalarKey = std::array<char, sizeof(int) + 1 + 16>;
  std::map<ScalarKey, runtime::BufferPtr> scalars_, elements_;
  runtime::BufferPtr cached_constant(std::map<ScalarKey, runtime::BufferPtr>& cache, int device,
                                     ElementType type, const void* value,
                                     const std::vector<int64_t>& dims);
  runtime::CompileOptions fast_options_, full_options_;
  bool fast_compile_ = true;  // TORCH_TPU_FAST_COMPILE
  std::unique_ptr<CompileCache> disk_cache_;
  bool serializable_ = true;  // the plugin can serialize executables
  EngineMutex mutex_;
};

}  // namespace torch_tpu::engine
