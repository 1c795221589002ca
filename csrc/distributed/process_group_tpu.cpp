#include "distributed/process_group_tpu.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>

#include "aten/tensor_bridge.h"
#include "engine/deferred.h"
#include "engine/metrics.h"

namespace torch_tpu::distributed {

namespace {

using c10d::ReduceOp;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// The element types Gloo carries (complex ones travel as real pairs).
bool carried_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kComplexFloat:
    case at::kComplexDouble:
    case at::kChar:
    case at::kByte:
    case at::kBool:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

std::string dtype_name(at::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

void check_tensor(const std::string& op, const at::Tensor& t,
                  std::optional<c10::DeviceType>& kind) {
  TORCH_CHECK_VALUE(t.defined(), "tpu_dist ", op, ": undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "tpu_dist ", op,
                    ": only dense (strided) tensors are supported, got ", t.layout());
  c10::DeviceType type = t.device().type();
  TORCH_CHECK_VALUE(type == aten::kTpu || type == at::kCPU, "tpu_dist ", op,
                    ": tensors must be on tpu (or cpu), got one on ", t.device());
  TORCH_CHECK_VALUE(!kind || *kind == type, "tpu_dist ", op,
                    ": all tensors must be on the same device type, got tpu and cpu tensors");
  kind = type;
  TORCH_CHECK_TYPE(carried_dtype(t.scalar_type()), "tpu_dist ", op, ": ",
                   dtype_name(t.scalar_type()),
                   " tensors are not supported (the host transport carries float32, float64, "
                   "float16, bfloat16, complex64, complex128, int8, uint8, int32, int64, bool)");
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

std::vector<at::Tensor> concat(std::vector<at::Tensor> a, const std::vector<at::Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const void* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

std::vector<at::Tensor> stage_inputs(Staging& staging, const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  for (const auto& t : tensors) host.push_back(staging.input(t));
  return host;
}

std::vector<at::Tensor> stage_outputs(Staging& staging, const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  for (const auto& t : tensors) host.push_back(staging.output(t));
  return host;
}

std::vector<std::vector<at::Tensor>> stage_outputs(
    Staging& staging, const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> host;
  for (const auto& list : lists) host.push_back(stage_outputs(staging, list));
  return host;
}

// all_to_all_single's split sizes (rows of dim 0 to each rank; none: equal
// parts); Gloo would only find a mismatch on its worker thread.
void check_splits(const std::string& op, const char* what, const at::Tensor& t,
                  const std::vector<int64_t>& splits, int size) {
  int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "tpu_dist ", op, ": the ", what, " has ", rows,
                      " rows, not divisible by the group size ", size);
    return;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "tpu_dist ", op, ": ", splits.size(),
                    " ", what, " split sizes for a group of ", size);
  int64_t total = 0;
  for (int64_t n : splits) {
    TORCH_CHECK_VALUE(n >= 0, "tpu_dist ", op, ": negative ", what, " split size ", n);
    total += n;
  }
  TORCH_CHECK_VALUE(total == rows, "tpu_dist ", op, ": the ", what, " split sizes add up to ",
                    total, " but the ", what, " has ", rows, " rows");
}

void check_root(const std::string& op, int64_t root, int size) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "tpu_dist ", op, ": root rank ", root,
                    " is not in the group of ", size, " ranks");
}

void check_same_dtype(const std::string& op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "tpu_dist ", op,
                   ": output and input dtypes differ (", dtype_name(a.scalar_type()), " and ",
                   dtype_name(b.scalar_type()), ")");
}

void check_gathered(const std::string& op, const at::Tensor& output, const at::Tensor& input,
                    int size) {
  TORCH_CHECK_VALUE(output.numel() == input.numel() * size, "tpu_dist ", op, ": the output has ",
                    output.numel(), " elements, expected ", input.numel(), " (the input's) x ",
                    size, " (the group size)");
  check_same_dtype(op, output, input);
}

void check_scattered(const std::string& op, const at::Tensor& output, const at::Tensor& input,
                     int size) {
  TORCH_CHECK_VALUE(input.numel() == output.numel() * size, "tpu_dist ", op, ": the input has ",
                    input.numel(), " elements, expected ", output.numel(), " (the output's) x ",
                    size, " (the group size)");
  check_same_dtype(op, output, input);
}

