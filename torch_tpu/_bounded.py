"""Bounded dynamism for torch.compile: one program per graph for every size up to a bound.

Dynamo traces a dimension marked dynamic (``torch_tpu.mark_dynamic``) as a size symbol
with a range. An inference graph whose symbols all have upper bounds is rewritten to tag
each input's symbolic dimensions with their sizes (``torch_tpu::set_dimension_size``,
whose size is a tensor: a runtime operand), and runs with the symbols at their bounds and
its inputs padded to them. The recorded program is therefore the same for every size,
XLA's dynamic padder masks the padding wherever it would change a result (reductions,
products), and each output is the valid part of its padded value.
"""

from __future__ import annotations

import operator

import sympy
import torch

_SET_SIZE = torch.ops.torch_tpu.set_dimension_size.default
aten = torch.ops.aten
# Python arithmetic of sizes in a graph (sizes derived from sizes) and tuple items.
_SIZE_ARITHMETIC = {operator.mul, operator.add, operator.sub, operator.floordiv, operator.getitem}
# Arguments that are extents (how many), not positions: at the bound they make a larger
# result whose leading entries are those at the size.
_EXTENT_ARGUMENTS = {"size", "sizes", "shape", "stride"}
# Ops whose result at the bound has the leading entries of the result at the size, on
# every dimension (XLA masks the padding in reductions and products).
_KEEP_LEADING = {
    aten.view,
    aten._unsafe_view,
    aten.reshape,
    aten.permute,
    aten.transpose,
    aten.t,
    aten.unsqueeze,
    aten.squeeze,
    aten.expand,
    aten.clone,
    aten.alias,
    aten.detach,
    aten._to_copy,
    aten.embedding,
    aten.mm,
    aten.bmm,
    aten.addmm,
    aten.baddbmm,
    aten.native_layer_norm,
    aten._softmax,
    aten._safe_softmax,
    aten._log_softmax,
    aten.sum,
    aten.mean,
    aten.amax,
    aten.amin,
    aten.var,
    aten.var_mean,
    aten.argmax,
    aten.argmin,
    aten.where,
    aten.masked_fill,
    aten.tril,
    aten.triu,
    aten.full_like,
    aten.zeros_like,
    aten.ones_like,
    aten.empty_like,
    aten.index_select,
    aten.arange,
    aten.full,
}
_RESHAPES = {aten.view, aten._unsafe_view, aten.reshape}
# Ops that keep the leading entries unless they act along a dimension whose size varies.
_ALONG_DIM = {aten.cat, aten.split, aten.split_with_sizes, aten.unbind, aten.flip, aten.cumsum}
# Ops that pick positions along a dimension: fine where they count from its start.
_INDEXED = {aten.select, aten.slice, aten.narrow}


class NotBounded(Exception):
    """Why a graph cannot run at its bounds (it then compiles per size)."""


def _symbolic(value) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _expr(size):
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def _uses_symbol(value) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, torch.fx.Node) and _symbolic(v.meta.get("val")) for v in values)


def _is_extent(target, name: str, arguments: dict) -> bool:
    if name in _EXTENT_ARGUMENTS:
        return True
    if target.overloadpacket is aten.arange:
        return name == "end" and arguments.get("start", 0) == 0
    # x[:, :n] with n the size (or any size): an extent counted from the start.
    return target is aten.slice.Tensor and name == "end" and arguments.get("start") in (None, 0)


def _varying_dims(node: torch.fx.Node) -> set[int]:
    """Dimensions of varying size of the node's first tensor argument."""
    first = node.args[0] if node.args else None
    if isinstance(first, (list, tuple)) and first:
        first = first[0]
    value = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return set()
    return {d for d, size in enumerate(value.shape) if _symbolic(size)}


