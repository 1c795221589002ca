#include "runtime/client.h"

#include <cstring>

namespace torch_tpu::runtime {

// ---------------------------------------------------------------- Event

Event::~Event() {
  if (!event_) return;
  auto args = TPU_ARGS(PJRT_Event_Args, event);
  args.event = event_;
  try {
    plugin_->call(Fn::EventDestroy, &args, "PJRT_Event_Destroy");
  } catch (const Error&) {
    // Destruction failures leave nothing to clean up.
  }
}

std::string Event::await_status() {
  if (!event_) return "";
  auto args = TPU_ARGS(PJRT_Event_Args, event);
  args.event = event_;
  try {
    plugin_->call(Fn::EventAwait, &args, "execution failed");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void Event::await(const char* what) {
  std::string status = await_status();
  if (!status.empty()) throw Error(std::string(what) + ": " + status, 13);
}

void Event::then(std::function<void()> fn) && {
  on_ready(std::move(fn));
  // The callback stays registered with the work's producer; the event, our
  // handle on it, can go now.
  Event consumed(std::move(*this));
}

void Event::on_ready(std::function<void()> fn) const {
  if (!event_) {
    fn();
    return;
  }
  struct Callback {
    const Plugin* plugin;
    std::function<void()> fn;
  };
  auto args = TPU_ARGS(PJRT_Event_OnReady_Args, user_arg);
  args.event = event_;
  args.user_arg = new Callback{plugin_, std::move(fn)};
  args.callback = [](PJRT_Error* error, void* arg) {
    std::unique_ptr<Callback> callback(static_cast<Callback*>(arg));
    callback->plugin->consume(error);
    try {
      callback->fn();
    } catch (...) {
      // Nothing may unwind into the plugin.
    }
  };
  try {
    plugin_->call(Fn::EventOnReady, &args, "PJRT_Event_OnReady");
  } catch (...) {
    delete static_cast<Callback*>(args.user_arg);
    throw;
  }
}

bool Event::ready() const {
  if (!event_) return true;
  auto args = TPU_ARGS(PJRT_Event_IsReady_Args, is_ready);
  args.event = event_;
  plugin_->call(Fn::EventIsReady, &args, "PJRT_Event_IsReady");
  return args.is_ready;
}

// ---------------------------------------------------------------- Buffer

Buffer::~Buffer() {
  auto args = TPU_ARGS(PJRT_Buffer_Destroy_Args, buffer);
  args.buffer = buffer_;
  try {
    plugin_->call(Fn::BufferDestroy, &args, "PJRT_Buffer_Destroy");
  } catch (const Error&) {
  }
}

int64_t Buffer::element_count() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

Event Buffer::to_host(void* dst) const {
  auto args = TPU_ARGS(PJRT_Buffer_ToHostBuffer_Args, event);
  args.src = buffer_;
  args.dst = dst;
  args.dst_size = byte_size();
  plugin_->call(Fn::BufferToHostBuffer, &args, "device-to-host copy");
  return Event(plugin_, args.event);
}

void Buffer::await_ready(const char* what) const {
  auto args = TPU_ARGS(PJRT_Buffer_ReadyEvent_Args, event);
  args.buffer = buffer_;
  plugin_->call(Fn::BufferReadyEvent, &args, "PJRT_Buffer_ReadyEvent");
  Event(plugin_, args.event).await(what);
}

// ---------------------------------------------------------------- Executable

Executable::Executable(Client* client, PJRT_LoadedExecutable* executable)
    : client_(client), executable_(executable) {
  const Plugin& plugin = client_->plugin();
  auto get = TPU_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, executable);
  get.loaded_executable = executable_;
  plugin.call(Fn::LoadedExecutableGetExecutable, &get, "PJRT_LoadedExecutable_GetExecutable");
  auto types = TPU_ARGS(PJRT_Executable_OutputElementTypes_Args, num_output_types);
  types.executable = get.executable;
  plugin.call(Fn::ExecutableOutputElementTypes, &types, "PJRT_Executable_OutputElementTypes");
  auto dims = TPU_ARGS(PJRT_Executable_OutputDimensions_Args, dim_sizes);
  dims.executable = get.executable;
  plugin.call(Fn::ExecutableOutputDimensions, &dims, "PJRT_Executable_OutputDimensions");
  const int64_t* next = dims.dims;
  for (size_t i = 0; i < types.num_output_types; ++i) {
    output_types_.push_back(static_cast<ElementType>(types.output_types[i]));
    output_dims_.emplace_back(next, next + dims.dim_sizes[i]);
    next += dims.dim_sizes[i];
  }
  auto destroy = TPU_ARGS(PJRT_Executable_Destroy_Args, executable);
  destroy.executable = get.executable;
  plugin.call(Fn::ExecutableDestroy, &destroy, "PJRT_Executable_Destroy");
}

Executable::~Executable() {
  auto args = TPU_ARGS(PJRT_LoadedExecutable_Destroy_Args, executable);
  args.executable = executable_;
  try {
    client_->plugin().call(Fn::LoadedExecutableDestroy, &args, "PJRT_LoadedExecutable_Destroy");
  } catch (const Error&) {
  }
}

Launch Executable::execute(int device, const std::vector<Buffer*>& inputs,
                           const std::vector<int64_t>& non_donatable, int launch_id) const {
  return std::move(
      run({device}, {inputs}, non_donatable, client_->device(device), launch_id).front());
}

std::vector<Launch> Executable::execute_replicas(const std::vector<std::vector<Buffer*>>& inputs,
                                                 const std::vector<int64_t>& non_donatable) const {
  std::vector<int> on = devices();
  if (on.size() != inputs.size()) {
    throw Error("a program of " + std::to_string(on.size()) + " replicas launched with " +
                    std::to_string(inputs.size()) + " argument lists",
                3);
  }
  return run(on, inputs, non_donatable, nullptr, 0);
}

std::vector<Launch> Executable::run(const std::vector<int>& devices,
                                    const std::vector<std::vector<Buffer*>>& inputs,
                                    const std::vector<int64_t>& non_donatable,
                                    PJRT_Device* execute_device, int launch_id) const {
  const Plugin& plugin = client_->plugin();
  const size_t n = devices.size();
  const size_t num_args = inputs.front().size();
  // Most launches are one device taking and making a few buffers: their handle
  // lists stay on the stack (a launch's host time is counted in mallocs).
  constexpr size_t kInline = 8;
  PJRT_Buffer* inline_args[kInline];
  PJRT_Buffer* inline_outs[kInline] = {};
  std::vector<PJRT_Buffer*> heap_args, heap_outs;
  PJRT_Buffer** args = inline_args;
  if (n * num_args > kInline) args = (heap_args.resize(n * num_args), heap_args.data());
  PJRT_Buffer** outs = inline_outs;
  if (n * num_outputs() > kInline) {
    outs = (heap_outs.resize(n * num_outputs(), nullptr), heap_outs.data());
  }
  PJRT_Buffer* const* inline_arg_lists[1];
  PJRT_Buffer** inline_out_lists[1];
  PJRT_Event* inline_done[1] = {};
  std::vector<PJRT_Buffer* const*> heap_arg_lists;
  std::vector<PJRT_Buffer**> heap_out_lists;
  std::vector<PJRT_Event*> heap_done;
  PJRT_Buffer* const** arg_lists = inline_arg_lists;
  PJRT_Buffer*** out_lists = inline_out_lists;
  PJRT_Event** done = inline_done;
  if (n > 1) {
    heap_arg_lists.resize(n);
    heap_out_lists.resize(n);
    heap_done.resize(n, nullptr);
    arg_lists = heap_arg_lists.data();
    out_lists = heap_out_lists.data();
    done = heap_done.data();
  }
  for (size_t d = 0; d < n; ++d) {
    if (inputs[d].size() != num_args) throw Error("replicas launched with unequal arguments", 3);
    for (size_t i = 0; i < num_args; ++i) args[d * num_args + i] = inputs[d][i]->get();
    arg_lists[d] = args + d * num_args;
    out_lists[d] = outs + d * num_outputs();
  }

  auto options = TPU_ARGS(PJRT_ExecuteOptions, num_hlo_output_callbacks);
  options.launch_id = launch_id;
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  auto exec = TPU_ARGS(PJRT_LoadedExecutable_Execute_Args, execute_device);
  exec.executable = executable_;
  exec.options = &options;
  exec.argument_lists = arg_lists;
  exec.num_devices = n;
  exec.num_args = num_args;
  exec.output_lists = out_lists;
  exec.device_complete_events = done;
  exec.execute_device = execute_device;
  plugin.call(Fn::LoadedExecutableExecute, &exec, "PJRT_LoadedExecutable_Execute");

  std::vector<Launch> launches;
  launches.reserve(n);
  for (size_t d = 0; d < n; ++d) {
    Launch& launch = launches.emplace_back(Launch{{}, Event(&plugin, done[d])});
    launch.outputs.reserve(num_outputs());
    for (size_t i = 0; i < num_outputs(); ++i) {
      launch.outputs.push_back(std::make_shared<Buffer>(&plugin, out_lists[d][i], output_types_[i],
                                                        output_dims_[i], devices[d]));
    }
  }
  return launches;
}

std::vector<int> Executable::devices() const {
  const Plugin& plugin = client_->plugin();
  auto args = TPU_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, num_addressable_devices);
  args.executable = executable_;
  plugin.call(Fn::LoadedExecutableAddressableDevices, &args,
              "PJRT_LoadedExecutable_AddressableDevices");
  std::vector<int> indices;
  for (size_t i = 0; i < args.num_addressable_devices; ++i) {
    indices.push_back(client_->index_of(args.addressable_devices[i]));
  }
  return indices;
}

std::string Executable::serialize() const {
  const Plugin& plugin = client_->plugin();
  auto get = TPU_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, executable);
  get.loaded_executable = executable_;
  plugin.call(Fn::LoadedExecutableGetExecutable, &get, "PJRT_LoadedExecutable_GetExecutable");
  auto args = TPU_ARGS(PJRT_Executable_Serialize_Args, serialized_executable_deleter);
  args.executable = get.executable;
  std::string bytes;
  try {
    plugin.call(Fn::ExecutableSerialize, &args, "PJRT_Executable_Serialize");
    bytes.assign(args.serialized_bytes, args.serialized_bytes_size);
    if (args.serialized_executable_deleter) {
      args.serialized_executable_deleter(args.serialized_executable);
    }
  } catch (...) {
    auto destroy = TPU_ARGS(PJRT_Executable_Destroy_Args, executable);
    destroy.executable = get.executable;
    plugin.call(Fn::ExecutableDestroy, &destroy, "PJRT_Executable_Destroy");
    throw;
  }
  auto destroy = TPU_ARGS(PJRT_Executable_Destroy_Args, executable);
  destroy.executable = get.executable;
  plugin.call(Fn::ExecutableDestroy, &destroy, "PJRT_Executable_Destroy");
  return bytes;
}

