"""torch.compile's ``"tpu"`` backend.

AOTAutograd traces forward and backward (decomposing only what the lowering table
lacks) into functional ATen graphs. Each graph's first call with given input layouts
is recorded by the DeferAndFuse recorder; later calls append the recorded ops to the
device's pending work with no per-op work, so the graphs of a training step run as one
program (a graph of bounded sizes is captured as a program of its own and replayed).
A graph whose recording cannot be replayed (a host read, a CPU fallback) runs op by
op in the current eager mode, with a warning naming the reason.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from torch_tpu import _C

if TYPE_CHECKING:
    from torch_tpu import _bounded

_EAGER_BACKWARD = "force_non_lazy_backward_lowering"  # an AOTAutograd option
_IGNORED_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_warned: set[str] = set()
_TENSOR = object()  # where a tensor output goes in a graph's output template
# Programs kept per graph for inputs of other strides, offsets or aliasing
# (sizes are Dynamo's guards: a new size is a new graph).
_MAX_LAYOUTS = 8


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


class CompiledGraph:
    """One AOTAutograd graph: its captured programs by input layout."""

    def __init__(self, gm: torch.fx.GraphModule, bounded: bool = False):
        # In the instance's __dict__, so wrappers made with functools.wraps keep it.
        self._boxed_call = True
        self.gm = gm
        self.captured: dict[tuple, list[tuple[Any, list]]] = {}
        self.eager_reason: str | None = None
        # Captured as a program of its own (bounded sizes), not appended to
        # the work around it.
        self.alone = bounded
        self.region = None  # the graph as one op, made when a dispatch mode first runs it
        self.uploaded = _copied_to_tpu_only(gm)
        # Runs at the bounds of its sizes (bounded_dynamism), or None: one program per size.
        self.bounds: _bounded.BoundedGraph | None = None
        if bounded:
            # Imported here: it imports sympy (half a second), which `import torch` with
            # autoload would otherwise pay.
            from torch_tpu import _bounded

            try:
                self.bounds = _bounded.BoundedGraph(gm)
            except _bounded.NotBounded as e:
                _warn_once(
                    f"torch.compile(backend='tpu', options={{'bounded_dynamism': True}}): a graph "
                    f"compiles one program per size because {e}"
                )

    def __call__(self, *args) -> Any:
        # Boxed (one list, which AOTAutograd may clear) or, through wrappers that
        # hide `_boxed_call`, unboxed: graph inputs are tensors and numbers.
        args = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        if is_in_torch_dispatch_mode():
            return _as_one_op(self, args)
        return self._call(args)

    def _call(self, args: list) -> Any:
        for k, device in self.uploaded:
            if isinstance(args[k], torch.Tensor) and args[k].device.type == "cpu":
                args[k] = args[k].to(device, non_blocking=True)
        if self.bounds is None:
            return self._run(args)
        if self.eager_reason is None:
            try:
                return self.bounds.call(self._run, args)
            except Exception as e:
                # The graph writes no input (BoundedGraph checks), so running it again
                # at the call's own sizes is safe.
                self.eager_reason = f"it cannot run at its bounds ({e})"
                _warn_once(f"torch.compile(backend='tpu'): a graph runs op by op because {e}")
        return self.gm(*self.bounds.actual_args(args))

    def _run(self, args: list) -> Any:
        """Replays the program captured for the layouts of `args`, or captures one."""
        if self.eager_reason is not None:
            return self.gm(*args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        # Non-tensor inputs (sizes of a dynamic graph) shape the program.
        statics = tuple(a for a in args if not isinstance(a, torch.Tensor))
        for graph, template in self.captured.get(statics, ()):
            outputs = _C._replay(graph, tensors)
            if outputs is not None:
                return _fill(template, outputs)
        return self._capture(args, tensors, statics)

    def _capture(self, args: list, tensors: list, statics: tuple) -> Any:
        device = _device_of(tensors)
        if device is None:
            self.eager_reason = "it has no tpu tensor inputs"
            return self.gm(*args)
        alone = self.alone or any(_C._has_bounds(t) for t in tensors if t.device.type == "tpu")
        _C._begin_capture(device, alone)
        try:
            result = self.gm(*args)
        except BaseException:
            try:
                _C._end_capture(device, [], [])
            except _C.CaptureError:
                pass
            raise
        flat = list(result) if isinstance(result, (tuple, list)) else [result]
        outputs = [r for r in flat if isinstance(r, torch.Tensor)]
        try:
            graph = _C._end_capture(device, tensors, outputs)
        except _C.CaptureAlone:
            self.alone = True  # the next call captures it alone
            return result
        except _C.CaptureError as e:
            if self.bounds is not None:
                # Ops that ran outside the recorded program lost the sizes of the
                # padding: this call's results are not the call's own.
                from torch_tpu._bounded import NotBounded

                raise NotBounded(str(e)) from e
            self.eager_reason = str(e)
            _warn_once(
                f"torch.compile(backend='tpu'): a graph runs op by op because {e}; "
                "torch._dynamo.explain shows the graph and its breaks"
            )
            return result
        template = [_TENSOR if isinstance(r, torch.Tensor) else r for r in flat]
        layouts = self.captured.setdefault(statics, [])
        layouts.append((graph, (template, type(result))))
        if len(layouts) > _MAX_LAYOUTS:
            layouts.pop(0)
        return result


def _as_one_op(graph: CompiledGraph, args: list) -> Any:
    """Runs `graph` as one op to the active dispatch modes, PyTorch's own way of showing a
    compiled region (Inductor's wrap_inductor_compiled_regions): a capture and a replay
    dispatch different ops, and selective activation checkpointing's recompute must see
    the ops its forward saw (it saves the region's outputs or recomputes it whole)."""
    from torch._higher_order_ops.wrap import InductorCompiledCallable, inductor_compiled_code

    if graph.region is None:
        stripped = copy.deepcopy(graph.gm)  # the fake-tensor rule re-derives its metadata
        for node in stripped.graph.nodes:
            node.meta.clear()
        graph.region = InductorCompiledCallable(graph._call, stripped)
        inductor_compiled_code.fallthrough(DispatchKey.AutogradPrivateUse1)
    return inductor_compiled_code(graph.region, args)


def _copied_to_tpu_only(gm: torch.fx.GraphModule) -> list[tuple[int, torch.device]]:
    """The inputs that the graph only copies to one tpu device, and that device
    (Transformers' static cache keeps 0-d counters on the host): copied before the graph
    runs, the program takes them as device inputs instead of the graph running op by op."""
    copied = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, node in enumerate(placeholders):
        copies = [u for u in node.users if u.target is torch.ops.aten._to_copy.default]
        devices = {u.kwargs.get("device") for u in copies}
        if copies and len(copies) == len(node.users) and len(devices) == 1:
            (device,) = devices
            if isinstance(device, torch.device) and device.type == "tpu":
                copied.append((k, device))
    return copied


def _device_of(tensors: list) -> int | None:
    for t in tensors:
        if t.device.type == "tpu":
            return t.device.index or 0
    return None


def _fill(template, outputs: list) -> Any:
    values, kind = template
    it = iter(outputs)
    flat = [next(it) if v is _TENSOR else v for v in values]
    return kind(flat) if kind in (tuple, list) else flat[0]


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> CompiledGraph:
    return CompiledGraph(gm)


def _compile_bounded_graph(gm: torch.fx.GraphModule, example_inputs: list) -> CompiledGraph:
    return CompiledGraph(gm, bounded=True)


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
    unknown = sorted(set(options) - {"bounded_dynamism"})
    if unknown:
        raise ValueError(f"torch.compile(backend='tpu'): unknown options {unknown}")
    if not dynamo_config.assume_static_by_default:
        raise NotImplementedError(
            "torch.compile(backend='tpu') does not support dynamic=True: leave dynamic unset "
            "or False (each new shape compiles its own program)"
        )
    _register_device_interface()
    cacheable = _cacheable_compiler()
    if options.get("bounded_dynamism"):
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
