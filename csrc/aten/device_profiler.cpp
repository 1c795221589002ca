#include "aten/device_profiler.h"

#if __has_include(<kineto/libkineto.h>)
#include <kineto/GenericTraceActivity.h>
#include <kineto/IActivityProfiler.h>
#include <kineto/libkineto.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torch_tpu::aten {

namespace {

using libkineto::ActivityType;

// Unix nanoseconds: the clock of kineto's activities.
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Work {
  engine::DeviceWork kind;
  int device;
  std::string name;
  uint64_t correlation;  // the op that queued it (0: none)
  int64_t queued_ns;
  std::atomic<int64_t> finished_ns{-1};
};

// What the recording session holds; the hook reaches it without the session.
struct Recording {
  std::mutex mutex;
  std::atomic<bool> active{false};
  std::vector<std::shared_ptr<Work>> work;
};

Recording& recording() {
  static auto* r = new Recording();  // outlives static destruction: callbacks
  return *r;
}

// The profiler pushes the id of each op it records on the op's thread; work
// queued inside the op belongs to it.
thread_local std::vector<uint64_t> t_correlation;

const std::set<ActivityType>& device_activities() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL,
                                            ActivityType::GPU_MEMCPY};
  return types;
}

class DeviceSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    Recording& r = recording();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.work.clear();
    r.active = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    Recording& r = recording();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.active = false;
    work_.swap(r.work);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_op, int64_t, int64_t) override {
    std::map<int, std::vector<const Work*>> by_device;
    for (const auto& w : work_) by_device[w->device].push_back(w.get());
    for (const auto& [device, queue] : by_device) {
      std::vector<engine::DeviceWorkTimes> times;
      for (const Work* w : queue) times.push_back({w->queued_ns, w->finished_ns.load()});
      std::vector<engine::DeviceSpan> spans = engine::device_timeline(times);
      for (size_t i = 0; i < queue.size(); ++i) {
        if (spans[i].end >= 0) log(logger, linked_op, *queue[i], spans[i].start, spans[i].end);
      }
    }
  }

  // Only a session that saw tpu work names a device lane: the same process
  // may profile CUDA, whose lanes are named by device number too.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (work_.empty()) return nullptr;
    int device = work_.front()->device;
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{device, 0x1000000 + device, "TPU " + std::to_string(device),
                              "tpu:" + std::to_string(device)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::set<int> devices;
    for (const auto& w : work_) devices.insert(w->device);
    std::vector<libkineto::ResourceInfo> queues;
    for (int device : devices) queues.push_back({0, 0, device, "queue"});
    return queues;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

 private:
  static void log(libkineto::ActivityLogger& logger,
                  const libkineto::getLinkedActivityCallback& linked_op, const Work& w,
                  int64_t start, int64_t end) {
    const bool program = w.kind == engine::DeviceWork::Program;
    libkineto::GenericTraceActivity activity;
    activity.activityType = program ? ActivityType::CONCURRENT_KERNEL : ActivityType::GPU_MEMCPY;
    // Not the op's own name: the table would show two rows of it.
    activity.activityName =
        std::string(program ? "tpu::execute(" : "tpu::device_to_host(") + w.name + ")";
    activity.startTime = start;
    activity.endTime = end;
    activity.device = w.device;
    activity.resource = 0;
    activity.id = static_cast<int32_t>(w.correlation);
    if (w.correlation != 0) {
      activity.linked = linked_op(static_cast<int32_t>(w.correlation));
      activity.flow.id = w.correlation;
      activity.flow.type = libkineto::kLinkAsyncCpuGpu;
      activity.flow.start = false;
    }
    activity.log(logger);
  }

  std::vector<std::shared_ptr<Work>> work_;
};

class DeviceProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string name = "torch_tpu";
    return name;
  }
  const std::set<ActivityType>& availableActivities() const override { return device_activities(); }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config&) override {
    for (ActivityType type : device_activities()) {
      if (types.count(type)) return std::make_unique<DeviceSession>();
    }
    return nullptr;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }
};

// The extension loads with torch, before any profiler session exists;
// kineto adds the profiler when it starts (or now, if it has).
const bool registered = [] {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<DeviceProfiler>(); });
  return true;
}();

}  // namespace

std::function<void()> record_device_work(engine::DeviceWork kind, int device,
                                         const std::string& name) {
  Recording& r = recording();
  if (!r.active.load(std::memory_order_relaxed)) return {};
  auto work = std::make_shared<Work>();
  work->kind = kind;
  work->device = device;
  work->name = name;
  work->correlation = t_correlation.empty() ? 0 : t_correlation.back();
  work->queued_ns = now_ns();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.active) return {};
    r.work.push_back(work);
  }
  return [work] {  // the first stamp counts: the engine may stamp twice
    int64_t unset = -1;
    work->finished_ns.compare_exchange_strong(unset, now_ns());
  };
}

}  // namespace torch_tpu::aten

#else  // a torch without kineto: no device rows

namespace torch_tpu::aten {
std::function<void()> record_device_work(engine::DeviceWork, int, const std::string&) { return {}; }
}  // namespace torch_tpu::aten

#endif
