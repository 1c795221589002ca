// RAII wrappers around the PJRT client and the handles it hands out.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/element_type.h"
#include "runtime/key_value_store.h"
#include "runtime/plugin.h"

namespace torch_tpu::runtime {

class Client;

// Completion of asynchronous work. Owns the PJRT_Event.
class Event {
 public:
  Event() = default;
  Event(const Plugin* plugin, PJRT_Event* event) : plugin_(plugin), event_(event) {}
  Event(Event&& other) noexcept : plugin_(other.plugin_), event_(other.event_) {
    other.event_ = nullptr;
  }
  Event& operator=(Event&& other) noexcept {
    std::swap(plugin_, other.plugin_);
    std::swap(event_, other.event_);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  // Blocks until the work is done; throws Error if it failed.
  void await(const char* what);
  // Blocks; returns the failure message, or "" on success.
  std::string await_status();
  bool ready() const;
  bool valid() const { return event_ != nullptr; }
  // Runs `fn` once the work is done, failed or not, on whichever thread
  // completes it (now, if it is done).
  void on_ready(std::function<void()> fn) const;
  // on_ready, consuming the event.
  void then(std::function<void()> fn) &&;

 private:
  const Plugin* plugin_ = nullptr;
  PJRT_Event* event_ = nullptr;
};

// An immutable array on one device. Owns the PJRT_Buffer.
class Buffer {
 public:
  Buffer(const Plugin* plugin, PJRT_Buffer* buffer, ElementType type, std::vector<int64_t> dims,
         int device)
      : plugin_(plugin), buffer_(buffer), type_(type), dims_(std::move(dims)), device_(device) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  PJRT_Buffer* get() const { return buffer_; }
  ElementType type() const { return type_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int device() const { return device_; }
  int64_t element_count() const;
  size_t byte_size() const { return element_count() * element_size(type_); }

  // Starts copying the whole buffer into `dst` (row-major, `byte_size()`
  // bytes); `dst` must stay alive until the returned event completes.
  Event to_host(void* dst) const;
  // Blocks until the buffer's defining computation finished; throws on error.
  void await_ready(const char* what) const;

 private:
  const Plugin* plugin_;
  PJRT_Buffer* buffer_;
  ElementType type_;
  std::vector<int64_t> dims_;
  int device_;
};

using BufferPtr = std::shared_ptr<Buffer>;

// Result of launching a program: its outputs (already usable as inputs of
// further launches) and the completion event of the launch.
struct Launch {
  std::vector<BufferPtr> outputs;
  Event done;
};

// A program compiled for this client. Owns the PJRT_LoadedExecutable.
class Executable {
 public:
  Executable(Client* client, PJRT_LoadedExecutable* executable);
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  ~Executable();

  size_t num_outputs() const { return output_types_.size(); }

  // Launches on `device` asynchronously. Inputs not listed in
  // `non_donatable` may be consumed when the program aliases them to an
  // output (their contents are undefined afterwards). A program compiled for
  // several replicas may be launched one device at a time: each launch of one
  // execution carries the same non-zero `launch_id`, by which the devices'
  // collectives find each other.
  Launch execute(int device, const std::vector<Buffer*>& inputs,
                 const std::vector<int64_t>& non_donatable = {}, int launch_id = 0) const;
  // Launches a program compiled for several replicas on all of them at once:
  // `inputs[i]` are the arguments of replica i, which runs on devices()[i].
  std::vector<Launch> execute_replicas(const std::vector<std::vector<Buffer*>>& inputs,
                                       const std::vector<int64_t>& non_donatable = {}) const;
  // The client's device indices the program runs on, in replica order.
  std::vector<int> devices() const;

  // Bytes that DeserializeAndLoad accepts (for the persistent cache).
  std::string serialize() const;

 private:
  std::vector<Launch> run(const std::vector<int>& devices,
                          const std::vector<std::vector<Buffer*>>& inputs,
                          const std::vector<int64_t>& non_donatable, PJRT_Device* execute_device,
                          int launch_id) const;

