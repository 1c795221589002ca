"""PyTorch's OpInfo database on tpu, compared with the CPU.

Every ``op_db`` entry runs its sample inputs (and a non-contiguous copy of the first)
at float32 (under Precision.HIGHEST, from conftest) and at one dtype of each other kind
the entry lists, plus the gradients of differentiable entries at float32; see
``torch_tpu.tools.opinfo_runner``. Entries whose ATen operator has a native lowering
must also run with no CPU fallback. Known failures are listed, with their reasons, in
``opinfo_runner.KNOWN_FAILURES`` (xfail, strict: a fix shows up as XPASS; not strict for
the few a random draw decides, ``opinfo_runner.UNDECIDED``).
"""

import pytest

from torch_tpu.tools import op_coverage, opinfo_runner

LOWERED = op_coverage.lowered_operators()


def _cases():
    for op in op_coverage.load_op_db():
        name = opinfo_runner.entry_name(op)
        for dtype in opinfo_runner.dtypes_to_check(op):
            marks = []
            reason = opinfo_runner.known_failure(name, dtype)
            if reason:
                strict = not opinfo_runner.undecided(name, dtype)
                marks.append(pytest.mark.xfail(reason=reason, strict=strict))
            yield pytest.param(op, dtype, id=f"{name}-{str(dtype)[6:]}", marks=marks)


pytestmark = pytest.mark.usefixtures("silent_fallbacks")


@pytest.mark.parametrize(("op", "dtype"), list(_cases()))
def test_opinfo(op, dtype):
    result = opinfo_runner.run_entry(op, dtype, max_samples=3)
    if result.status == "skip":
        pytest.skip(result.detail)
    assert result.status != "fail", result.detail
    if op_coverage.aten_name(op) in LOWERED:
        assert result.status == "pass", result.detail
