#include "runtime/key_value_store.h"

#include <cstring>
#include <exception>

namespace torch_tpu::runtime {

namespace {

PJRT_Error* error(PJRT_CallbackError* make, PJRT_Error_Code code, const std::string& message) {
  return (*make)(code, message.data(), message.size());
}

// Hands `value` over as PJRT expects: a buffer the plugin copies, then frees
// through the deleter.
template <class Args>
void hand_over(Args* args, const std::string& value) {
  char* copy = new char[value.size() + 1];
  std::memcpy(copy, value.data(), value.size());
  copy[value.size()] = '\0';
  args->value = copy;
  args->value_size = value.size();
  args->value_deleter_callback = [](char* v) { delete[] v; };
}

template <class Args, class Fn>
PJRT_Error* serve(Args* args, Fn&& fn) {
  try {
    return fn(*static_cast<KeyValueStore*>(args->user_arg));
  } catch (const std::exception& e) {
    return error(args->callback_error, PJRT_Error_Code_UNAVAILABLE,
                 std::string("torch_tpu key-value store: ") + e.what());
  } catch (...) {
    return error(args->callback_error, PJRT_Error_Code_UNAVAILABLE,
                 "torch_tpu key-value store: unknown failure");
  }
}

}  // namespace

PJRT_Error* key_value_get(PJRT_KeyValueGetCallback_Args* args) {
  return serve(args, [&](KeyValueStore& store) -> PJRT_Error* {
    const std::string key(args->key, args->key_size);
    std::optional<std::string> value =
        store.get(key, std::chrono::milliseconds(args->timeout_in_ms));
    if (!value) {
      return error(
          args->callback_error, PJRT_Error_Code_NOT_FOUND,
          "key " + key + " did not appear within " + std::to_string(args->timeout_in_ms) + " ms");
    }
    hand_over(args, *value);
    return nullptr;
  });
}

PJRT_Error* key_value_try_get(PJRT_KeyValueTryGetCallback_Args* args) {
  return serve(args, [&](KeyValueStore& store) -> PJRT_Error* {
    const std::string key(args->key, args->key_size);
    std::optional<std::string> value = store.try_get(key);
    if (!value) return error(args->callback_error, PJRT_Error_Code_NOT_FOUND, "no key " + key);
    hand_over(args, *value);
    return nullptr;
  });
}

PJRT_Error* key_value_put(PJRT_KeyValuePutCallback_Args* args) {
  return serve(args, [&](KeyValueStore& store) -> PJRT_Error* {
    store.put(std::string(args->key, args->key_size), std::string(args->value, args->value_size));
    return nullptr;
  });
}

}  // namespace torch_tpu::runtime
