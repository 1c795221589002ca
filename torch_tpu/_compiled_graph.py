"""One graph compiled by torch.compile's ``"tpu"`` backend: its first call with given
input layouts is recorded by the DeferAndFuse recorder; later calls append the recorded
ops to the device's pending work with no per-op work (or replay a program captured
alone). A graph whose recording cannot be replayed (a host read, a CPU fallback) runs op
by op in the current eager mode, with a warning naming the reason.

Both the backend (``_compile``) and AOTAutograd's cached form of its output
(``_graph_code``) build on it.
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from torch_tpu import _C

if TYPE_CHECKING:
    from torch_tpu import _bounded

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