def _keeps_varying_dims(node: torch.fx.Node) -> bool:
    """A reshape leaves each dimension of varying size whole: the same sizes come
    before and after it in the input and in the output."""

    def placed(shape) -> set:
        exprs = [_expr(d) for d in shape]
        out = set()
        for i, e in enumerate(exprs):
            if e.free_symbols:
                before, after = sympy.Mul(*exprs[:i]), sympy.Mul(*exprs[i + 1 :])
                out.add((sympy.expand(before), e, sympy.expand(after)))
        return out

    return placed(node.args[0].meta["val"].shape) == placed(node.meta["val"].shape)


def _dim_of(node: torch.fx.Node, arguments: dict) -> int:
    value = node.args[0]
    rank = (value[0] if isinstance(value, (list, tuple)) else value).meta["val"].dim()
    dims = arguments.get("dim", arguments.get("dims", 0))
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    if len(dims) != 1 or not isinstance(dims[0], int):
        return -1  # several: treated as touching a varying one
    return dims[0] % max(rank, 1)


def _leading(node: torch.fx.Node, arguments: dict, varying: set[int]) -> bool:
    """select/slice/narrow count from the start of a varying dimension (or avoid it)."""
    if _dim_of(node, arguments) not in varying:
        return True
    first = arguments.get("index", arguments.get("start"))
    if first is not None and not (isinstance(first, int) and first >= 0):
        return False
    end = arguments.get("end", arguments.get("length"))
    return end is None or isinstance(end, torch.fx.Node) or end >= 0


