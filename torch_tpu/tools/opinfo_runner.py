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
import torch.utils._pytree as pytree
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
    torch.complex128: dict(rtol=1e-7, atol=1e-7),
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
_HALF_STATS = (
    "the saved statistics (mean, invstd/rstd) are float32 for float16/bfloat16 inputs, "
    "as CUDA's kernels make them; the CPU kernel returns them in the input dtype and "
    "normalizes with the rounded statistics"
)
_LOWRANK_GRAD = (
    "the gradient checked (of a fixed projection of U, S, V) depends on the signs of the "
    "singular vectors, which the random projection decides; tpu draws it from its own "
    "generator (the forward results match up to those signs)"
)
KNOWN_FAILURES: dict[str, str] = {
    "complex:float16": _COMPLEX_HALF,
    "view_as_complex:float16": _COMPLEX_HALF,
    "chalf": _COMPLEX_HALF,
    "native_batch_norm:float32": _BN_EVAL,
    "native_batch_norm:bfloat16": _HALF_STATS,
    "native_batch_norm:float16": _HALF_STATS,
    "_native_batch_norm_legit:float32": _BN_EVAL,
    "_native_batch_norm_legit:bfloat16": _HALF_STATS,
    "_native_batch_norm_legit:float16": _HALF_STATS,
    "_batch_norm_with_update:bfloat16": _HALF_STATS,
    "_batch_norm_with_update:float16": _HALF_STATS,
    "native_layer_norm:bfloat16": _HALF_STATS,
    "native_layer_norm:float16": _HALF_STATS,
    "svd_lowrank:float32": _LOWRANK_GRAD,
    "pca_lowrank:float32": _LOWRANK_GRAD,
    "to_sparse": "sparse layouts are not supported on tpu (strided tensors only)",
    "_upsample_bilinear2d_aa:uint8": (
        "uint8 antialiased bilinear resizing runs PyTorch's fixed-point integer kernel on "
        "the CPU (a fallback): the float lowering rounds differently"
    ),
}


# Reference inputs (tests/test_ops_reference.py) that fail beyond KNOWN_FAILURES,
# "entry:dtype" -> why.
KNOWN_REFERENCE_FAILURES: dict[str, str] = {}

# Known failures whose outcome a random draw decides: they may pass.
UNDECIDED = {"svd_lowrank:float32", "pca_lowrank:float32"}

# Tolerances wider than the OpInfo's, with the error measured.
TOLERANCES_WIDENED: dict[str, dict[str, float]] = {
    # The gradient through eigh amplifies a last-bit difference of the elementwise work
    # (fused multiply-adds, or not, at XLA's optimisation level): 1.5e-5 relative
    # measured on one of 25 entries.
    "linalg.pinv.hermitian:float32": dict(atol=1e-5, rtol=5e-5),
    # The CPU rounds each product of a float16 cross product to float16 before the
    # difference (two roundings); tpu computes it in float32 and rounds once, as CUDA
    # does, nearer the exact value: under cancellation two float16 ulps apart
    # (-15.766 on the CPU, -15.781 on tpu, -15.778 exact, on this machine's CPU kernel).
    "cross:float16": dict(atol=2e-2, rtol=1e-3),
    "linalg.cross:float16": dict(atol=2e-2, rtol=1e-3),
}


def known_failure(entry: str, dtype: torch.dtype) -> str | None:
    return KNOWN_FAILURES.get(f"{entry}:{str(dtype)[6:]}") or KNOWN_FAILURES.get(entry)


def undecided(entry: str, dtype: torch.dtype) -> bool:
    return f"{entry}:{str(dtype)[6:]}" in UNDECIDED


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
    # Lazily conjugated or negated views keep their bit over the raw storage.
    if t.is_conj():
        return _move(t.conj(), device).conj()
    if t.is_neg():
        return torch._neg_view(_move(torch._neg_view(t), device))
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