// per_rank[i] holds one tensor per rank, each the size and dtype of single[i].
void check_gather_lists(const std::string& op, const std::vector<std::vector<at::Tensor>>& per_rank,
                        const std::vector<at::Tensor>& single, int size) {
  TORCH_CHECK_VALUE(per_rank.size() == single.size(), "tpu_dist ", op, ": ", per_rank.size(),
                    " tensor lists for ", single.size(), " tensors");
  for (size_t i = 0; i < single.size(); ++i) {
    TORCH_CHECK_VALUE(static_cast<int>(per_rank[i].size()) == size, "tpu_dist ", op, ": a list of ",
                      per_rank[i].size(), " tensors for a group of ", size, " ranks");
    for (const at::Tensor& t : per_rank[i]) {
      TORCH_CHECK_VALUE(t.numel() == single[i].numel(), "tpu_dist ", op, ": tensors of ", t.numel(),
                        " and ", single[i].numel(), " elements");
      check_same_dtype(op, t, single[i]);
    }
  }
}

// Explicit split sizes, or the even ones when there are none.
std::vector<int64_t> splits_or_even(const at::Tensor& t, const std::vector<int64_t>& splits,
                                    int size) {
  if (!splits.empty()) return splits;
  int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  return std::vector<int64_t>(size, rows / size);
}

int64_t rows_of(const at::Tensor& t) { return t.dim() > 0 ? t.size(0) : 1; }

// `t` with zero rows appended up to `rows` (itself when it has as many).
at::Tensor padded_rows(const at::Tensor& t, int64_t rows) {
  if (rows_of(t) == rows) return t;
  at::Tensor shaped = t.dim() > 0 ? t : t.reshape({1});
  std::vector<int64_t> sizes = shaped.sizes().vec();
  sizes[0] = rows - sizes[0];
  return at::cat({shaped, at::zeros(sizes, shaped.options())});
}

// Tensors of one dtype and element count (all_to_all's lists in one program).
bool uniform(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.numel() != tensors[0].numel() || t.scalar_type() != tensors[0].scalar_type()) {
      return false;
    }
  }
  return true;
}

// How the host backend runs a reduction. Gloo has neither AVG nor
// PREMUL_SUM: AVG is a SUM whose result is divided by the group size (in
// the dtype, truncating integers as NCCL does), PREMUL_SUM a SUM of inputs
// scaled first (FSDP2 uses both).
class HostReduction {
 public:
  HostReduction(const std::string& op, const ReduceOp& reduce, const std::vector<at::Tensor>& ts)
      : host_op_(reduce.op_) {
    bool any_complex =
        std::any_of(ts.begin(), ts.end(), [](const at::Tensor& t) { return t.is_complex(); });
    if (reduce.op_ == ReduceOp::AVG) {
      average_ = true;
      host_op_ = ReduceOp::SUM;
      for (const auto& t : ts) {
        TORCH_CHECK_TYPE(t.scalar_type() != at::kBool, "tpu_dist ", op,
                         ": ReduceOp.AVG is not defined for torch.bool tensors");
      }
    } else if (reduce.op_ == ReduceOp::PREMUL_SUM) {
      auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(reduce.supplement_.get());
      TORCH_CHECK_VALUE(factor != nullptr, "tpu_dist ", op, ": PREMUL_SUM without a factor");
      if (factor->tensor_factor.defined()) {
        tensor_factor_ = factor->tensor_factor.to(at::kCPU);
      } else {
        double_factor_ = factor->double_factor;
      }
      premultiply_ = true;
      host_op_ = ReduceOp::SUM;
    }
    TORCH_CHECK_TYPE(!any_complex || host_op_ == ReduceOp::SUM, "tpu_dist ", op,
                     ": complex tensors support only ReduceOp.SUM, AVG and PREMUL_SUM");
  }

  ReduceOp host_op() const { return ReduceOp(host_op_); }

  // The host inputs of the reduction: for PREMUL_SUM, private copies scaled.
  std::vector<at::Tensor> stage_inputs(Staging& staging,
                                       const std::vector<at::Tensor>& tensors) const {
    std::vector<at::Tensor> host;
    for (const auto& t : tensors) host.push_back(scale(staging.input(t, premultiply_)));
    return host;
  }
  // The host tensors of an in-place reduction (results go back into them).
  std::vector<at::Tensor> stage_inouts(Staging& staging,
                                       const std::vector<at::Tensor>& tensors) const {
    std::vector<at::Tensor> host;
    for (const auto& t : tensors) host.push_back(scale(staging.inout(t)));
    return host;
  }

