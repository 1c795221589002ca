"""torch.compile's ``"tpu"`` backend.

AOTAutograd traces forward and backward (decomposing only what the lowering table
lacks) into functional ATen graphs, each a CompiledGraph (``_compiled_graph``): its
first call with given input layouts is recorded, later calls append the recorded ops to
the device's pending work, so the graphs of a training step run as one program.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import sys
from typing import Any

import torch

from torch_tpu import _C

from torch_tpu._compiled_graph import CompiledGraph, _warn_once

_EAGER_BACKWARD = "force_non_lazy_backward_lowering"  # an AOTAutograd option
_IGNORED_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> CompiledGraph:
    return CompiledGraph(gm)


def _compile_bounded_graph(gm: torch.fx.GraphModule, example_inputs: list) -> CompiledGraph:
    return CompiledGraph(gm, bounded=True)


def _compile_own_program(gm: torch.fx.GraphModule, example_inputs: list) -> CompiledGraph:
    return CompiledGraph(gm, alone=True)


@functools.cache
def _cacheable_compiler():
    """The compiler of AOTAutograd graphs in the form AOTAutograd's own cache stores
    (bundled entries on disk, under PyTorch's compile cache directory): a later process
    that traces the same Dynamo graph skips AOTAutograd's tracing and partitioning,
    about half of a training step's warm first call."""
    config = torch._functorch.config
    try:
        from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

        from torch_tpu._graph_code import GraphCode
    except ImportError:
        return None  # a PyTorch without it: graphs are traced in every process
    if not all(hasattr(config, k) for k in ("bundled_autograd_cache", _EAGER_BACKWARD)):
        return None
    return SerializableAOTDispatchCompiler(GraphCode, lambda gm, example_inputs: GraphCode(gm))


@functools.cache
def _identity() -> str:
    """Names this build of torch_tpu: the graphs AOTAutograd traced depend on the
    lowering table (which ops are decomposed)."""
    import hashlib
    import os

    stat = os.stat(_C.__file__)
    build = f"{_C.__file__}:{stat.st_size}:{stat.st_mtime_ns}"
    return "torch_tpu-" + hashlib.sha256(build.encode()).hexdigest()[:16]


@functools.cache
def _decompositions() -> dict:
    """Core ATen decompositions of the ops the lowering table does not have."""
    from torch._decomp import core_aten_decompositions

    lowered = set(_C._lowered_ops())

    def has_rule(op) -> bool:
        name = op.name()
        return name in lowered or f"{name}.default" in lowered

    return {op: fn for op, fn in core_aten_decompositions().items() if not has_rule(op)}


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any):
    """The ``"tpu"`` Dynamo backend: ``torch.compile(model, backend="tpu")``."""
    from torch._dynamo import config as dynamo_config
    from torch._dynamo.backends.common import aot_autograd

    mode = kwargs.pop("mode", None)
    options = kwargs.pop("options", None) or {}
    if kwargs:
        raise TypeError(f"torch.compile(backend='tpu') got unexpected arguments {sorted(kwargs)}")
    if mode in _IGNORED_MODES:
        _warn_once(f"torch.compile(backend='tpu') ignores mode={mode!r}: it has no meaning here")
    elif mode not in (None, "default"):
        raise ValueError(f"torch.compile(backend='tpu'): unknown mode {mode!r}")
    unknown = sorted(set(options) - {"bounded_dynamism", "own_program"})
    if unknown:
        raise ValueError(f"torch.compile(backend='tpu'): unknown options {unknown}")
    if not dynamo_config.assume_static_by_default:
        raise NotImplementedError(
            "torch.compile(backend='tpu') does not support dynamic=True: leave dynamic unset "
            "or False (each new shape compiles its own program)"
        )
    _register_device_interface()
    cacheable = _cacheable_compiler()
    if options.get("own_program"):
        # Each graph a program of its own, not fused with the work around it (the
        # cache's key does not hold the option either).
        compilers = (_compile_own_program,) * 3
        caching = contextlib.nullcontext()
    elif options.get("bounded_dynamism"):
        # Bounded dynamism for inference graphs, not cached (the cache's key does not
        # hold the option); a training graph's forward and backward compile per size.
        compilers = (_compile_graph, _compile_graph, _compile_bounded_graph)
        caching = contextlib.nullcontext()
    elif cacheable is None:
        compilers = (_compile_graph,) * 3
        caching = contextlib.nullcontext()
    else:
        compilers = (cacheable,) * 3
        # AOTAutograd's cache key holds PyTorch's identity and configuration, not ours:
        # this graph attribute (meant for Dynamo's precompile) carries it into the key.
        gm._backend_id = _identity()
        # Bundled entries hold the compiled graphs themselves (the default form names
        # Inductor's own cache entries); the backward is compiled with the forward so
        # that the entry is complete when AOTAutograd saves it.
        caching = torch._functorch.config.patch(
            {"bundled_autograd_cache": True, _EAGER_BACKWARD: True}
        )
    with caching:
        return aot_autograd(
            fw_compiler=compilers[0],
            bw_compiler=compilers[1],
            inference_compiler=compilers[2],
            decompositions=_decompositions(),
            keep_inference_input_mutations=True,
        )(gm, example_inputs)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs `patch` on module `name` once it has loaded (now, if it has)."""

    def __init__(self, name: str, patch):
        self.name, self.patch = name, patch
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            sys.meta_path.insert(0, self)

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                self.patch(module)

            spec.loader.exec_module = exec_and_patch
        return spec


def _capturable_on_tpu(optimizer_module) -> None:
    """Dynamo makes an optimizer capturable when it first traces the step of one whose
    parameters are all on CUDA and whose state is empty: its `step` counters are then
    made on the device. Tpu parameters get the same: with the counters on the host, the
    optimizer's graph took CPU tensors and ran op by op (67 programs a step of
    benchmarks/eager_modes.py's transformer instead of 1)."""
    cls = getattr(optimizer_module, "OptimizerVariable", None)
    set_capturable = getattr(cls, "_set_capturable", None)
    if set_capturable is None:  # another Dynamo: its optimizers as it makes them
        return

    def _set_capturable(self, tx) -> None:
        state = self.value.state
        for group in self.value.param_groups:
            params = group.get("params", [])
            if "capturable" in group and all(_is_tpu_tensor(p) and p not in state for p in params):
                group["capturable"] = True
        set_capturable(self, tx)

    cls._set_capturable = _set_capturable


