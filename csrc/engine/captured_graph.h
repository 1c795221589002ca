// torch.compile's programs. One call of a compiled FX graph is recorded by the
// DeferAndFuse recorder (whatever the eager mode) and compiled as one program;
// later calls whose inputs have the same layouts replay that program directly,
// with no per-op work on the host.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/op_call.h"
#include "engine/program.h"

namespace torch_tpu::engine {

// The recorded work cannot be replayed (a host read or CPU fallback cut it, or
// it writes a tensor that is neither an input nor an output); the message says
// why. The call itself has run correctly.
class CaptureError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The capture recorded ops that cannot be appended to other work (bounded
// sizes): the next call is captured as a program of its own.
class CaptureAlone : public CaptureError {
  using CaptureError::CaptureError;
};

// A capture's recorded ops, which replays append to the pending graph.
struct RecordedGraph;

// Where an output of the graph lives: a storage the program creates, or the
// storage of an input (a view of it, or an input the program overwrote).
struct CapturedOutput {
  int new_storage = -1;
  int input = -1;
  TensorView view;  // geometry only
};

struct CapturedGraph {
  // What a program parameter is at replay.
  struct ParamValue {
    enum class Kind : uint8_t { Input, Constant, Host, Random };
    Kind kind = Kind::Host;
    int input = 0;                // Input: whose storage
    runtime::BufferPtr constant;  // Constant: a tensor the graph holds (read only)
    HostScalar host;              // Host: a scalar or view offset fixed by the layouts
    uint64_t random_delta = 0;    // Random: generator offset past the call's start
  };

  int device = 0;
  // The capture's ops: each replay appends them to the device's pending
  // graph, which runs them as one program with the work around them (a
  // compiled training step's forward, backward and optimizer graphs, and the
  // eager ops between them). Null for a graph captured alone: `program`.
  std::shared_ptr<const RecordedGraph> recorded;
  std::optional<Program> program;  // none when the graph does no device work
  GroupRank group;                 // the group its collectives run in, if any
  std::vector<ParamValue> params;
  // Input layouts the program was built for: geometry, storage size, whether
  // the storage held a buffer, and the first input sharing its storage.
  std::vector<TensorView> inputs;
  std::vector<size_t> input_nbytes;
  std::vector<bool> input_had_buffer;
  std::vector<int> input_alias;
  // Bounds of each input's storage (bounded dynamism), as the program read them.
  std::vector<std::optional<Bounds>> input_bounds;
  // Program output i replaces the buffer of input output_input[i] (an
  // overwritten input), or is new storage output_storage[i].
  std::vector<int> output_input;
  std::vector<int> output_storage;
  std::vector<size_t> new_storage_nbytes;
  // Bounds the storage of program output i holds after the call (its buffer
  // is laid out for them), without their `alive` token.
  std::vector<std::optional<Bounds>> output_bounds;
  std::vector<CapturedOutput> outputs;
  uint64_t random_consumed = 0;

  // Whether `inputs` (the graph's tensor inputs, in order) have the captured
  // layouts (the caller holds the backend's lock).
  bool matches(const std::vector<TensorView>& inputs) const;

  // Runs the program on `inputs` and returns the buffers of the new storages;
  // nullopt when an input's layout differs from the captured one. Draws
  // random offsets from `generator`. The caller gives the storages written
  // their output_bounds.
  std::optional<std::vector<runtime::BufferPtr>> replay(const std::vector<TensorView>& inputs,
                                                        RandomState* generator) const;

  // A recorded graph's replay: appends its ops on `inputs`, writing the new
  // storages `fresh` (new_storage_nbytes each); false when an input's layout
  // differs from the captured one.
  bool append(const std::vector<TensorView>& inputs, const std::vector<StorageSlot*>& fresh,
              RandomState* generator) const;
};

// The first of `views` whose storage is that of views[k] (k when none is).
int first_sharing_storage(const std::vector<TensorView>& views, size_t k);

// Starts recording `device`'s ops. `generator` is the device's default
// generator: the only one a captured random op may draw from. `alone`: the
// pending work is materialised first and the capture becomes a program of its
// own (graphs of bounded sizes); otherwise its ops stay pending, with what
// precedes and follows them. `uploads_are_constants`: the graph takes no host data
// (its host values are Python constants and the sizes that key it), so host data it
// copies to the device is the same at every call: a constant of the recorded graph
// (Helion's launcher uploads a kernel's scalar arguments), not a cut.
void begin_capture(int device, RandomState* generator, bool alone, bool uploads_are_constants);

// Ends the recording; a capture alone runs the recorded work for this call
// (the outputs' storages hold their values on return), another leaves it
// pending. Returns the replayable graph, or throws CaptureError (CaptureAlone:
// capture the next call alone).
std::shared_ptr<CapturedGraph> end_capture(int device, const std::vector<TensorView>& inputs,
                                           const std::vector<TensorView>& outputs);

// Whether `device` is recording a capture (its ops are recorded, not run).
bool capturing(int device);

}  // namespace torch_tpu::engine
