// Strict eager execution: every op runs as its own program, compiled once per
// program-shaping signature (op, dtypes, shapes, view layouts, static
// arguments) and cached; storage offsets and scalars are runtime operands.
#pragma once

#include "engine/op_call.h"

namespace torch_tpu::engine {

// Runs `call` asynchronously (or records it, in DeferAndFuse): the target
// storages hold the results (or pending results) when it returns.
// Thread-safe.
void execute(OpCall&& call);

// Matmul/convolution precision for float32 (torch.tpu.Precision).
void set_precision(hlo::Precision precision);
hlo::Precision precision();

}  // namespace torch_tpu::engine
