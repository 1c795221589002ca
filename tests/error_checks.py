"""Shared by tests/test_error_inputs.py and tests/test_unsupported_dtypes.py: OpInfo
entries run on tpu and, on host copies of the same inputs, on the CPU, for the errors
each raises."""

import contextlib

import pytest
import torch
from torch.utils._pytree import tree_flatten

import torch_tpu
from torch_tpu.tools import op_coverage, opinfo_runner


def entries(with_error_inputs=False):
    """The OpInfo entries (those with error inputs only), as pytest params named by
    entry."""
    for op in op_coverage.load_op_db():
        if not with_error_inputs or op.error_inputs_func is not None:
            yield pytest.param(op, id=opinfo_runner.entry_name(op))


@contextlib.contextmanager
def fallbacks_silenced():
    """Fallbacks are not warned about (entries that fall back raise as well)."""
    previous = torch_tpu._C._get_fallback_mode()
    torch_tpu._C._set_fallback_mode("silent")
    try:
        yield
    finally:
        torch_tpu._C._set_fallback_mode(previous)


def on_cpu(sample):
    """The sample with its tpu tensors copied to the CPU, sharing storages as on tpu
    (one host copy per tpu storage, viewed with each tensor's sizes, strides and
    offset; a tensor passed twice, as the same copy: overlap checks compare them by
    identity)."""
    storages, copies = {}, {}

    def move(t):
        if not isinstance(t, torch.Tensor) or t.device.type != "tpu":
            return t
        if id(t) not in copies:
            copies[id(t)] = (t, copy_of(t))  # t kept: its id stays its own
        return copies[id(t)][1]

    def copy_of(t):
        if t.is_conj():
            return copy_of(t.conj()).conj()
        if t.is_neg():
            return torch._neg_view(copy_of(torch._neg_view(t)))
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


def mixes_devices(sample) -> bool:
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


def error_of(op, sample):
    try:
        _run(op, sample)
    except Exception as err:
        return err
    return None
