"""Custom kernels: JAX functions, Pallas kernels and hand-written StableHLO as PyTorch ops.

``jax_op("ns::name", fn)`` makes a JAX function a ``torch.library`` custom op. On tpu
tensors JAX lowers ``fn`` for the platform that runs the device, and its StableHLO enters
our program as a function it calls (``torch_tpu::stablehlo_call``): one cached program in
strict mode, part of the fused program in defer_and_fuse and ``torch.compile(backend="tpu")``,
where XLA optimises across the call. Gradients come from ``jax.vjp`` unless ``vjp=False``.
On CPU tensors the op runs ``fn`` with JAX on the host. ``stablehlo_op`` does the same for a
module written by hand.

Shapes are static: each new combination of input shapes, dtypes and static arguments
lowers and compiles once. Pallas kernels are ordinary ``fn``s; on the CPU platform they
must run in Pallas's interpret mode: ``pl.pallas_call(..., interpret=pallas_interpret())``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import typing
from collections.abc import Callable, Sequence

try:
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import mlir as _jax_mlir
    from jax._src.lib.mlir import ir
except ImportError as e:  # pragma: no cover - exercised in a venv without jax
    raise ImportError(
        "torch_tpu.kernels needs JAX: install it with `pip install 'torch_tpu[jax]'`"
    ) from e

import torch

from . import _stablehlo_call, platform
from ._compiled_graph import record_through

__all__ = ["jax_op", "pallas_interpret", "stablehlo_op"]

_STABLEHLO_CALL = torch.ops.torch_tpu.stablehlo_call.default


def pallas_interpret() -> bool:
    """Whether ``pl.pallas_call`` must interpret its kernel on this process's platform: on
    the CPU platform (XLA's CPU backend has no Pallas compiler); on GPU and TPU Pallas
    compiles to the platform's kernels."""
    return platform() == "cpu"


# ---------------------------------------------------------------- dtypes

_JAX_DTYPES = {
    torch.float32: jnp.float32,
    torch.float64: jnp.float64,
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
    torch.int8: jnp.int8,
    torch.int16: jnp.int16,
    torch.int32: jnp.int32,
    torch.int64: jnp.int64,
    torch.uint8: jnp.uint8,
    torch.uint16: jnp.uint16,
    torch.uint32: jnp.uint32,
    torch.uint64: jnp.uint64,
    torch.bool: jnp.bool_,
    torch.float8_e4m3fn: jnp.float8_e4m3fn,
    torch.float8_e5m2: jnp.float8_e5m2,
}
_TORCH_DTYPES = {jnp.dtype(j): t for t, j in _JAX_DTYPES.items()}
# MLIR's element types (tensor<2xbf16>) of the dtypes above
_MLIR_DTYPES = {
    "f32": jnp.float32, "f64": jnp.float64, "f16": jnp.float16, "bf16": jnp.bfloat16,
    "complex<f32>": jnp.complex64, "complex<f64>": jnp.complex128, "i1": jnp.bool_,
    "i8": jnp.int8, "i16": jnp.int16, "i32": jnp.int32, "i64": jnp.int64, "ui8": jnp.uint8,
    "ui16": jnp.uint16, "ui32": jnp.uint32, "ui64": jnp.uint64,
    "f8E4M3FN": jnp.float8_e4m3fn, "f8E5M2": jnp.float8_e5m2,
}  # fmt: skip
_WIDE = (torch.float64, torch.int64, torch.uint64, torch.complex128)


def _jax_dtype(op: str, dtype: torch.dtype):
    if dtype not in _JAX_DTYPES:
        raise TypeError(f"{op}: tensors of dtype {dtype} have no JAX array type")
    return _JAX_DTYPES[dtype]


def _torch_dtype(op: str, dtype) -> torch.dtype:
    if dtype is None or jnp.dtype(dtype) not in _TORCH_DTYPES:
        raise TypeError(f"{op}: a result of dtype {dtype} has no PyTorch dtype")
    return _TORCH_DTYPES[jnp.dtype(dtype)]


# ---------------------------------------------------------------- modules


def _add_module(op: str, module: ir.Module, results) -> str:
    """Adds the functions of ``module`` for ``stablehlo_call``, their symbols renamed apart
    from every other module's and @main made private; returns the module's id."""
    with module.context:
        text = module.operation.get_asm(enable_debug_info=False, print_generic_op_form=True)
        module_id = hashlib.sha256(f"{op}\0{text}".encode()).hexdigest()[:24]
        prefix = f"k{module_id}_"
        table = module.operation
        entry = None
        for child in module.body.operations:
            if "sym_name" not in child.attributes:
                continue
            name = ir.StringAttr(child.attributes["sym_name"]).value
            ir.SymbolTable.replace_all_symbol_uses(name, prefix + name, table)
            ir.SymbolTable.set_symbol_name(child, prefix + name)
            if name == "main":
                entry = prefix + name
                child.attributes["sym_visibility"] = ir.StringAttr.get("private")
                for attr in ("arg_attrs", "res_attrs"):  # donation, layouts: the caller's
                    if attr in child.attributes:
                        del child.attributes[attr]
        if entry is None:
            raise ValueError(f"{op}: the module has no function @main")
        functions = "\n".join(
            child.operation.get_asm(enable_debug_info=False, print_generic_op_form=True)
            for child in module.body.operations
        )
    _stablehlo_call.add_module(module_id, entry, functions, results)
    return module_id


def _call(module_id: str, tensors: Sequence[torch.Tensor], single: bool):
    outs = _STABLEHLO_CALL(list(tensors), module_id)
    return outs[0] if single else tuple(outs)


# ---------------------------------------------------------------- schemas

_STATIC_TYPES = {int: "int", float: "float", bool: "bool", str: "str"}


def _static_type(param: inspect.Parameter) -> str | None:
    """The schema type of a static argument from its annotation or default, or None:
    then any hashable value (as ``jax.jit`` takes), carried by key (``_static_key``)."""
    ann = param.annotation
    if ann in _STATIC_TYPES:
        return _STATIC_TYPES[ann]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (list, tuple, Sequence) and args and args[0] in (int, float, bool):
        return _STATIC_TYPES[args[0]] + "[]"
    default = param.default
    if type(default) in _STATIC_TYPES:
        return _STATIC_TYPES[type(default)]
    if isinstance(default, (list, tuple)) and default and type(default[0]) in (int, float, bool):
        return _STATIC_TYPES[type(default[0])] + "[]"
    return None


# Static values of no schema type, by key: an op takes their key (a str argument).
_static_values: dict[str, tuple] = {}
_static_keys: dict[tuple, str] = {}


# Run at Dynamo's trace (a constant of the graph): the op's fake kernel reads the values.
@torch._dynamo.assume_constant_result
def _static_key(op: str, names: tuple[str, ...], values: tuple) -> str:
    try:
        key = _static_keys.get(values)
    except TypeError:
        raise TypeError(
            f"{op}: static arguments {names} must be hashable (as jax.jit requires), got {values!r}"
        ) from None
    if key is None:
        key = _static_keys[values] = f"s{len(_static_keys)}"
        _static_values[key] = values
    return key


def _schema_default(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_schema_default(v) for v in value) + "]"
    return repr(value) if not isinstance(value, bool) else str(value)


def _num_outputs(fn: Callable, signature: inspect.Signature) -> int | None:
    """The number of arrays ``fn`` returns by its annotation: 1 for an array, n for a
    tuple of n; None without one (found by tracing: the op returns a list)."""
    ann = signature.return_annotation
    if ann is inspect.Signature.empty:
        return None
    if typing.get_origin(ann) is tuple:
        args = typing.get_args(ann)
        if not args or args[-1] is Ellipsis:
            raise TypeError(
                f"the return annotation of {fn.__name__} must give the number of arrays "
                "(tuple[jax.Array, jax.Array]), or be left out"
            )
        return len(args)
    return 1


# Kinds of parameters besides static schema types ("int", "float[]", ...).
_TENSOR, _TENSORS, _OPAQUE = "Tensor", "Tensor[]", None
_KEY = "static_key"  # the schema argument carrying the _OPAQUE values' key


class _Signature:
    """How an op's arguments split into arrays and static values."""

    def __init__(self, params: list[tuple[str, str | None, object]], num_outputs: int | None):
        # (name, _TENSOR, _TENSORS, a static schema type or _OPAQUE, default)
        self.params = params
        self.num_outputs = num_outputs  # None: a list, as many as the function returns
        self.opaque = tuple(name for name, kind, _ in params if kind is _OPAQUE)

    @property
    def declared(self) -> bool:
        """Whether the op's schema is the function's own (no opaque statics, results
        annotated): then the op is called directly."""
        return not self.opaque and self.num_outputs is not None

    def schema(self) -> str:
        args = []
        for name, kind, default in self.params:
            if kind is _OPAQUE:
                continue
            decl = f"{kind} {name}"
            # Defaults for callers of the op itself; JaxOp passes every argument. (The
            # dispatcher drops trailing arguments equal to their defaults, which
            # autograd of an op returning a list does not expect.)
            if self.declared and default is not inspect.Parameter.empty:
                decl += "=" + _schema_default(default)
            args.append(decl)
        if self.opaque:
            args.append(f"str {_KEY}")
        if self.num_outputs is None:
            return f"({', '.join(args)}) -> Tensor[]"
        rets = ", ".join(["Tensor"] * self.num_outputs)
        return f"({', '.join(args)}) -> " + (rets if self.num_outputs == 1 else f"({rets})")

    def split(self, args) -> tuple[list[torch.Tensor], dict[str, object]]:
        """The op's arguments (in schema order) as its tensors and its static values."""
        tensors, statics = [], {}
        schema_params = [(n, k, d) for n, k, d in self.params if k is not _OPAQUE]
        # The dispatcher leaves out trailing arguments equal to their defaults.
        args = list(args) + [d for _, _, d in schema_params[len(args) :]]
        for (name, kind, _), value in zip(schema_params, args):
            if kind == _TENSOR:
                tensors.append(value)
            elif kind == _TENSORS:
                tensors.extend(value)
            else:
                statics[name] = tuple(value) if isinstance(value, list) else value
        if self.opaque:
            statics.update(zip(self.opaque, _static_values[args[len(schema_params)]]))
        return tensors, statics

    def op_arguments(self, op: str, values: dict) -> list:
        """The op's arguments (schema order) from the function's, bound by name."""
        out = [values[name] for name, kind, _ in self.params if kind is not _OPAQUE]
        if self.opaque:
            out.append(_static_key(op, self.opaque, tuple(values[n] for n in self.opaque)))
        return out

    @property
    def tensor_names(self) -> list[str]:
        return [name for name, kind, _ in self.params if kind == _TENSOR]


def _signature_of(op: str, fn: Callable, static_argnames: Sequence[str]) -> _Signature:
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (NameError, TypeError):
        sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{op}: *args and **kwargs cannot be op arguments ({p.name})")
        if p.name in static_argnames:
            params.append((p.name, _static_type(p), p.default))
        else:
            params.append((p.name, _TENSOR, inspect.Parameter.empty))
    unknown = set(static_argnames) - {name for name, _, _ in params}
    if unknown:
        raise TypeError(f"{op}: static_argnames names no parameter of the function: {unknown}")
    return _Signature(params, _num_outputs(fn, sig))


# ---------------------------------------------------------------- jax_op


class _Lowering:
    """One op's function, lowered per (input shapes and dtypes, static arguments)."""

    def __init__(self, op: str, fn: Callable, signature: _Signature):
        self.op, self.fn, self.signature = op, fn, signature
        self._shapes: dict[tuple, list[tuple[tuple[int, ...], torch.dtype]]] = {}
        # Whether the function returned one array (not a tuple), for results found by
        # tracing; read by JaxOp.
        self.single: dict[tuple, bool] = {}
        self._modules: dict[tuple, str] = {}
        # Entered around tracing and lowering for the device (torch_tpu._internal's
        # JaxCallable interprets TPU Pallas kernels on the CPU platform in it).
        self.context: Callable[[], typing.ContextManager] = contextlib.nullcontext

    def _bound(self, statics: dict):
        names = [n for n, kind, _ in self.signature.params if kind == _TENSOR]
        listed = [n for n, kind, _ in self.signature.params if kind == _TENSORS]

        def call(*arrays):
            args = dict(zip(names, arrays))
            if listed:  # the arrays after the named ones
                args[listed[0]] = list(arrays[len(names) :])
            return self.fn(**args, **statics)

        return call

    def _specs(self, tensors):
        return [jax.ShapeDtypeStruct(tuple(t.shape), _jax_dtype(self.op, t.dtype)) for t in tensors]

    def _x64(self, tensors):
        return jax.enable_x64(any(t.dtype in _WIDE for t in tensors))

    def _leaves(self, outs) -> tuple[list, bool]:
        """The function's results as a list, and whether it returned a single array."""
        declared = self.signature.num_outputs
        single = not isinstance(outs, (tuple, list)) if declared is None else declared == 1
        leaves = [outs] if single else outs
        if not single and not isinstance(outs, (tuple, list)):
            raise TypeError(f"{self.op}: the function returned {outs!r}, not a tuple of arrays")
        if declared == 1 and isinstance(outs, (tuple, list)):
            raise TypeError(
                f"{self.op}: the function returned {len(outs)} values, its return annotation "
                "says one array"
            )
        if declared is not None and len(leaves) != declared:
            raise TypeError(
                f"{self.op}: the function returned {len(outs)} arrays, its annotation says "
                f"{declared}"
            )
        return list(leaves), single

    def _check_results(self, outs) -> tuple[list, bool]:
        leaves, single = self._leaves(outs)
        for out in leaves:
            if not isinstance(out, jax.ShapeDtypeStruct):
                raise TypeError(f"{self.op}: the function returned {out!r}, not an array")
        return [(tuple(o.shape), _torch_dtype(self.op, o.dtype)) for o in leaves], single

    def _jax(self, what: Callable, tensors):
        """``what(specs)`` under JAX, its errors naming the op."""
        try:
            with self._x64(tensors):
                return what(self._specs(tensors))
        except TypeError as e:
            raise TypeError(f"{self.op}: {e}") from e
        except Exception as e:
            raise RuntimeError(f"{self.op}: JAX could not trace the function: {e}") from e

    @staticmethod
    def key(tensors, statics) -> tuple:
        return _signature_key(
            tuple(tuple(t.shape) for t in tensors), tuple(t.dtype for t in tensors), statics.items()
        )

    def results(self, tensors, statics):
        key = self.key(tensors, statics)
        if key not in self._shapes:
            if any(not isinstance(s, int) for t in tensors for s in t.shape):
                raise RuntimeError(
                    f"{self.op}: JAX kernels take static shapes; compile the graph with "
                    "torch.compile(..., dynamic=False)"
                )
            outs = self._jax(lambda specs: jax.eval_shape(self._bound(statics), *specs), tensors)
            self._shapes[key], self.single[key] = self._check_results(outs)
        return self._shapes[key]

    def pack(self, results: list):
        """The op's return value from its list of results, as its schema says."""
        n = self.signature.num_outputs
        return results if n is None else results[0] if n == 1 else tuple(results)

    def module(self, tensors, statics) -> str:
        key = self.key(tensors, statics)
        if key not in self._modules:
            results = self.results(tensors, statics)
            with self.context():
                traced = self._jax(
                    lambda specs: jax.jit(self._bound(statics), keep_unused=True).trace(*specs),
                    tensors,
                )
            try:
                with self._x64(tensors), self.context():
                    lowered = traced.lower(lowering_platforms=(platform(),))
                module = lowered.compiler_ir("stablehlo")
            except Exception as e:
                raise RuntimeError(
                    f"{self.op} does not lower on the {platform()} platform: {e}"
                ) from e
            self._modules[key] = _add_module(self.op, module, results)
        return self._modules[key]

    def run_on_host(self, tensors, statics):
        self.results(tensors, statics)  # checks the dtypes and results
        arrays = [jax.dlpack.from_dlpack(t.detach().contiguous()) for t in tensors]
        with self._x64(tensors), jax.default_device(jax.devices("cpu")[0]):
            outs = jax.jit(self._bound(statics))(*arrays)
        leaves, _ = self._leaves(outs)
        return self.pack([torch.from_dlpack(o).clone() for o in leaves])


def _define(op: str, lowering: _Lowering, vjp: bool):
    signature = lowering.signature
    custom = torch.library.custom_op(
        op, mutates_args=(), device_types="cpu", schema=signature.schema()
    )(lambda *args: lowering.run_on_host(*signature.split(args)))

    # A lowering: captures record it into their programs.
    record_through(custom._qualname)

    @custom.register_kernel("tpu")
    def _(*args):
        tensors, statics = signature.split(args)
        module_id = lowering.module(tensors, statics)
        return lowering.pack(list(_STABLEHLO_CALL(list(tensors), module_id)))

    @custom.register_fake
    def _(*args):
        tensors, statics = signature.split(args)
        device = tensors[0].device if tensors else torch.device("tpu")
        outs = [
            torch.empty(shape, dtype=dtype, device=device)
            for shape, dtype in lowering.results(tensors, statics)
        ]
        return lowering.pack(outs)

    if vjp:
        _register_vjp(op, custom, lowering)
    return custom


def _register_vjp(op: str, custom, lowering: _Lowering) -> None:
    """The backward of ``op`` as another JAX op (``jax.vjp`` of the function, the
    cotangents one list), defined on first use."""
    signature = lowering.signature
    names = signature.tensor_names
    n_in = len(names)
    primal_names = [f"primal_{n}" for n in names]

    def backward_fn(cotangents, **values):
        primals = [values.pop(n) for n in primal_names]
        statics = values
        diff = [i for i, p in enumerate(primals) if jnp.issubdtype(p.dtype, jnp.inexact)]

        def of_differentiable(*values):
            full = list(primals)
            for i, v in zip(diff, values):
                full[i] = v
            return lowering.fn(**dict(zip(names, full)), **statics)

        outs, pullback = jax.vjp(of_differentiable, *(primals[i] for i in diff))
        leaves, single = lowering._leaves(outs)
        cotangents = list(cotangents)
        for k, out in enumerate(leaves):  # integer results take no cotangent
            if not jnp.issubdtype(out.dtype, jnp.inexact):
                cotangents[k] = jnp.zeros(out.shape, jax.dtypes.float0)
        grads = pullback(cotangents[0] if single else type(outs)(cotangents))
        result = [jnp.zeros_like(p) for p in primals]
        for i, g in zip(diff, grads):
            result[i] = g
        return result[0] if n_in == 1 else tuple(result)

    statics = [(n, kind, d) for n, kind, d in signature.params if kind != _TENSOR]
    backward_signature = _Signature(
        [(n, _TENSOR, inspect.Parameter.empty) for n in primal_names]
        + [("cotangents", _TENSORS, inspect.Parameter.empty)]
        + statics,
        n_in,
    )
    backward_lowering = _Lowering(f"{op}_vjp", backward_fn, backward_signature)
    backward_op = functools.cache(lambda: _define(f"{op}_vjp", backward_lowering, vjp=False))

    def setup_context(ctx, inputs, output):
        tensors, static_values = signature.split(inputs)
        ctx.save_for_backward(*tensors)
        ctx.statics = static_values
        outs = [output] if signature.num_outputs == 1 else list(output)
        ctx.outputs = [(o.shape, o.dtype, o.device) for o in outs]

    def backward(ctx, *grads):
        if signature.num_outputs is None:  # one list of gradients
            (grads,) = grads
        cotangents = [
            g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
            for g, (shape, dtype, device) in zip(grads, ctx.outputs)
        ]
        primals = ctx.saved_tensors
        values = dict(zip(primal_names, primals), cotangents=cotangents, **ctx.statics)
        outs = backward_op()(*backward_signature.op_arguments(f"{op}_vjp", values))
        outs = [outs] if n_in == 1 else list(outs)
        result, k = [], 0
        for _, kind, _ in signature.params:
            if kind is _OPAQUE:
                continue
            if kind != _TENSOR:
                result.append(None)
                continue
            result.append(outs[k] if primals[k].dtype.is_floating_point else None)
            k += 1
        if signature.opaque:
            result.append(None)  # the static key
        return tuple(result)

    custom.register_autograd(backward, setup_context=setup_context)


_lowerings: dict[str, _Lowering] = {}


# Run at Dynamo's trace (a constant of the graph): the op's fake kernel has traced the
# function by then, and Dynamo's copy of a dict would not see what it added.
@torch._dynamo.assume_constant_result
def _returned_one_array(op: str, shapes: tuple, dtypes: tuple, statics: tuple) -> bool:
    return _lowerings[op].single[_signature_key(shapes, dtypes, statics)]


def _signature_key(shapes, dtypes, statics) -> tuple:
    """A call's key: its tensors' shapes and dtypes, its static values by name."""
    return (tuple(zip(shapes, dtypes)), tuple(sorted(statics, key=lambda item: item[0])))


class JaxOp:
    """A JAX function as PyTorch op whose schema is not all its own: static arguments of
    no schema type (any hashable value, as ``jax.jit`` takes, passed to the op by key)
    and results found by tracing (the op returns a list; a call returns what the
    function returns, an array or a tuple). ``op`` is the custom op."""

    def __init__(self, op, fn: Callable, lowering: _Lowering):
        self.op, self._lowering = op, lowering
        self._signature = inspect.signature(fn)
        self._defaults = {
            n: p.default
            for n, p in self._signature.parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        self.__name__ = getattr(fn, "__name__", "jax_op")

    def _bind(self, args, kwargs) -> dict:
        # By hand, not Signature.bind: Dynamo traces this.
        names = list(self._signature.parameters)
        if len(args) > len(names):
            raise TypeError(f"{self.op._qualname}: {len(args)} arguments, it takes {len(names)}")
        values = dict(self._defaults)
        values.update(zip(names, args))
        values.update(kwargs)
        missing = [n for n in names if n not in values]
        unknown = [n for n in kwargs if n not in names]
        if missing or unknown:
            raise TypeError(f"{self.op._qualname}: missing {missing}, unexpected {unknown}")
        return values

    def __call__(self, *args, **kwargs):
        values = self._bind(args, kwargs)
        signature = self._lowering.signature
        out = self.op(*signature.op_arguments(self.op._qualname, values))
        if signature.num_outputs is not None:
            return out
        tensors = [values[n] for n in signature.tensor_names]
        statics = tuple(
            (n, tuple(values[n]) if isinstance(values[n], list) else values[n])
            for n, kind, _ in signature.params
            if kind != _TENSOR
        )
        shapes = tuple(tuple(t.shape) for t in tensors)
        dtypes = tuple(t.dtype for t in tensors)
        single = _returned_one_array(self.op._qualname, shapes, dtypes, statics)
        return out[0] if single else tuple(out)

    def register_autograd(self, backward: Callable, *, setup_context: Callable | None = None):
        """As ``CustomOpDef.register_autograd``, with the function's arguments and results
        (``setup_context`` sees them as the function takes and returns them)."""
        signature, lowering = self._lowering.signature, self._lowering
        names = [n for n, kind, _ in signature.params if kind is not _OPAQUE]

        def setup(ctx, inputs, output):
            values = dict(zip(names, inputs))
            if signature.opaque:
                values.update(zip(signature.opaque, _static_values[inputs[-1]]))
            ctx.single = (
                signature.num_outputs is None
                and len(output) == 1
                and lowering.single[_Lowering.key(*signature.split(inputs))]
            )
            if setup_context is not None:
                args = [values[n] for n in self._signature.parameters]
                setup_context(ctx, args, output[0] if ctx.single else output)

        def run(ctx, *grads):
            if signature.num_outputs is None:
                (grads,) = grads
                grads = grads[:1] if ctx.single else grads
            got = backward(ctx, *grads)
            got = got if isinstance(got, tuple) else (got,)
            by_name = dict(zip(self._signature.parameters, got))
            out = [by_name.get(n) for n in names]
            return tuple(out + [None] * bool(signature.opaque))

        self.op.register_autograd(run, setup_context=setup)


def jax_op(name: str, fn: Callable, *, static_argnames: Sequence[str] = (), vjp: bool = True):
    """Makes the JAX function ``fn`` the custom op ``name`` ("ns::name"), as JAX code is
    written: ``jax_op(name, fn, static_argnames=...)`` takes what ``jax.jit(fn,
    static_argnames=...)`` takes.

    Parameters of ``fn`` not named in ``static_argnames`` take tensors (JAX arrays of the
    same shape and dtype, whatever the tensors' strides); those named are static values,
    part of the cache key: typed by their annotation or default (int, float, bool, str,
    lists of numbers) they are the op's own arguments; otherwise any hashable value. ``fn``
    returns an array or a tuple of them. When the op's schema is the function's own (static
    arguments typed, the return annotated: ``-> jax.Array`` or ``-> tuple[jax.Array,
    jax.Array]``), returns the ``torch.library.CustomOpDef``: ``torch.compile``, ``opcheck``
    and ``register_autograd`` work on it. Otherwise a ``JaxOp``, which calls such an op
    (one program per signature all the same) and has ``register_autograd``. With ``vjp``
    (the default) its gradient is ``jax.vjp``'s.
    """
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    signature = _signature_of(name, fn, static_argnames)
    lowering = _lowerings[name] = _Lowering(name, fn, signature)
    custom = _define(name, lowering, vjp)
    return custom if signature.declared else JaxOp(custom, fn, lowering)


# ---------------------------------------------------------------- stablehlo_op


def stablehlo_op(name: str, mlir_text: str, out_shapes=None):
    """Makes the StableHLO module ``mlir_text`` (its entry a ``func.func public @main``) the
    custom op ``name`` taking one tensor per argument of @main. ``out_shapes``, a list of
    (shape, dtype), is checked against @main's results (read from the module if omitted).
    tpu tensors only; no gradient (``register_autograd`` gives one)."""
    with _jax_mlir.make_ir_context():
        try:
            module = ir.Module.parse(mlir_text)
        except Exception as e:
            raise ValueError(f"{name}: the module does not parse: {e}") from e
        main = next(
            (
                op
                for op in module.body.operations
                if "sym_name" in op.attributes
                and ir.StringAttr(op.attributes["sym_name"]).value == "main"
            ),
            None,
        )
        if main is None:
            raise ValueError(f"{name}: the module has no func.func @main")
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)

        def shape_of(t):
            t = ir.RankedTensorType(t)
            return tuple(t.shape), _torch_dtype(name, _MLIR_DTYPES.get(str(t.element_type)))

        inputs = [shape_of(t) for t in ftype.inputs]
        results = [shape_of(t) for t in ftype.results]
    if out_shapes is not None:
        given = [(tuple(s), d) for s, d in out_shapes]
        if given != results:
            raise ValueError(f"{name}: out_shapes {given} are not @main's results {results}")
    module_id = _add_module(name, module, results)  # in the module's own context
    single = len(results) == 1
    rets = ", ".join(["Tensor"] * len(results))
    schema = "(" + ", ".join(f"Tensor x{i}" for i in range(len(inputs))) + ") -> "
    schema += rets if single else f"({rets})"

    def check(tensors):
        got = [(tuple(t.shape), t.dtype) for t in tensors]
        if got != inputs:
            raise ValueError(f"{name}: @main takes {inputs}, got {got}")

    def on_host(*tensors):
        raise NotImplementedError(f"{name}: a StableHLO op runs on tpu tensors only")

    custom = torch.library.custom_op(name, mutates_args=(), device_types="cpu", schema=schema)(
        on_host
    )

    record_through(custom._qualname)

    @custom.register_kernel("tpu")
    def _(*tensors):
        check(tensors)
        return _call(module_id, tensors, single)

    @custom.register_fake
    def _(*tensors):
        check(tensors)
        outs = [torch.empty(s, dtype=d, device=tensors[0].device) for s, d in results]
        return outs[0] if single else tuple(outs)

    return custom
