// Devices whose programs run collectives together: the ranks of a tpu_dist
// group whose collectives run inside device programs. A program with
// collective ops is compiled for the group's devices (one replica per rank,
// replica i on rank i's device; its collectives address ranks as replica
// ids) and launched through the group, which makes sure that every rank
// launches the same program before the devices run it: ranks that issue
// different programs, or a rank that never comes, end in an error naming
// the program and the group, never in a device waiting forever.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/client.h"

namespace torch_tpu::engine {

struct Program;

// The group could not launch a program (mismatch, timeout, a failed peer).
class GroupLaunchError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class DeviceGroup {
 public:
  // `device_ids`: each rank's global device id (PJRT's), in rank order.
  DeviceGroup(std::vector<int64_t> device_ids, std::string name, std::chrono::milliseconds timeout);
  virtual ~DeviceGroup() = default;

  const std::vector<int64_t>& device_ids() const { return device_ids_; }
  int size() const { return static_cast<int>(device_ids_.size()); }
  // "tpu_dist group '0' (4 ranks)", for messages.
  std::string name() const {
    std::lock_guard<std::mutex> lock(name_mutex_);
    return name_;
  }
  void set_name(std::string name) {
    std::lock_guard<std::mutex> lock(name_mutex_);
    name_ = std::move(name);
  }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_); }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ms_ = timeout.count(); }

  // Launches `program` (compiled for this group's devices) as `rank`'s
  // replica on `device` with `params`. Returns the rank's launch once every
  // rank launched the same program; throws GroupLaunchError otherwise. The
  // caller holds the engine lock, which is let go of while ranks meet.
  virtual runtime::Launch launch(const Program& program, int rank, int device,
                                 std::vector<runtime::BufferPtr> params,
                                 const std::vector<int64_t>& non_donatable) = 0;

  // The group of ranks `low` < `high` of this one, the same for both (each
  // process's pair object of a multi-process group agrees through the same
  // store): what their point-to-point messages launch through.
  std::shared_ptr<DeviceGroup> pair(int low, int high);

 protected:
  virtual std::shared_ptr<DeviceGroup> make_pair(int low, int high, std::string name) = 0;

 private:
  std::vector<int64_t> device_ids_;
  mutable std::mutex name_mutex_;
  std::string name_;
  std::atomic<int64_t> timeout_ms_;
  std::mutex pairs_mutex_;
  std::map<std::pair<int, int>, std::shared_ptr<DeviceGroup>> pairs_;
};

// A rank of a group: what an op call carries to reach its group.
struct GroupRank {
  std::shared_ptr<DeviceGroup> group;
  int rank = -1;

  explicit operator bool() const { return group != nullptr; }
};

// The group `uid` of ranks that are all threads of this process, each on its
// own device (one object per uid, shared by the ranks): the last rank to
// arrive launches the program on every device of the group at once.
std::shared_ptr<DeviceGroup> in_process_group(const std::string& uid,
                                              std::vector<int64_t> device_ids,
                                              const std::string& name,
                                              std::chrono::milliseconds timeout);

// How a thread waits for other threads of its process: the Python layer
// makes it let go of the interpreter lock (ranks are Python threads).
using BlockingWait = std::function<void(const std::function<void()>& wait)>;
void set_blocking_wait(BlockingWait wait);
// Runs `wait` with the engine lock and (through the hook) the interpreter
// lock let go of.
void wait_for_other_threads(const std::function<void()>& wait);

}  // namespace torch_tpu::engine
