// tpu_dist's collectives inside device programs: each collective is an op of
// the lowering table (lower/collectives.cpp) on the rank's tensors, compiled
// for the group's devices and launched through its engine::DeviceGroup, so
// the devices exchange the data themselves. Strict eager runs each as a
// program of its own, DeferAndFuse too (it cuts its graph around it), and a
// torch.compile capture keeps it in the graph's program.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "engine/device_group.h"
#include "engine/op_call.h"

namespace torch_tpu::distributed {

struct MessageBatch;  // messages launched together

class ProgramCollectives : public std::enable_shared_from_this<ProgramCollectives> {
 public:
  ProgramCollectives(engine::GroupRank member, int device)
      : member_(std::move(member)), device_(device) {}

  const engine::GroupRank& member() const { return member_; }
  int device() const { return device_; }
  int size() const { return member_.group->size(); }

  // Whether this path carries the tensors: all on the group's tpu device,
  // without a lazy conjugate or negation bit.
  bool carries(const std::vector<at::Tensor>& tensors) const;

  // Each writes its results into the given tensors (pending on the device
  // when it returns); outputs may be the inputs. Bad arguments raise, naming `op`.
  void all_reduce(const std::string& op, const std::vector<at::Tensor>& outputs,
                  const std::vector<at::Tensor>& inputs, const c10d::ReduceOp& reduce);
  void reduce(const std::string& op, const std::vector<at::Tensor>& tensors,
              const c10d::ReduceOp& reduce, int root);
  void broadcast(const std::string& op, const std::vector<at::Tensor>& outputs,
                 const std::vector<at::Tensor>& inputs, int root);
  // outputs[i] receives inputs[i] from every rank: one tensor of group-size
  // times its elements, or (per_rank) one tensor per rank.
  void all_gather(const std::string& op, const std::vector<at::Tensor>& outputs,
                  const std::vector<at::Tensor>& inputs, bool per_rank);
  // per_rank: `inputs` are one tensor per rank for the single output;
  // otherwise outputs[i] takes its block of inputs[i].
  void reduce_scatter(const std::string& op, const std::vector<at::Tensor>& outputs,
                      const std::vector<at::Tensor>& inputs, const c10d::ReduceOp& reduce,
                      bool per_rank);
  // One input and output split along dim 0 (evenly when the split sizes are
  // empty), or one of each per rank.
  void all_to_all(const std::string& op, const std::vector<at::Tensor>& outputs,
                  const std::vector<at::Tensor>& inputs, const std::vector<int64_t>& output_splits,
                  const std::vector<int64_t>& input_splits);
  // Completes once every rank launched it (a one-element all-reduce).
  void barrier(const std::string& op);

  // Point-to-point messages to or from `peer` are held until this rank waits
  // for one of them (their Work's wait()) or issues an eager collective of
  // the group (a compiled graph's collectives run past them); then every
  // held message launches, one program per peer pair carrying the pair's
  // messages both ways (each direction in issue order, as NCCL matches
  // them), pairs in one order for all ranks so that a batch (a ring's isend
  // and irecv) never waits on itself.
  c10::intrusive_ptr<c10d::Work> send(const std::string& op, const std::vector<at::Tensor>& tensors,
                                      int peer);
  c10::intrusive_ptr<c10d::Work> recv(const std::string& op, const std::vector<at::Tensor>& tensors,
                                      int peer);
  void launch_messages();

 private:
  struct Message {
    int peer;
    bool outgoing;
    at::Tensor tensor;
  };

  c10::intrusive_ptr<c10d::Work> hold(const std::string& op, const std::vector<at::Tensor>& tensors,
                                      int peer, bool outgoing);
  void exchange(int peer, const std::vector<Message>& messages);
  // Launches the collective `rule` over the group, after held messages.
  void run(const std::string& op, const char* rule, std::vector<engine::CallArg> args,
           const std::vector<at::Tensor>& targets);

  engine::GroupRank member_;
  int device_;
  std::mutex messages_mutex_;
  std::vector<Message> held_;
  std::shared_ptr<MessageBatch> batch_;
};

// The in-program path of the group `store` serves (rank `rank` of `size`, on
// tpu:`device`), or null when its ranks cannot share device programs: this
// is where the path of a group is decided, at its first collective `op` on
// tpu tensors (a rank missing there past `timeout` fails it). The ranks publish their client's
// domain and device; programs span the group when one client runs all its
// devices (ranks as threads of one process; a client made for a multi-
// process job), each rank on a device of its own.
std::shared_ptr<ProgramCollectives> join_device_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::string& op, int rank, int size,
                                                      int device,
                                                      std::chrono::milliseconds timeout);

// The Work of a collective run inside a program: its results are the
// tensors, already pending on the device in issue order, so wait() needs no
// host wait (the device runs later work after it); isCompleted() says
// whether the device finished it. A barrier's wait() waits for the device.
c10::intrusive_ptr<c10d::Work> program_work(int rank, c10d::OpType type, int device,
                                            std::vector<at::Tensor> outputs, bool blocking);

}  // namespace torch_tpu::distributed
