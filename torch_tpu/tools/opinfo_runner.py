"""Runs PyTorch's OpInfo samples on ``tpu`` and compares them with the CPU.

Shared by ``tests/test_ops.py`` and ``python -m torch_tpu.tools.op_coverage``. One call
checks one OpInfo entry at one dtype: its sample inputs (and a non-contiguous copy of the
first), the outputs, and for float32 the gradients of differentiable entries. A result
records which ATen ops fell back to the CPU on the way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math

import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_tpu

# Tolerances by dtype. float32 allows a few ulp more than torch.testing's default
# (1.3e-6): XLA's transcendental functions are a few ulp from the CPU's.
TOLERANCES = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.complex64: dict(rtol=1e-5, atol=1e-5),
}


# OpInfo entries known to fail, by "entry" or "entry:dtype" (dtype as in ``float32``),
# with the reason. tests/test_ops.py marks them xfail and docs/op_coverage.md lists them.
_COMPLEX_HALF = (
    "ComplexHalf (complex32) tensors are not supported on tpu: XLA has no complex32 type"
)
_BN_EVAL = (
    "eval mode: the CPU kernel returns empty save_mean/save_invstd, tpu returns the meta "
    "kernel's [C] (no caller reads them in eval)"
)
_BN_HALF = (
    "save_mean/save_invstd are float32 for float16/bfloat16 inputs (the meta kernel's "
    "dtype); the CPU kernel returns the input dtype"
)
KNOWN_FAILURES: dict[str, str] = {
    "complex:float16": _COMPLEX_HALF,
    "view_as_complex:float16": _COMPLEX_HALF,
    "native_batch_norm:float32": _BN_EVAL,
    "native_batch_norm:bfloat16": _BN_HALF,
    "native_batch_norm:float16": _BN_HALF,
    "_native_batch_norm_legit:float32": _BN_EVAL,
    "_native_batch_norm_legit:bfloat16": _BN_HALF,
    "_native_batch_norm_legit:float16": _BN_HALF,
}


def known_failure(entry: str, dtype: torch.dtype) -> str | None:
    return KNOWN_FAILURES.get(f"{entry}:{str(dtype)[6:]}") or KNOWN_FAILURES.get(entry)


@dataclasses.dataclass
class Result:
    status: str  # "pass", "fail", "fallback", "skip"
    detail: str = ""
    fallbacks: frozenset[str] = frozenset()
    samples: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")


def entry_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _move(t: torch.Tensor, device) -> torch.Tensor:
    """A copy of ``t`` on ``device`` with the same storage layout (sizes, strides,
    offset, and the storage elements around them), so ops that read storage
    (as_strided) see the same elements."""
    t = t.detach()
    if t.layout != torch.strided or t.dtype in (torch.complex32,):
        return t.to(device).clone()
    elements = t.untyped_storage().nbytes() // t.element_size()
    flat = t.new_empty(0).set_(t.untyped_storage(), 0, (elements,), (1,))
    return flat.to(device).clone().as_strided(t.shape, t.stride(), t.storage_offset())


def _to(sample, device):
    """The sample with every tensor copied to ``device`` (leaves keep requires_grad)."""

    def move(t):
        if isinstance(t, torch.Tensor):
            if t.device.type == torch.device(device).type:
                copy = t.detach().clone()
            else:
                copy = _move(t, device)
            return copy.requires_grad_(t.requires_grad)
        return t

    return sample.transform(move)


def _fallbacks() -> dict[str, int]:
    return dict(torch_tpu.metrics()["fallbacks"])


def _new_fallbacks(before: dict[str, int]) -> set[str]:
    after = _fallbacks()
    return {op for op, n in after.items() if n != before.get(op, 0)}


def opinfo_tolerance(op, dtype) -> dict[str, float] | None:
    """The tolerance an OpInfo entry declares for ``dtype`` for every test or for
    PyTorch's own device-vs-CPU comparison (TestCommon.test_compare_cpu)."""
    from torch.testing._internal.common_device_type import toleranceOverride

    for info in op.decorators:
        if getattr(info, "test_name", None) not in (None, "test_compare_cpu"):
            continue
        if getattr(info, "dtypes", None) and dtype not in info.dtypes:
            continue
        for decorator in getattr(info, "decorators", []):
            if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                tol = decorator.d[dtype]
                return dict(atol=tol.atol, rtol=tol.rtol)
    return None


