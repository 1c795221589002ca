// PyTorch's functional collectives (torch.ops._c10d_functional: what
// torch.compile traces collectives into, and what DTensor and FSDP2 call) on
// tpu tensors. Where the group runs collectives inside programs, each is an op
// of the engine like any other: a strict program, a recorded op, or part of a
// compiled graph's program, with no Work to wait for (wait_tensor finds none
// and returns its tensor). Elsewhere they go to PyTorch's own implementation,
// which calls the group's backend (its CPU dispatch slot holds it).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <numeric>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "aten/tensor_bridge.h"
#include "distributed/process_group_tpu.h"

namespace torch_tpu::distributed {

namespace {

using c10d::ReduceOp;
using Stack = torch::jit::Stack;

enum class Functional {
  AllReduce,
  AllReduceInPlace,
  AllReduceCoalesced,
  AllReduceCoalescedInPlace,
  AllGather,
  AllGatherOut,
  AllGatherCoalesced,
  ReduceScatter,
  ReduceScatterOut,
  ReduceScatterCoalesced,
  AllToAllSingle,
  Broadcast,
  BroadcastInPlace,
};

c10::intrusive_ptr<c10d::ProcessGroup> group_of(const c10::IValue& group) {
  if (group.isString()) return c10d::resolve_process_group(group.toStringRef());
  return group.toCustomClass<c10d::ProcessGroup>();
}

// The group's in-program path for `tensors`, or null.
ProgramCollectives* program_path(const c10::IValue& group, const std::string& op,
                                 const std::vector<at::Tensor>& tensors) {
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = group_of(group)->getBackend(aten::kTpu);
  } catch (const c10::Error&) {
    return nullptr;  // no tpu backend in the group: PyTorch's path says so
  }
  auto* tpu = dynamic_cast<ProcessGroupTPU*>(backend.get());
  return tpu ? tpu->program_for(op, tensors) : nullptr;
}

ReduceOp reduce_op(const std::string& name) {
  static const std::unordered_map<std::string, ReduceOp::RedOpType> ops = {
      {"sum", ReduceOp::SUM}, {"avg", ReduceOp::AVG},   {"product", ReduceOp::PRODUCT},
      {"min", ReduceOp::MIN}, {"max", ReduceOp::MAX},   {"band", ReduceOp::BAND},
      {"bor", ReduceOp::BOR}, {"bxor", ReduceOp::BXOR},
  };
  auto it = ops.find(name);
  TORCH_CHECK_VALUE(it != ops.end(), "tpu_dist: unknown reduce_op '", name, "'");
  return ReduceOp(it->second);
}

at::Tensor empty_like_rows(const at::Tensor& like, int64_t rows) {
  std::vector<int64_t> sizes = like.sizes().vec();
  TORCH_CHECK_VALUE(!sizes.empty(), "tpu_dist: a collective of a zero-dim tensor along dim 0");
  sizes[0] = rows;
  return aten::empty_tpu(sizes, like.scalar_type(), like.device().index());
}

at::Tensor empty_like_dense(const at::Tensor& like) {
  return aten::empty_tpu(like.sizes(), like.scalar_type(), like.device().index());
}

std::vector<int64_t> concrete(const c10::IValue& sizes) {
  std::vector<int64_t> out;
  for (const c10::SymInt& s : sizes.toSymIntList()) out.push_back(s.guard_int(__FILE__, __LINE__));
  return out;
}

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), 0L); }

