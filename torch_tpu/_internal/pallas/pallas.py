"""TorchTPU's ``JaxCallable``: a jitted JAX function called on tpu tensors, here a
``torch_tpu.kernels`` op, so that it runs inside our programs (strict, defer_and_fuse,
``torch.compile``) with no host round trip. Pallas kernels in it compile for the TPU
that runs the device; on the CPU platform, whose compiler has no Mosaic, they run in
Pallas's HLO interpreter (XLA's GPU plugin runs none yet)."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import re
from collections.abc import Callable

import jax
import torch
from jax._src.interpreters import mlir
from jax._src.pallas import mpmd, pallas_call
from jax._src.pallas.pallas_call import pallas_call_p

from torch_tpu import kernels, platform

_ops = itertools.count()


def get_default_pallas_mesh():
    raise NotImplementedError(
        "Pallas kernels over a device mesh (remote copies, collectives) do not run on tpu yet"
    )


def jax_placeholder(t: torch.Tensor) -> jax.ShapeDtypeStruct:
    """The JAX array type standing for tensor `t` (an output's shape and dtype)."""
    return jax.ShapeDtypeStruct(tuple(t.shape), kernels._jax_dtype("jax_placeholder", t.dtype))


# Set while a JaxCallable's function is traced and lowered on the CPU platform.
_interpreting = contextvars.ContextVar("torch_tpu_interpreting_tpu_kernels", default=False)


@contextlib.contextmanager
def _interpreting_tpu_kernels():
    token = _interpreting.set(platform() == "cpu")
    try:
        yield
    finally:
        _interpreting.reset(token)


def _interpreted(rule):
    def lower(ctx, *in_nodes, interpret, **params):
        if _interpreting.get():
            interpret = interpret or True
        return rule(ctx, *in_nodes, interpret=interpret, **params)

    return lower


# Helion builds TPU Pallas kernels (interpret=False). On XLA's CPU backend JAX raises
# "Only interpret mode is supported on CPU backend"; while a JaxCallable is lowered for
# the CPU platform they run in Pallas's HLO interpreter instead, plain StableHLO in our
# program (TPU interpret mode would simulate memory through host callbacks, which our
# programs cannot call). Other lowerings are JAX's own: the rules below are those JAX
# registers (pl.kernel's mpmd_map on the CPU calls pallas_call's rule) with interpret
# set only in that case.
mlir.register_lowering(
    pallas_call_p, _interpreted(pallas_call._pallas_call_lowering), platform="cpu"
)
mlir.register_lowering(
    mpmd.mpmd_map_p, _interpreted(mpmd._mpmd_map_fallback_lowering), platform="cpu"
)


class JaxCallable:
    """``jit_fn`` (taking and returning arrays) called on tensors: returns its results as
    tpu tensors (one, or a tuple), and writes the results ``input_output_aliases``
    ({input: output}) names into those inputs, as a donated buffer would be."""

    def __init__(
        self,
        name: str,
        jit_fn: Callable,
        trace_key: str | None = None,
        mesh=None,
        input_partition_specs=None,
        input_output_aliases: dict[int, int] | None = None,
        static_argnums: tuple[int, ...] = (),
        donate_argnums: tuple[int, ...] = (),
    ):
        if mesh is not None:
            raise NotImplementedError(
                f"{name}: kernels over a device mesh (remote copies, collectives) do not "
                "run on tpu yet"
            )
        if static_argnums:
            raise NotImplementedError(f"{name}: static arguments of a JaxCallable")
        self.name, self.jit_fn, self.trace_key = name, jit_fn, trace_key or name
        self.mesh, self.input_partition_specs = mesh, input_partition_specs
        self.input_output_aliases = dict(input_output_aliases or {})
        self.static_argnums, self.donate_argnums = static_argnums, donate_argnums
        # What TorchTPU records for its direct kernel call; none here (see tpu_torch_pallas).
        self.output_shapes: dict = {}
        self.kernel_key_to_mlir_fingerprint: dict = {}
        self._op = None

    def _define(self, num_inputs: int):
        names = [f"x{i}" for i in range(num_inputs)]

        def call(**arrays):
            return self.jit_fn(*(arrays[n] for n in names))

        call.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
        )
        stem = re.sub(r"\W", "_", self.name)
        op = kernels.jax_op(f"jax_callable::{stem}_{next(_ops)}", call, vjp=False)
        op._lowering.context = _interpreting_tpu_kernels
        return op

    def __call__(self, *tensors: torch.Tensor):
        if self._op is None:
            self._op = self._define(len(tensors))
        out = self._op(*tensors)
        results = out if isinstance(out, tuple) else (out,)
        for i, k in self.input_output_aliases.items():
            tensors[i].copy_(results[k])
        return out