def _wider_reference(op, cpu_sample, dtype, wide=torch.float32):
    """The op computed in ``wide`` (float32, or float64) on the CPU and rounded to
    ``dtype`` once.

    For float16/bfloat16 the tpu computes in float32 and rounds the result, where the
    CPU rounds intermediate results too (addbmm's partial sums): a result equal to the
    float32 computation is correct although it differs from the CPU's. Where the CPU's
    float32 kernel is itself inexact, float64's is the reference: its vectorized fmod
    and remainder divide first, and a quotient beyond float32's range (6.15625 by
    2^-126) makes NaN where the exact result is 0.
    """

    def down(t):
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == wide else t

    return tree_map(down, _call(op, _widened(cpu_sample, {dtype: wide})))


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


def _widened(sample, wider=None):
    """The sample on the CPU with its tensors of the dtypes ``wider`` maps (float32 by
    default) made the dtype it maps them to (float64)."""
    wider = wider or {torch.float32: torch.float64}
    return _to(sample, "cpu").transform(
        lambda t: (
            t.to(wider[t.dtype]).detach().requires_grad_(t.requires_grad)
            if isinstance(t, torch.Tensor) and t.dtype in wider
            else t
        )
    )


def _as_accurate_as_cpu(compute, sample, actual, expected) -> bool:
    """Whether float32 results that differ from the CPU's are as close to the float64
    results (``compute`` on the widened sample) as the CPU's are: ill-conditioned
    formulas (matrix_exp's squarings, logcumsumexp's backward difference of
    exponentials) leave both far from the truth."""
    try:
        reference = compute(_widened(sample))
    except Exception:
        return False
    a_leaves, e_leaves = tree_flatten(actual)[0], tree_flatten(expected)[0]
    r_leaves = tree_flatten(reference)[0]
    if not (len(a_leaves) == len(e_leaves) == len(r_leaves)):
        return False
    for a, e, r in zip(a_leaves, e_leaves, r_leaves):
        if not all(isinstance(x, torch.Tensor) for x in (a, e, r)):
            if not (a is None and e is None) and a != e:
                return False
            continue
        if not (e.is_floating_point() and r.is_floating_point()):
            if not torch.equal(a.cpu(), e):
                return False
            continue
        if a.dtype != e.dtype:
            return False
        a, e, r = a.detach().cpu().double(), e.detach().double(), r.detach().double()
        if a.shape != e.shape or not torch.isfinite(r).all():
            return False
        if a.numel() and (a - r).abs().max() > 2 * (e - r).abs().max() + 1e-5:
            return False
    return True


def _low_precision_as_accurate_as_cpu(op, sample, actual, expected, dtype) -> bool:
    """Whether float16/bfloat16 results that differ from the CPU's are, element by
    element, the CPU's or at most twice as far from the result computed in float64 as
    the CPU's (plus the dtype's tolerance). Near a pole (lgamma's, in mvlgamma of
    inputs outside its domain) each rounding of an intermediate moves the result by
    whole units: the CPU's kernel and a fused tpu program round them at other points,
    and both land far from float64's, tpu no farther."""
    try:
        reference = _call(op, _widened(sample, {dtype: torch.float64}))
    except Exception:
        return False
    tol = TOLERANCES[dtype]
    leaves = [tree_flatten(x)[0] for x in (actual, expected, reference)]
    if not len(leaves[0]) == len(leaves[1]) == len(leaves[2]):
        return False
    for a, e, r in zip(*leaves):
        if not isinstance(e, torch.Tensor) or not e.is_floating_point():
            if _compare(a, e, dtype) is not None:
                return False
            continue
        if not isinstance(r, torch.Tensor) or a.shape != e.shape or r.shape != e.shape:
            return False
        if a.dtype != e.dtype:  # the rule judges values, never a result of another dtype
            return False
        a, e, r = a.detach().cpu().double(), e.detach().double(), r.detach().double()
        same = (a == e) | (a.isnan() & e.isnan())
        closer = (a - r).abs() <= 2 * (e - r).abs() + tol["atol"] + tol["rtol"] * r.abs()
        if not (same | (closer & r.isfinite())).all():
            return False
    return True