  // Makes `staging` divide the results for AVG.
  void finish_with(Staging& staging, int size) const {
    if (!average_) return;
    staging.transform_results([size](at::Tensor& result) {
      if (at::isIntegralType(result.scalar_type(), /*includeBool=*/false)) {
        result.div_(size, "trunc");
      } else {
        result.div_(size);
      }
    });
  }

 private:
  at::Tensor scale(at::Tensor host) const {
    if (premultiply_) {
      if (tensor_factor_.defined()) {
        host.mul_(tensor_factor_);
      } else {
        host.mul_(double_factor_);
      }
    }
    return host;
  }

  ReduceOp::RedOpType host_op_;
  bool average_ = false;
  bool premultiply_ = false;
  double double_factor_ = 1.0;
  at::Tensor tensor_factor_;
};

// Runs `start` (the host backend's call), naming `op` in what it raises. The
// synchronous part of a host collective only checks its arguments, so its
// plain errors are bad input (ValueError); communication errors stay
// DistBackendErrors.
WorkPtr start_host(const std::string& op, const std::function<WorkPtr()>& start) {
  try {
    return start();
  } catch (const c10::DistError&) {
    std::rethrow_exception(collective_error(op, std::current_exception()));
  } catch (const c10::TypeError& e) {
    TORCH_CHECK_TYPE(false, "tpu_dist ", op, ": ", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    TORCH_CHECK_VALUE(false, "tpu_dist ", op, ": ", e.what_without_backtrace());
  }
}

}  // namespace

ProcessGroupTPU::ProcessGroupTPU(c10::intrusive_ptr<c10d::Backend> host,
                                 c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                 std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      host_(std::move(host)),
      store_(std::move(store)),
      timeout_(timeout),
      completions_(std::make_unique<CompletionThread>()) {
  init();
}

ProcessGroupTPU::~ProcessGroupTPU() { completions_.reset(); }

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupTPU::getBackendOptions() {
  return c10::make_intrusive<Options>("tpu_dist", timeout_);
}

void ProcessGroupTPU::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  host_->setTimeout(timeout);
  if (program_) program_->member().group->set_timeout(timeout);
}

void ProcessGroupTPU::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  if (program_) {
    program_->member().group->set_name("tpu_dist group '" + pg_uid + "' (" + std::to_string(size_) +
                                       " ranks)");
  }
}

bool ProcessGroupTPU::in_program(const std::string& op, const std::vector<at::Tensor>& tensors) {
  if (tensors.empty() || !store_ || !aten::is_tpu(tensors[0])) return false;
  std::call_once(joined_, [&] {
    program_ = join_device_group(store_, op, rank_, size_, tensors[0].device().index(), timeout_);
    if (program_ && !getGroupUid().empty()) setGroupUid(getGroupUid());
  });
  return found_in_program(op, tensors);
}

bool ProcessGroupTPU::found_in_program(const std::string& op,
                                       const std::vector<at::Tensor>& tensors) {
  if (!program_ || !program_->carries(tensors)) return false;
  for (const auto& t : tensors) {
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "tpu_dist ", op,
                      ": only dense (strided) tensors are supported, got ", t.layout());
  }
  order_after_in_flight(tensors);
  return true;
}

WorkPtr ProcessGroupTPU::program_work(c10d::OpType type, std::vector<at::Tensor> outputs,
                                      bool blocking) {
  return distributed::program_work(rank_, type, program_->device(), std::move(outputs), blocking);
}

void ProcessGroupTPU::prepare(const std::string& op, const std::vector<at::Tensor>& tensors) {
  std::optional<c10::DeviceType> kind;
  for (const auto& t : tensors) check_tensor(op, t, kind);
  order_after_in_flight(tensors);

  // DeferAndFuse: pending work is materialised at the collective, on this
  // thread, so graphs are cut at the same points in every run and the
  // completion thread's writes replace buffers instead of joining a graph.
  for (const auto& t : tensors) {
    if (aten::is_tpu(t)) engine::materialize(*aten::slot_of(t), engine::FlushReason::HostRead);
  }
}

