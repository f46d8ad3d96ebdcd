"""numpy ufuncs and gufuncs compiled from MLIR: ``mlir_ufunc`` and ``mlir_gufunc``.

A scalar MLIR function becomes a real :class:`numpy.ufunc` (broadcasting, ``out=``,
``where=``, ``reduce``/``accumulate``, numpy's type resolution); a function over memrefs
becomes a generalized ufunc with a layout such as ``"(n),(n)->()"``, as numba's
``@vectorize`` and ``@guvectorize`` do.

>>> import numpy as np
>>> add = mlir_ufunc(source='''
... func.func @add(%a: f64, %b: f64) -> f64 {
...   %r = arith.addf %a, %b : f64
...   return %r : f64
... }''')
>>> isinstance(add, np.ufunc), add(np.arange(3.0), 1.0).tolist(), float(add.reduce([1.0, 2.0]))
(True, [1.0, 2.0, 3.0], 3.0)

numpy's inner loop, ``void loop(char **args, npy_intp const *dimensions, npy_intp const
*steps, void *data)``, is generated in MLIR beside the user's function, in the same
module: a loop over the whole array that calls the function (which LLVM inlines), with a
path for contiguous operands that LLVM vectorizes. numpy runs it without the GIL. The
ufunc owns the compiled code: it lives as long as the ufunc (see :func:`ffi.ufunc_keep_alive`).
"""

from __future__ import annotations

import ctypes
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .boundary import ffi
from .boundary.failures import FAIL_SYMBOL
from .boundary.signature import Signature, from_func_op
from .boundary.sourcelines import read_mlir_file
from .boundary.types import MemRefType, ScalarType, Type, to_type
from .codegen.ufunc_loops import Operand, gufunc_loop, ufunc_loop
from .errors import MLIRError, SignatureError
from .generic import _header, describe, free_aliases
from .lowering.builtsource import built_text
from .lowering.pipeline import new_context, parse_module
from .session import CompiledModule, Session, default_session

__all__ = ["mlir_gufunc", "mlir_ufunc"]

#: numpy's identity codes (``ufuncobject.h``).
_IDENTITY_NONE, _IDENTITY_REORDERABLE, _IDENTITY_VALUE = -1, -2, -3
# Ufuncs whose code could not be tied to them (an unknown numpy struct layout): kept for
# the life of the process.
_NEVER_FREED: list[object] = []


def mlir_ufunc(*, source: str | Path | Any, types: Sequence[Any] | None = None,
               name: str | None = None, identity: Any = None, doc: str | None = None,
               pipeline: str | Sequence[str] | None = None, opt_level: int | None = None,
               shared_libs: Iterable[str] | None = None, session: Session | None = None,
               cache: bool | None = None, fastmath: bool | None = None) -> np.ufunc:
    """A :class:`numpy.ufunc` from the scalar MLIR function ``@name`` of ``source``
    (default: its only public function): scalar parameters (the ufunc's inputs) and one
    or more scalar results (its outputs). Compiled now.

    A generic source (type aliases such as ``!T`` left undefined, see
    :mod:`pymlirjit.generic`) takes ``types``: one loop per entry, an MLIR type (or
    pymlirjit/numpy type) when the source has one alias, a dict ``{"T": "f32", ...}``
    otherwise. numpy picks the first loop the inputs cast to safely: list narrow types
    first (``["f32", "f64"]``).

    ``identity``: ``None`` (reductions of empty arrays fail, and ``reduce`` runs over
    one axis at a time), ``"reorderable"`` (no identity, but the function is associative
    and commutative: ``reduce`` over several axes), or a value (``0`` for a sum).
    The session options (``pipeline``, ``opt_level``, ``shared_libs``, ``session``,
    ``cache``, ``fastmath``) are :func:`~pymlirjit.mlir_kernel`'s.

    A function that calls a Python ``@callback`` is refused (:class:`TypeError`): numpy
    runs the loop without the GIL, in any thread. Integer division by zero follows
    numpy's error model (numba's ``error_model="numpy"``): the result is 0 and numpy
    warns, or raises ``FloatingPointError``, as ``np.errstate`` says.
    """
    builder = _Builder("mlir_ufunc", source, types, name, pipeline, opt_level, shared_libs,
                       session, cache, fastmath)
    return builder.make(None, identity, doc)


