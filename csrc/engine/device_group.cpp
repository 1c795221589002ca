#include "engine/device_group.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "engine/backend.h"
#include "engine/program.h"
#include "hlo/builder.h"

namespace torch_tpu::engine {

DeviceGroup::DeviceGroup(std::vector<int64_t> device_ids, std::string name,
                         std::chrono::milliseconds timeout)
    : device_ids_(std::move(device_ids)), name_(std::move(name)), timeout_ms_(timeout.count()) {}

std::shared_ptr<DeviceGroup> DeviceGroup::pair(int low, int high) {
  std::lock_guard<std::mutex> lock(pairs_mutex_);
  std::shared_ptr<DeviceGroup>& group = pairs_[{low, high}];
  if (!group) {
    group = make_pair(low, high,
                      name() + ": ranks " + std::to_string(low) + " and " + std::to_string(high));
  }
  return group;
}

namespace {

BlockingWait& blocking_wait() {
  static auto* wait = new BlockingWait();
  return *wait;
}

// "fused program of 3 ops: ... (f32[4], s32[])": the program and what it was
// given, to tell two ranks' programs apart in a message.
std::string describe(const Program& program, const std::vector<runtime::BufferPtr>& params) {
  std::string out = *program.name + " (";
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i]) continue;
    if (out.back() != '(') out += ", ";
    out += hlo::to_string(hlo::Shape{params[i]->type(), params[i]->dims()});
  }
  return out + ")";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

class InProcessGroup : public DeviceGroup {
 public:
  using DeviceGroup::DeviceGroup;

  runtime::Launch launch(const Program& program, int rank, int device,
                         std::vector<runtime::BufferPtr> params,
                         const std::vector<int64_t>& non_donatable) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (next_.empty()) next_.resize(size(), 0);
    const uint64_t seq = next_.at(rank)++;
    Round& round = rounds_[seq];
    if (round.programs.empty()) {
      round.programs.resize(size(), nullptr);
      round.what.resize(size());
      round.params.resize(size());
    }
    if (round.error.empty()) {
      round.programs[rank] = &program;
      round.what[rank] = describe(program, params);
      round.params[rank] = std::move(params);
      for (int64_t p : non_donatable) round.non_donatable.push_back(p);
      if (++round.arrived == size()) {
        launch_all(round);
      } else {
        // The locks are taken engine first, then this group's: let go of
        // this one before the engine lock is taken again.
        const auto deadline = std::chrono::steady_clock::now() + timeout();
        wait_for_other_threads([&] {
          round.done.wait_until(lock, deadline,
                                [&] { return round.launched || !round.error.empty(); });
          lock.unlock();
        });
        lock.lock();
        if (!round.launched && round.error.empty()) timed_out(round, program);
      }
    }
    if (!round.error.empty()) {
      std::string error = round.error;
      finish(seq, round);
      throw GroupLaunchError(error);
    }
    runtime::Launch mine = std::move(round.launches.at(rank));
    finish(seq, round);
    return mine;
  }

 private:
  struct Round {
    std::vector<const Program*> programs;  // by rank; null: not arrived
    std::vector<std::string> what;
    std::vector<std::vector<runtime::BufferPtr>> params;
    std::vector<int64_t> non_donatable;
    int arrived = 0;
    int taken = 0;
    bool launched = false;
    std::vector<runtime::Launch> launches;  // by rank
    std::string error;
    std::condition_variable done;
  };

  // Under mutex_, by the last rank to arrive (which holds the engine lock).
  void launch_all(Round& round) {
    for (int r = 1; r < size(); ++r) {
      if (!same_program(*round.programs[r], *round.programs[0])) {
        fail(round, name() + ": ranks launched different programs: rank 0 " + round.what[0] +
                        ", rank " + std::to_string(r) + " " + round.what[r] + hint());
        return;
      }
    }
    const Program& program = *round.programs[0];
    std::vector<std::vector<runtime::Buffer*>> inputs(size());
    for (int r = 0; r < size(); ++r) {
      for (const runtime::BufferPtr& b : round.params[r]) inputs[r].push_back(b.get());
    }
    try {
      round.launches =
          Backend::get().launch_replicas(*program.executable, inputs, round.non_donatable);
    } catch (const std::exception& e) {
      fail(round, name() + ": launching " + round.what[0] + " failed: " + e.what());
      return;
    }
    round.params.clear();
    round.launched = true;
    round.done.notify_all();
  }

  // One object for every rank: its pairs are shared as well.
  std::shared_ptr<DeviceGroup> make_pair(int low, int high, std::string name) override {
    return std::make_shared<InProcessGroup>(
        std::vector<int64_t>{device_ids().at(low), device_ids().at(high)}, std::move(name),
        timeout());
  }

  static bool same_program(const Program& a, const Program& b) {
    return a.executable == b.executable || a.text_hash == b.text_hash;
  }

  void timed_out(Round& round, const Program& program) {
    std::vector<int> missing;
    for (int r = 0; r < size(); ++r) {
      if (!round.programs[r]) missing.push_back(r);
    }
    fail(round, name() + ": " + *program.name + " timed out after " +
                    std::to_string(timeout().count()) + " ms: rank(s) " + rank_list(missing) +
                    " did not launch it" + hint());
  }

  static std::string hint() {
    return " (every rank must issue the same collectives in the same order, and materialise "
           "pending work containing collectives at the same points)";
  }

  void fail(Round& round, std::string error) {
    round.error = std::move(error);
    round.params.clear();
    round.done.notify_all();
  }

  // A rank is done with the round; the last one forgets it (ranks that never
  // came leave it: its error awaits them).
  void finish(uint64_t seq, Round& round) {
    if (++round.taken == size()) rounds_.erase(seq);
  }

  std::mutex mutex_;
  std::vector<uint64_t> next_;  // each rank's next round
  std::map<uint64_t, Round> rounds_;
};

}  // namespace

std::shared_ptr<DeviceGroup> in_process_group(const std::string& uid,
                                              std::vector<int64_t> device_ids,
                                              const std::string& name,
                                              std::chrono::milliseconds timeout) {
  static auto* mutex = new std::mutex();
  static auto* groups = new std::map<std::string, std::weak_ptr<DeviceGroup>>();
  std::lock_guard<std::mutex> lock(*mutex);
  std::weak_ptr<DeviceGroup>& slot = (*groups)[uid];
  if (auto group = slot.lock()) {
    if (group->device_ids() != device_ids) {
      throw GroupLaunchError(name + ": its ranks disagree on their devices");
    }
    return group;
  }
  auto group = std::make_shared<InProcessGroup>(std::move(device_ids), name, timeout);
  slot = group;
  return group;
}

void set_blocking_wait(BlockingWait wait) { blocking_wait() = std::move(wait); }

void wait_for_other_threads(const std::function<void()>& wait) {
  Backend::get().mutex().unlocked_while([&] {
    if (blocking_wait()) {
      blocking_wait()(wait);
    } else {
      wait();
    }
  });
}

}  // namespace torch_tpu::engine
