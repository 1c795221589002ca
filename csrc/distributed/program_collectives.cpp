#include "distributed/program_collectives.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <cctype>
#include <random>

#include "aten/tensor_bridge.h"
#include "distributed/job.h"
#include "engine/backend.h"
#include "engine/captured_graph.h"
#include "engine/deferred.h"
#include "engine/executor.h"
#include "engine/program.h"
#include "lower/lowering.h"

namespace torch_tpu::distributed {

namespace {

using c10d::ReduceOp;

engine::Input on_device(const at::Tensor& t) {
  engine::Input in;
  in.view = aten::view_of(t);
  in.dtype = aten::element_type(t.scalar_type());
  return in;
}

engine::Input host_scalar(engine::HostScalar s) {
  engine::Input in;
  in.on_device = false;
  in.scalar = s;
  in.dtype = s.type;
  in.category = lower::Category::WrappedNumber;
  return in;
}

engine::CallArg tensors_arg(const std::vector<at::Tensor>& tensors) {
  engine::CallArg arg;
  arg.is_operand = true;
  arg.is_list = true;
  for (const at::Tensor& t : tensors) arg.inputs.push_back(on_device(t));
  return arg;
}

engine::CallArg static_arg(lower::Static value) {
  engine::CallArg arg;
  arg.value = std::move(value);
  return arg;
}

engine::CallArg scalars_arg(const std::vector<int64_t>& values) {
  engine::CallArg arg;
  arg.is_operand = true;
  arg.is_list = true;
  for (int64_t v : values) {
    arg.inputs.push_back(host_scalar(engine::HostScalar::of_int(v, ElementType::S64)));
  }
  return arg;
}

std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::string dtype_name(at::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

// c10d's reduction as the rules name it; raises for a reduction the tensors'
// dtype does not have.
std::string reduction(const std::string& op, const ReduceOp& reduce,
                      const std::vector<at::Tensor>& tensors) {
  std::string name;
  switch (reduce.op_) {
    case ReduceOp::SUM:
      name = "sum";
      break;
    case ReduceOp::AVG:
      name = "avg";
      break;
    case ReduceOp::PRODUCT:
      name = "product";
      break;
    case ReduceOp::MIN:
      name = "min";
      break;
    case ReduceOp::MAX:
      name = "max";
      break;
    case ReduceOp::BAND:
      name = "band";
      break;
    case ReduceOp::BOR:
      name = "bor";
      break;
    case ReduceOp::BXOR:
      name = "bxor";
      break;
    case ReduceOp::PREMUL_SUM:
      name = "premul_sum";
      break;
    default:
      TORCH_CHECK_VALUE(false, "tpu_dist ", op, ": unsupported reduction");
  }
  for (const at::Tensor& t : tensors) {
    const at::ScalarType type = t.scalar_type();
    TORCH_CHECK_TYPE(!t.is_complex() || name == "sum" || name == "avg" || name == "premul_sum",
                     "tpu_dist ", op, ": complex tensors support only ReduceOp.SUM, AVG and ",
                     "PREMUL_SUM");
    TORCH_CHECK_TYPE(type != at::kBool || name != "avg", "tpu_dist ", op,
                     ": ReduceOp.AVG is not defined for torch.bool tensors");
    const bool bitwise = name == "band" || name == "bor" || name == "bxor";
    TORCH_CHECK_TYPE(!bitwise || at::isIntegralType(type, /*includeBool=*/true), "tpu_dist ", op,
                     ": ReduceOp.", upper(name),
                     " is defined only for integer and bool tensors, got ", dtype_name(type));
  }
  return name;
}

// PREMUL_SUM's factor: a tpu tensor as an operand, anything else as a host
// scalar (None for other reductions).
engine::CallArg factor_arg(const ReduceOp& reduce) {
  engine::CallArg arg;
  arg.is_operand = true;
  if (reduce.op_ != ReduceOp::PREMUL_SUM) {
    arg.inputs.push_back(std::nullopt);
    return arg;
  }
  auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(reduce.supplement_.get());
  TORCH_CHECK_VALUE(factor != nullptr, "tpu_dist: PREMUL_SUM without a factor");
  if (factor->tensor_factor.defined() && aten::is_tpu(factor->tensor_factor)) {
    arg.inputs.push_back(on_device(factor->tensor_factor));
  } else {
    const double value = factor->tensor_factor.defined() ? factor->tensor_factor.item<double>()
                                                         : factor->double_factor;
    arg.inputs.push_back(host_scalar(engine::HostScalar::of_double(value, ElementType::F64)));
  }
  return arg;
}

}  // namespace

bool ProgramCollectives::carries(const std::vector<at::Tensor>& tensors) const {
  for (const at::Tensor& t : tensors) {
    if (!aten::is_tpu(t) || t.device().index() != device_ || t.is_conj() || t.is_neg()) {
      return false;
    }
  }
  return true;
}

namespace {

void run_as(const engine::GroupRank& member, const std::string& op, const char* rule, int device,
            std::vector<engine::CallArg> args, const std::vector<at::Tensor>& targets) {
  engine::OpCall call;
  call.name = engine::interned("tpu_dist " + op);
  call.rule = lower::find_rule(rule);
  TORCH_INTERNAL_ASSERT(call.rule, "no lowering rule ", rule);
  call.device = device;
  call.group = member;
  call.args = std::move(args);
  for (const at::Tensor& t : targets) call.targets.push_back(aten::view_of(t));
  try {
    engine::execute(std::move(call));
  } catch (const engine::GroupLaunchError& e) {
    C10_THROW_ERROR(DistBackendError, e.what());
  }
}

}  // namespace

void ProgramCollectives::run(const std::string& op, const char* rule,
                             std::vector<engine::CallArg> args,
                             const std::vector<at::Tensor>& targets) {
  // Not into a capture: the compiled graph would send them again at every
  // replay. They stay held past its collectives, as past a replay's.
  if (!engine::capturing(device_)) launch_messages();
  run_as(member_, op, rule, device_, std::move(args), targets);
}

void ProgramCollectives::all_reduce(const std::string& op, const std::vector<at::Tensor>& outputs,
                                    const std::vector<at::Tensor>& inputs, const ReduceOp& reduce) {
  run(op, "_tpu_dist_all_reduce",
      {tensors_arg(inputs), static_arg(reduction(op, reduce, inputs)), static_arg(int64_t{size()}),
       factor_arg(reduce)},
      outputs);
}

void ProgramCollectives::reduce(const std::string& op, const std::vector<at::Tensor>& tensors,
                                const ReduceOp& reduce, int root) {
  run(op, "_tpu_dist_reduce",
      {tensors_arg(tensors), static_arg(reduction(op, reduce, tensors)),
       static_arg(int64_t{size()}), factor_arg(reduce), static_arg(int64_t{root})},
      tensors);
}

void ProgramCollectives::broadcast(const std::string& op, const std::vector<at::Tensor>& outputs,
                                   const std::vector<at::Tensor>& inputs, int root) {
  run(op, "_tpu_dist_broadcast",
      {tensors_arg(inputs), static_arg(int64_t{root}), static_arg(int64_t{size()})}, outputs);
}

void ProgramCollectives::all_gather(const std::string& op, const std::vector<at::Tensor>& outputs,
                                    const std::vector<at::Tensor>& inputs, bool per_rank) {
  run(op, "_tpu_dist_all_gather",
      {tensors_arg(inputs), static_arg(int64_t{size()}), static_arg(per_rank)}, outputs);
}

void ProgramCollectives::reduce_scatter(const std::string& op,
                                        const std::vector<at::Tensor>& outputs,
                                        const std::vector<at::Tensor>& inputs,
                                        const ReduceOp& reduce, bool per_rank) {
  run(op, "_tpu_dist_reduce_scatter",
      {tensors_arg(inputs), static_arg(reduction(op, reduce, inputs)), static_arg(int64_t{size()}),
       factor_arg(reduce), static_arg(per_rank)},
      outputs);
}

void ProgramCollectives::all_to_all(const std::string& op, const std::vector<at::Tensor>& outputs,
                                    const std::vector<at::Tensor>& inputs,
                                    const std::vector<int64_t>& output_splits,
                                    const std::vector<int64_t>& input_splits) {
  run(op, "_tpu_dist_all_to_all",
      {tensors_arg(inputs), static_arg(int64_t{size()}), scalars_arg(input_splits),
       scalars_arg(output_splits)},
      outputs);
}

void ProgramCollectives::barrier(const std::string& op) {
  at::Tensor token = aten::empty_tpu({1}, at::kInt, static_cast<c10::DeviceIndex>(device_));
  all_reduce(op, {token}, {token}, ReduceOp(ReduceOp::SUM));
}

// ---------------------------------------------------------------- point to point

// What the Works of messages launched together report.
struct MessageBatch {
  std::atomic<bool> launched{false};
  std::string error;  // set before `launched`
  std::shared_ptr<engine::CompletionMark> done;
};

namespace {

// A held message's Work: waiting launches the held messages (NCCL's isend
// returns with the message on its way; here a rank's messages go together).
class MessageWork : public c10d::Work {
 public:
  MessageWork(int rank, c10d::OpType type, std::shared_ptr<ProgramCollectives> program,
              std::shared_ptr<MessageBatch> batch, std::vector<at::Tensor> tensors)
      : c10d::Work(rank, type),
        program_(std::move(program)),
        batch_(std::move(batch)),
        tensors_(std::move(tensors)) {}