def mlir_gufunc(*, source: str | Path | Any, layout: str, types: Sequence[Any] | None = None,
                name: str | None = None, doc: str | None = None,
                pipeline: str | Sequence[str] | None = None, opt_level: int | None = None,
                shared_libs: Iterable[str] | None = None, session: Session | None = None,
                cache: bool | None = None, fastmath: bool | None = None) -> np.ufunc:
    """A generalized :class:`numpy.ufunc` (numba's ``@guvectorize``) from the MLIR
    function ``@name`` of ``source``, with ``layout`` its core dimensions, as numpy
    writes them: ``"(n),(n)->()"``.

    The function's parameters are the inputs, then the outputs it writes: an argument
    with core dimensions is a memref of that rank (``memref<?xf64>``); one without is a
    scalar (an input) or a rank-0 memref. Trailing outputs without core dimensions may
    instead be the function's results. A memref with the identity layout receives only
    operands contiguous in their core dimensions (otherwise the call raises
    :class:`ValueError`); declare ``memref<?xf64, strided<[?], offset: ?>>`` to take any
    strides. ``types`` and the session options are as for :func:`mlir_ufunc`.
    """
    builder = _Builder("mlir_gufunc", source, types, name, pipeline, opt_level, shared_libs,
                       session, cache, fastmath)
    return builder.make(_parse_layout(layout, builder.what), None, doc)


_FUNC = re.compile(r"func\.func\s+(private\s+)?@([\w$.]+)")
_DIMS = re.compile(r"\(\s*([^()]*?)\s*\)")


def _parse_layout(layout: str, what: str) -> tuple[list[list[str]], list[list[str]]]:
    """(inputs, outputs), each a list of core dimension names per argument."""
    if not isinstance(layout, str) or "->" not in layout:
        raise ValueError(f"{what}: layout must be a string like '(n),(n)->()', got {layout!r}")
    sides = []
    for side in layout.replace(" ", "").split("->", 1):
        if _DIMS.sub("", side).replace(",", ""):
            raise ValueError(f"{what}: cannot read layout {layout!r}: expected a list of "
                             f"parenthesized dimension names on each side of '->'")
        args = []
        for group in _DIMS.findall(side):
            dims = [d for d in group.split(",") if d] if group else []
            for d in dims:
                if not re.fullmatch(r"[A-Za-z_]\w*", d):
                    raise ValueError(f"{what}: layout {layout!r}: core dimension {d!r} is "
                                     f"not a name (fixed or optional sizes are not supported)")
            args.append(dims)
        sides.append(args)
    if not sides[0] or not sides[1]:
        raise ValueError(f"{what}: layout {layout!r} needs at least one input and one output")
    return sides[0], sides[1]