std::pair<int64_t, int64_t> ProcessGroupTPU::agreed_rows(int64_t in_rows, int64_t out_rows) {
  const uint64_t round = rows_round_++;
  auto key = [&](int r, uint64_t n) {
    return "tpu_dist/rows/" + std::to_string(n) + "/" + std::to_string(r);
  };
  const std::string mine = std::to_string(in_rows) + " " + std::to_string(out_rows);
  store_->set(key(rank_, round), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(r, round));
  bool arrived = true;
  engine::wait_for_other_threads([&] {
    try {
      store_->wait(keys, timeout_);
    } catch (const c10::DistStoreError&) {
      arrived = false;
    }
  });
  if (!arrived) {
    C10_THROW_ERROR(DistBackendError, "tpu_dist all_to_all_single timed out after " +
                                          std::to_string(timeout_.count()) +
                                          " ms: not every rank of the group issued it");
  }
  int64_t most_in = 1, most_out = 1;
  for (const std::string& k : keys) {
    const std::vector<uint8_t> value = store_->get(k);
    const std::string text(value.begin(), value.end());
    const size_t space = text.find(' ');
    most_in = std::max<int64_t>(most_in, std::stoll(text.substr(0, space)));
    most_out = std::max<int64_t>(most_out, std::stoll(text.substr(space + 1)));
  }
  // Two rounds back every rank has read this rank's key.
  if (round >= 2) store_->deleteKey(key(rank_, round - 2));
  // Powers of two: a program per size class, not per size, as the counts vary.
  auto rounded = [](int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
  };
  return {rounded(most_in), rounded(most_out)};
}

void ProcessGroupTPU::order_after_in_flight(const std::vector<at::Tensor>& tensors) {
  // Results of an earlier collective still on their way into a storage these
  // tensors read or write must land first (NCCL orders them on its stream).
  std::vector<const void*> storages;
  for (const auto& t : tensors) storages.push_back(storage_of(t));
  {
    std::lock_guard<std::mutex> lock(in_flight_mutex_);
    auto first_kept = std::remove_if(in_flight_.begin(), in_flight_.end(), [&](auto& entry) {
      if (entry.first->isCompleted()) return true;
      for (const void* s : entry.second) {
        if (std::find(storages.begin(), storages.end(), s) == storages.end()) continue;
        try {
          entry.first->wait();
        } catch (...) {
          // That collective's failure is raised by its own wait().
        }
        return true;
      }
      return false;
    });
    in_flight_.erase(first_kept, in_flight_.end());
  }
}

WorkPtr ProcessGroupTPU::launch(const std::string& op, c10d::OpType type, Staging staging,
                                const std::function<WorkPtr()>& start) {
  WorkPtr host_work = start_host(op, start);
  engine::metrics().staged_collectives++;
  auto work = c10::make_intrusive<StagedWork>(rank_, type, op, staging.outputs());
  track(work, staging.outputs());
  completions_->push(std::move(host_work), std::move(staging), work);
  return work;
}

WorkPtr ProcessGroupTPU::launch_p2p(const std::string& op, c10d::OpType type, Staging staging,
                                    const std::function<WorkPtr()>& start) {
  WorkPtr host_work = start_host(op, start);
  engine::metrics().staged_collectives++;
  auto outputs = staging.outputs();
  auto work =
      c10::make_intrusive<P2PWork>(rank_, type, op, std::move(host_work), std::move(staging));
  track(work, outputs);
  return work;
}

void ProcessGroupTPU::track(const WorkPtr& work, const std::vector<at::Tensor>& outputs) {
  if (outputs.empty()) return;
  std::vector<const void*> storages;
  for (const auto& t : outputs) storages.push_back(storage_of(t));
  std::lock_guard<std::mutex> lock(in_flight_mutex_);
  in_flight_.emplace_back(work, std::move(storages));
}

// ---------------------------------------------------------------- collectives

WorkPtr ProcessGroupTPU::broadcast(std::vector<at::Tensor>& tensors,
                                   const c10d::BroadcastOptions& opts) {
  const std::string op = "broadcast";
  check_root(op, opts.rootRank, size_);
  if (in_program(op, tensors)) {
    program_->broadcast(op, tensors, tensors, static_cast<int>(opts.rootRank));
    return program_work(c10d::OpType::BROADCAST, tensors);
  }
  prepare(op, tensors);
  Staging staging;
  std::vector<at::Tensor> host;
  for (const auto& t : tensors) {
    host.push_back(rank_ == opts.rootRank ? staging.input(t) : staging.output(t));
  }
  return launch(op, c10d::OpType::BROADCAST, std::move(staging),
                [&] { return host_->broadcast(host, opts); });
}

