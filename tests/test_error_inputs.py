"""PyTorch's OpInfo error inputs on tpu, compared with the CPU.

Every ``op_db`` entry with ``error_inputs`` (calls each op must reject) runs each of
them on tpu and on the CPU: tpu must raise the CPU's exception type with the CPU's
message, and match the ErrorInput's own regex as PyTorch's ``test_errors`` does. The
inputs are built on tpu; the CPU's reference runs on host copies that keep their
storage sharing (an ``out=`` that overlaps an input overlaps it on the CPU too). Where
the error is in the data (an index out of range), tpu reports it at the next
synchronisation, which the test waits for inside the check.

Cases whose CPU reference does not apply:
  - the CPU accepts the input too (an ErrorInput for another device, or wrong for the
    CPU, as PyTorch's own skips for ``test_errors`` say): skipped;
  - the input mixes devices on purpose (a tensor on ``meta`` or a non-scalar one on
    the CPU): the messages name the devices, so tpu is held to the ErrorInput's type
    and regex only.
"""

import re

import pytest
from error_checks import entries, error_of, fallbacks_silenced, mixes_devices, on_cpu

from torch_tpu.tools import opinfo_runner


@pytest.fixture(scope="module", autouse=True)
def _fallbacks_silenced():
    with fallbacks_silenced():
        yield


def _matches(regex, expected) -> bool:
    """Whether tpu's error is held to the ErrorInput's regex: where the CPU's error
    matches it (some regexes are CUDA's words), or there is no CPU reference."""
    return expected is None or re.search(regex, str(expected)) is not None


@pytest.mark.parametrize("op", list(entries(with_error_inputs=True)))
def test_error_inputs(op):
    name = opinfo_runner.entry_name(op)
    problems, checked = [], 0
    for index, error_input in enumerate(op.error_inputs("tpu")):
        sample = error_input.sample_input
        case = f"{name}[{index}]"
        mixed = mixes_devices(sample)
        expected = None if mixed else error_of(op, on_cpu(sample))
        if not mixed and expected is None:
            continue  # the CPU accepts it too
        actual = error_of(op, sample)
        checked += 1
        want_type = type(expected) if expected is not None else error_input.error_type
        if actual is None:
            problems.append(f"{case}: no error; the CPU raises {want_type.__name__}: {expected}")
            continue
        if not isinstance(actual, want_type):
            problems.append(
                f"{case}: {type(actual).__name__}: {actual}; the CPU raises "
                f"{want_type.__name__}: {expected}"
            )
        elif expected is not None and str(actual) != str(expected):
            problems.append(f"{case}: message {str(actual)!r}; the CPU's {str(expected)!r}")
        elif _matches(error_input.error_regex, expected) and not re.search(
            error_input.error_regex, str(actual)
        ):
            problems.append(f"{case}: {actual!r} does not match {error_input.error_regex!r}")
    if not checked:
        pytest.skip("the CPU accepts every error input of this entry")
    assert not problems, "\n".join(problems)