// ---------------------------------------------------------------- Client

namespace {

PJRT_NamedValue scalar_option(const char* name, PJRT_NamedValue_Type type) {
  auto v = TPU_ARGS(PJRT_NamedValue, value_size);
  v.name = name;
  v.name_size = std::strlen(name);
  v.type = type;
  v.value_size = 1;
  return v;
}

PJRT_NamedValue int_option(const char* name, int64_t value) {
  auto v = scalar_option(name, PJRT_NamedValue_kInt64);
  v.int64_value = value;
  return v;
}

PJRT_NamedValue bool_option(const char* name, bool value) {
  auto v = scalar_option(name, PJRT_NamedValue_kBool);
  v.bool_value = value;
  return v;
}

PJRT_NamedValue float_option(const char* name, float value) {
  auto v = scalar_option(name, PJRT_NamedValue_kFloat);
  v.float_value = value;
  return v;
}

PJRT_NamedValue int_list_option(const char* name, const std::vector<int64_t>& values) {
  auto v = scalar_option(name, PJRT_NamedValue_kInt64List);
  v.int64_array_value = values.data();
  v.value_size = values.size();
  return v;
}

PJRT_NamedValue string_option(const char* name, const char* value) {
  auto v = scalar_option(name, PJRT_NamedValue_kString);
  v.string_value = value;
  v.value_size = std::strlen(value);
  return v;
}

// Each plugin rejects option names it does not know, so each platform gets
// its own. The CUDA plugin's are those JAX passes it (platform name, the BFC
// allocator), except that memory is taken as needed rather than preallocated.
std::vector<PJRT_NamedValue> create_options(const std::string& platform,
                                            const ClientOptions& options) {
  if (platform == "cpu" && options.cpu_device_count > 0) {
    return {int_option("cpu_device_count", options.cpu_device_count)};
  }
  if (platform == "cuda") {
    std::vector<PJRT_NamedValue> named = {
        string_option("platform_name", "cuda"), string_option("allocator", "bfc"),
        bool_option("preallocate", false),
        float_option("memory_fraction", options.gpu_memory_fraction)};
    if (options.key_value_store) {
      named.push_back(int_option("node_id", options.node_id));
      named.push_back(int_option("num_nodes", options.num_nodes));
    }
    if (!options.visible_devices.empty()) {
      named.push_back(int_list_option("visible_devices", options.visible_devices));
    }
    if (options.mock_nccl) {
      named.push_back(bool_option("enable_mock_nccl", true));
      named.push_back(string_option("mock_gpu_topology", options.mock_topology.c_str()));
    }
    return named;
  }
  return {};
}

std::string client_string(const Plugin& plugin, PJRT_Client* client, Fn fn, const char* what) {
  auto args = TPU_ARGS(PJRT_Client_String_Args, value_size);
  args.client = client;
  plugin.call(fn, &args, what);
  return std::string(args.value, args.value_size);
}

}  // namespace

