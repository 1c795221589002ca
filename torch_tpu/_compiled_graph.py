"""One graph compiled by torch.compile's ``"tpu"`` backend: its first call with given
input layouts is recorded by the DeferAndFuse recorder; later calls append the recorded
ops to the device's pending work with no per-op work (or replay a program captured
alone). A graph whose recording cannot be replayed (a host read, a CPU fallback) runs op
by op in the current eager mode, with a warning naming the reason. Custom ops of other
libraries are opaque, as to Inductor: the graph is split around them and they run at
every call (a recording would freeze what their Python reads besides their arguments).

Both the backend (``_compile``) and AOTAutograd's cached form of its output
(``_graph_code``) build on it.
"""

from __future__ import annotations

import copy
import operator
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


# Operator libraries whose ops are functions of their arguments, so that a recording
# of them holds for later calls: ATen and those torch_tpu lowers itself.
_RECORDED_NAMESPACES = frozenset({"aten", "prims", "_c10d_functional", "c10d", "torch_tpu"})
# Custom ops defined by torch_tpu.kernels (lowerings: pure too), by qualified name.
_recorded_custom_ops: set[str] = set()


def record_through(qualname: str) -> None:
    """Lets captures record custom op `qualname` ("ns::name") rather than call it."""
    _recorded_custom_ops.add(qualname)


def _is_opaque(node: torch.fx.Node) -> bool:
    """Whether `node` calls a custom op that every call of the graph must run."""
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        # A mutating custom op, functionalized by AOTAutograd.
        if target.name() not in ("auto_functionalized", "auto_functionalized_v2"):
            return False
        target = node.args[0]
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return (
        target.namespace not in _RECORDED_NAMESPACES
        and target._schema.name not in _recorded_custom_ops
    )


# Allocations whose contents the op they are made for writes.
_ALLOCATIONS = frozenset(
    {
        torch.ops.aten.empty.memory_format,
        torch.ops.aten.empty_permuted.default,
        torch.ops.aten.empty_strided.default,
        torch.ops.aten.new_empty.default,
        torch.ops.aten.new_empty_strided.default,
    }
)


def _pieces(gm: torch.fx.GraphModule) -> tuple[dict, set]:
    """Each node's piece, and the opaque pieces: an opaque op with the items taken from
    its results and the buffers made only for it (a capture cannot return an unwritten
    buffer); between them, runs of recordable nodes."""
    piece_of: dict[torch.fx.Node, int] = {}
    opaque: set[int] = set()
    current = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if _is_opaque(node):
            current += 1
            opaque.add(current)
            piece_of[node] = current
            current += 1
        elif node.target is operator.getitem and piece_of.get(node.args[0]) in opaque:
            piece_of[node] = piece_of[node.args[0]]
        else:
            piece_of[node] = current
    for node in piece_of:
        users = {piece_of[u] for u in node.users if u in piece_of}
        if node.target in _ALLOCATIONS and len(users) == 1 and users <= opaque:
            (piece_of[node],) = users
    return piece_of, opaque


def _split_at_opaque_ops(gm: torch.fx.GraphModule, bounded: bool, alone: bool):
    """`gm` as a graph of pieces (`_pieces`), the recordable ones each a CompiledGraph,
    or None when it has no opaque op."""
    if not any(_is_opaque(n) for n in gm.graph.nodes):
        return None
    from torch.fx.passes.split_module import split_module

    piece_of, opaque = _pieces(gm)
    split = split_module(gm, None, piece_of.__getitem__)
    for name, sub in list(split.named_children()):
        if int(name.removeprefix("submod_")) not in opaque:
            delattr(split, name)  # a plain attribute now: not a Module
            setattr(split, name, CompiledGraph(sub, bounded, alone))
    return split


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


class CompiledGraph:
    """One AOTAutograd graph: its captured programs by input layout."""

    def __init__(self, gm: torch.fx.GraphModule, bounded: bool = False, alone: bool = False):
        # In the instance's __dict__, so wrappers made with functools.wraps keep it.
        self._boxed_call = True
        self.gm = gm
        self.captured: dict[tuple, list[tuple[Any, list]]] = {}
        self.eager_reason: str | None = None
        # Captured as a program of its own (bounded sizes, options={"own_program":
        # True}), not appended to the work around it.
        self.alone = bounded or alone
        self.region = None  # the graph as one op, made when a dispatch mode first runs it
        self.uploaded = _copied_to_tpu_only(gm)
        # The graph split around opaque ops, or None.
        self.pieces = _split_at_opaque_ops(gm, bounded, alone)
        # Runs at the bounds of its sizes (bounded_dynamism), or None: one program per size.
        self.bounds: _bounded.BoundedGraph | None = None
        if bounded and self.pieces is None:
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
        if self.pieces is not None:
            return self.pieces(*args)
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
        # With no host tensor among its inputs, the graph's host values are constants
        # and the statics that key it: what it copies to the device is the same at
        # every call (Helion's launcher uploads a kernel's scalar arguments).
        host_inputs = any(t.device.type == "cpu" for t in tensors)
        _C._begin_capture(device, alone, not host_inputs)
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
