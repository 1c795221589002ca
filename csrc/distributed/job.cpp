#include "distributed/job.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <random>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "engine/backend.h"
#include "engine/metrics.h"
#include "engine/program.h"
#include "runtime/plugin.h"

namespace torch_tpu::distributed {

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

std::optional<std::string> StoreKeyValues::get(const std::string& key,
                                               std::chrono::milliseconds timeout) {
  try {
    store_->wait({prefix_ + key}, timeout);
  } catch (const c10::DistStoreError&) {
    return std::nullopt;  // not there within the timeout
  }
  return text_of(store_->get(prefix_ + key));
}

std::optional<std::string> StoreKeyValues::try_get(const std::string& key) {
  if (!store_->check({prefix_ + key})) return std::nullopt;
  return text_of(store_->get(prefix_ + key));
}

void StoreKeyValues::put(const std::string& key, const std::string& value) {
  store_->set(prefix_ + key, bytes_of(value));
}

bool join_job(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
              int local_rank) {
  if (engine::Backend::started()) return false;
  // The job's identity, the same in every process: rank 0's draw.
  const std::string key = "torch_tpu/job";
  if (rank == 0) {
    std::random_device random;
    store->set(key, bytes_of(std::to_string(random()) + "-" + std::to_string(random())));
  }
  engine::BackendConfig::Job job;
  job.node_id = rank;
  job.num_nodes = world_size;
  job.local_device = local_rank;
  job.id = text_of(store->get(key));
  job.key_value_store = std::make_shared<StoreKeyValues>(store, "torch_tpu/pjrt/");
  return engine::Backend::join_job(std::move(job));
}

namespace {

// What a plugin's error maker records in call_key_value_callback.
thread_local int made_code = 0;
PJRT_Error* record_error(PJRT_Error_Code code, const char*, size_t) {
  made_code = code;
  static char error;  // any non-null pointer: an error to the caller
  return reinterpret_cast<PJRT_Error*>(&error);
}

}  // namespace

std::pair<int, std::string> call_key_value_callback(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::string& prefix,
                                                    const std::string& call, const std::string& key,
                                                    const std::string& value, int timeout_ms) {
  StoreKeyValues kv(store, prefix);
  PJRT_CallbackError make_error = &record_error;
  made_code = 0;
  auto taken = [](char* data, size_t size, void (*deleter)(char*)) {
    std::string out(data, size);
    deleter(data);
    return out;
  };
  if (call == "put") {
    auto args = TPU_ARGS(PJRT_KeyValuePutCallback_Args, user_arg);
    args.key = key.data();
    args.key_size = key.size();
    args.value = value.data();
    args.value_size = value.size();
    args.callback_error = &make_error;
    args.user_arg = &kv;
    return {runtime::key_value_put(&args) ? made_code : 0, ""};
  }
  if (call == "get") {
    auto args = TPU_ARGS(PJRT_KeyValueGetCallback_Args, value_deleter_callback);
    args.key = key.data();
    args.key_size = key.size();
    args.timeout_in_ms = timeout_ms;
    args.callback_error = &make_error;
    args.user_arg = &kv;
    if (runtime::key_value_get(&args)) return {made_code, ""};
    return {0, taken(args.value, args.value_size, args.value_deleter_callback)};
  }
  TORCH_CHECK_VALUE(call == "try_get", "no key-value callback ", call);
  auto args = TPU_ARGS(PJRT_KeyValueTryGetCallback_Args, value_deleter_callback);
  args.key = key.data();
  args.key_size = key.size();
  args.callback_error = &make_error;
  args.user_arg = &kv;
  if (runtime::key_value_try_get(&args)) return {made_code, ""};
  return {0, taken(args.value, args.value_size, args.value_deleter_callback)};
}

namespace {

class StoreAgreedGroup : public engine::DeviceGroup {
 public:
  StoreAgreedGroup(c10::intrusive_ptr<c10d::Store> store, const std::string& uid,
                   std::vector<int64_t> device_ids, const std::string& name,
                   std::chrono::milliseconds timeout)
      : DeviceGroup(std::move(device_ids), name, timeout),
        store_(std::move(store)),
        uid_text_(uid),
        uid_(std::hash<std::string>()(uid)) {}

  runtime::Launch launch(const engine::Program& program, int rank, int device,
                         std::vector<runtime::BufferPtr> params,
                         const std::vector<int64_t>& non_donatable) override {
    const uint64_t round = next_++;
    const std::string prefix = "tpu_dist/round/" + std::to_string(round) + "/";
    auto key = [&](int r) { return prefix + std::to_string(r); };
    const std::string mine = std::to_string(program.text_hash) + "\n" + *program.name;
    store_->set(key(rank), bytes_of(mine));
    std::vector<std::string> keys;
    for (int r = 0; r < size(); ++r) keys.push_back(key(r));
    bool arrived = true;
    engine::wait_for_other_threads([&] {
      try {
        store_->wait(keys, timeout());
      } catch (const c10::DistStoreError&) {
        arrived = false;
      }
    });
    if (!arrived) {
      std::string missing;
      for (int r = 0; r < size(); ++r) {
        if (!store_->check({key(r)})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      throw engine::GroupLaunchError(name() + ": " + *program.name + " timed out after " +
                                     std::to_string(timeout().count()) + " ms: rank(s) " + missing +
                                     " did not launch it");
    }
    for (int r = 0; r < size(); ++r) {
      std::string theirs = text_of(store_->get(key(r)));
      if (theirs.substr(0, theirs.find('\n')) != mine.substr(0, mine.find('\n'))) {
        throw engine::GroupLaunchError(name() + ": ranks launched different programs: rank " +
                                       std::to_string(rank) + " " + *program.name + ", rank " +
                                       std::to_string(r) + " " +
                                       theirs.substr(theirs.find('\n') + 1));
      }
    }
    // Two rounds back every rank has read this rank's key: it can go.
    if (round >= 2) {
      store_->deleteKey("tpu_dist/round/" + std::to_string(round - 2) + "/" + std::to_string(rank));
    }
    std::vector<runtime::Buffer*> inputs;
    for (const runtime::BufferPtr& b : params) inputs.push_back(b.get());
    const int launch_id = static_cast<int>(((uid_ + round) & 0x7ffffffe) | 1);
    return engine::Backend::get().launch(*program.executable, device, inputs, non_donatable,
                                         launch_id);
  }

 private:
  std::shared_ptr<engine::DeviceGroup> make_pair(int low, int high, std::string name) override {
    const std::string pair = "pair/" + std::to_string(low) + "," + std::to_string(high);
    return std::make_shared<StoreAgreedGroup>(
        c10::make_intrusive<c10d::PrefixStore>(pair, store_), uid_text_ + "/" + pair,
        std::vector<int64_t>{device_ids().at(low), device_ids().at(high)}, std::move(name),
        timeout());
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string uid_text_;
  uint64_t uid_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace

std::shared_ptr<engine::DeviceGroup> store_agreed_group(c10::intrusive_ptr<c10d::Store> store,
                                                        const std::string& uid,
                                                        std::vector<int64_t> device_ids,
                                                        const std::string& name,
                                                        std::chrono::milliseconds timeout) {
  return std::make_shared<StoreAgreedGroup>(std::move(store), uid, std::move(device_ids), name,
                                            timeout);
}

}  // namespace torch_tpu::distributed