# Complex results whose parts rounding decides. A part of a product is a difference
# of products: (-501-1e20j) * (-501+1e20j) has Im 0 exactly, the CPU gives 0 on its
# vectorized path and 3.2e14 on its scalar one, tpu's fused multiply-add -3.2e14 (Re is
# inf: the error is 1e-26 of |z|); a power with the phase Im(y log x) far beyond 2 pi,
# (-501-501j) ** (-501+4988429j) (3e7 radians in float32, several ulps wide), has
# overflowed parts whose signs the phase's rounding picks. So a part of a complex result
# that differs from the CPU's is accepted where the CPU's own result moves past the
# tolerance when the inputs move by an ulp (it is determined only up to the range the
# CPU's results for such inputs span, and tpu's lies in it: infinities by sign, NaN where
# one of them is NaN), or where it is as close as the CPU's to the result computed in
# complex128 and rounded: (1e20+1e20j) ** (1001.2-13437.7j) is -inf+infj (phase
# -622699.77), tpu's, where the CPU's complex64 kernel gives inf+infj; (-1e20-1e20j)**2
# is 0+infj, tpu's fused multiply-add gives -inf+infj and the CPU nan+infj.
PERTURBED_INPUTS = 32


def _perturbed(sample, seed):
    """The sample with each float or complex tensor's parts moved by up to an ulp."""
    generator = torch.Generator().manual_seed(seed)

    def move(t):
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            return t
        parts = torch.view_as_real(t.detach().resolve_conj()) if t.is_complex() else t.detach()
        eps = torch.finfo(parts.dtype).eps
        u = torch.rand(parts.shape, generator=generator, dtype=torch.float64) * 2 - 1
        moved = (parts.double() * (1 + eps * u)).to(parts.dtype)
        return torch.view_as_complex(moved.contiguous()) if t.is_complex() else moved

    return sample.transform(move)


def _distance(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """|x - r| part by part, 0 where equal (infinities too) or both NaN, else inf for NaN."""
    d = (x.double() - r.double()).abs()
    d = torch.where((x == r) | (x.isnan() & r.isnan()), 0, d)
    return d.nan_to_num(nan=math.inf)


def _complex_as_accurate_as_cpu(op, sample, actual, expected, override) -> bool:
    """Whether complex results that differ from the CPU's are, part by part, within
    the CPU's spread or as close to complex128's as the CPU's (see PERTURBED_INPUTS)."""
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if a_spec != e_spec:
        return False
    try:
        spreads = [
            tree_flatten(_call(op, _perturbed(sample, seed)))[0] for seed in range(PERTURBED_INPUTS)
        ]
        widened = _widened(
            sample, {torch.complex64: torch.complex128, torch.float32: torch.float64}
        )
        wide = tree_flatten(_call(op, widened))[0]
    except Exception:
        return False
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if not isinstance(e, torch.Tensor) or not e.is_complex():
            if _compare(a, e, e.dtype if isinstance(e, torch.Tensor) else None) is not None:
                return False
            continue
        a = a.detach().cpu().resolve_conj()
        e = e.detach().resolve_conj()
        others = [r[i].detach().resolve_conj() for r in spreads]
        r = wide[i]
        if any(x.shape != e.shape for x in [a, r, *others]) or not r.is_complex():
            return False
        if any(x.dtype != e.dtype for x in [a, *others]):
            return False
        tol = dict(TOLERANCES[e.dtype])
        if override:
            tol = {k: max(v, override[k]) for k, v in tol.items()}
        close = torch.isclose(a, e, equal_nan=True, **tol)
        values = torch.stack([torch.view_as_real(x) for x in [e, *others]])
        nan = values.isnan()
        low = values.masked_fill(nan, math.inf).amin(0)
        high = values.masked_fill(nan, -math.inf).amax(0)
        parts, e_parts = torch.view_as_real(a), torch.view_as_real(e)
        r_parts = torch.view_as_real(r.detach().resolve_conj().to(e.dtype))
        slack = torch.where(e_parts.isfinite(), tol["atol"] + tol["rtol"] * e_parts.abs(), 0)
        inside = (parts >= low - slack) & (parts <= high + slack)
        inside |= parts.isnan() & nan.any(0)
        as_close = _distance(parts, r_parts) <= 2 * _distance(e_parts, r_parts) + slack
        if not (close | (inside | as_close).all(-1)).all():
            return False
    return True


# Entries whose index results are defined only up to the order of equal values
# (the CPU's unstable sort and selection order ties as its C++ library does; CUDA's
# differ too): where `dim` they sort or select along.
def _sort_dim(sample) -> int:
    dim = sample.kwargs.get("dim", sample.args[0] if sample.args else -1)
    return dim if isinstance(dim, int) else -1


def _topk_dim(sample) -> int:
    return sample.kwargs.get("dim", sample.args[1] if len(sample.args) > 1 else -1)


TIES_UNORDERED = {"sort": _sort_dim, "argsort": _sort_dim, "topk": _topk_dim}


def _equal_nan(a: torch.Tensor, e: torch.Tensor) -> bool:
    if a.shape != e.shape or a.dtype != e.dtype:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, e)
    return torch.equal(a.isnan(), e.isnan()) and torch.equal(a.nan_to_num(0), e.nan_to_num(0))


