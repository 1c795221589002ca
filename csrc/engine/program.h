// Programs built from op calls. A program is a sequence of ops over a set of
// storages: strict eager compiles one op per program, DeferAndFuse a recorded
// sequence. This file holds what both share: the signature that keys the
// program cache, the emission of ops into one program (view reads, the rule,
// view writes), the cache of compiled programs and their launch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/op_call.h"
#include "runtime/client.h"

namespace torch_tpu::engine {

// The storages an op touches, each once (aliases share one program operand).
struct SlotUse {
  StorageSlot* slot;
  bool read = false;
};

struct Signature {
  std::vector<SlotUse> slots;
  std::vector<const Input*> inputs;  // flattened, in argument order
  std::vector<int> input_slot;       // slot index per device input (-1: scalar)
  std::vector<int> target_slot;
  std::string key;  // everything that shapes the op's program
};

Signature signature(const OpCall& call, hlo::Precision precision);
// What keys the call's program apart from its views' layouts and storages: the
// op, its static arguments and its operands' and results' types and sizes.
std::string shape_key(const OpCall& call);
// The signature's storages, in its slot order.
std::vector<const StorageSlot*> storages_of(const Signature& sig);

// Where a program parameter's value comes from at launch.
struct Param {
  // Checks: the device's data-check error code (see data_checks.h).
  // InputSize/TargetSize: the size of a varying dimension of the storage an
  // input or target of bounded dynamic size is a view of (an s32 scalar).
  enum class Source : uint8_t {
    Storage,
    InputOffset,
    TargetOffset,
    Scalar,
    Random,
    Checks,
    InputSize,
    TargetSize
  };
  Source source;
  int op = 0;     // the op of the program (all but Storage)
  int index = 0;  // storage, input or target index
  ElementType type;
  int dim = 0;  // InputSize/TargetSize: the storage dimension
};

struct Program {
  const std::string* name = nullptr;  // the name failures are reported under
  std::shared_ptr<runtime::Executable> executable;
  std::vector<Param> params;
  std::vector<int> output_slots;  // program output i -> storage index
  std::vector<int> donor_param;   // program output i -> aliased param or -1
  // The parameter taking the data-check error code, whose update is the last
  // output (-1: the program checks nothing). launch_with passes it on.
  int checks_param = -1;
  int64_t random_consumed = 0;  // by the first op (strict programs have one)
  std::string unsupported;      // the rule declined these inputs
  // A program with collectives: the devices of its replicas (DeviceGroup)
  // and how many collective ops it runs.
  std::vector<int64_t> replica_devices;
  int collectives = 0;
  // Of the program's text: ranks launch the same program when they agree on it
  // (their keys may differ where the text does not: a view at offset 0 on one
  // rank, at another offset on the next).
  uint64_t text_hash = 0;
};

// One op of a program and the runtime values it contributes.
struct ProgramOp {
  const OpCall* call = nullptr;
  const Signature* sig = nullptr;
  // Program storage of each of sig->slots (null: the identity).
  const std::vector<int>* storage_of = nullptr;
  hlo::Precision precision = hlo::Precision::Default;
  RandomState random;  // the generator state the op draws from

  int storage(int local) const { return storage_of ? (*storage_of)[local] : local; }
};

// Builds one program over `storages` (their size and initial buffer, if any):
// ops are emitted in order, each reading the values the previous ones wrote.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::vector<const StorageSlot*> storages);
  ~ProgramBuilder();

  // A program of several ops, before the first emit: `final_write[s]` is the
  // op whose write of storage s the program returns (-1: none). Ops after it
  // read that value from memory instead of recomputing it (see emit).
  void mark_outputs(std::vector<int> final_write);
  // Emits `op` as op `index` of the program and returns the random offsets it
  // consumes. Throws lower::Unsupported when the rule declines its inputs.
  int64_t emit(const ProgramOp& op, int index);
  bool written(int storage) const;
  // Compiles the program; its outputs are the written storages s with keep[s].
  Program finish(const std::string* name, const std::vector<bool>& keep);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Compiled programs by key, least recently used first out.
const Program& cached_program(const std::string& key, const std::function<Program()>& build);
bool has_program(const std::string& key);

// Launches `program` asynchronously on `params` (one buffer per parameter;
// the data-check code's is filled in here, and its update kept by the
// backend, so `outputs` are the storages' only). A donor parameter's buffer
// is donated only when `params` and its storage are its only holders.
// A program with collectives is launched through `group`, as its rank.
runtime::Launch launch_with(const Program& program, int device,
                            std::vector<runtime::BufferPtr> params, const GroupRank& group = {});
// A view offset as a parameter of `type` (s32 or s64) takes it.
HostScalar offset_scalar(int64_t offset, ElementType type);
// The varying size an InputSize or TargetSize parameter of `op` takes.
int32_t stored_size(const Param& param, const ProgramOp& op);
// The generator state a random op's parameter takes.
runtime::BufferPtr random_state_buffer(int device, uint64_t seed, uint64_t offset);

// Launches `program` asynchronously with the runtime values of `ops` and the
// buffers of `storages`.
runtime::Launch launch_program(const Program& program, int device,
                               const std::vector<const StorageSlot*>& storages,
                               const std::vector<ProgramOp>& ops);

// Names kept for the life of the process: storages point at the name of the
// program that last wrote them (failures name it), which may outlive it.
const std::string* interned(const std::string& name);

}  // namespace torch_tpu::engine
