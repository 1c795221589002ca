"""Comparing ops on tpu against the same ops on the CPU."""

from __future__ import annotations

import math

import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_tpu


def to_tpu(x):
    return tree_map(lambda t: t.to("tpu") if isinstance(t, torch.Tensor) else t, x)


def to_cpu(x):
    return tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, x)


def fallbacks() -> dict[str, int]:
    return dict(torch_tpu.metrics()["fallbacks"])


def assert_close_tree(
    actual, expected, *, atol=None, rtol=None, check_dtype=True, check_stride=False
):
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    assert a_spec == e_spec, f"result structure differs: {a_spec} vs {e_spec}"
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"expected a tensor, got {type(a)}"
            assert a.device.type == "tpu", f"result on {a.device}, expected tpu"
            if check_stride:
                assert a.stride() == e.stride(), f"strides {a.stride()} vs {e.stride()}"
            torch.testing.assert_close(
                a.cpu(), e, atol=atol, rtol=rtol, equal_nan=True, check_dtype=check_dtype
            )
        else:
            both_nan = (
                isinstance(a, float) and isinstance(e, float) and math.isnan(a) and math.isnan(e)
            )
            assert a == e or both_nan, f"{a!r} != {e!r}"


def check(
    fn,
    *args,
    atol=None,
    rtol=None,
    allow_fallback=False,
    check_dtype=True,
    check_stride=False,
    **kwargs,
):
    """Runs ``fn`` on CPU inputs and on their tpu copies and compares the results.

    Inputs mutated by ``fn`` are compared too. Fails if an op fell back to the CPU
    unless ``allow_fallback``.
    """
    cpu_args = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, args)
    tpu_args = to_tpu(args)
    before = fallbacks()
    tpu_result = fn(*tpu_args, **kwargs)
    after = fallbacks()
    cpu_result = fn(*cpu_args, **kwargs)
    if not allow_fallback:
        new = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
        assert not new, f"ops fell back to the CPU: {new}"
    assert_close_tree(
        tpu_result,
        cpu_result,
        atol=atol,
        rtol=rtol,
        check_dtype=check_dtype,
        check_stride=check_stride,
    )
    assert_close_tree(tpu_args, cpu_args, atol=atol, rtol=rtol, check_dtype=check_dtype)
    return tpu_result
