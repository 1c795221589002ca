"""PyTorch's OpInfo reference inputs on tpu, compared with the CPU: for every ``op_db``
entry that has them, the reference inputs beyond its sample inputs (larger tensors,
extremal values, broadcasting and type-promotion cases), at float32 and at one dtype of
each other kind the entry lists (``opinfo_runner.dtypes_to_check``).

Known failures, with their reasons, are ``opinfo_runner.KNOWN_REFERENCE_FAILURES`` (and
the sample inputs' ``KNOWN_FAILURES``, not strict).
"""

import os

import pytest
import torch

from torch_tpu.tools import op_coverage, opinfo_runner

# `make test`: one reference input of each entry, at float32; `make test-all`
# (TORCH_TPU_TEST_ALL=1): 16 at every dtype checked (about 75 minutes for all 14,813 at
# float32 alone); TORCH_TPU_REFERENCE_INPUTS=N sets how many, 0 for all.
WHOLE = os.environ.get("TORCH_TPU_TEST_ALL") == "1"
SAMPLES = int(os.environ.get("TORCH_TPU_REFERENCE_INPUTS", "16" if WHOLE else "1")) or 10**9


def _cases():
    for op in op_coverage.load_op_db():
        if op.reference_inputs_func is None:
            continue
        name = opinfo_runner.entry_name(op)
        for dtype in opinfo_runner.dtypes_to_check(op) if WHOLE else [torch.float32]:
            marks = []
            reason = opinfo_runner.KNOWN_REFERENCE_FAILURES.get(f"{name}:{str(dtype)[6:]}")
            if reason:
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            elif opinfo_runner.known_failure(name, dtype):
                # The sample inputs' known failure (ComplexHalf, ...); a reference input
                # may avoid what fails there.
                reason = opinfo_runner.known_failure(name, dtype)
                marks.append(pytest.mark.xfail(reason=reason, strict=False))
            yield pytest.param(op, dtype, id=f"{name}-{str(dtype)[6:]}", marks=marks)


pytestmark = pytest.mark.usefixtures("silent_fallbacks")


@pytest.mark.parametrize(("op", "dtype"), list(_cases()))
def test_opinfo_reference(op, dtype):
    result = opinfo_runner.run_entry(op, dtype, max_samples=SAMPLES, reference=True)
    if result.status == "skip":
        pytest.skip(result.detail)
    assert result.status in ("pass", "fallback"), result.detail


def test_low_precision_results_as_accurate_as_the_cpus_are_accepted_and_no_others():
    """The bfloat16 rule that accepts an element the CPU's kernel and tpu round apart
    (each no farther from float64 than twice the CPU's) refuses one that is farther."""
    from torch.testing._internal.opinfo.core import SampleInput

    x = torch.tensor([0.3, 1.7, 2.9, 5.1], dtype=torch.bfloat16)
    sample = SampleInput(x)
    expected = torch.exp(x)
    exact = torch.exp(x.double()).to(torch.bfloat16)
    accepted = opinfo_runner._low_precision_as_accurate_as_cpu
    assert accepted(torch.exp, sample, expected.clone(), expected, torch.bfloat16)
    assert accepted(torch.exp, sample, exact, expected, torch.bfloat16)
    wrong = expected.clone()
    wrong[3] = wrong[3] * 1.1
    assert not accepted(torch.exp, sample, wrong, expected, torch.bfloat16)
    wrong = expected.clone()
    wrong[0] = float("inf")
    assert not accepted(torch.exp, sample, wrong, expected, torch.bfloat16)
    # a result of another dtype is a difference the rule does not judge (the saved
    # statistics of native_layer_norm, float32 on tpu, are KNOWN_FAILURES)
    assert not accepted(torch.exp, sample, exact.float(), expected, torch.bfloat16)