// Runs `kind` on the stack's arguments in a program and leaves its results;
// false (the stack untouched) where the group stages its collectives.
bool run_in_program(Functional kind, const c10::OperatorHandle& op, Stack* stack) {
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  const std::string name =
      op.schema().operator_name().name.substr(sizeof("_c10d_functional::") - 1);
  c10::IValue result;
  switch (kind) {
    case Functional::AllReduce:
    case Functional::AllReduceInPlace: {
      at::Tensor input = args[0].toTensor();
      ProgramCollectives* p = program_path(args[2], name, {input});
      if (!p) return false;
      at::Tensor out = kind == Functional::AllReduce ? empty_like_dense(input) : input;
      p->all_reduce(name, {out}, {input}, reduce_op(args[1].toStringRef()));
      result = out;
      break;
    }
    case Functional::AllReduceCoalesced:
    case Functional::AllReduceCoalescedInPlace: {
      std::vector<at::Tensor> inputs = args[0].toTensorVector();
      ProgramCollectives* p = program_path(args[2], name, inputs);
      if (!p) return false;
      std::vector<at::Tensor> outs = inputs;
      if (kind == Functional::AllReduceCoalesced) {
        for (at::Tensor& t : outs) t = empty_like_dense(t);
      }
      if (!inputs.empty()) p->all_reduce(name, outs, inputs, reduce_op(args[1].toStringRef()));
      result = outs;
      break;
    }
    case Functional::AllGather:
    case Functional::AllGatherOut: {
      at::Tensor input = args[0].toTensor();
      const int64_t size = args[1].toInt();
      at::Tensor out = kind == Functional::AllGatherOut
                           ? args[3].toTensor()
                           : empty_like_rows(input, input.size(0) * size);
      ProgramCollectives* p = program_path(args[2], name, {input, out});
      if (!p || p->size() != size) return false;
      p->all_gather(name, {out}, {input}, /*per_rank=*/false);
      result = out;
      break;
    }
    case Functional::AllGatherCoalesced: {
      std::vector<at::Tensor> inputs = args[0].toTensorVector();
      const int64_t size = args[1].toInt();
      ProgramCollectives* p = program_path(args[2], name, inputs);
      if (!p || p->size() != size) return false;
      std::vector<at::Tensor> outs;
      for (const at::Tensor& t : inputs) outs.push_back(empty_like_rows(t, t.size(0) * size));
      if (!inputs.empty()) p->all_gather(name, outs, inputs, /*per_rank=*/false);
      result = outs;
      break;
    }
    case Functional::ReduceScatter:
    case Functional::ReduceScatterOut: {
      at::Tensor input = args[0].toTensor();
      const int64_t size = args[2].toInt();
      TORCH_CHECK_VALUE(input.dim() > 0 && input.size(0) % size == 0, "tpu_dist ", name,
                        ": dim 0 of the input must divide by the group size ", size);
      at::Tensor out = kind == Functional::ReduceScatterOut
                           ? args[4].toTensor()
                           : empty_like_rows(input, input.size(0) / size);
      ProgramCollectives* p = program_path(args[3], name, {input, out});
      if (!p || p->size() != size) return false;
      p->reduce_scatter(name, {out}, {input}, reduce_op(args[1].toStringRef()), false);
      result = out;
      break;
    }
    case Functional::ReduceScatterCoalesced: {
      std::vector<at::Tensor> inputs = args[0].toTensorVector();
      const int64_t size = args[2].toInt();
      ProgramCollectives* p = program_path(args[3], name, inputs);
      if (!p || p->size() != size) return false;
      std::vector<at::Tensor> outs;
      for (const at::Tensor& t : inputs) {
        TORCH_CHECK_VALUE(t.dim() > 0 && t.size(0) % size == 0, "tpu_dist ", name,
                          ": dim 0 of each input must divide by the group size ", size);
        outs.push_back(empty_like_rows(t, t.size(0) / size));
      }
      if (!inputs.empty()) {
        p->reduce_scatter(name, outs, inputs, reduce_op(args[1].toStringRef()), false);
      }
      result = outs;
      break;
    }
    case Functional::AllToAllSingle: {
      at::Tensor input = args[0].toTensor();
      std::vector<int64_t> out_splits = concrete(args[1]), in_splits = concrete(args[2]);
      ProgramCollectives* p = program_path(args[3], name, {input});
      if (!p) return false;
      // PyTorch's: the output has as many rows as the splits bring.
      at::Tensor out = empty_like_rows(input, total(out_splits));
      p->all_to_all(name, {out}, {input}, out_splits, in_splits);
      result = out;
      break;
    }
    case Functional::Broadcast:
    case Functional::BroadcastInPlace: {
      at::Tensor input = args[0].toTensor();
      ProgramCollectives* p = program_path(args[2], name, {input});
      if (!p) return false;
      const int64_t root = args[1].toInt();
      TORCH_CHECK_VALUE(root >= 0 && root < p->size(), "tpu_dist ", name, ": root rank ", root,
                        " is not in the group of ", p->size(), " ranks");
      at::Tensor out = kind == Functional::Broadcast ? empty_like_dense(input) : input;
      p->broadcast(name, {out}, {input}, static_cast<int>(root));
      result = out;
      break;
    }
  }
  torch::jit::drop(*stack, n);
  stack->push_back(std::move(result));
  return true;
}

template <Functional kind>
void functional_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
  if (run_in_program(kind, op, stack)) return;
  // PyTorch's implementation (CompositeExplicitAutograd), which fills every
  // backend's slot without a kernel of its own: the CPU one.
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

template <Functional kind>
torch::CppFunction boxed() {
  return torch::CppFunction::makeFromBoxedFunction<&functional_kernel<kind>>();
}

}  // namespace

TORCH_LIBRARY_IMPL(_c10d_functional, PrivateUse1, m) {
  m.impl("all_reduce", boxed<Functional::AllReduce>());
  m.impl("all_reduce_", boxed<Functional::AllReduceInPlace>());
  m.impl("all_reduce_coalesced", boxed<Functional::AllReduceCoalesced>());
  m.impl("all_reduce_coalesced_", boxed<Functional::AllReduceCoalescedInPlace>());
  m.impl("all_gather_into_tensor", boxed<Functional::AllGather>());
  m.impl("all_gather_into_tensor_out", boxed<Functional::AllGatherOut>());
  m.impl("all_gather_into_tensor_coalesced", boxed<Functional::AllGatherCoalesced>());
  m.impl("reduce_scatter_tensor", boxed<Functional::ReduceScatter>());
  m.impl("reduce_scatter_tensor_out", boxed<Functional::ReduceScatterOut>());
  m.impl("reduce_scatter_tensor_coalesced", boxed<Functional::ReduceScatterCoalesced>());
  m.impl("all_to_all_single", boxed<Functional::AllToAllSingle>());
  m.impl("broadcast", boxed<Functional::Broadcast>());
  m.impl("broadcast_", boxed<Functional::BroadcastInPlace>());
}

}  // namespace torch_tpu::distributed