def _compare(actual, expected, dtype, override=None) -> str | None:
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if a_spec != e_spec:
        return f"result structure {a_spec} != {e_spec}"
    tol = TOLERANCES.get(dtype, dict(rtol=0, atol=0))
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"expected a tensor, got {type(a).__name__}"
            if e.layout != torch.strided:
                continue
            try:
                a_cpu = a.detach().cpu()
            except Exception as err:
                return f"cannot read the result: {type(err).__name__}: {err}"
            e_cpu = e.detach().cpu()
            if a_cpu.dtype != e_cpu.dtype or a_cpu.shape != e_cpu.shape:
                return f"{a_cpu.dtype}{list(a_cpu.shape)} != {e_cpu.dtype}{list(e_cpu.shape)}"
            ftol = (
                TOLERANCES.get(e_cpu.dtype, dict(rtol=0, atol=0))
                if e_cpu.is_floating_point() or e_cpu.is_complex()
                else dict(rtol=0, atol=0)
            )
            if override and (e_cpu.is_floating_point() or e_cpu.is_complex()):
                ftol = {k: max(v, override[k]) for k, v in ftol.items()}
            try:
                torch.testing.assert_close(a_cpu, e_cpu, equal_nan=True, **ftol)
            except AssertionError as err:
                return str(err).split("\n\n")[0].replace("\n", " ")[:300]
        elif isinstance(e, float) and isinstance(a, float):
            if not (
                a == e
                or (math.isnan(a) and math.isnan(e))
                or abs(a - e) <= tol["atol"] + tol["rtol"] * abs(e)
            ):
                return f"{a} != {e}"
        elif a != e:
            return f"{a!r} != {e!r}"
    return None


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _float32_reference(op, cpu_sample, dtype):
    """The op computed in float32 on the CPU and rounded to ``dtype`` once.

    For float16/bfloat16 the tpu computes in float32 and rounds the result, where the
    CPU rounds intermediate results too (addbmm's partial sums): a result equal to the
    float32 computation is correct although it differs from the CPU's.
    """

    def up(t):
        return t.to(torch.float32) if isinstance(t, torch.Tensor) and t.dtype == dtype else t

    def down(t):
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t

    return tree_map(down, _call(op, cpu_sample.transform(up)))


def _is_random(op, sample) -> bool:
    """A sample whose results change with the seed (nothing to compare: the CPU and
    tpu generators draw different numbers). Checked on the CPU and on tpu, as entries
    that seed themselves (``wrapper_set_seed``) are deterministic on one device."""

    def fresh():  # in-place random ops overwrite their input
        return sample.transform(lambda t: t.clone() if isinstance(t, torch.Tensor) else t)

    try:
        torch.manual_seed(0)
        first = _call(op, fresh())
        torch.manual_seed(1)
        second = _call(op, fresh())
    except Exception:
        return False
    problem = _compare(second, first, torch.float64)
    return problem is not None and not problem.startswith("cannot read")


def _as_accurate_as_cpu(op, sample, actual, expected) -> bool:
    """Whether float32 gradients that differ from the CPU's are as close to the
    float64 gradients as the CPU's are (ill-conditioned backward formulas, e.g.
    logcumsumexp's difference of exponentials, leave both far from the truth)."""
    try:
        wide = _to(sample, "cpu").transform(
            lambda t: (
                t.double().detach().requires_grad_(t.requires_grad)
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32
                else t
            )
        )
        reference = _grads(op, wide)
    except Exception:
        return False
    for a, e, r in zip(actual, expected, reference):
        if a is None or e is None or r is None:
            if not (a is None and e is None):
                return False
            continue
        a, e, r = a.cpu().double(), e.double(), r.double()
        if not torch.isfinite(r).all():
            return False
        if (a - r).abs().max() > 2 * (e - r).abs().max() + 1e-5:
            return False
    return True