class _Builder:
    """Compiles one loop per binding of the source's type aliases; makes the ufunc."""

    def __init__(self, kind: str, source: Any, types: Sequence[Any] | None, name: str | None,
                 pipeline: Any, opt_level: int | None, shared_libs: Iterable[str] | None,
                 session: Session | None, cache: bool | None, fastmath: bool | None) -> None:
        if isinstance(source, Path):
            text = read_mlir_file(source)
        elif isinstance(source, str):
            text = source
        else:
            text = built_text(source() if callable(source) else source)
        self.kind, self.text, self.name = kind, text, name
        self.what = f"{kind} {name!r}" if name else kind
        self.session = session if session is not None else default_session()
        self.compile_options = dict(pipeline=pipeline, opt_level=opt_level,
                                    shared_libs=shared_libs, fastmath=fastmath, cache=cache,
                                    error_model="numpy")
        self.bindings = _bindings(free_aliases(text), types, self.what)

    def make(self, layout: tuple[list[list[str]], list[list[str]]] | None, identity: Any,
             doc: str | None) -> np.ufunc:
        loops: list[tuple[int, list[Operand]]] = []
        keep: list[object] = []
        described = []
        nin = 0
        for binding in self.bindings:
            prefix = " ".join(f"!{a} = {t}" for a, t in binding.items())
            text = (prefix + " " + self.text) if prefix else self.text
            where = f"{self.what} bound to {describe(binding)}" if binding else self.what
            name, signature = self._function(text, where)
            self.what, self.function = f"{self.kind} {name!r}", name
            described.append(signature.mlir)
            where = f"{self.what} bound to {describe(binding)}" if binding else self.what
            loop_name = _free_symbol(text, f"{name}_numpy_loop")
            if layout is None:
                operands = _scalar_operands(signature, where)
                loop_text = ufunc_loop(loop_name, name, signature, operands)
                nin = len(signature.params)
            else:
                operands = _core_operands(signature, layout, where)
                loop_text = gufunc_loop(loop_name, name, signature, operands, layout)
                nin = len(layout[0])
            module = self._compile(text + "\n" + loop_text, where)
            if FAIL_SYMBOL in module.callbacks:  # checked mode's: not the user's
                raise TypeError(f"{where}: @{name} has a check that can fail at run time "
                                f"(a cf.assert); a ufunc loop cannot raise, so ufuncs take "
                                f"only code that cannot fail (compute a NaN or a flag "
                                f"output with arith.select instead, or use @mlir_kernel, "
                                f"whose cf.assert raises AssertionError)")
            if module.callbacks:
                raise TypeError(f"{where}: @{name} calls the Python callback(s) "
                                f"{', '.join('@' + n for n in sorted(module.callbacks))}; a "
                                f"ufunc loop runs without the GIL and cannot call Python "
                                f"(compute it in MLIR, or use @mlir_kernel)")
            keep.append(module)
            loops.append((module.engine.function_address(loop_name), operands))
        if doc is None:
            doc = f"{self.what}: @{self.function} compiled from MLIR, {'; '.join(described)}"
        return self._ufunc(loops, nin, layout, identity, doc, keep)

    def _function(self, text: str, where: str) -> tuple[str, Signature]:
        """The name and signature of the ufunc's function in ``text`` (parsed)."""
        from mlir import ir

        context = new_context()
        try:
            module = parse_module(text, context)
        except MLIRError as exc:
            public = [n for private, n in _FUNC.findall(text) if not private]
            if self.name is None and len(public) == 1:  # name it as later messages do
                where = where.replace(self.kind, f"{self.kind} {public[0]!r}", 1)
            raise MLIRError(f"{where}: {exc.summary}", exc.diagnostics) from exc
        found = {}
        for op in module.body.operations:
            if op.operation.name != "func.func" or len(op.regions[0].blocks) == 0:
                continue
            attributes = op.operation.attributes
            private = ("sym_visibility" in attributes
                       and ir.StringAttr(attributes["sym_visibility"]).value == "private")
            found[ir.StringAttr(attributes["sym_name"]).value] = (op, private)
        if self.name is not None:
            if self.name not in found:
                raise SignatureError(f"{where}: the source defines no func.func @{self.name} "
                                     f"(it defines: {', '.join(sorted(found)) or 'none'})")
            name = self.name
        else:
            public = [n for n, (_, private) in found.items() if not private]
            if len(public) != 1:
                raise SignatureError(f"{where}: the source defines {len(public)} public "
                                     f"functions ({', '.join(public) or 'none'}); say which "
                                     f"one with name=...")
            name = public[0]
        try:
            with context:
                signature = from_func_op(found[name][0])
        except SignatureError as exc:
            raise SignatureError(f"{self.kind} {name!r}: {exc}") from None
        try:  # the source's names for the parameters, for messages
            names = [ssa for ssa, _ in _header(text, name)]
        except SignatureError:
            names = []
        if len(names) == len(signature.params):
            signature = signature.with_names(names)
        return name, signature

    def _compile(self, text: str, where: str) -> CompiledModule:
        try:
            return self.session.compile(text, **self.compile_options)
        except MLIRError as exc:
            raise MLIRError(f"{where}: {exc.summary}", exc.diagnostics) from exc

    def _ufunc(self, loops: list[tuple[int, list[Operand]]], nin: int,
               layout: tuple[list[list[str]], list[list[str]]] | None, identity: Any,
               doc: str, keep: list[object]) -> np.ufunc:
        nargs = len(loops[0][1])
        functions = (ctypes.c_void_p * len(loops))(*[address for address, _ in loops])
        data = (ctypes.c_void_p * len(loops))()
        type_numbers = bytes(_type_number(o.scalar, self.what) for _, os in loops for o in os)
        types = ctypes.create_string_buffer(type_numbers, len(type_numbers))
        seen = set()
        for _, operands in loops:
            key = tuple(o.scalar.dtype for o in operands[:nin])
            if key in seen:
                raise ValueError(f"{self.what}: two loops take the same input types "
                                 f"({', '.join(o.scalar.mlir for o in operands[:nin])}): "
                                 f"numpy would only ever run the first")
            seen.add(key)
        name, text = self.function.encode(), doc.encode()
        code, value = _identity(identity, self.what, layout is None and nin == 2
                                and nargs == 3)
        signature = None
        if layout is not None:
            signature = _layout_text(layout).encode()
            blocks = [_error_block(self.what, layout, operands) for _, operands in loops]
            keep.extend(blocks)
            for i, (block, _) in enumerate(blocks):
                data[i] = ctypes.addressof(block)
        ufunc = ffi.ufunc_from_loops(ctypes.addressof(functions), ctypes.addressof(data),
                                     ctypes.addressof(types), len(loops), nin, nargs - nin,
                                     code, name, text, signature, value)
        keep_alive = (tuple(keep), functions, data, types, name, text, signature)
        if not ffi.ufunc_keep_alive(ufunc, ctypes.addressof(functions), ctypes.addressof(data),
                                    ctypes.addressof(types), keep_alive):
            _NEVER_FREED.append(keep_alive)
        assert isinstance(ufunc, np.ufunc)
        return ufunc


