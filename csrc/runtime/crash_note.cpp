#include "runtime/crash_note.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace torch_tpu::runtime {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
std::atomic<const std::string*> g_note{nullptr};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

void restore_previous() {
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
    sigaction(kSignals[i], &g_previous[i], nullptr);
  }
}

// Async-signal-safe: write(2), sigaction and raise only. The signal goes on
// to the previous handler (and, should that return from a fault, returning
// here re-runs the faulting instruction under it).
void on_fatal_signal(int signal) {
  if (const std::string* note = g_note.exchange(nullptr)) {
    ssize_t ignored = write(STDERR_FILENO, note->data(), note->size());
    (void)ignored;
  }
  restore_previous();
  raise(signal);
}

}  // namespace

CrashNote::CrashNote(std::string note) : note_("\ntorch_tpu: " + std::move(note) + "\n") {
  struct sigaction action{};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_NODEFER;
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
    sigaction(kSignals[i], &action, &g_previous[i]);
  }
  g_note.store(&note_);
}

CrashNote::~CrashNote() {
  if (g_note.exchange(nullptr)) restore_previous();
}

}  // namespace torch_tpu::runtime