def _same_up_to_ties(entry: str, sample, actual, expected) -> bool:
    """Whether the results agree once tied values may swap their indices: equal
    values, and index results that pick distinct positions holding the values the
    CPU's indices pick."""
    x = sample.input.detach()
    if x.dim() == 0:
        return False
    dim = TIES_UNORDERED[entry](sample)
    # The indices are the last result (sort and topk return values first).
    *values_a, a = [t.detach().cpu() for t in tree_flatten(actual)[0]]
    *values_e, e = tree_flatten(expected)[0]
    if not all(_equal_nan(va, ve) for va, ve in zip(values_a, values_e)):
        return False
    if a.dtype != torch.int64 or a.shape != e.shape:
        return False
    if not _equal_nan(torch.take_along_dim(x, a, dim), torch.take_along_dim(x, e, dim)):
        return False
    ordered = a.sort(dim).values
    return ordered.size(dim) < 2 or not (ordered.diff(dim=dim) == 0).any()


# Entries whose results are defined up to a phase (a sign, for real ones) per
# eigenvector or singular vector, by the position of the vectors among the results
# (the columns of the first listed share the phase of those of the others; the
# randomized low-rank SVDs take it from their random projection, drawn by another
# generator on tpu). Each column is compared after a rotation that makes the entry
# where the CPU's first vector is largest real and positive.
PHASE_FREE_VECTORS = {
    "linalg.eigh": (1,),
    "linalg.eig": (1,),
    "svd_lowrank": (0, 2),
    "pca_lowrank": (0, 2),
}


def _phase(vectors: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    pivot = vectors.gather(-2, rows)
    return pivot / pivot.abs().clamp_min(torch.finfo(pivot.abs().dtype).tiny)


def _phases_fixed(entry: str, actual, expected):
    """Both results with each vector's phase fixed (see PHASE_FREE_VECTORS)."""
    first, *_ = positions = PHASE_FREE_VECTORS[entry]
    actual = [t.detach().cpu() for t in actual]
    expected = [t.detach() for t in expected]
    if not expected[first].numel() or actual[first].shape != expected[first].shape:
        return tuple(actual), tuple(expected)
    rows = expected[first].abs().argmax(-2, keepdim=True)
    for results in (actual, expected):
        phase = _phase(results[first], rows).conj()
        for i in positions:
            results[i] = results[i] * phase
    return tuple(actual), tuple(expected)


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


def _reference_samples(op, dtype, count):
    """The entry's reference inputs beyond its sample inputs (``reference_inputs`` yields
    those first): larger, extremal and broadcasting cases."""
    if op.reference_inputs_func is None:
        return []
    known = sum(1 for _ in op.sample_inputs("cpu", dtype))
    samples = itertools.islice(op.reference_inputs("tpu", dtype), known, known + count)
    # Type promotion cases with ComplexHalf tensors: a dtype tpu does not have (KNOWN_FAILURES).
    return [s for s in samples if not _holds_complex_half([s.input, s.args, s.kwargs])]


def _holds_complex_half(tree) -> bool:
    leaves = pytree.tree_leaves(tree)
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.complex32 for t in leaves)


