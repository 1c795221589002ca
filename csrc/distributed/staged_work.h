// The host staging of one collective and the Work objects that hand its
// results back: tpu tensors are copied to host tensors, a host backend (Gloo)
// runs the collective on those, and the results are copied back into the tpu
// tensors before the Work completes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

namespace torch_tpu::distributed {

// Host memory for staging, reused across collectives. A fresh allocation of
// tens of MB is paid in page faults on first touch (measured: 64 MB costs
// ~45 ms on the 2-core CI machine, against 15 ms for the copy itself), so
// buffers go back to a small free list when their collective is finished, or,
// when a result became a device buffer in place, when the device drops it.
class HostBufferPool {
 public:
  static HostBufferPool& get();
  // A contiguous CPU tensor of `sizes` and `dtype` over pooled memory.
  at::Tensor take(c10::IntArrayRef sizes, at::ScalarType dtype);
  // Returns the memory of a tensor from take(). The caller guarantees that
  // nothing reads or writes it any more (the host collective has finished;
  // stale references, such as Gloo's finished work, do not touch it).
  void give_back(at::Tensor t);

 private:
  std::mutex mutex_;
  std::vector<c10::Storage> free_;  // at most kKept, any sizes
};

// Host stand-ins for the tensors of one collective. CPU tensors that are
// contiguous stand for themselves (no copy); every other tensor gets a
// contiguous CPU tensor of the same shape and dtype. What the methods return
// is what the host backend is given: the stand-in, or for a complex one its
// view_as_real (Gloo carries no complex types).
class Staging {
 public:
  // A host tensor holding `t`'s value now. `private_copy`: the caller will
  // modify it, so a CPU tensor is copied too.
  at::Tensor input(const at::Tensor& t, bool private_copy = false);
  // A host tensor whose value is written into `t` by finish().
  at::Tensor output(const at::Tensor& t);
  // Both (in-place collectives: all_reduce, broadcast).
  at::Tensor inout(const at::Tensor& t);

  // Applied to every output's host tensor before it is written back (the
  // division of ReduceOp.AVG).
  void transform_results(std::function<void(at::Tensor&)> transform) {
    transform_ = std::move(transform);
  }

  // Writes the host results into the user's tensors (any thread) and returns
  // the staging memory to the pool: only after the host collective succeeded
  // (after a failure, Gloo may still be using it). A result that fills a tpu
  // tensor's whole storage becomes its device buffer instead of being copied
  // (on the CPU platform the buffer is the host memory itself).
  void finish();

  // The user tensors finish() writes: the Work's result().
  const std::vector<at::Tensor>& outputs() const { return outputs_; }

 private:
  at::Tensor host_copy(const at::Tensor& t);
  at::Tensor host_empty(const at::Tensor& like);

  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> host_results_;  // parallel to outputs_
  std::vector<at::Tensor> pooled_;        // host memory from the pool
  std::function<void(at::Tensor&)> transform_;
};

// Wraps `error`, raised by the host backend during `op`, in a DistBackendError
// whose message names the collective.
std::exception_ptr collective_error(const std::string& op, std::exception_ptr error);

// A staged collective's Work: complete once the host backend's work has
// finished and the results are in the user's tensors. wait() follows CUDA's
// semantics: when it returns, the tensors hold the results.
class StagedWork : public c10d::Work {
 public:
  StagedWork(int rank, c10d::OpType type, std::string op, std::vector<at::Tensor> outputs);

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Completes the work and its future (error: null on success).
  void complete(std::exception_ptr error);

  const std::string& op() const { return op_; }

 private:
  std::string op_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Finishes staged collectives in issue order on a thread of its own: waits
// for each host work, copies its results back, completes its Work. So the
// caller's thread only stages inputs and starts the host collective, and the
// device copies of results overlap the caller's work.
class CompletionThread {
 public:
  CompletionThread();
  ~CompletionThread();  // finishes what is queued, then joins

  void push(c10::intrusive_ptr<c10d::Work> host_work, Staging staging,
            c10::intrusive_ptr<StagedWork> work);

 private:
  struct Entry {
    c10::intrusive_ptr<c10d::Work> host_work;
    Staging staging;
    c10::intrusive_ptr<StagedWork> work;
  };
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// A point-to-point Work (send, recv). Gloo's send/recv works have no future
// to chain on, and a receive may wait for its sender indefinitely (a queue
// in issue order would hold every later collective behind it), so it
// completes on the caller's thread, in wait() or isCompleted().
class P2PWork : public c10d::Work {
 public:
  P2PWork(int rank, c10d::OpType type, std::string op, c10::intrusive_ptr<c10d::Work> host_work,
          Staging staging);

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  int sourceRank() const override { return host_work_->sourceRank(); }
  std::vector<at::Tensor> result() override { return staging_.outputs(); }
  void abort() override { host_work_->abort(); }

 private:
  std::string op_;
  c10::intrusive_ptr<c10d::Work> host_work_;
  Staging staging_;
  std::mutex finish_mutex_;
  bool finished_ = false;
};

}  // namespace torch_tpu::distributed