  Client* client_;
  PJRT_LoadedExecutable* executable_;
  std::vector<ElementType> output_types_;
  std::vector<std::vector<int64_t>> output_dims_;
};

struct DeviceInfo {
  int id = 0;
  std::string kind;
  std::string description;
  // What the plugin says of the device (CUDA: compute_capability, core_count, ...).
  std::vector<std::pair<std::string, std::string>> attributes;
};

struct MemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = -1;  // -1: not reported by the plugin
  int64_t bytes_limit = -1;
};

struct ClientOptions {
  // Number of devices of the CPU plugin ("cpu_device_count"); 0: default.
  int64_t cpu_device_count = 0;
  // A client of a multi-process job (num_nodes > 1: one node a process):
  // the peers find each other through `key_value_store`.
  int64_t node_id = 0;
  int64_t num_nodes = 1;
  std::shared_ptr<KeyValueStore> key_value_store;
  // CUDA plugin: the local devices this process uses (empty: all).
  std::vector<int64_t> visible_devices;
  // CUDA plugin: NCCL mocked and the job's other nodes' devices mocked after
  // this one's ("<slices>x<hosts>x<devices per host>", hosts = num_nodes), so
  // a program of several replicas runs on one GPU (for checks).
  bool mock_nccl = false;
  std::string mock_topology;
  // CUDA plugin: the share of each GPU's memory its allocator may grow to. It
  // takes memory as needed, not up front (PyTorch's CUDA allocator does too),
  // and leaves some for other users of the GPU in the process (PyTorch's CUDA
  // tensors, cuDNN and cuBLAS workspaces).
  float gpu_memory_fraction = 0.9f;
};

class Client {
 public:
  Client(const Plugin& plugin, const std::string& platform, const ClientOptions& options);
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  const Plugin& plugin() const { return *plugin_; }
  PJRT_Client* get() const { return client_; }
  // What the plugin calls itself ("cpu", "cuda", "tpu").
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }

  int device_count() const { return static_cast<int>(devices_.size()); }
  PJRT_Device* device(int index) const;
  // The index of an addressable device (-1: not one of them).
  int index_of(const PJRT_Device* device) const;
  // The global id of addressable device `index`: what device assignments name.
  int64_t global_id(int index) const { return global_ids_.at(index); }
  // Which process of a multi-process client this is (0 for one process).
  int process_index() const { return process_index_; }
  DeviceInfo device_info(int index) const;
  MemoryStats memory_stats(int index) const;

  // Copies `data` (row-major, dense) into a new buffer on `device`. The copy
  // of the host data completes before this returns.
  BufferPtr buffer_from_host(const void* data, ElementType type, const std::vector<int64_t>& dims,
                             int device);
  // A buffer of `data` (row-major, dense) that uses the host memory in place
  // where the platform can (the CPU platform can, for 64-byte aligned data)
  // and copies it otherwise. `release` runs, on any thread, once the device
  // no longer uses the memory: until then it must stay alive and unchanged.
  // On failure it throws and never runs `release`.
  BufferPtr buffer_using_host(const void* data, ElementType type, const std::vector<int64_t>& dims,
                              int device, std::function<void()> release);
  // A buffer that fails every launch using it with `message` (API >= 0.103);
  // used to test how asynchronous failures surface.
  BufferPtr error_buffer(const std::string& message, ElementType type,
                         const std::vector<int64_t>& dims, int device);
  // Copies `buffer` to another device of this client.
  BufferPtr copy_to_device(const Buffer& buffer, int device);

  // Compiles MLIR text (StableHLO with `func.func public @main`).
  std::shared_ptr<Executable> compile(const std::string& mlir, const std::string& compile_options);
  // An executable serialized earlier, or null where the plugin cannot load
  // it (a stale or corrupt cache entry, or XLA's CPU JIT failing to link it:
  // "Failed to materialize symbols"), which the caller compiles instead.
  std::shared_ptr<Executable> try_deserialize(const std::string& bytes);

 private:
  BufferPtr from_host(const void* data, ElementType type, const std::vector<int64_t>& dims,
                      int device, PJRT_HostBufferSemantics semantics,
                      std::function<void()> release);

  const Plugin* plugin_;
  PJRT_Client* client_ = nullptr;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<PJRT_Device*> devices_;
  std::vector<int64_t> global_ids_;
  int process_index_ = 0;
  // Kept for the client's life: the plugin may call it after creation (the
  // CUDA plugin exchanges NCCL ids through it at a group's first collective).
  std::shared_ptr<KeyValueStore> key_value_store_;
};

}  // namespace torch_tpu::runtime