class BoundedGraph:
    """A graph rewritten to run at its bounds; raises NotBounded when it cannot."""

    def __init__(self, gm: torch.fx.GraphModule):
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        values = [n.meta.get("val") for n in placeholders]
        self.symbol_args = {
            i: v.node.expr
            for i, v in enumerate(values)
            if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol)
        }
        if not self.symbol_args:
            raise NotBounded("it has no dynamic sizes")
        shape_env = next(v for v in values if isinstance(v, torch.SymInt)).node.shape_env
        self.bound = {}
        for sym in self.symbol_args.values():
            upper = shape_env.var_to_range[sym].upper
            if not isinstance(upper, sympy.Integer):  # int_oo when none was given
                raise NotBounded(
                    f"size {sym} has no upper bound (give one: torch_tpu.mark_dynamic(t, dim, min, max))"
                )
            self.bound[sym] = int(upper)
        self._check_uses(gm, placeholders)

        self.padded_args = {}  # argument index -> padded shape (sympy expressions)
        self.size_exprs: list[sympy.Expr] = []  # of the size inputs added to the graph
        tags = []  # (input node, dimension, size input node)
        graph = gm.graph
        last = placeholders[-1]
        for i, (node, value) in enumerate(zip(placeholders, values)):
            if not isinstance(value, torch.Tensor) or not any(map(_symbolic, value.shape)):
                continue
            shape = [_expr(d) for d in value.shape]
            missing = set().union(*(e.free_symbols for e in shape)) - set(self.bound)
            if missing:
                raise NotBounded(f"an input's size depends on {sorted(map(str, missing))}")
            self.padded_args[i] = shape
            for dim, size in enumerate(value.shape):
                if _symbolic(size):
                    with graph.inserting_after(last):
                        last = graph.placeholder(f"tpu_size_{len(self.size_exprs)}")
                    self.size_exprs.append(_expr(size))
                    tags.append((node, dim, last))
        first_op = last.next
        for node in {n: None for n, _, _ in tags}:
            users = list(node.users)
            tagged = node
            for _, dim, size_input in (t for t in tags if t[0] is node):
                with graph.inserting_before(first_op):
                    tagged = graph.call_function(_SET_SIZE, (tagged, dim, size_input))
            for user in users:
                user.replace_input_with(node, tagged)
        gm.recompile()
        output = next(n for n in graph.nodes if n.op == "output")
        results = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
        self.output_exprs = [
            [_expr(d) for d in r.meta["val"].shape]
            if isinstance(r, torch.fx.Node) and isinstance(r.meta.get("val"), torch.Tensor)
            else None
            for r in results
        ]
        self._sizes: dict[tuple, torch.Tensor] = {}

    @staticmethod
    def _check_uses(gm: torch.fx.GraphModule, placeholders) -> None:
        """Refuses graphs whose results at the bounds could differ in their valid part:
        a size used as a position, an op that reads a padded dimension from its end,
        an op not known to keep the leading entries, a write to an input."""
        inputs = set(placeholders)
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            target = node.target
            if not isinstance(target, torch._ops.OpOverload):
                if target not in _SIZE_ARITHMETIC:
                    raise NotBounded(f"it calls {getattr(target, '__name__', target)}")
                continue
            schema = target._schema
            if schema.is_mutable and node.args and node.args[0] in inputs:
                raise NotBounded(f"it writes an input ({target})")
            arguments = dict(zip((a.name for a in schema.arguments), node.args))
            arguments.update(node.kwargs)
            for name, value in arguments.items():
                if _uses_symbol(value) and not _is_extent(target, name, arguments):
                    raise NotBounded(f"it uses a size as a position ({target}, argument {name})")
            varying = _varying_dims(node)
            if not varying or torch.Tag.pointwise in target.tags:
                continue
            packet = target.overloadpacket
            if packet in _RESHAPES and not _keeps_varying_dims(node):
                raise NotBounded(
                    f"{target} merges or splits a dimension whose size varies (XLA cannot tell"
                    " where its padding goes)"
                )
            if packet in _KEEP_LEADING:
                continue
            if packet in _ALONG_DIM and _dim_of(node, arguments) not in varying:
                continue
            if packet in _INDEXED and _leading(node, arguments, varying):
                continue
            raise NotBounded(f"{target} reads a dimension whose size varies")

    def environment(self, args: list) -> dict:
        return {sym: args[i] for i, sym in self.symbol_args.items()}

    def actual_args(self, args: list) -> list:
        """The call's own arguments plus the size tensors: runs the graph op by op."""
        return list(args) + self._size_tensors(args, self.environment(args))

    def call(self, run, args: list):
        """Runs the graph at its bounds through `run` and returns the valid outputs."""
        env = self.environment(args)
        padded = list(args)
        for i, sym in self.symbol_args.items():
            padded[i] = self.bound[sym]
        for i, shape in self.padded_args.items():
            padded[i] = _pad(args[i], [int(e.xreplace(self.bound)) for e in shape])
        result = run(padded + self._size_tensors(args, env))
        flat = list(result) if isinstance(result, (tuple, list)) else [result]
        for k, exprs in enumerate(self.output_exprs):
            if exprs is not None:
                flat[k] = _valid_part(flat[k], [int(e.xreplace(env)) for e in exprs])
        return type(result)(flat) if isinstance(result, (tuple, list)) else flat[0]

    def _size_tensors(self, args: list, env: dict) -> list:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        sizes = []
        for e in self.size_exprs:
            key = (device, int(e.xreplace(env)))
            if key not in self._sizes:
                self._sizes[key] = torch.tensor(key[1], dtype=torch.int32, device=device)
            sizes.append(self._sizes[key])
        return sizes


def _pad(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """`t` zero-padded at the end of each dimension to `shape`, through the host: a
    device program per size is what bounded dynamism avoids."""
    if list(t.shape) == shape:
        return t
    host = t.cpu()
    padded = host.new_zeros(shape)
    padded[tuple(slice(0, s) for s in host.shape)] = host
    return padded.to(t.device)


def _valid_part(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """The valid entries of an output computed at the bounds. XLA compacts them: they lead
    the output's storage in row-major order, so they are a contiguous tensor of `shape`."""
    if list(t.shape) == shape:
        return t
    if not t.is_contiguous() or t.storage_offset() != 0:
        raise NotBounded("an output whose size varies is a view")
    return t.as_strided(shape, torch.empty(shape, device="meta").stride(), 0)