WorkPtr ProcessGroupTPU::allreduce(std::vector<at::Tensor>& tensors,
                                   const c10d::AllreduceOptions& opts) {
  const std::string op = "all_reduce";
  if (in_program(op, tensors)) {
    program_->all_reduce(op, tensors, tensors, opts.reduceOp);
    return program_work(c10d::OpType::ALLREDUCE, tensors);
  }
  prepare(op, tensors);
  HostReduction reduction(op, opts.reduceOp, tensors);
  Staging staging;
  auto host = reduction.stage_inouts(staging, tensors);
  reduction.finish_with(staging, size_);
  c10d::AllreduceOptions host_opts = opts;
  host_opts.reduceOp = reduction.host_op();
  return launch(op, c10d::OpType::ALLREDUCE, std::move(staging),
                [&] { return host_->allreduce(host, host_opts); });
}

WorkPtr ProcessGroupTPU::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                             const c10d::AllreduceCoalescedOptions& opts) {
  const std::string op = "all_reduce_coalesced";
  if (in_program(op, tensors)) {
    program_->all_reduce(op, tensors, tensors, opts.reduceOp);
    return program_work(c10d::OpType::ALLREDUCE_COALESCED, tensors);
  }
  prepare(op, tensors);
  HostReduction reduction(op, opts.reduceOp, tensors);
  Staging staging;
  auto host = reduction.stage_inouts(staging, tensors);
  reduction.finish_with(staging, size_);
  c10d::AllreduceCoalescedOptions host_opts = opts;
  host_opts.reduceOp = reduction.host_op();
  return launch(op, c10d::OpType::ALLREDUCE_COALESCED, std::move(staging),
                [&] { return host_->allreduce_coalesced(host, host_opts); });
}

WorkPtr ProcessGroupTPU::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const std::string op = "reduce";
  check_root(op, opts.rootRank, size_);
  if (in_program(op, tensors)) {
    program_->reduce(op, tensors, opts.reduceOp, static_cast<int>(opts.rootRank));
    return program_work(c10d::OpType::REDUCE, tensors);
  }
  prepare(op, tensors);
  HostReduction reduction(op, opts.reduceOp, tensors);
  Staging staging;
  // Only the root gets the result; the others' buffers are Gloo's scratch.
  auto host = rank_ == opts.rootRank ? reduction.stage_inouts(staging, tensors)
                                     : reduction.stage_inputs(staging, tensors);
  reduction.finish_with(staging, size_);
  c10d::ReduceOptions host_opts = opts;
  host_opts.reduceOp = reduction.host_op();
  return launch(op, c10d::OpType::REDUCE, std::move(staging),
                [&] { return host_->reduce(host, host_opts); });
}

