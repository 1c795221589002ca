#include "runtime/compile_options.h"

namespace torch_tpu::runtime {

namespace {

// Protobuf wire format: varints and length-delimited fields are all we need.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_int(std::string& out, int field, int64_t value) {
  put_varint(out, static_cast<uint64_t>(field) << 3);
  put_varint(out, static_cast<uint64_t>(value));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// CompileOptionsProto.env_option_overrides (field 7) is a map<string,
// OptionOverrideProto>; a map entry is {1: key, 2: value}.
void put_override(std::string& out, const std::string& name, int value_field, int64_t value) {
  std::string option;
  put_int(option, value_field, value);
  std::string entry;
  put_bytes(entry, 1, name);
  put_bytes(entry, 2, option);
  put_bytes(out, 7, entry);
}

// DeviceAssignmentProto: replica_count (1), computation_count (2) and one
// ComputationDevice (3) per partition listing its replicas' devices (1).
std::string device_assignment(const std::vector<int64_t>& replica_devices) {
  std::string computation;
  for (int64_t id : replica_devices) put_int(computation, 1, id);
  std::string out;
  put_int(out, 1, static_cast<int64_t>(replica_devices.size()));
  put_int(out, 2, 1);
  put_bytes(out, 3, computation);
  return out;
}

}  // namespace

std::string CompileOptions::serialize() const {
  // ExecutableBuildOptionsProto: num_replicas (4), num_partitions (5) = 1,
  // device_assignment (9).
  const bool replicated = !replica_devices.empty();
  std::string build;
  put_int(build, 4, replicated ? static_cast<int64_t>(replica_devices.size()) : 1);
  put_int(build, 5, 1);
  if (replicated) put_bytes(build, 9, device_assignment(replica_devices));
  std::string out;
  put_bytes(out, 3, build);
  if (portable && !replicated) put_int(out, 4, 1);  // compile_portable_executable
  for (const auto& [name, value] : int_overrides) {
    put_override(out, name, 3, value);  // OptionOverrideProto.int_field
  }
  for (const auto& [name, value] : bool_overrides) {
    put_override(out, name, 2, value);  // OptionOverrideProto.bool_field
  }
  return out;
}

}  // namespace torch_tpu::runtime
