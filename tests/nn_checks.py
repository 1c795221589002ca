"""Forward-and-backward comparisons against the CPU for the nn op tests (pooling, losses,
normalisation, embeddings)."""

from __future__ import annotations

import torch
from op_utils import assert_close_tree, fallbacks, to_tpu
from torch.utils._pytree import tree_flatten, tree_map

import torch_tpu

TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float16: {"atol": 1e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}


def _base(op: str) -> str:
    return op.removeprefix("aten::").split(".")[0]


class no_lowered_fallback:
    """Fails if an op that has a tpu lowering (ours or anyone's) fell back to the CPU.

    Ops nobody has lowered yet (helpers used by composites and autograd) may still fall back.
    """

    def __enter__(self):
        self.before = fallbacks()
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        lowered = {_base(n) for n in torch_tpu._C._lowered_ops()}
        after = fallbacks()
        new = {op for op, n in after.items() if n != self.before.get(op, 0)}
        bad = sorted(op for op in new if _base(op) in lowered)
        assert not bad, f"ops with a lowering fell back to the CPU: {bad}"
        return False


def _tol(args, kwargs):
    dtypes = [t.dtype for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        if dtype in dtypes:
            return {**TOL[dtype], **kwargs}
    return kwargs


def run(fn, *args, grad=(), **tol):
    """Runs ``fn`` on CPU inputs and on their tpu copies and compares the results, the inputs
    (mutations) and, for the argument positions in ``grad``, the gradients of every floating
    output under the same random cotangents. Returns the tpu results."""
    tol = _tol(args, tol)
    cpu_args = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, args)
    tpu_args = list(to_tpu(args))
    cpu_args = list(cpu_args)
    for i in grad:
        cpu_args[i] = cpu_args[i].detach().requires_grad_()
        tpu_args[i] = tpu_args[i].detach().requires_grad_()
    with no_lowered_fallback():
        actual = fn(*tpu_args)
        expected = fn(*cpu_args)
        assert_close_tree(tree_map(_detach, actual), tree_map(_detach, expected), **tol)
        assert_close_tree(tree_map(_detach, tpu_args), tree_map(_detach, cpu_args), **tol)
        if grad:
            outs_c, outs_t = _differentiable(expected), _differentiable(actual)
            gen = torch.Generator().manual_seed(1)
            cot = [
                torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype) for o in outs_c
            ]
            inputs_c = [cpu_args[i] for i in grad]
            inputs_t = [tpu_args[i] for i in grad]
            g_c = torch.autograd.grad(outs_c, inputs_c, cot, allow_unused=True)
            g_t = torch.autograd.grad(
                outs_t, inputs_t, [c.to("tpu") for c in cot], allow_unused=True
            )
            assert_close_tree(list(g_t), list(g_c), **tol)
    return actual


def _detach(x):
    return x.detach() if isinstance(x, torch.Tensor) else x


def _differentiable(result):
    return [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def randn(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
