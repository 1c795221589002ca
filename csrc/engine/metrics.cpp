#include "engine/metrics.h"

namespace torch_tpu::engine {

void Metrics::count_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++fallbacks_[op];
}

std::map<std::string, int64_t> Metrics::fallbacks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fallbacks_;
}

void Metrics::count_materialization(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++materializations_[reason];
}

std::map<std::string, int64_t> Metrics::materializations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return materializations_;
}

void Metrics::reset() {
  for (auto* counter :
       {&compiles, &compile_nanos, &cache_hits, &cache_misses, &executions, &host_to_device_bytes,
        &host_to_device_transfers, &device_to_host_bytes, &device_to_host_transfers, &deferred_ops,
        &persistent_cache_hits, &fast_compiles, &program_collectives, &staged_collectives}) {
    counter->store(0);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  fallbacks_.clear();
  materializations_.clear();
}

Metrics& metrics() {
  static Metrics m;
  return m;
}

}  // namespace torch_tpu::engine