def _grads(op, sample):
    """Gradients of a fixed projection of the outputs w.r.t. the float inputs."""
    moved = sample
    out = _call(op, moved)
    leaves = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    inputs = [
        t
        for t in tree_flatten((moved.input, moved.args, moved.kwargs))[0]
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    if not leaves or not inputs:
        return None
    g = torch.Generator().manual_seed(0)
    # float64 cotangents (_as_accurate_as_cpu) are the float32 ones, widened.
    cotangents = [
        torch.randn(
            t.shape, generator=g, dtype=torch.float32 if t.dtype == torch.float64 else t.dtype
        )
        .to(t.dtype)
        .to(t.device)
        for t in leaves
    ]
    grads = torch.autograd.grad(leaves, inputs, cotangents, allow_unused=True)
    return [None if x is None else x.detach() for x in grads]


@contextlib.contextmanager
def _unseeded(op):
    """Random entries wrap their op in ``wrapper_set_seed`` (which reseeds every
    generator, the tpu's too): unwrapped, random samples show as random."""
    names = getattr(op.op, "__globals__", {})
    saved = names.get("wrapper_set_seed")
    if saved is None:
        yield
        return
    names["wrapper_set_seed"] = lambda fn, *args, **kwargs: fn(*args, **kwargs)
    try:
        yield
    finally:
        names["wrapper_set_seed"] = saved


def _samples(op, dtype, requires_grad, count):
    # Samples are made on tpu, as PyTorch's device tests make them on their device:
    # tensors an op needs on the CPU (tensor_split's indices) stay there.
    return list(
        itertools.islice(op.sample_inputs("tpu", dtype, requires_grad=requires_grad), count)
    )


def run_entry(op, dtype: torch.dtype, *, max_samples: int = 4, check_grad: bool = True) -> Result:
    """Checks OpInfo entry ``op`` at ``dtype`` on tpu against the CPU."""
    with _unseeded(op):
        return _run_entry(op, dtype, max_samples, check_grad)


def _raised(where: str, err: Exception, fallbacks: set[str], compared: int) -> Result:
    return Result(
        "fail", f"{where}: {type(err).__name__}: {str(err)[:300]}", frozenset(fallbacks), compared
    )


def _run_entry(op, dtype, max_samples, check_grad) -> Result:
    if op.name.startswith(("empty", "new_empty")):
        return Result("skip", "results are uninitialized memory")
    try:
        samples = _samples(op, dtype, False, max_samples)
        if samples:
            samples.append(samples[0].noncontiguous())
    except Exception as err:  # the OpInfo itself cannot build samples here
        return Result("skip", f"no samples: {type(err).__name__}: {err}")
    fallbacks: set[str] = set()
    tolerance = opinfo_tolerance(op, dtype)
    compared = random = 0
    for index, sample in enumerate(samples):
        cpu_sample = _to(sample, "cpu")
        pristine = _to(sample, "cpu")  # the op may write its inputs
        try:
            expected = _call(op, cpu_sample)
        except Exception:
            continue  # the CPU rejects this sample too
        if _is_random(op, pristine) or _is_random(op, sample):
            random += 1
            continue
        before = _fallbacks()
        try:
            actual = _call(op, sample)
        except Exception as err:
            return _raised(f"sample {index}", err, fallbacks | _new_fallbacks(before), compared)
        fallbacks |= _new_fallbacks(before)
        problem = _compare(actual, expected, dtype, tolerance)
        if problem and dtype in (torch.float16, torch.bfloat16):
            try:
                if (
                    _compare(actual, _float32_reference(op, pristine, dtype), dtype, tolerance)
                    is None
                ):
                    problem = None
            except Exception:
                pass
        if problem:
            return Result("fail", f"sample {index}: {problem}", frozenset(fallbacks), compared)
        compared += 1
    if check_grad and op.supports_autograd and dtype in (torch.float32, torch.float64):
        try:
            grad_samples = _samples(op, dtype, True, 2)
        except Exception:
            grad_samples = []
        for index, sample in enumerate(grad_samples):
            if _is_random(op, _to(sample, "cpu")) or _is_random(op, sample):
                continue
            try:
                expected = _grads(op, _to(sample, "cpu"))
            except Exception:
                continue
            if expected is None:
                continue
            before = _fallbacks()
            try:
                actual = _grads(op, sample)
            except Exception as err:
                return _raised(
                    f"grad sample {index}", err, fallbacks | _new_fallbacks(before), compared
                )
            fallbacks |= _new_fallbacks(before)
            problem = _compare(actual, expected, dtype, tolerance)
            if (
                problem
                and dtype == torch.float32
                and _as_accurate_as_cpu(op, sample, actual, expected)
            ):
                problem = None
            if problem:
                return Result(
                    "fail", f"grad sample {index}: {problem}", frozenset(fallbacks), compared
                )
    if compared == 0 and random:
        return Result("skip", "random op: results depend on the generator")
    if compared == 0:
        return Result("skip", "the CPU rejects every sample")
    if fallbacks:
        return Result(
            "fallback", "fell back: " + ", ".join(sorted(fallbacks)), frozenset(fallbacks), compared
        )
    return Result("pass", samples=compared)


def dtypes_to_check(op) -> list[torch.dtype]:
    """float32 always (when supported), plus one of each other kind the entry supports."""
    supported = op.supported_dtypes("cpu")
    chosen = []
    for group in (
        (torch.float32,),
        (torch.bfloat16,),
        (torch.float16,),
        (torch.int64, torch.int32),
        (torch.uint8, torch.int8, torch.int16),
        (torch.bool,),
        (torch.complex64,),
    ):
        for dtype in group:
            if dtype in supported:
                chosen.append(dtype)
                break
    return chosen