def _bindings(aliases: tuple[str, ...], types: Sequence[Any] | None,
              what: str) -> list[dict[str, str]]:
    """One binding (alias -> MLIR type) per loop: ``[{}]`` for a source without alias."""
    if not aliases:
        if types is not None:
            raise TypeError(f"{what}: types= is for generic sources (type aliases such as "
                            f"!T left undefined); this source has none")
        return [{}]
    if types is None or isinstance(types, (str, dict)) or not len(types):
        raise TypeError(f"{what}: the source is generic over "
                        f"{', '.join('!' + a for a in aliases)}: pass types=[...] (one loop "
                        f"per entry, e.g. types=['f32', 'f64'])")
    bindings = []
    for i, entry in enumerate(types):
        if not isinstance(entry, Mapping):
            if len(aliases) != 1:
                raise TypeError(f"{what}: types[{i}]: the source has several aliases "
                                f"({', '.join('!' + a for a in aliases)}): give a dict "
                                f"such as {{{', '.join(repr(a) + ': ...' for a in aliases)}}}")
            entry = {aliases[0]: entry}
        if set(entry) != set(aliases):
            raise TypeError(f"{what}: types[{i}] binds {sorted(entry)}; the source's aliases "
                            f"are {list(aliases)}")
        bindings.append({a: _mlir_type(entry[a], f"{what}: types[{i}] (!{a})")
                         for a in aliases})
    return bindings


def _mlir_type(value: Any, what: str) -> str:
    try:
        return value if isinstance(value, str) else to_type(value).mlir
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None


def _free_symbol(text: str, base: str) -> str:
    name = base
    while "@" + name in text:
        name += "_"
    return name


def _scalar_operands(signature: Signature, what: str) -> list[Operand]:
    if not signature.results:
        raise SignatureError(f"{what}: a ufunc's function returns one or more scalars; "
                             f"it returns nothing ({signature.mlir})")
    if not signature.params:
        raise SignatureError(f"{what}: a ufunc's function takes one or more scalars; it "
                             f"takes none ({signature.mlir})")
    operands = []
    for i, p in enumerate(signature.params):
        operands.append(Operand(_scalar(p.type, f"{what}: parameter #{i} ({p.name})",
                                        signature), "input"))
    for i, t in enumerate(signature.results):
        operands.append(Operand(_scalar(t, f"{what}: result #{i}", signature), "result"))
    return operands


def _scalar(t: Type, what: str, signature: Signature) -> ScalarType:
    if not isinstance(t, ScalarType):
        raise SignatureError(f"{what} is {t.mlir}: a ufunc takes and returns scalars only "
                             f"({signature.mlir}); use mlir_gufunc for arrays")
    return t


