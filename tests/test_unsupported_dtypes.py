"""Dtypes the CPU's kernels lack, on tpu, compared with the CPU.

Each OpInfo entry runs its first sample at every dtype its CPU kernel does not support
(by the OpInfo's dtype table, less Half and BFloat16, which tpu computes as CUDA does):
where the CPU raises, tpu raises its exception type, naming the same dtype (the kernel
named may differ where tpu received a decomposed call). tpu learns the CPU's dtypes by
probing its kernel (``cpu_dtypes``, csrc/aten/meta_errors.cpp).

``make test`` runs a fixed sample, every fourth entry (1 minute with 2 workers);
``make test-all`` (TORCH_TPU_TEST_ALL=1) runs every entry (3 minutes).
"""

import os
import re

import pytest
import torch
import torch.nn.functional as F
from error_checks import entries, error_of, fallbacks_silenced, on_cpu

from torch_tpu.tools import opinfo_runner


@pytest.fixture(scope="module", autouse=True)
def _fallbacks_silenced():
    with fallbacks_silenced():
        yield


# Dtype cases that cannot match, by "entry:dtype" or "entry", with the reason.
DTYPE_DIFFERENCES = {
    "_segment_reduce.lengths": (
        "the CPU's kernel checks the lengths before its dtype dispatch, and the probe that "
        "learns the CPU's dtypes runs it on zero lengths, which it refuses: the probe "
        "decides nothing, and tpu computes"
    ),
    "histc": (
        "integer histc runs as CUDA's kernel runs it (MoE routers count tokens per expert "
        "with it), where the CPU's kernel refuses integers (TPU_LOWERING_CUDA_DTYPES)"
    ),
    "topk:bool": (
        "the CPU's kernel refuses bool ('topk does not support bool dtypes on CPU'), a limit "
        "of its sort the CUDA kernel does not have: tpu sorts bools"
    ),
}
# The dtypes probed: every kind but Half and BFloat16 (see above).
DTYPES = (
    torch.float32,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
)


EVERY_ENTRY = os.environ.get("TORCH_TPU_TEST_ALL") == "1"
ENTRIES = [e for i, e in enumerate(entries()) if EVERY_ENTRY or i % 4 == 0]


def _dispatch_dtype(err) -> str | None:
    match = re.search(r"not implemented for '(\w+)'", str(err))
    return match.group(1) if match else None


@pytest.mark.parametrize("op", ENTRIES)
def test_unsupported_dtypes(op):
    name = opinfo_runner.entry_name(op)
    supported = op.supported_dtypes("cpu")
    problems, checked = [], 0
    for dtype in DTYPES:
        if dtype in supported or {name, f"{name}:{str(dtype)[6:]}"} & DTYPE_DIFFERENCES.keys():
            continue
        try:
            sample = next(iter(op.sample_inputs("tpu", dtype)))
            cpu_sample = on_cpu(sample)
        except Exception:
            continue  # no sample of this dtype
        expected = error_of(op, cpu_sample)
        if expected is None:
            continue  # the CPU computes it after all
        actual = error_of(op, sample)
        checked += 1
        case = f"{name}:{str(dtype)[6:]}"
        if actual is None:
            problems.append(
                f"{case}: no error; the CPU raises {type(expected).__name__}: {expected}"
            )
        elif type(actual) is not type(expected):
            problems.append(
                f"{case}: {type(actual).__name__}: {actual}; the CPU raises "
                f"{type(expected).__name__}: {expected}"
            )
        elif _dispatch_dtype(actual) != _dispatch_dtype(expected):
            problems.append(f"{case}: message {str(actual)!r}; the CPU's {str(expected)!r}")
    if not checked:
        pytest.skip("the CPU supports every dtype of this entry")
    assert not problems, "\n".join(problems)


_x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
_t = torch.tensor([0, 1, 2])
_half = torch.ones(4, dtype=torch.float16)
MIXED_DTYPES = {
    # the CPU's kernels read the weights as the input's dtype: they refuse another
    "nll_loss": lambda d: F.nll_loss(_x.to(d), _t.to(d), _half.to(d)),
    "cross_entropy": lambda d: F.cross_entropy(_x.to(d), _t.to(d), _half.to(d)),
    "multi_margin_loss": lambda d: F.multi_margin_loss(_x.to(d), _t.to(d), weight=_half.to(d)),
    "nll_loss of nothing": lambda d: F.nll_loss(
        torch.empty(0, 0, device=d),
        torch.empty(0, dtype=torch.long, device=d),
        torch.empty(0, dtype=torch.float16, device=d),
    ),
    "embedding_bag": lambda d: F.embedding_bag(
        _t.view(1, 3).to(d),
        _x.to(d),
        mode="sum",
        per_sample_weights=torch.ones(1, 3, dtype=torch.float16, device=d),
    ),
    # the CPU's kernel keeps the input's dtype, PyTorch's reference promotes
    "binary_cross_entropy": lambda d: F.binary_cross_entropy(
        _x.sigmoid().to(d), _x.sigmoid().to(d), weight=torch.ones(3, 4, dtype=torch.float64).to(d)
    ),
}


def _outcome(fn, device):
    try:
        result = fn(device)
        return ("result", result.dtype, result.cpu())
    except Exception as e:  # the CPU's exception is the expectation
        return (type(e), str(e))


@pytest.mark.parametrize("case", MIXED_DTYPES)
def test_operands_of_mixed_dtypes_as_the_cpu(case):
    # Refusals of one operand's dtype against another's and results' dtypes, learnt from
    # the CPU's kernel by the same probe.
    cpu, tpu = _outcome(MIXED_DTYPES[case], "cpu"), _outcome(MIXED_DTYPES[case], "tpu")
    assert cpu[:2] == tpu[:2]
    if cpu[0] == "result":
        torch.testing.assert_close(tpu[2], cpu[2])
