// A multi-process job's PJRT client (GPU, TPU): each process's client is one
// node of the job, created with the launch's node id and count and a key-value
// store backed by the c10d store, as JAX creates it with its distributed
// client. XLA's own collectives (NCCL, ICI) then carry the programs of a
// group whose ranks are processes of the job (StoreAgreedGroup).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "engine/device_group.h"
#include "runtime/key_value_store.h"

namespace torch_tpu::distributed {

// The c10d store as a PJRT client's key-value store: keys under `prefix`;
// get() waits for a key with store->wait and reports a missing one as none.
class StoreKeyValues : public runtime::KeyValueStore {
 public:
  StoreKeyValues(c10::intrusive_ptr<c10d::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  std::optional<std::string> get(const std::string& key,
                                 std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void put(const std::string& key, const std::string& value) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
};

// Makes this process node `rank` of a job of `world_size` processes, before
// the backend starts: its client then spans the job's devices (using its local
// device `local_rank` only). False when the backend already started.
bool join_job(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
              int local_rank);

// Calls the PJRT key-value callback `call` ("get", "try_get", "put") over
// StoreKeyValues(store, prefix) the way a plugin calls it: returns the error
// code it made (0: none) and the value it handed over (tests).
std::pair<int, std::string> call_key_value_callback(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const std::string& prefix,
                                                    const std::string& call, const std::string& key,
                                                    const std::string& value, int timeout_ms);

// A group whose ranks are processes of one job: before a launch the ranks
// agree through the c10d store that they launch the same program (or fail
// naming it at the group's timeout), then each launches its own device with a
// launch id the group's round gives, by which XLA's collectives meet.
std::shared_ptr<engine::DeviceGroup> store_agreed_group(c10::intrusive_ptr<c10d::Store> store,
                                                        const std::string& uid,
                                                        std::vector<int64_t> device_ids,
                                                        const std::string& name,
                                                        std::chrono::milliseconds timeout);

}  // namespace torch_tpu::distributed