WorkPtr ProcessGroupTPU::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const c10d::AllgatherOptions& opts) {
  const std::string op = "all_gather";
  if (in_program(op, concat(flatten(outputs), inputs))) {
    check_gather_lists(op, outputs, inputs, size_);
    program_->all_gather(op, flatten(outputs), inputs, /*per_rank=*/true);
    return program_work(c10d::OpType::ALLGATHER, flatten(outputs));
  }
  prepare(op, concat(flatten(outputs), inputs));
  Staging staging;
  auto host_in = stage_inputs(staging, inputs);
  auto host_out = stage_outputs(staging, outputs);
  return launch(op, c10d::OpType::ALLGATHER, std::move(staging),
                [&] { return host_->allgather(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::_allgather_base(at::Tensor& output, at::Tensor& input,
                                         const c10d::AllgatherOptions& opts) {
  const std::string op = "all_gather_into_tensor";
  check_gathered(op, output, input, size_);
  if (in_program(op, {output, input})) {
    program_->all_gather(op, {output}, {input}, /*per_rank=*/false);
    return program_work(c10d::OpType::_ALLGATHER_BASE, {output});
  }
  prepare(op, {output, input});
  Staging staging;
  at::Tensor host_in = staging.input(input);
  at::Tensor host_out = staging.output(output);
  return launch(op, c10d::OpType::_ALLGATHER_BASE, std::move(staging),
                [&] { return host_->_allgather_base(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const c10d::AllgatherOptions& opts) {
  const std::string op = "all_gather_coalesced";
  if (in_program(op, concat(flatten(outputs), inputs))) {
    check_gather_lists(op, outputs, inputs, size_);
    program_->all_gather(op, flatten(outputs), inputs, /*per_rank=*/true);
    return program_work(c10d::OpType::ALLGATHER_COALESCED, flatten(outputs));
  }
  prepare(op, concat(flatten(outputs), inputs));
  Staging staging;
  auto host_in = stage_inputs(staging, inputs);
  auto host_out = stage_outputs(staging, outputs);
  return launch(op, c10d::OpType::ALLGATHER_COALESCED, std::move(staging),
                [&] { return host_->allgather_coalesced(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  const std::string op = "all_gather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist ", op, ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) check_gathered(op, outputs[i], inputs[i], size_);
  if (in_program(op, concat(outputs, inputs))) {
    program_->all_gather(op, outputs, inputs, /*per_rank=*/false);
    return program_work(c10d::OpType::COALESCED, outputs);
  }
  prepare(op, concat(outputs, inputs));
  Staging staging;
  auto host_in = stage_inputs(staging, inputs);
  auto host_out = stage_outputs(staging, outputs);
  return launch(op, c10d::OpType::COALESCED, std::move(staging),
                [&] { return host_->allgather_into_tensor_coalesced(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const std::string op = "gather";
  check_root(op, opts.rootRank, size_);
  const bool root = rank_ == opts.rootRank;
  if (inputs.size() == 1 && in_program(op, concat(flatten(outputs), inputs))) {
    // An all-gather (the same program on every rank) whose result the root keeps.
    if (root) check_gather_lists(op, outputs, inputs, size_);
    const at::Tensor& input = inputs[0];
    const int64_t m = input.numel();
    at::Tensor all = at::empty({size_ * m}, input.options());
    program_->all_gather(op, {all}, {input}, /*per_rank=*/false);
    if (!root) return program_work(c10d::OpType::GATHER, {});
    for (int r = 0; r < size_; ++r) {
      outputs[0][r].copy_(all.narrow(0, r * m, m).view(outputs[0][r].sizes()));
    }
    return program_work(c10d::OpType::GATHER, outputs[0]);
  }
  prepare(op, concat(flatten(outputs), inputs));
  Staging staging;
  auto host_in = stage_inputs(staging, inputs);
  auto host_out = stage_outputs(staging, outputs);  // empty except on the root
  return launch(op, c10d::OpType::GATHER, std::move(staging),
                [&] { return host_->gather(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::scatter(std::vector<at::Tensor>& outputs,
                                 std::vector<std::vector<at::Tensor>>& inputs,
                                 const c10d::ScatterOptions& opts) {
  const std::string op = "scatter";
  check_root(op, opts.rootRank, size_);
  const bool root = rank_ == opts.rootRank;
  if (outputs.size() == 1 && in_program(op, concat(outputs, flatten(inputs)))) {
    // An all-to-all (the same program on every rank) in which only the root's
    // blocks are kept: block r of its input is rank r's.
    if (root) check_gather_lists(op, inputs, outputs, size_);
    const at::Tensor& output = outputs[0];
    const int64_t m = output.numel();
    at::Tensor blocks;
    if (root) {
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : inputs[0]) flat.push_back(t.reshape({-1}));
      blocks = at::cat(flat);
    } else {
      blocks = at::empty({size_ * m}, output.options());
    }
    at::Tensor arrived = at::empty({size_ * m}, output.options());
    program_->all_to_all(op, {arrived}, {blocks}, {}, {});
    output.copy_(arrived.narrow(0, opts.rootRank * m, m).view(output.sizes()));
    return program_work(c10d::OpType::SCATTER, outputs);
  }
  prepare(op, concat(outputs, flatten(inputs)));
  Staging staging;
  std::vector<std::vector<at::Tensor>> host_in;  // empty except on the root
  for (const auto& list : inputs) host_in.push_back(stage_inputs(staging, list));
  auto host_out = stage_outputs(staging, outputs);
  return launch(op, c10d::OpType::SCATTER, std::move(staging),
                [&] { return host_->scatter(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::reduce_scatter(std::vector<at::Tensor>& outputs,
                                        std::vector<std::vector<at::Tensor>>& inputs,
                                        const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter";
  if (in_program(op, concat(outputs, flatten(inputs)))) {
    check_gather_lists(op, inputs, outputs, size_);
    for (size_t i = 0; i < outputs.size(); ++i) {
      program_->reduce_scatter(op, {outputs[i]}, inputs[i], opts.reduceOp, /*per_rank=*/true);
    }
    return program_work(c10d::OpType::REDUCE_SCATTER, outputs);
  }
  prepare(op, concat(outputs, flatten(inputs)));
  HostReduction reduction(op, opts.reduceOp, outputs);
  Staging staging;
  std::vector<std::vector<at::Tensor>> host_in;
  for (const auto& list : inputs) host_in.push_back(reduction.stage_inputs(staging, list));
  auto host_out = stage_outputs(staging, outputs);
  reduction.finish_with(staging, size_);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = reduction.host_op();
  return launch(op, c10d::OpType::REDUCE_SCATTER, std::move(staging),
                [&] { return host_->reduce_scatter(host_out, host_in, host_opts); });
}

WorkPtr ProcessGroupTPU::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                              const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter_tensor";
  check_scattered(op, output, input, size_);
  if (in_program(op, {output, input})) {
    program_->reduce_scatter(op, {output}, {input}, opts.reduceOp, /*per_rank=*/false);
    return program_work(c10d::OpType::_REDUCE_SCATTER_BASE, {output});
  }
  prepare(op, {output, input});
  HostReduction reduction(op, opts.reduceOp, {input});
  Staging staging;
  at::Tensor host_in = reduction.stage_inputs(staging, {input})[0];
  at::Tensor host_out = staging.output(output);
  reduction.finish_with(staging, size_);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = reduction.host_op();
  return launch(op, c10d::OpType::_REDUCE_SCATTER_BASE, std::move(staging),
                [&] { return host_->_reduce_scatter_base(host_out, host_in, host_opts); });
}

WorkPtr ProcessGroupTPU::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::ReduceScatterOptions& opts) {
  const std::string op = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist ", op, ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) check_scattered(op, outputs[i], inputs[i], size_);
  if (in_program(op, concat(outputs, inputs))) {
    program_->reduce_scatter(op, outputs, inputs, opts.reduceOp, /*per_rank=*/false);
    return program_work(c10d::OpType::COALESCED, outputs);
  }
  prepare(op, concat(outputs, inputs));
  HostReduction reduction(op, opts.reduceOp, inputs);
  Staging staging;
  auto host_in = reduction.stage_inputs(staging, inputs);
  auto host_out = stage_outputs(staging, outputs);
  reduction.finish_with(staging, size_);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = reduction.host_op();
  return launch(op, c10d::OpType::COALESCED, std::move(staging), [&] {
    return host_->reduce_scatter_tensor_coalesced(host_out, host_in, host_opts);
  });
}

WorkPtr ProcessGroupTPU::alltoall_base(at::Tensor& output, at::Tensor& input,
                                       std::vector<int64_t>& output_split_sizes,
                                       std::vector<int64_t>& input_split_sizes,
                                       const c10d::AllToAllOptions& opts) {
  const std::string op = "all_to_all_single";
  check_splits(op, "input", input, input_split_sizes, size_);
  check_splits(op, "output", output, output_split_sizes, size_);
  if (in_program(op, {output, input})) {
    TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "tpu_dist ", op,
                     ": output and input dtypes differ (", dtype_name(output.scalar_type()),
                     " and ", dtype_name(input.scalar_type()), ")");
    const bool even = input_split_sizes.empty() && output_split_sizes.empty();
    TORCH_CHECK_VALUE(!even || input.numel() == output.numel(), "tpu_dist ", op, ": the input has ",
                      input.numel(), " elements and the output ", output.numel(),
                      "; even splits need as many");
    if (even) {
      program_->all_to_all(op, {output}, {input}, {}, {});
      return program_work(c10d::OpType::ALLTOALL_BASE, {output});
    }
    // Ranks' row counts differ where their splits do, and one program needs
    // one shape: each pads to the rows the ranks agree on (rows past the
    // splits are never read).
    const auto [in_rows, out_rows] = agreed_rows(rows_of(input), rows_of(output));
    at::Tensor padded_in = padded_rows(input, in_rows);
    at::Tensor padded_out = output;
    if (out_rows != rows_of(output)) {  // written whole: its former values are not needed
      std::vector<int64_t> sizes =
          output.dim() > 0 ? output.sizes().vec() : std::vector<int64_t>{1};
      sizes[0] = out_rows;
      padded_out = at::empty(sizes, output.options());
    }
    program_->all_to_all(op, {padded_out}, {padded_in},
                         splits_or_even(output, output_split_sizes, size_),
                         splits_or_even(input, input_split_sizes, size_));
    if (!padded_out.is_same(output)) output.copy_(padded_out.narrow(0, 0, rows_of(output)));
    return program_work(c10d::OpType::ALLTOALL_BASE, {output});
  }
  prepare(op, {output, input});
  Staging staging;
  at::Tensor host_in = staging.input(input);
  at::Tensor host_out = staging.output(output);
  return launch(op, c10d::OpType::ALLTOALL_BASE, std::move(staging), [&] {
    return host_->alltoall_base(host_out, host_in, output_split_sizes, input_split_sizes, opts);
  });
}

WorkPtr ProcessGroupTPU::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllToAllOptions& opts) {
  const std::string op = "all_to_all";
  if (in_program(op, concat(outputs, inputs)) && uniform(concat(outputs, inputs)) &&
      static_cast<int>(inputs.size()) == size_ && outputs.size() == inputs.size()) {
    program_->all_to_all(op, outputs, inputs, {}, {});
    return program_work(c10d::OpType::ALLTOALL, outputs);
  }
  prepare(op, concat(outputs, inputs));
  Staging staging;
  auto host_in = stage_inputs(staging, inputs);
  auto host_out = stage_outputs(staging, outputs);
  return launch(op, c10d::OpType::ALLTOALL, std::move(staging),
                [&] { return host_->alltoall(host_out, host_in, opts); });
}

WorkPtr ProcessGroupTPU::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  const std::string op = "send";
  if (found_in_program(op, tensors)) return program_->send(op, tensors, dst_rank);
  prepare(op, tensors);
  Staging staging;
  auto host = stage_inputs(staging, tensors);
  return launch_p2p(op, c10d::OpType::SEND, std::move(staging),
                    [&] { return host_->send(host, dst_rank, tag); });
}

WorkPtr ProcessGroupTPU::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  const std::string op = "recv";
  if (found_in_program(op, tensors)) return program_->recv(op, tensors, src_rank);
  prepare(op, tensors);
  Staging staging;
  auto host = stage_outputs(staging, tensors);
  return launch_p2p(op, c10d::OpType::RECV, std::move(staging),
                    [&] { return host_->recv(host, src_rank, tag); });
}

WorkPtr ProcessGroupTPU::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const std::string op = "recv";
  // A program names both ends of a message (NCCL has no any-source receive either).
  TORCH_CHECK_VALUE(!program_ || !program_->carries(tensors), "tpu_dist ", op,
                    ": receiving from any source is not supported where the group's "
                    "collectives run in device programs; give the source rank");
  prepare(op, tensors);
  Staging staging;
  auto host = stage_outputs(staging, tensors);
  return launch_p2p(op, c10d::OpType::RECVANYSOURCE, std::move(staging),
                    [&] { return host_->recvAnysource(host, tag); });
}

WorkPtr ProcessGroupTPU::barrier(const c10d::BarrierOptions& opts) {
  const std::string op = "barrier";
  if (program_) {
    program_->barrier(op);
    return program_work(c10d::OpType::BARRIER, {}, /*blocking=*/true);
  }
  prepare(op, {});
  // Completes after every earlier collective of this group (one queue).
  return launch(op, c10d::OpType::BARRIER, Staging(), [&] { return host_->barrier(opts); });
}

void ProcessGroupTPU::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  host_->monitoredBarrier(opts, wait_all_ranks);
}

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Backend>& host,
                                                 const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int size,
                                                 std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(host, "tpu_dist: no host backend");
  TORCH_CHECK_VALUE(host->getRank() == rank && host->getSize() == size,
                    "tpu_dist: the host backend is rank ", host->getRank(), " of ", host->getSize(),
                    ", expected rank ", rank, " of ", size);
  return c10::make_intrusive<ProcessGroupTPU>(host, store, rank, size, timeout);
}

}  // namespace torch_tpu::distributed
