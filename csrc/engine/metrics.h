// Counters behind torch_tpu.metrics(): tests assert on them, users read them
// to find recompiles, transfers and CPU fallbacks.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace torch_tpu::engine {

struct Metrics {
  std::atomic<int64_t> compiles{0};
  std::atomic<int64_t> compile_nanos{0};
  // Of the compiles, those for fast compilation (Backend::compile).
  std::atomic<int64_t> fast_compiles{0};
  // Programs loaded from the persistent cache instead of compiled.
  std::atomic<int64_t> persistent_cache_hits{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> executions{0};
  std::atomic<int64_t> host_to_device_bytes{0};
  std::atomic<int64_t> host_to_device_transfers{0};
  std::atomic<int64_t> device_to_host_bytes{0};
  std::atomic<int64_t> device_to_host_transfers{0};
  // DeferAndFuse: ops recorded into pending graphs.
  std::atomic<int64_t> deferred_ops{0};
  // tpu_dist collectives run inside device programs (counted per rank at
  // launch), and those staged through the host (Gloo).
  std::atomic<int64_t> program_collectives{0};
  std::atomic<int64_t> staged_collectives{0};

  void count_fallback(const std::string& op);
  std::map<std::string, int64_t> fallbacks() const;
  // DeferAndFuse: graphs materialised, by reason ("host_read", "step", ...).
  void count_materialization(const std::string& reason);
  std::map<std::string, int64_t> materializations() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> fallbacks_;
  std::map<std::string, int64_t> materializations_;
};

Metrics& metrics();

}  // namespace torch_tpu::engine