def install_capturable_optimizers() -> None:
    """Optimizers of tpu parameters traced by Dynamo are capturable, as CUDA's are."""
    _PatchOnImport("torch._dynamo.variables.optimizer", _capturable_on_tpu)


def _is_tpu_tensor(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "tpu"


def _uses_tpu(model, inputs) -> bool:
    """Whether a graph takes tpu tensors, or makes them (``torch.arange(n, device="tpu")``
    of a Python int): Dynamo records each node's value as a fake tensor on its device."""
    if any(_is_tpu_tensor(t) for t in inputs):
        return True
    for node in getattr(getattr(model, "graph", None), "nodes", ()):
        value = node.meta.get("example_value", node.meta.get("val"))
        if any(_is_tpu_tensor(v) for v in torch.utils._pytree.tree_leaves(value)):
            return True
    return False


def install_default_backend() -> None:
    """Plain ``torch.compile(model)`` on tpu tensors uses ``"tpu"``.

    The default (Inductor) wrapper picks per graph: graphs that take or make tpu
    tensors go to ``tpu_backend``, every other graph to Inductor unchanged, so
    importing torch_tpu never changes compilation for other devices.
    """
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper, "_torch_tpu_routed", False):
        return
    inductor_call = wrapper.__call__

    @functools.wraps(inductor_call)
    def call(self, model_, inputs_):
        if _uses_tpu(model_, inputs_):
            return tpu_backend(model_, inputs_)
        return inductor_call(self, model_, inputs_)

    wrapper.__call__ = call
    wrapper._torch_tpu_routed = True


@functools.cache
def _register_device_interface() -> None:
    """Dynamo's interface for the "tpu" device is ours, not upstream's (which is
    Google's TorchTPU): registered after upstream's lazy registration."""
    from torch._dynamo import device_interface as di

    class TpuInterface(di.DeviceInterface):
        @staticmethod
        def is_available() -> bool:
            return torch.tpu.is_available()

        @staticmethod
        def device_count() -> int:
            return torch.tpu.device_count()

        @staticmethod
        def current_device() -> int:
            return torch.tpu.current_device()

        @staticmethod
        def set_device(device) -> None:
            torch.tpu.set_device(device)

        @staticmethod
        def synchronize(device=None) -> None:
            torch.tpu.synchronize(device)

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return ""

    di.get_registered_device_interfaces()  # runs upstream's registration first
    di.register_interface_for_device("tpu", TpuInterface)
