"""Zero-size inputs on tpu, compared with the CPU.

``test_opinfo_zero_size`` sweeps PyTorch's OpInfo database: every entry whose ATen
operator runs natively on tpu (a lowering rule, or a tpu kernel such as nonzero's)
gets zero-size variants of its first float32 samples with a non-empty tensor input:
that tensor narrowed to length 0 along its first and its last dimension, alone and
together with the other tensor arguments of its shape. Where the CPU raises, tpu must
raise the same exception type; where the CPU returns, tpu must return the same
results (NaN equal to NaN). Known differences are listed with their reasons in
``KNOWN_DIFFERENCES`` (xfail, strict: a fix shows up as XPASS).

The whole sweep (about 300 entries, 1300 calls on each device, at most SAMPLES
samples an entry) took 42-48 s on a 2-core machine with no compilation cache
(``TORCH_TPU_CACHE_DIR=off``) and about 10 s with a warm one (70 s cold in
defer_and_fuse mode), so it runs in full by default.

``test_issue_examples`` checks the examples of issue 18 directly.
"""

import itertools

import pytest
import torch
from torch.utils._pytree import tree_flatten

import torch_tpu  # noqa: F401  (registers the tpu device)
from torch_tpu.tools import op_coverage, opinfo_runner

# Samples per entry, chosen among the first SCANNED ones.
SAMPLES, SCANNED = 3, 100

_RESTRIDED = (
    "the CPU kernel restrides self for the indices before checking them and fails on a "
    "zero-size dimension with an internal error (RuntimeError 'setStorage: ... out of "
    "bounds for storage of size 0'); tpu checks the indices and raises the IndexError "
    "the CPU raises for an index out of range of a non-empty dimension"
)
KNOWN_DIFFERENCES = {
    "index_fill": _RESTRIDED,
    "index_copy": _RESTRIDED,
    "index_reduce.prod": _RESTRIDED,
    "index_reduce.mean": _RESTRIDED,
    "index_reduce.amax": _RESTRIDED,
    "index_reduce.amin": _RESTRIDED,
    "native_batch_norm": opinfo_runner.known_failure("native_batch_norm", torch.float32),
    "_native_batch_norm_legit": opinfo_runner.known_failure(
        "_native_batch_norm_legit", torch.float32
    ),
}
# Entries whose zero-size variants the CPU cannot run.
UNSAFE_ON_CPU = {
    "_segment_reduce.offsets": (
        "the CPU does not check the offsets against the data's size and reads past the "
        "end of the empty data: its results are whatever memory holds, or a crash"
    ),
}


def _entries():
    how = op_coverage.operator_table(op_coverage.lowered_operators())
    for op in op_coverage.load_op_db():
        if how.get(op_coverage.aten_name(op)) not in ("native", "tpu kernel"):
            continue
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        if op.name.startswith(("empty", "new_empty")):
            continue  # uninitialized results
        name = opinfo_runner.entry_name(op)
        marks = []
        if name in UNSAFE_ON_CPU:
            marks.append(pytest.mark.skip(reason=UNSAFE_ON_CPU[name]))
        if name in KNOWN_DIFFERENCES:
            marks.append(pytest.mark.xfail(reason=KNOWN_DIFFERENCES[name], strict=True))
        yield pytest.param(op, id=name, marks=marks)


def _first_tensor(sample):
    leaves = [t for t in tree_flatten(sample.input)[0] if isinstance(t, torch.Tensor)]
    return leaves[0] if leaves else None


def _samples(op):
    """The first SAMPLES float32 samples whose first tensor has a dimension and elements."""

    def usable(sample):
        x = _first_tensor(sample)
        return x is not None and x.dim() > 0 and x.numel() > 0

    scanned = itertools.islice(op.sample_inputs("tpu", torch.float32), SCANNED)
    return list(itertools.islice(filter(usable, scanned), SAMPLES))