Client::Client(const Plugin& plugin, const std::string& platform, const ClientOptions& options)
    : plugin_(&plugin) {
  std::vector<PJRT_NamedValue> named = create_options(platform, options);
  auto args = TPU_ARGS(PJRT_Client_Create_Args, kv_try_get_user_arg);
  args.create_options = named.data();
  args.num_options = named.size();
  key_value_store_ = options.key_value_store;
  if (KeyValueStore* store = key_value_store_.get()) {
    args.kv_get_callback = &key_value_get;
    args.kv_get_user_arg = store;
    args.kv_put_callback = &key_value_put;
    args.kv_put_user_arg = store;
    args.kv_try_get_callback = &key_value_try_get;
    args.kv_try_get_user_arg = store;
  }
  plugin.call(Fn::ClientCreate, &args, "PJRT_Client_Create");
  client_ = args.client;

  platform_name_ =
      client_string(plugin, client_, Fn::ClientPlatformName, "PJRT_Client_PlatformName");
  platform_version_ =
      client_string(plugin, client_, Fn::ClientPlatformVersion, "PJRT_Client_PlatformVersion");
  auto devices = TPU_ARGS(PJRT_Client_AddressableDevices_Args, num_addressable_devices);
  devices.client = client_;
  plugin.call(Fn::ClientAddressableDevices, &devices, "PJRT_Client_AddressableDevices");
  devices_.assign(devices.addressable_devices,
                  devices.addressable_devices + devices.num_addressable_devices);
  for (int i = 0; i < device_count(); ++i) global_ids_.push_back(device_info(i).id);
  auto process = TPU_ARGS(PJRT_Client_ProcessIndex_Args, process_index);
  process.client = client_;
  plugin.call(Fn::ClientProcessIndex, &process, "PJRT_Client_ProcessIndex");
  process_index_ = process.process_index;
}

