// Compiled executables on disk, so a new process (or another one) starts
// warm. Entries are keyed by the program text and everything else that
// decides the compiled code: compile options, platform, plugin (path, size,
// version) and the host CPU's features. Writes are atomic (temporary file and
// rename), so concurrent processes are safe; entries that are unreadable or
// were written for another identity are ignored and rewritten. The directory
// is kept under TORCH_TPU_CACHE_MAX_MB (default 4096): least recently written
// entries go first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torch_tpu::engine {

class CompileCache {
 public:
  // `dir` empty: disabled. `identity` names the plugin, platform and host.
  CompileCache(std::string dir, std::string identity);

  bool enabled() const { return !dir_.empty(); }
  std::optional<std::string> load(const std::string& program, const std::string& options) const;
  void store(const std::string& program, const std::string& options,
             const std::string& executable) const;

  // $TORCH_TPU_CACHE_DIR, else $XDG_CACHE_HOME/torch_tpu, else
  // ~/.cache/torch_tpu; TORCH_TPU_CACHE_DIR=off disables the cache.
  static std::string default_dir();
  // The features of this host's CPU that compiled code may use.
  static std::string host_cpu();

 private:
  std::string path(const std::string& program, const std::string& options) const;
  std::string header(const std::string& program, const std::string& options) const;

  void trim() const;

  std::string dir_;
  std::string identity_;
  uintmax_t max_bytes_;
  mutable int stores_ = 0;
};

}  // namespace torch_tpu::engine
