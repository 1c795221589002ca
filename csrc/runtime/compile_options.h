// Serialised xla.CompileOptionsProto, written by hand (a few varint fields):
// the runtime needs no protobuf library for this.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_tpu::runtime {

struct CompileOptions {
  // Compile once, pick the device at launch (`execute_device`).
  bool portable = true;
  // A program whose replicas run on these devices (global device ids, replica
  // i on replica_devices[i]): its collectives run among them. Not portable.
  std::vector<int64_t> replica_devices;
  // XLA debug-option overrides by name, e.g. {"xla_backend_optimization_level", 0}.
  std::vector<std::pair<std::string, int64_t>> int_overrides;
  std::vector<std::pair<std::string, bool>> bool_overrides;

  std::string serialize() const;
};

}  // namespace torch_tpu::runtime