Client::~Client() {
  auto args = TPU_ARGS(PJRT_Client_Destroy_Args, client);
  args.client = client_;
  try {
    plugin_->call(Fn::ClientDestroy, &args, "PJRT_Client_Destroy");
  } catch (const Error&) {
  }
}

PJRT_Device* Client::device(int index) const {
  if (index < 0 || index >= device_count()) {
    throw Error("device index " + std::to_string(index) + " is out of range (the " +
                    platform_name_ + " client has " + std::to_string(device_count()) + " devices)",
                3);
  }
  return devices_[index];
}

int Client::index_of(const PJRT_Device* device) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i] == device) return static_cast<int>(i);
  }
  return -1;
}

DeviceInfo Client::device_info(int index) const {
  auto desc = TPU_ARGS(PJRT_Device_GetDescription_Args, device_description);
  desc.device = device(index);
  plugin_->call(Fn::DeviceGetDescription, &desc, "PJRT_Device_GetDescription");
  DeviceInfo info;
  auto id = TPU_ARGS(PJRT_DeviceDescription_Id_Args, id);
  id.device_description = desc.device_description;
  plugin_->call(Fn::DeviceDescriptionId, &id, "PJRT_DeviceDescription_Id");
  info.id = id.id;
  auto kind = TPU_ARGS(PJRT_DeviceDescription_String_Args, value_size);
  kind.device_description = desc.device_description;
  plugin_->call(Fn::DeviceDescriptionKind, &kind, "PJRT_DeviceDescription_Kind");
  info.kind.assign(kind.value, kind.value_size);
  auto debug = TPU_ARGS(PJRT_DeviceDescription_String_Args, value_size);
  debug.device_description = desc.device_description;
  plugin_->call(Fn::DeviceDescriptionDebugString, &debug, "PJRT_DeviceDescription_DebugString");
  info.description.assign(debug.value, debug.value_size);
  if (plugin_->has(Fn::DeviceDescriptionAttributes)) {
    auto attrs = TPU_ARGS(PJRT_DeviceDescription_Attributes_Args, attributes);
    attrs.device_description = desc.device_description;
    plugin_->call(Fn::DeviceDescriptionAttributes, &attrs, "PJRT_DeviceDescription_Attributes");
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const PJRT_NamedValue& v = attrs.attributes[i];
      info.attributes.emplace_back(std::string(v.name, v.name_size), named_value_text(v));
    }
  }
  return info;
}