def _zero_size_variants(sample):
    """(description, sample) pairs: the first tensor narrowed to length 0 along its
    first and last dimension, alone and with the other tensors of its shape."""
    x = _first_tensor(sample)
    alike = [
        t
        for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
        if isinstance(t, torch.Tensor) and t.shape == x.shape
    ]

    def narrowed(d, tensors):
        return sample.transform(lambda t: t.narrow(d, 0, 0) if any(t is u for u in tensors) else t)

    for d in sorted({0, x.dim() - 1}):
        yield f"dim {d}", narrowed(d, [x])
        if len(alike) > 1:
            yield f"dim {d} of all", narrowed(d, alike)


def _run(fn):
    """(True, results) or (False, the exception); tpu results are waited for, so
    the errors of checks made on the device are raised here."""
    try:
        result = fn()
        torch.tpu.synchronize()
        return True, result
    except Exception as err:
        return False, err


def _difference(op, sample) -> str | None:
    cpu_sample = opinfo_runner._to(sample, "cpu")
    cpu_ok, expected = _run(lambda: opinfo_runner._call(op, cpu_sample))
    tpu_ok, actual = _run(lambda: opinfo_runner._call(op, sample))
    if not cpu_ok:
        if tpu_ok:
            return f"the CPU raises {type(expected).__name__}: {expected}; tpu returns"
        if type(actual) is not type(expected):
            return (
                f"the CPU raises {type(expected).__name__}: {expected}; "
                f"tpu raises {type(actual).__name__}: {actual}"
            )
        return None
    if not tpu_ok:
        return f"the CPU returns; tpu raises {type(actual).__name__}: {actual}"
    problem = opinfo_runner._compare(actual, expected, torch.float32)
    # (A fresh CPU copy: the op may have written its inputs.)
    if problem and opinfo_runner._is_random(op, opinfo_runner._to(sample, "cpu")):
        return None  # results that depend on the generator
    return problem


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("op", list(_entries()))
def test_opinfo_zero_size(op):
    problems, checked = [], 0
    with opinfo_runner._unseeded(op):
        for index, sample in enumerate(_samples(op)):
            for where, variant in _zero_size_variants(sample):
                checked += 1
                problem = _difference(op, variant)
                if problem:
                    problems.append(f"sample {index}, {where}: {problem[:300]}")
    if not checked:
        pytest.skip("no float32 sample with a non-empty tensor of rank >= 1")
    assert not problems, "\n".join(problems)


def _empty(device):
    return torch.ones(0, device=device)


# The examples of issue 18, item 5.
ISSUE_EXAMPLES = {
    "index_by_empty_index": lambda d: _empty(d)[torch.tensor([], dtype=torch.long, device=d)],
    "boolean_mask": lambda d: (lambda x: x[x > 0])(_empty(d)),
    "masked_select": lambda d: torch.masked_select(_empty(d), _empty(d) > 0),
    "median": lambda d: _empty(d).median(),
    "nanmedian": lambda d: _empty(d).nanmedian(),
    "mode": lambda d: _empty(d).mode(),
    "argmax": lambda d: _empty(d).argmax(),
    "amax_over_empty_dim": lambda d: torch.ones(0, 3, device=d).amax(0),
}


@pytest.mark.parametrize("case", sorted(ISSUE_EXAMPLES))
def test_issue_examples(case):
    cpu_ok, expected = _run(lambda: ISSUE_EXAMPLES[case]("cpu"))
    tpu_ok, actual = _run(lambda: ISSUE_EXAMPLES[case]("tpu"))
    assert tpu_ok == cpu_ok, (expected, actual)
    if cpu_ok:
        torch.testing.assert_close(
            [t.cpu() for t in tree_flatten(actual)[0]], tree_flatten(expected)[0], equal_nan=True
        )
    else:
        assert type(actual) is type(expected)
        assert str(actual).splitlines()[0] == str(expected).splitlines()[0]