def _core_operands(signature: Signature, layout: tuple[list[list[str]], list[list[str]]],
                   what: str) -> list[Operand]:
    inputs, outputs = layout
    args = inputs + outputs
    params, results = signature.params, signature.results
    if len(params) + len(results) != len(args) or len(params) < len(inputs):
        raise SignatureError(f"{what}: layout {_layout_text(layout)} has {len(inputs)} "
                             f"input(s) and {len(outputs)} output(s); the function "
                             f"({signature.mlir}) takes {len(params)} parameter(s) and "
                             f"returns {len(results)} result(s): it should take the inputs "
                             f"then the outputs it writes, and may return trailing "
                             f"outputs without core dimensions")
    operands = []
    for k, dims in enumerate(args):
        role = "input" if k < len(inputs) else "output"
        if k < len(params):
            t = params[k].type
            label = f"{what}: parameter #{k} ({params[k].name}, {t.mlir})"
            if isinstance(t, MemRefType):
                if t.rank != len(dims):
                    raise SignatureError(f"{label} has rank {t.rank}; the layout gives "
                                         f"argument {k} the core dimensions "
                                         f"({', '.join(dims)}) (rank {len(dims)})")
                if t.strides is not None and t.offset not in (None, 0):
                    raise SignatureError(f"{label}: a static offset other than 0 is not "
                                         f"supported (declare offset: ?)")
                element = _scalar(t.element, label, signature)
                operands.append(Operand(element, role, t, dims))
                continue
            if dims or role == "output":
                raise SignatureError(f"{label}: argument {k} of the layout is "
                                     f"{'an output' if role == 'output' else 'an array'} "
                                     f"({', '.join(dims)}): expected a memref of rank "
                                     f"{len(dims)}")
            operands.append(Operand(_scalar(t, label, signature), role))
        else:
            t = results[k - len(params)]
            label = f"{what}: result #{k - len(params)} ({t.mlir})"
            if dims:
                raise SignatureError(f"{label}: output {k - len(inputs)} has core "
                                     f"dimensions ({', '.join(dims)}): write it through a "
                                     f"memref parameter instead")
            operands.append(Operand(_scalar(t, label, signature), "result"))
    return operands


def _layout_text(layout: tuple[list[list[str]], list[list[str]]]) -> str:
    return "->".join(",".join("(" + ",".join(d) + ")" for d in side) for side in layout)


def _type_number(t: ScalarType, what: str) -> int:
    number = int(t.dtype.num)
    if number >= 256:  # a dtype of another package (ml_dtypes): not a legacy type number
        raise TypeError(f"{what}: {t.mlir} ({t.dtype}) is not a numpy built-in type: "
                        f"ufunc loops over it are not supported")
    return number


def _identity(identity: Any, what: str, binary: bool) -> tuple[int, object]:
    if identity is None:
        return _IDENTITY_NONE, None
    if not binary:
        raise ValueError(f"{what}: identity= is for binary functions with one result "
                         f"(the ones numpy reduces)")
    if identity == "reorderable":
        return _IDENTITY_REORDERABLE, None
    if isinstance(identity, str) or not isinstance(identity, (numbers.Number, np.generic)):
        raise ValueError(f"{what}: identity must be None, 'reorderable' or a number, "
                         f"got {identity!r}")
    return _IDENTITY_VALUE, identity


def _error_block(what: str, layout: tuple[list[list[str]], list[list[str]]],
                 operands: list[Operand]) -> Any:
    """What a gufunc loop raises with when an operand does not fit its memref: the
    C functions it calls (the GIL taken back), the exception type and one message per
    argument."""
    args = layout[0] + layout[1]
    messages = []
    for k, (dims, operand) in enumerate(zip(args, operands)):
        memref = operand.memref
        need = ("contiguous in its core dimensions" if memref is None or memref.strides is None
                else "with core strides that are multiples of its itemsize (and equal to "
                     "those it declares)")
        if memref is not None and any(d is not None for d in memref.shape):
            shape = ", ".join("?" if d is None else str(d) for d in memref.shape)
            need += f", of core shape ({shape})"
        messages.append(ctypes.create_string_buffer(
            f"{what}: argument {k} (core dimensions ({', '.join(dims)})) does not fit "
            f"parameter #{k} ({memref}): it takes an operand {need}; pass "
            f"np.ascontiguousarray(...), or declare a strided layout "
            f"(memref<..., strided<[?, ...], offset: ?>>) to take any strides".encode()))
    block = (ctypes.c_void_p * (4 + len(args)))(
        ffi.python_api_address("PyGILState_Ensure"), ffi.python_api_address("PyErr_SetString"),
        ffi.python_api_address("PyGILState_Release"), id(ValueError),
        *[ctypes.addressof(m) for m in messages])
    return block, messages
