// The key-value store a PJRT client of a multi-process job exchanges its
// topology through (the CUDA plugin: under "local_topology/" and
// "global_topology/" keys, and its NCCL ids), as JAX passes its distributed
// client: the caller's store behind the C callbacks of PJRT_Client_Create.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "runtime/pjrt_abi.h"

namespace torch_tpu::runtime {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // The value of `key`, waiting up to `timeout` for a peer to put it; none
  // if it did not come.
  virtual std::optional<std::string> get(const std::string& key,
                                         std::chrono::milliseconds timeout) = 0;
  // The value of `key` if it is there now.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  virtual void put(const std::string& key, const std::string& value) = 0;
};

// The callbacks PJRT calls, `user_arg` a KeyValueStore*. A missing key is
// NOT_FOUND, a failure of the store UNAVAILABLE, both made with the plugin's
// callback_error; values are handed over with their deleter.
PJRT_Error* key_value_get(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* key_value_try_get(PJRT_KeyValueTryGetCallback_Args* args);
PJRT_Error* key_value_put(PJRT_KeyValuePutCallback_Args* args);

}  // namespace torch_tpu::runtime
