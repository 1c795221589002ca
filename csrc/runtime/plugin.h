// A loaded PJRT plugin: the shared object, its function table, its version.
// Plugins are loaded once per process and never unloaded (unloading tears down
// static registries inside XLA).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/pjrt_abi.h"

namespace torch_tpu::runtime {

// Slot indices of the PJRT_Api function table (append-only across versions).
enum class Fn : int {
  ErrorDestroy = 0,
  ErrorMessage = 1,
  ErrorGetCode = 2,
  PluginInitialize = 3,
  PluginAttributes = 4,
  EventDestroy = 5,
  EventIsReady = 6,
  EventError = 7,
  EventAwait = 8,
  EventOnReady = 9,
  ClientCreate = 10,
  ClientDestroy = 11,
  ClientPlatformName = 12,
  ClientProcessIndex = 13,
  ClientPlatformVersion = 14,
  ClientDevices = 15,
  ClientAddressableDevices = 16,
  ClientCompile = 20,
  ClientBufferFromHostBuffer = 22,
  DeviceDescriptionId = 23,
  DeviceDescriptionAttributes = 25,
  DeviceDescriptionKind = 26,
  DeviceDescriptionDebugString = 27,
  DeviceGetDescription = 29,
  DeviceDefaultMemory = 33,
  DeviceMemoryStats = 34,
  ExecutableDestroy = 40,
  ExecutableSerialize = 49,
  LoadedExecutableDestroy = 50,
  LoadedExecutableGetExecutable = 51,
  LoadedExecutableAddressableDevices = 52,
  LoadedExecutableExecute = 55,
  ExecutableDeserializeAndLoad = 56,
  BufferDestroy = 58,
  BufferOnDeviceSizeInBytes = 64,
  BufferCopyToDevice = 69,
  BufferToHostBuffer = 70,
  BufferReadyEvent = 72,
  ExecutableOutputElementTypes = 90,
  ExecutableOutputDimensions = 91,
  ClientCreateErrorBuffer = 118,
};

// A failed PJRT call, carrying the plugin's own message.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Plugin {
 public:
  // Loads (or returns the already loaded) plugin at `path`, checks its API
  // version and initialises it.
  static const Plugin& load(const std::string& path);

  const std::string& path() const { return path_; }
  int major_version() const { return major_; }
  int minor_version() const { return minor_; }
  // "0.115"
  std::string version_string() const;
  // Plugin attributes (xla_version, stablehlo_current_version, ...) as text.
  const std::vector<std::pair<std::string, std::string>>& attributes() const { return attributes_; }
  std::string attribute(const std::string& name) const;

  bool has(Fn fn) const;

  // Calls function `fn` with `args`; a returned PJRT_Error becomes an Error
  // whose message starts with `what`.
  template <class Args>
  void call(Fn fn, Args* args, const char* what) const {
    using Function = PJRT_Error* (*)(Args*);
    check(reinterpret_cast<Function>(slot(fn))(args), what);
  }

  // As call, but returns the error's message ("" on success) instead of
  // raising: for failures the caller expects and handles at once.
  template <class Args>
  std::string try_call(Fn fn, Args* args) const {
    using Function = PJRT_Error* (*)(Args*);
    return consume(reinterpret_cast<Function>(slot(fn))(args));
  }

  // Turns a PJRT_Error into an Error (and destroys it); no-op for nullptr.
  void check(PJRT_Error* error, const char* what) const;
  // Returns the message of `error` and destroys it ("" for nullptr).
  std::string consume(PJRT_Error* error, int* code = nullptr) const;

 private:
  explicit Plugin(std::string path);
  void* slot(Fn fn) const;

  std::string path_;
  const PJRT_Api* api_ = nullptr;
  int major_ = 0;
  int minor_ = 0;
  std::vector<std::pair<std::string, std::string>> attributes_;
};

// True in a process forked after a plugin was loaded: the plugin's threads
// and device state stayed with the parent, so every PJRT call would hang or
// crash. Plugin calls throw Error instead (see kForkedChild).
bool forked_child();
extern const char* const kForkedChild;

// Loads each of `paths` (kept for the life of the process) so that a plugin
// asking for the library by name gets this copy; a file that is missing or
// does not load is skipped, and the plugin reports what it then lacks.
void load_libraries(const std::vector<std::string>& paths);

// A plugin's named value (attribute, option) as text; lists joined by ".".
std::string named_value_text(const PJRT_NamedValue& value);

// Zero-initialised argument struct with struct_size set, as every call needs.
template <class Args>
Args make_args(size_t struct_size) {
  Args args{};
  args.struct_size = struct_size;
  return args;
}

#define TPU_ARGS(type, last) ::torch_tpu::runtime::make_args<type>(TPU_PJRT_STRUCT_SIZE(type, last))

}  // namespace torch_tpu::runtime
