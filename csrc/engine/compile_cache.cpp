#include "engine/compile_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace torch_tpu::engine {

namespace {

constexpr const char* kFormat = "torch_tpu executable cache 1";

// Two independent 64-bit FNV-1a hashes (different offsets and a final mix):
// 128 bits name a file, so unrelated programs practically never collide, and
// the header below rejects the rest.
uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string digest(const std::string& s) {
  return hex(fnv1a(s, 14695981039346656037ull)) + hex(fnv1a(s, 0x9e3779b97f4a7c15ull));
}

}  // namespace

CompileCache::CompileCache(std::string dir, std::string identity)
    : dir_(std::move(dir)), identity_(std::move(identity)) {
  const char* max_mb = std::getenv("TORCH_TPU_CACHE_MAX_MB");
  max_bytes_ = static_cast<uintmax_t>(max_mb && std::atoll(max_mb) > 0 ? std::atoll(max_mb) : 4096)
               << 20;
  if (dir_.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error || access(dir_.c_str(), W_OK) != 0) dir_.clear();  // unusable: compile every time
}

std::string CompileCache::default_dir() {
  const char* dir = std::getenv("TORCH_TPU_CACHE_DIR");
  if (dir && *dir) return std::string(dir) == "off" ? "" : dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/torch_tpu";
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.cache/torch_tpu" : "";
}

std::string CompileCache::host_cpu() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0 && model.empty()) model = line;
    // x86 "flags", arm64 "Features": what the JIT may target.
    if (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0) return model + line;
  }
  return model;
}

std::string CompileCache::header(const std::string& program, const std::string& options) const {
  return std::string(kFormat) + "\n" + digest(identity_) + digest(options) + "\n" +
         std::to_string(program.size()) + "\n";
}

std::string CompileCache::path(const std::string& program, const std::string& options) const {
  return dir_ + "/" + digest(program + '\0' + options + '\0' + identity_) + ".xla";
}

std::optional<std::string> CompileCache::load(const std::string& program,
                                              const std::string& options) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path(program, options), std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream contents;
  contents << in.rdbuf();
  std::string bytes = contents.str();
  std::string expected = header(program, options);
  if (bytes.compare(0, expected.size(), expected) != 0) return std::nullopt;
  return bytes.substr(expected.size());
}

void CompileCache::store(const std::string& program, const std::string& options,
                         const std::string& executable) const {
  if (!enabled() || executable.empty()) return;
  std::string target = path(program, options);
  // Of this process and thread: ranks as threads store at once.
  static std::atomic<uint64_t> next{0};
  std::string temporary = target + ".tmp" + std::to_string(getpid()) + "." + std::to_string(next++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << header(program, options) << executable;
    if (!out) {
      std::remove(temporary.c_str());
      return;
    }
  }
  std::rename(temporary.c_str(), target.c_str());  // atomic: readers see all or nothing
  if (++stores_ % 256 == 0) trim();
}

void CompileCache::trim() const {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  uintmax_t total = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir_, error)) {
    if (entry.path().extension() != ".xla") continue;
    uintmax_t size = entry.file_size(error);
    if (error) continue;
    total += size;
    entries.emplace_back(entry.last_write_time(error), entry.path());
  }
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end());
  for (const auto& [time, path] : entries) {
    if (total <= max_bytes_ * 3 / 4) break;
    uintmax_t size = fs::file_size(path, error);
    if (!error && fs::remove(path, error)) total -= size;
  }
}

}  // namespace torch_tpu::engine
