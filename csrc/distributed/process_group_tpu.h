// tpu_dist: the c10d backend of the `tpu` device.
//
// A collective on tpu tensors runs inside a device program where the group's
// ranks can share programs (join_device_group decides, once per group): the
// devices exchange the data. Otherwise, and for CPU tensors, it is staged
// through a host backend (Gloo, made by the Python side from the same store,
// rank, size and timeout): tpu inputs are copied to host tensors, the host
// backend runs the collective on them, and a completion thread copies the
// results back into the tpu tensors in place, so every alias of them sees the
// result. CPU tensors go to the host backend as they are.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <utility>
#include <vector>

#include "distributed/program_collectives.h"
#include "distributed/staged_work.h"

namespace torch_tpu::distributed {

class ProcessGroupTPU : public c10d::Backend {
 public:
  ProcessGroupTPU(c10::intrusive_ptr<c10d::Backend> host, c10::intrusive_ptr<c10d::Store> store,
                  int rank, int size, std::chrono::milliseconds timeout);
  ~ProcessGroupTPU() override;

  const std::string getBackendName() const override { return "tpu_dist"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setGroupUid(const std::string& pg_uid) override;
  // The in-program path for `op` on `tensors` (functional collectives take
  // it), or null where they are staged.
  ProgramCollectives* program_for(const std::string& op, const std::vector<at::Tensor>& tensors) {
    return in_program(op, tensors) ? program_.get() : nullptr;
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void abort() override { host_->abort(); }
  void shutdown() override { host_->shutdown(); }

 private:
  // Checks the tensors of `op` and orders it after in-flight collectives
  // that write any of their storages.
  void prepare(const std::string& op, const std::vector<at::Tensor>& tensors);
  // Whether `op` on `tensors` runs inside a device program (then ordered
  // after in-flight staged collectives on their storages). The group's path
  // is decided at its first collective on tpu tensors (join_device_group):
  // a group used for host tensors alone never starts the device.
  bool in_program(const std::string& op, const std::vector<at::Tensor>& tensors);
  // The same once the group found its path, without deciding it: two ranks
  // exchanging messages cannot (point-to-point is staged until a collective
  // of the whole group found the in-program path).
  bool found_in_program(const std::string& op, const std::vector<at::Tensor>& tensors);
  void order_after_in_flight(const std::vector<at::Tensor>& tensors);
  // The input and output row counts every rank's all_to_all_single pads to:
  // the largest of any rank, agreed through the group's store.
  std::pair<int64_t, int64_t> agreed_rows(int64_t in_rows, int64_t out_rows);
  c10::intrusive_ptr<c10d::Work> program_work(c10d::OpType type, std::vector<at::Tensor> outputs,
                                              bool blocking = false);
  // Starts the host collective and returns the Work that finishes it.
  c10::intrusive_ptr<c10d::Work> launch(
      const std::string& op, c10d::OpType type, Staging staging,
      const std::function<c10::intrusive_ptr<c10d::Work>()>& start);
  c10::intrusive_ptr<c10d::Work> launch_p2p(
      const std::string& op, c10d::OpType type, Staging staging,
      const std::function<c10::intrusive_ptr<c10d::Work>()>& start);
  void track(const c10::intrusive_ptr<c10d::Work>& work, const std::vector<at::Tensor>& outputs);

  c10::intrusive_ptr<c10d::Backend> host_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::once_flag joined_;
  std::shared_ptr<ProgramCollectives> program_;  // null: every collective is staged
  std::chrono::milliseconds timeout_;
  uint64_t rows_round_ = 0;
  // Works whose results are not yet in their tensors, with those tensors'
  // storages. Collectives may be issued from several threads (DDP issues
  // from autograd's).
  std::mutex in_flight_mutex_;
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::vector<const void*>>> in_flight_;
  std::unique_ptr<CompletionThread> completions_;
};

// The backend of the group `store` serves, over `host` (a c10d backend of CPU
// tensors: Gloo), for the current tpu device.
c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Backend>& host,
                                                 const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int size,
                                                 std::chrono::milliseconds timeout);

}  // namespace torch_tpu::distributed
