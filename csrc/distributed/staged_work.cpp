#include "distributed/staged_work.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "aten/tensor_bridge.h"
#include "engine/storage_ops.h"

namespace torch_tpu::distributed {

namespace {

bool stands_for_itself(const at::Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

at::Tensor carried(const at::Tensor& host) {
  return host.is_complex() ? at::view_as_real(host) : host;
}

// Copies between a user tensor and its host stand-in like a collective
// library writes memory: below autograd and the version counter, so a leaf
// that requires grad (DDP's parameter broadcast) can be written, and tensors
// saved for backward are not reported as modified in place.
void raw_copy(const at::Tensor& dst, const at::Tensor& src) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  at::Tensor out = dst;
  out.copy_(src);
}

// A result computed in pooled host memory becomes the whole storage of a tpu
// tensor without a copy where the platform allows: the CPU platform's device
// buffer then is that memory, and it goes back to the pool when the device
// drops it. A copy would cost more than the collective at large sizes: XLA's
// CPU client allocates every upload fresh, and glibc maps blocks over 32 MB
// anew each time (64 MB: ~60 ms, most of it page faults).
bool hand_over(const at::Tensor& dst, const at::Tensor& host) {
  if (!aten::is_tpu(dst) || dst.is_conj() || dst.is_neg() ||
      !aten::view_of(dst).is_whole_storage()) {
    return false;
  }
  at::Tensor memory = host;
  engine::upload_storage(
      *aten::slot_of(dst), host.data_ptr(), aten::element_type(host.scalar_type()), host.numel(),
      [memory]() mutable { HostBufferPool::get().give_back(std::move(memory)); });
  return true;
}

std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

// ---------------------------------------------------------------- HostBufferPool

namespace {
constexpr size_t kKept = 8;
}

HostBufferPool& HostBufferPool::get() {
  static auto* pool = new HostBufferPool();  // leaked: used until process exit
  return *pool;
}

at::Tensor HostBufferPool::take(c10::IntArrayRef sizes, at::ScalarType dtype) {
  size_t nbytes = c10::multiply_integers(sizes) * c10::elementSize(dtype);
  c10::Storage storage;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest free buffer that fits, unless it wastes more than half.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      size_t have = it->nbytes();
      if (have >= nbytes && have <= 2 * nbytes + 4096 &&
          (best == free_.end() || have < best->nbytes())) {
        best = it;
      }
    }
    if (best != free_.end()) {
      storage = std::move(*best);
      free_.erase(best);
    }
  }
  if (!storage) {
    return at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kCPU));
  }
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, sizes);
}

void HostBufferPool::give_back(at::Tensor t) {
  c10::Storage storage = t.storage();
  t.reset();
  if (!storage) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.size() >= kKept) free_.erase(free_.begin());  // the oldest goes
  free_.push_back(std::move(storage));
}

// ---------------------------------------------------------------- Staging

at::Tensor Staging::host_empty(const at::Tensor& like) {
  at::Tensor host = HostBufferPool::get().take(like.sizes(), like.scalar_type());
  pooled_.push_back(host);
  return host;
}

at::Tensor Staging::host_copy(const at::Tensor& t) {
  at::Tensor host = host_empty(t);
  raw_copy(host, t);  // a tpu source materialises pending work and waits for it
  return host;
}

at::Tensor Staging::input(const at::Tensor& t, bool private_copy) {
  return carried(stands_for_itself(t) && !private_copy ? t : host_copy(t));
}

at::Tensor Staging::output(const at::Tensor& t) {
  at::Tensor host = stands_for_itself(t) ? t : host_empty(t);
  outputs_.push_back(t);
  host_results_.push_back(host);
  return carried(host);
}

at::Tensor Staging::inout(const at::Tensor& t) {
  at::Tensor host = stands_for_itself(t) ? t : host_copy(t);
  outputs_.push_back(t);
  host_results_.push_back(host);
  return carried(host);
}

void Staging::finish() {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    at::Tensor& host = host_results_[i];
    if (transform_) transform_(host);
    if (host.is_same(outputs_[i])) continue;
    auto pooled = std::find_if(pooled_.begin(), pooled_.end(),
                               [&](const at::Tensor& p) { return p.is_same(host); });
    if (pooled != pooled_.end() && hand_over(outputs_[i], host)) {
      pooled_.erase(pooled);  // the device returns it to the pool
    } else {
      raw_copy(outputs_[i], host);
    }
  }
  host_results_.clear();
  for (auto& host : pooled_) HostBufferPool::get().give_back(std::move(host));
  pooled_.clear();
}

std::exception_ptr collective_error(const std::string& op, std::exception_ptr error) {
  try {
    C10_THROW_ERROR(DistBackendError, "tpu_dist " + op + " failed: " + message_of(error));
  } catch (...) {
    return std::current_exception();
  }
}

// ---------------------------------------------------------------- StagedWork

StagedWork::StagedWork(int rank, c10d::OpType type, std::string op, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      op_(std::move(op)),
      outputs_(std::move(outputs)),
      // A CPU future: the values are tpu tensors, but the device has one
      // in-order queue, so there are no streams or events to record.
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool StagedWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError, "tpu_dist " + op_ + " did not complete within " +
                                          std::to_string(timeout.count()) + " ms");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void StagedWork::complete(std::exception_ptr error) {
  finish(error);
  // Future callbacks (DDP's comm hooks) run here, on the completion thread.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

// ---------------------------------------------------------------- CompletionThread

CompletionThread::CompletionThread() : thread_([this] { run(); }) {}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void CompletionThread::push(c10::intrusive_ptr<c10d::Work> host_work, Staging staging,
                            c10::intrusive_ptr<StagedWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(host_work), std::move(staging), std::move(work)});
  }
  ready_.notify_one();
}

void CompletionThread::run() {
  for (;;) {
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is finished
      entry = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      entry.host_work->wait();
      entry.staging.finish();
    } catch (...) {
      error = collective_error(entry.work->op(), std::current_exception());
    }
    entry.work->complete(error);
  }
}

// ---------------------------------------------------------------- P2PWork

P2PWork::P2PWork(int rank, c10d::OpType type, std::string op,
                 c10::intrusive_ptr<c10d::Work> host_work, Staging staging)
    : c10d::Work(rank, type),
      op_(std::move(op)),
      host_work_(std::move(host_work)),
      staging_(std::move(staging)) {}

bool P2PWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(finish_mutex_);
    if (finished_) return true;
  }
  if (!host_work_->isCompleted()) return false;
  wait();
  return true;
}

bool P2PWork::wait(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(finish_mutex_);
  if (!finished_) {
    std::exception_ptr error;
    try {
      host_work_->wait(timeout);
      staging_.finish();
    } catch (...) {
      error = collective_error(op_, std::current_exception());
    }
    finished_ = true;
    finish(error);
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

}  // namespace torch_tpu::distributed
