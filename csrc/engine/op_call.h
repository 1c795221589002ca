// One operator application, in terms the engine understands: the rule, its
// arguments (device views, host scalars, static values) and the views its
// results are written to. The PyTorch layer builds these from dispatcher
// stacks; the engine turns them into cached programs.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "engine/device_group.h"
#include "engine/storage.h"
#include "lower/lowering.h"

namespace torch_tpu::engine {

// A value known on the host that the program receives as an operand (Python
// scalars, CPU zero-dim tensors): varying values never enter the program.
struct HostScalar {
  ElementType type = ElementType::Invalid;  // how it travels (f32, f64, s64, ...)
  alignas(8) unsigned char bytes[16] = {};

  static HostScalar of_double(double v, ElementType type);
  static HostScalar of_int(int64_t v, ElementType type);
  static HostScalar of_bool(bool v);
  static HostScalar of_complex(double re, double im, ElementType type);
};

struct Input {
  bool on_device = true;
  TensorView view;    // on_device
  HostScalar scalar;  // otherwise
  // PyTorch's promotion view of the operand (see lower::Operand).
  ElementType dtype = ElementType::Invalid;
  lower::Category category = lower::Category::Tensor;
};

struct CallArg {
  lower::Static value;
  std::vector<std::optional<Input>> inputs;
  bool is_operand = false;
  bool is_list = false;
};

// Seed and offset of a random generator; the engine advances `offset`.
struct RandomState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct OpCall {
  // For messages and metrics: "aten::add.Tensor"; interned or otherwise
  // outliving every program (a binding's name).
  const std::string* name = nullptr;
  const lower::Rule* rule = nullptr;
  std::vector<CallArg> args;
  // Where each result of the rule is written (same order as its results); a
  // target without a slot discards its result.
  std::vector<TensorView> targets;
  int device = 0;
  RandomState* random = nullptr;
  // A collective's group and the rank issuing it: its program is compiled for
  // the group's devices and launched through the group.
  GroupRank group;
};

}  // namespace torch_tpu::engine