  bool isCompleted() override {
    return batch_->launched && (!batch_->error.empty() || batch_->done->done());
  }
  bool isSuccess() const override { return batch_->launched && batch_->error.empty(); }
  bool wait(std::chrono::milliseconds timeout) override {
    if (!batch_->launched) program_->launch_messages();
    if (!batch_->error.empty()) C10_THROW_ERROR(DistBackendError, batch_->error);
    return true;
  }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return tensors_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(kNoTimeout);
    auto future =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(tensors_));
    return future;
  }

 private:
  std::shared_ptr<ProgramCollectives> program_;
  std::shared_ptr<MessageBatch> batch_;
  std::vector<at::Tensor> tensors_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> ProgramCollectives::send(const std::string& op,
                                                        const std::vector<at::Tensor>& tensors,
                                                        int peer) {
  return hold(op, tensors, peer, /*outgoing=*/true);
}

c10::intrusive_ptr<c10d::Work> ProgramCollectives::recv(const std::string& op,
                                                        const std::vector<at::Tensor>& tensors,
                                                        int peer) {
  return hold(op, tensors, peer, /*outgoing=*/false);
}

c10::intrusive_ptr<c10d::Work> ProgramCollectives::hold(const std::string& op,
                                                        const std::vector<at::Tensor>& tensors,
                                                        int peer, bool outgoing) {
  const int rank = member_.rank;
  TORCH_CHECK_VALUE(peer >= 0 && peer < size(), "tpu_dist ", op, ": peer rank ", peer,
                    " is not in the group of ", size(), " ranks");
  TORCH_CHECK_VALUE(peer != rank, "tpu_dist ", op, ": rank ", rank, " cannot ",
                    outgoing ? "send to" : "receive from", " itself");
  std::lock_guard<std::mutex> lock(messages_mutex_);
  if (!batch_) batch_ = std::make_shared<MessageBatch>();
  for (const at::Tensor& t : tensors) held_.push_back({peer, outgoing, t});
  return c10::make_intrusive<MessageWork>(rank, outgoing ? c10d::OpType::SEND : c10d::OpType::RECV,
                                          shared_from_this(), batch_, tensors);
}

void ProgramCollectives::launch_messages() {
  std::vector<Message> messages;
  std::shared_ptr<MessageBatch> batch;
  {
    std::lock_guard<std::mutex> lock(messages_mutex_);
    messages.swap(held_);
    batch.swap(batch_);
  }
  if (messages.empty()) return;
  // Pairs in ascending (low, high) order, the same for every rank: for this
  // rank, that is ascending peer order.
  std::stable_sort(messages.begin(), messages.end(),
                   [](const Message& a, const Message& b) { return a.peer < b.peer; });
  try {
    for (size_t first = 0, last; first < messages.size(); first = last) {
      for (last = first; last < messages.size() && messages[last].peer == messages[first].peer;) {
        ++last;
      }
      exchange(messages[first].peer, {messages.begin() + first, messages.begin() + last});
    }
    batch->done = engine::mark_completion(device_);
  } catch (const std::exception& e) {
    batch->error = e.what();
    batch->launched = true;
    throw;
  }
  batch->launched = true;
}

void ProgramCollectives::exchange(int peer, const std::vector<Message>& messages) {
  const int rank = member_.rank;
  const bool low = rank < peer;
  // The pair's program: messages from the lower rank, then from the higher,
  // each in issue order; each rank gives what it sends or receives into (a
  // sender's tensor is written back its own values).
  std::vector<at::Tensor> tensors;
  lower::IntList sources;
  for (const bool from_low : {true, false}) {
    for (const Message& m : messages) {
      if ((m.outgoing == low) != from_low) continue;
      tensors.push_back(m.tensor);
      sources.push_back(from_low ? 0 : 1);
    }
  }
  const int low_rank = std::min(rank, peer), high_rank = std::max(rank, peer);
  engine::GroupRank pair{member_.group->pair(low_rank, high_rank), low ? 0 : 1};
  run_as(pair, "send/recv", "_tpu_dist_exchange", device_,
         {tensors_arg(tensors), static_arg(sources)}, tensors);
}

// ---------------------------------------------------------------- joining

namespace {

// This process, told apart from others across hosts and pid reuse.
const std::string& process_domain() {
  static const std::string domain = [] {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::random_device random;
    return std::string(host) + "/" + std::to_string(getpid()) + "/" + std::to_string(random());
  }();
  return domain;
}

// The processes whose devices one client spans: a multi-process job's (the
// same in all its processes), or this process alone.
std::string client_domain() {
  const auto& job = engine::Backend::config().job;
  return job ? "job/" + job->id : process_domain();
}

std::string group_nonce() {
  static std::atomic<uint64_t> next{0};
  return process_domain() + "/" + std::to_string(next++);
}

struct Member {
  std::string client;
  std::string process;
  int64_t device_id = -1;
  std::string nonce;
};

std::string to_text(const Member& m) {
  return m.client + "\n" + m.process + "\n" + std::to_string(m.device_id) + "\n" + m.nonce;
}

Member from_text(const std::vector<uint8_t>& bytes) {
  std::string text(bytes.begin(), bytes.end());
  std::vector<std::string> parts;
  size_t at = 0;
  for (size_t next; (next = text.find('\n', at)) != std::string::npos; at = next + 1) {
    parts.push_back(text.substr(at, next - at));
  }
  parts.push_back(text.substr(at));
  TORCH_CHECK(parts.size() == 4, "tpu_dist: a malformed group member record");
  return {parts[0], parts[1], std::stoll(parts[2]), parts[3]};
}

}  // namespace

std::shared_ptr<ProgramCollectives> join_device_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::string& op, int rank, int size,
                                                      int device,
                                                      std::chrono::milliseconds timeout) {
  const Member mine{client_domain(), process_domain(),
                    engine::Backend::get().client().global_id(device), group_nonce()};
  const std::string text = to_text(mine);
  auto key = [](int r) { return "tpu_dist/member/" + std::to_string(r); };
  store->set(key(rank), std::vector<uint8_t>(text.begin(), text.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  try {
    store->wait(keys, timeout);
  } catch (const c10::DistStoreError& e) {
    C10_THROW_ERROR(DistBackendError, "tpu_dist " + op + " failed: not every rank of the group " +
                                          "reached its first collective within " +
                                          std::to_string(timeout.count()) + " ms (" +
                                          e.what_without_backtrace() + ")");
  }
  std::vector<Member> members;
  for (int r = 0; r < size; ++r) members.push_back(from_text(store->get(key(r))));
  // Programs span the group when one client runs every rank's device, each
  // rank on a device of its own; the others stage through the host.
  std::vector<int64_t> ids;
  bool one_process = true;
  for (const Member& m : members) {
    if (m.client != mine.client) return nullptr;
    if (std::find(ids.begin(), ids.end(), m.device_id) != ids.end()) return nullptr;
    ids.push_back(m.device_id);
    one_process = one_process && m.process == mine.process;
  }
  const std::string name = "tpu_dist group of " + std::to_string(size) + " ranks";
  auto group = one_process ? engine::in_process_group(members[0].nonce, ids, name, timeout)
                           : store_agreed_group(store, members[0].nonce, ids, name, timeout);
  return std::make_shared<ProgramCollectives>(engine::GroupRank{group, rank}, device);
}

// ---------------------------------------------------------------- Work

namespace {

class ProgramWork : public c10d::Work {
 public:
  ProgramWork(int rank, c10d::OpType type, int device, std::vector<at::Tensor> outputs,
              bool blocking)
      : c10d::Work(rank, type),
        device_(device),
        outputs_(std::move(outputs)),
        done_(engine::mark_completion(device)),
        blocking_(blocking),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    // The results are ordered on the device before any later use of them.
    future_->markCompleted(c10::IValue(outputs_));
  }

  bool isCompleted() override { return done_->done(); }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds timeout) override {
    if (blocking_) engine::synchronize(device_);
    return true;
  }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  int device_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<engine::CompletionMark> done_;
  bool blocking_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> program_work(int rank, c10d::OpType type, int device,
                                            std::vector<at::Tensor> outputs, bool blocking) {
  return c10::make_intrusive<ProgramWork>(rank, type, device, std::move(outputs), blocking);
}

}  // namespace torch_tpu::distributed
