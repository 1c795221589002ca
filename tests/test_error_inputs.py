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
import torch
from torch.utils._pytree import tree_flatten

import torch_tpu
from torch_tpu.tools import op_coverage, opinfo_runner

# Cases that cannot match, by "entry[index]", with the reason. None at present:
# entries are added here only with a reason that no check could remove.
KNOWN_FAILURES: dict[str, str] = {}


def _entries():
    for op in op_coverage.load_op_db():
        if op.error_inputs_func is not None:
            yield pytest.param(op, id=opinfo_runner.entry_name(op))


@pytest.fixture(scope="module", autouse=True)
def _silent_fallbacks():
    previous = torch_tpu._C._get_fallback_mode()
    torch_tpu._C._set_fallback_mode("silent")
    yield
    torch_tpu._C._set_fallback_mode(previous)


def _on_cpu(sample):
    """The sample with its tpu tensors copied to the CPU, sharing storages as on tpu
    (one host copy per tpu storage, viewed with each tensor's sizes, strides and
    offset)."""
    storages = {}

    def move(t):
        if not isinstance(t, torch.Tensor) or t.device.type != "tpu":
            return t
        if t.is_conj():
            return move(t.conj()).conj()
        if t.is_neg():
            return torch._neg_view(move(torch._neg_view(t)))
        if t.layout != torch.strided:
            return t.cpu()
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes(), t.dtype)
        if key not in storages:
            elements = t.untyped_storage().nbytes() // t.element_size()
            flat = t.detach().new_empty(0).set_(t.untyped_storage(), 0, (elements,), (1,))
            storages[key] = flat.cpu()
        copy = storages[key].as_strided(t.shape, t.stride(), t.storage_offset())
        return copy.requires_grad_(t.requires_grad) if t.requires_grad else copy

    return sample.transform(move)


def _mixes_devices(sample) -> bool:
    """Whether the sample puts a tensor on another device on purpose (CPU scalars,
    which ops take as numbers, do not count)."""
    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return any(
        isinstance(t, torch.Tensor)
        and t.device.type != "tpu"
        and not (t.device.type == "cpu" and t.dim() == 0)
        for t in leaves
    )


def _run(op, sample):
    """Calls the op and waits for its results (an error found on the device is raised
    at a synchronisation)."""
    result = op(sample.input, *sample.args, **sample.kwargs)
    for t in tree_flatten(result)[0]:
        if isinstance(t, torch.Tensor) and t.device.type == "tpu":
            t.cpu()
    torch.tpu.synchronize()
    return result


def _matches(regex, expected) -> bool:
    """Whether tpu's error is held to the ErrorInput's regex: where the CPU's error
    matches it (some regexes are CUDA's words), or there is no CPU reference."""
    return expected is None or re.search(regex, str(expected)) is not None


def _error(op, sample):
    try:
        _run(op, sample)
    except Exception as err:
        return err
    return None


@pytest.mark.parametrize("op", list(_entries()))
def test_error_inputs(op):
    name = opinfo_runner.entry_name(op)
    problems, checked = [], 0
    for index, error_input in enumerate(op.error_inputs("tpu")):
        sample = error_input.sample_input
        case = f"{name}[{index}]"
        if case in KNOWN_FAILURES:
            continue
        mixed = _mixes_devices(sample)
        expected = None if mixed else _error(op, _on_cpu(sample))
        if not mixed and expected is None:
            continue  # the CPU accepts it too
        actual = _error(op, sample)
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
