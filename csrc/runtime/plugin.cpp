#include "runtime/plugin.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

namespace torch_tpu::runtime {

namespace {

// Oldest API the runtime was written against (ExecuteOptions without
// `context`, no DeserializeAndLoad load options, ...).
constexpr int kMinMinorVersion = 40;

std::atomic<bool> g_forked{false};

}  // namespace

std::string named_value_text(const PJRT_NamedValue& v) {
  std::ostringstream s;
  switch (v.type) {
    case PJRT_NamedValue_kString:
      s << std::string(v.string_value, v.value_size);
      break;
    case PJRT_NamedValue_kInt64:
      s << v.int64_value;
      break;
    case PJRT_NamedValue_kInt64List:
      for (size_t i = 0; i < v.value_size; ++i) {
        s << (i ? "." : "") << v.int64_array_value[i];
      }
      break;
    case PJRT_NamedValue_kFloat:
      s << v.float_value;
      break;
    case PJRT_NamedValue_kBool:
      s << (v.bool_value ? "true" : "false");
      break;
  }
  return s.str();
}

const char* const kForkedChild =
    "Cannot re-initialize tpu in forked subprocess: the tpu backend started before this "
    "process was forked. To use tpu with multiprocessing, you must use the 'spawn' start "
    "method";

bool forked_child() { return g_forked.load(std::memory_order_relaxed); }

const Plugin& Plugin::load(const std::string& path) {
  static const bool watching_forks = [] {
    return pthread_atfork(nullptr, nullptr, [] { g_forked = true; }) == 0;
  }();
  (void)watching_forks;
  static std::mutex mutex;
  // Leaked: buffers freed during process exit still call into the plugin.
  static auto* loaded = new std::map<std::string, std::unique_ptr<Plugin>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& plugin = (*loaded)[path];
  if (!plugin) plugin.reset(new Plugin(path));
  return *plugin;
}

Plugin::Plugin(std::string path) : path_(std::move(path)) {
  void* handle = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    throw Error("cannot load PJRT plugin " + path_ + ": " + dlerror(), 5);
  }
  using GetApi = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApi>(dlsym(handle, "GetPjrtApi"));
  if (!get_api) {
    throw Error(path_ + " is not a PJRT plugin (no GetPjrtApi symbol)", 5);
  }
  api_ = get_api();
  major_ = api_->pjrt_api_version.major_version;
  minor_ = api_->pjrt_api_version.minor_version;
  if (major_ != 0 || minor_ < kMinMinorVersion) {
    throw Error("PJRT plugin " + path_ + " has API version " + version_string() +
                    "; torch_tpu needs 0." + std::to_string(kMinMinorVersion) + " or newer (0.x)",
                12);
  }
  if (has(Fn::PluginInitialize)) {
    auto args = TPU_ARGS(PJRT_Plugin_Initialize_Args, extension_start);
    call(Fn::PluginInitialize, &args, "PJRT_Plugin_Initialize");
  }
  if (has(Fn::PluginAttributes)) {
    auto args = TPU_ARGS(PJRT_Plugin_Attributes_Args, num_attributes);
    call(Fn::PluginAttributes, &args, "PJRT_Plugin_Attributes");
    for (size_t i = 0; i < args.num_attributes; ++i) {
      const auto& v = args.attributes[i];
      attributes_.emplace_back(std::string(v.name, v.name_size), named_value_text(v));
    }
  }
}

void load_libraries(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
}

std::string Plugin::version_string() const {
  return std::to_string(major_) + "." + std::to_string(minor_);
}

std::string Plugin::attribute(const std::string& name) const {
  for (const auto& [key, value] : attributes_) {
    if (key == name) return value;
  }
  return "";
}

bool Plugin::has(Fn fn) const {
  size_t offset = offsetof(PJRT_Api, slots) + sizeof(void*) * (static_cast<size_t>(fn) + 1);
  return offset <= api_->struct_size && api_->slots[static_cast<int>(fn)] != nullptr;
}

void* Plugin::slot(Fn fn) const {
  if (forked_child()) throw Error(kForkedChild, 9);
  if (!has(fn)) {
    throw Error("PJRT plugin " + path_ + " (API " + version_string() +
                    ") does not implement function slot " + std::to_string(static_cast<int>(fn)),
                12);
  }
  return api_->slots[static_cast<int>(fn)];
}

std::string Plugin::consume(PJRT_Error* error, int* code) const {
  if (!error) return "";
  auto message = TPU_ARGS(PJRT_Error_Message_Args, message_size);
  message.error = error;
  using MessageFn = void (*)(PJRT_Error_Message_Args*);
  reinterpret_cast<MessageFn>(api_->slots[static_cast<int>(Fn::ErrorMessage)])(&message);
  std::string text(message.message, message.message_size);
  if (code) {
    auto get_code = TPU_ARGS(PJRT_Error_GetCode_Args, code);
    get_code.error = error;
    using CodeFn = PJRT_Error* (*)(PJRT_Error_GetCode_Args*);
    auto failed =
        reinterpret_cast<CodeFn>(api_->slots[static_cast<int>(Fn::ErrorGetCode)])(&get_code);
    *code = failed ? 2 : static_cast<int>(get_code.code);
  }
  auto destroy = TPU_ARGS(PJRT_Error_Destroy_Args, error);
  destroy.error = error;
  using DestroyFn = void (*)(PJRT_Error_Destroy_Args*);
  reinterpret_cast<DestroyFn>(api_->slots[static_cast<int>(Fn::ErrorDestroy)])(&destroy);
  return text;
}

void Plugin::check(PJRT_Error* error, const char* what) const {
  if (!error) return;
  int code = 0;
  std::string text = consume(error, &code);
  throw Error(std::string(what) + ": " + text, code);
}

}  // namespace torch_tpu::runtime
