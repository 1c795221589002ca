// Bounded dynamism: a tensor computed at the upper bound of a dimension whose
// logical size is known only at run time.
#include "lower/helpers.h"

namespace torch_tpu::lower {

namespace {

// torch_tpu::set_dimension_size(self, dim, size): `self` with only the first `size`
// entries of dimension `dim` valid. XLA's dynamic padder carries the size
// through the ops that follow and masks what lies beyond it in reductions and
// products, so one program serves every size up to the bound. `size` is a
// tensor (a runtime operand), not an argument that would shape the program.
std::vector<Value> set_dimension_size(Context& c, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim = a.integer(1);
  if (dim < 0) dim += x.rank();
  Value size = convert(c.b, c.b.reshape(a.tensor(2), {}), ElementType::S32);
  return {c.b.set_dimension_size(x, size, dim)};
}

}  // namespace

TPU_LOWERING(set_dimension_size, "torch_tpu::set_dimension_size");

}  // namespace torch_tpu::lower
