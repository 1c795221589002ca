#include "aten/memory_history.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace torch_tpu::aten {

namespace {

std::atomic<bool> g_recording{false};
std::mutex g_mutex;
size_t g_max_entries = 0;
std::deque<MemoryEvent> g_events;
std::unordered_map<uintptr_t, MemoryBlock> g_live;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void add_event(MemoryEvent event) {
  g_events.push_back(std::move(event));
  while (g_events.size() > g_max_entries) g_events.pop_front();
}

}  // namespace

void record_memory_history(bool enabled, size_t max_entries) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_recording = enabled;
  g_max_entries = max_entries;
  if (!enabled) {
    g_events.clear();
    g_live.clear();
  }
}

bool recording_memory_history() { return g_recording.load(std::memory_order_relaxed); }

void note_alloc(const void* storage, c10::DeviceIndex device, size_t size) {
  MemoryBlock block{device, reinterpret_cast<uintptr_t>(storage), size,
                    torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false,
                                                     /*cpp=*/false)};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_recording) return;
  g_live[block.address] = block;
  add_event({true, std::move(block), now_us()});
}

void note_free(const void* storage) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_live.find(reinterpret_cast<uintptr_t>(storage));
  if (it == g_live.end()) return;  // allocated before recording started
  add_event({false, it->second, now_us()});
  g_live.erase(it);
}

std::vector<MemoryBlock> live_blocks() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<MemoryBlock> out;
  for (const auto& [address, block] : g_live) out.push_back(block);
  return out;
}

std::vector<MemoryEvent> memory_events() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_events.begin(), g_events.end()};
}

}  // namespace torch_tpu::aten