def run_entry(
    op,
    dtype: torch.dtype,
    *,
    max_samples: int = 4,
    check_grad: bool = True,
    reference: bool = False,
) -> Result:
    """Checks OpInfo entry ``op`` at ``dtype`` on tpu against the CPU: its sample inputs
    (and their gradients), or with ``reference`` its reference inputs."""
    with _unseeded(op):
        return _run_entry(op, dtype, max_samples, check_grad and not reference, reference)


def _raised(where: str, err: Exception, fallbacks: set[str], compared: int) -> Result:
    return Result(
        "fail", f"{where}: {type(err).__name__}: {str(err)[:300]}", frozenset(fallbacks), compared
    )


def _run_entry(op, dtype, max_samples, check_grad, reference) -> Result:
    if op.name.startswith(("empty", "new_empty")):
        return Result("skip", "results are uninitialized memory")
    try:
        if reference:
            samples = _reference_samples(op, dtype, max_samples)
        else:
            samples = _samples(op, dtype, False, max_samples)
        if samples and not reference:
            samples.append(samples[0].noncontiguous())
    except Exception as err:  # the OpInfo itself cannot build samples here
        return Result("skip", f"no samples: {type(err).__name__}: {err}")
    fallbacks: set[str] = set()
    tolerance = opinfo_tolerance(op, dtype)
    widened = TOLERANCES_WIDENED.get(f"{entry_name(op)}:{str(dtype)[6:]}")
    if widened:
        tolerance = {k: max(v, (tolerance or {}).get(k, 0.0)) for k, v in widened.items()}
    compared = random = 0
    for index, sample in enumerate(samples):
        cpu_sample = _to(sample, "cpu")
        pristine = _to(sample, "cpu")  # the op may write its inputs
        try:
            expected = _call(op, cpu_sample)
        except Exception:
            continue  # the CPU rejects this sample too
        if reference and _holds_complex_half(expected):
            continue  # promoted to ComplexHalf, which tpu does not have (KNOWN_FAILURES)
        if _is_random(op, pristine) or _is_random(op, sample):
            random += 1
            continue
        before = _fallbacks()
        try:
            actual = _call(op, sample)
        except Exception as err:
            return _raised(f"sample {index}", err, fallbacks | _new_fallbacks(before), compared)
        fallbacks |= _new_fallbacks(before)
        name = entry_name(op)
        if name in PHASE_FREE_VECTORS:
            actual, expected = _phases_fixed(name, actual, expected)
        problem = _compare(actual, expected, dtype, tolerance)
        if (
            problem
            and name in TIES_UNORDERED
            and _same_up_to_ties(name, pristine, actual, expected)
        ):
            problem = None
        if problem and dtype == torch.float32:
            if _as_accurate_as_cpu(lambda s: _call(op, s), pristine, actual, expected):
                problem = None
        if problem and dtype in (torch.float16, torch.bfloat16):
            for wide in (torch.float32, torch.float64):
                try:
                    wider = _wider_reference(op, _to(pristine, "cpu"), dtype, wide)
                    if _compare(actual, wider, dtype, tolerance) is None:
                        problem = None
                        break
                except Exception:
                    pass
            if problem and _low_precision_as_accurate_as_cpu(op, pristine, actual, expected, dtype):
                problem = None
        if (
            problem
            and dtype.is_complex
            and _complex_as_accurate_as_cpu(op, pristine, actual, expected, tolerance)
        ):
            problem = None
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
                and _as_accurate_as_cpu(lambda s: _grads(op, s), sample, actual, expected)
            ):
                problem = None
            if problem:
                return Result(
                    "fail", f"grad sample {index}: {problem}", frozenset(fallbacks), compared
                )
    if compared == 0 and random:
        return Result("skip", "random op: results depend on the generator")
    if not samples:
        return Result("skip", "no reference inputs beyond the sample inputs")
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
