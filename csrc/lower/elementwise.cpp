#include "lower/helpers.h"

namespace torch_tpu::lower {
namespace {

std::vector<Value> probe(Context& c, const Args& a) {
  Value x = a.tensor(0);
  const std::string& op = c.op_name();
  std::string name = op.find("asin") != std::string::npos ? "chlo.asin"
                     : op.find("tan") != std::string::npos ? "chlo.tan"
                     : op.find("erfc") != std::string::npos ? "chlo.erfc"
                     : op.find("erf") != std::string::npos ? "chlo.erf"
                     : "chlo.lgamma";
  return {c.b.emit(name, {x}, "", {x.shape})[0]};
}

}  // namespace
TPU_LOWERING(probe, "asin", "tan", "erf", "erfc", "lgamma");
}  // namespace torch_tpu::lower
