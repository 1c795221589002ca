// DeferAndFuse: ops append to a per-device graph of pending values instead of
// running; the graph is compiled as one program (cached by its structure) and
// run when a value is needed outside it. The eager mode chooses between this
// and strict eager.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/op_call.h"

namespace torch_tpu::engine {

enum class EagerMode : int { Strict, Debug, DeferAndFuse };

struct RecordedGraph;  // captured_graph.h

EagerMode eager_mode();
// Materialises pending work first; Debug also makes every launch blocking.
void set_eager_mode(EagerMode mode);

// Appends `call` to its device's graph. Validates it as strict execution
// would (the rule may decline with lower::Unsupported) and draws its random
// offsets now, so results equal strict mode's.
void record(OpCall&& call);

// Why a graph is materialised (counted in the metrics).
enum class FlushReason : int {
  HostRead,
  Synchronize,
  SizeLimit,
  Step,
  ModeSwitch,
  Storage,
  Repeat,
  Event,
  Collective
};

// Compiles (or finds) and launches the pending graph of `device` (-1: every
// device). Asynchronous: the slots hold the results' buffers on return.
void flush(int device, FlushReason reason);

// Materialises the pending work of `device` (-1: all) and waits for it;
// raises the first failure of asynchronous execution. No-op before the
// backend starts.
void synchronize(int device);

// When the work on a device up to some point completed, as the host saw
// PJRT report it: what timing events (torch.Event(enable_timing=True)) hold.
class CompletionMark {
 public:
  // `earlier`: the device's previous mark, if it was not done yet. PJRT may
  // run completion callbacks out of order; a mark is never earlier than the
  // marks before it.
  explicit CompletionMark(std::shared_ptr<const CompletionMark> earlier)
      : earlier_(std::move(earlier)) {}
  bool done() const { return nanos_.load() >= 0 && (!earlier_ || earlier_->done()); }
  // Steady-clock nanoseconds of the completion; waits for it.
  int64_t wait() const;
  void set_now();

 private:
  std::atomic<int64_t> nanos_{-1};
  std::shared_ptr<const CompletionMark> earlier_;
};

// A mark of the work launched on `device` so far, pending DeferAndFuse work
// included (which this launches).
std::shared_ptr<CompletionMark> mark_completion(int device);

// The slot's value is pending: it must be materialised before its buffer is
// read or replaced outside a graph.
inline bool is_pending(const StorageSlot& slot) { return slot.pending != nullptr; }
inline void materialize(const StorageSlot& slot, FlushReason reason) {
  if (slot.pending) flush(slot.device, reason);
}

// Whether the slot has a buffer: while pending, the one it had before its graph.
bool holds_buffer(const StorageSlot& slot);

// Appends a recorded graph's ops (captured_graph.h) to the pending graph of
// `device`: inputs[k] is the graph's k-th input, fresh[j] its j-th new storage.
// Random ops draw from `generator` past its offset (the caller advances it).
void append_recorded(const RecordedGraph& graph, int device, const std::vector<TensorView>& inputs,
                     const std::vector<StorageSlot*>& fresh, RandomState* generator);

// Work on `device` that bypasses the recorder (an upload, a download, a
// resize): a capture recording on the device could not replay it.
void note_unrecorded(int device, const char* what);

// An upload to `device`: it cuts a capture, unless the capture takes its uploads as
// constants (begin_capture).
void note_upload(int device);

// The op count at which a graph is materialised (TORCH_TPU_DEFER_MAX_OPS).
// From half of it on, a graph is also cut where the recorded ops start
// repeating the sequence that preceded the graph (the next iteration of a
// loop), so repeated work yields the same graphs.
int max_graph_ops();

}  // namespace torch_tpu::engine