MemoryStats Client::memory_stats(int index) const {
  MemoryStats stats;
  if (!plugin_->has(Fn::DeviceMemoryStats)) return stats;
  auto args = TPU_ARGS(PJRT_Device_MemoryStats_Args, peak_allocated_bytes_is_set);
  args.device = device(index);
  try {
    plugin_->call(Fn::DeviceMemoryStats, &args, "PJRT_Device_MemoryStats");
  } catch (const Error&) {
    return stats;  // The CPU plugin does not implement memory stats.
  }
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

BufferPtr Client::buffer_from_host(const void* data, ElementType type,
                                   const std::vector<int64_t>& dims, int device) {
  // The host data is copied before the call returns.
  return from_host(data, type, dims, device, PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
                   nullptr);
}

BufferPtr Client::buffer_using_host(const void* data, ElementType type,
                                    const std::vector<int64_t>& dims, int device,
                                    std::function<void()> release) {
  return from_host(data, type, dims, device, PJRT_HostBufferSemantics_kImmutableZeroCopy,
                   std::move(release));
}

BufferPtr Client::from_host(const void* data, ElementType type, const std::vector<int64_t>& dims,
                            int device, PJRT_HostBufferSemantics semantics,
                            std::function<void()> release) {
  auto args = TPU_ARGS(PJRT_Client_BufferFromHostBuffer_Args, buffer);
  args.client = client_;
  args.data = data;
  args.type = static_cast<PJRT_Buffer_Type>(type);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = semantics;
  args.device = this->device(device);
  plugin_->call(Fn::ClientBufferFromHostBuffer, &args, "host-to-device copy");
  auto buffer = std::make_shared<Buffer>(plugin_, args.buffer, type, dims, device);
  Event done(plugin_, args.done_with_host_buffer);
  if (release) std::move(done).then(std::move(release));
  return buffer;
}

BufferPtr Client::error_buffer(const std::string& message, ElementType type,
                               const std::vector<int64_t>& dims, int device) {
  auto memory = TPU_ARGS(PJRT_Device_DefaultMemory_Args, memory);
  memory.device = this->device(device);
  plugin_->call(Fn::DeviceDefaultMemory, &memory, "PJRT_Device_DefaultMemory");
  auto args = TPU_ARGS(PJRT_Client_CreateErrorBuffer_Args, num_payload);
  args.client = client_;
  args.error_code = PJRT_Error_Code_INVALID_ARGUMENT;
  args.error_message = message.data();
  args.error_message_size = message.size();
  args.shape_dims = dims.data();
  args.shape_num_dims = dims.size();
  args.shape_element_type = static_cast<PJRT_Buffer_Type>(type);
  args.memory = memory.memory;
  plugin_->call(Fn::ClientCreateErrorBuffer, &args, "PJRT_Client_CreateErrorBuffer");
  return std::make_shared<Buffer>(plugin_, args.buffer, type, dims, device);
}

BufferPtr Client::copy_to_device(const Buffer& buffer, int device) {
  auto args = TPU_ARGS(PJRT_Buffer_CopyToDevice_Args, dst_buffer);
  args.buffer = buffer.get();
  args.dst_device = this->device(device);
  plugin_->call(Fn::BufferCopyToDevice, &args, "device-to-device copy");
  return std::make_shared<Buffer>(plugin_, args.dst_buffer, buffer.type(), buffer.dims(), device);
}

std::shared_ptr<Executable> Client::compile(const std::string& mlir,
                                            const std::string& compile_options) {
  auto program = TPU_ARGS(PJRT_Program, format_size);
  program.code = const_cast<char*>(mlir.data());
  program.code_size = mlir.size();
  program.format = "mlir";
  program.format_size = 4;
  auto args = TPU_ARGS(PJRT_Client_Compile_Args, executable);
  args.client = client_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  plugin_->call(Fn::ClientCompile, &args, "XLA compilation failed");
  return std::make_shared<Executable>(this, args.executable);
}

std::shared_ptr<Executable> Client::try_deserialize(const std::string& bytes) {
  auto args = TPU_ARGS(PJRT_Executable_DeserializeAndLoad_Args, load_options);
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  if (!plugin_->try_call(Fn::ExecutableDeserializeAndLoad, &args).empty()) return nullptr;
  return std::make_shared<Executable>(this, args.loaded_executable);
}

}  // namespace torch_tpu::runtime
