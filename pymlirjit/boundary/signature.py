"""Signatures: the parameters and results of a function, from any of their spellings.

:func:`as_signature` is the one entry point that normalizes a signature, whether it is
given as a :class:`Signature`, an MLIR function type string, or read from a Python
function's annotations. :func:`from_func_op` reads one from a ``func.func`` in a module.

>>> from pymlirjit import f32, i32
>>> def scale(x: f32, k: i32) -> f32: ...
>>> as_signature(None, scale)
Signature('(f32, i32) -> f32')
>>> as_signature("(f32, memref<?xf32>) -> f64").params[1].type
memref<?xf32>
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, get_args, get_origin

from ..errors import SignatureError
from .sparseformat import FORMATS
from .typeparser import parsed_type
from .types import (
    SCALARS,
    MemRefType,
    ScalarType,
    SparseTensorType,
    TensorType,
    Type,
    UnrankedMemRefType,
    ptr,
    to_type,
)

__all__ = ["Parameter", "Signature", "argument_label", "as_signature", "check_annotation",
           "decode_signature", "encode_signature", "from_func_op"]


def argument_label(index: int, name: str) -> str:
    """How errors name parameter ``index`` (from 0): ``argument 2 ('k')``, counting from
    1, or ``argument 2`` where the name is only the positional ``arg1`` MLIR gives."""
    if name == f"arg{index}":
        return f"argument {index + 1}"
    return f"argument {index + 1} ({name!r})"


@dataclass(frozen=True)
class Parameter:
    """One parameter: its name (``arg<i>`` where MLIR gives none) and type;
    ``read_only``: a memref the function provably never writes, for which a read-only
    array may pass (not part of equality: the types are the signature)."""

    name: str
    type: Type
    read_only: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Signature:
    """Parameter and result types of a function; immutable, usable as a cache key."""

    params: tuple[Parameter, ...]
    results: tuple[Type, ...]

    @classmethod
    def of(cls, params: Sequence[Type], results: Sequence[Type]) -> Signature:
        """Build a signature with positional names ``arg0, arg1, ...``."""
        return cls(tuple(Parameter(f"arg{i}", t) for i, t in enumerate(params)), tuple(results))

    @property
    def param_types(self) -> tuple[Type, ...]:
        return tuple(p.type for p in self.params)

    @property
    def mlir(self) -> str:
        """The MLIR function type, e.g. ``(f32, i32) -> f32``."""
        params = ", ".join(t.mlir for t in self.param_types)
        if len(self.results) == 1:
            results = self.results[0].mlir
        else:
            results = "(" + ", ".join(t.mlir for t in self.results) + ")"
        return f"({params}) -> {results}"

    def __repr__(self) -> str:
        return f"Signature({self.mlir!r})"

    def with_names(self, names: Sequence[str]) -> Signature:
        """The same types, with the given parameter names."""
        return Signature(
            tuple(Parameter(n, p.type, p.read_only) for n, p in zip(names, self.params)),
            self.results
        )

    def with_read_only(self, positions: Container[int]) -> Signature:
        """The same signature, the parameters at ``positions`` marked ``read_only``."""
        return Signature(tuple(replace(p, read_only=True) if i in positions else p
                               for i, p in enumerate(self.params)), self.results)

    def check_matches(self, actual: Signature, what: str, expected_from: str,
                      actual_from: str, annotated: bool = True) -> None:
        """Raise :class:`SignatureError` unless ``actual`` fits this signature.

        A memref annotated without a layout fits any layout of the same element type and
        shape. The message names ``what``, shows both sides and the first difference
        (and, where this signature comes from Python annotations, ``annotated``, how to
        annotate a scalar of another width).
        """
        difference = self._first_difference(actual, annotated)
        if difference is None:
            return
        raise SignatureError(
            f"{what}: {expected_from} and {actual_from} disagree: {difference}\n"
            f"  {expected_from}: {self.mlir}\n  {actual_from}: {actual.mlir}"
        )

    def _first_difference(self, actual: Signature, annotated: bool) -> str | None:
        hint = _width_hint if annotated else lambda mine, theirs: ""
        if len(self.params) != len(actual.params):
            return f"{len(self.params)} parameters versus {len(actual.params)}"
        for i, (mine, theirs) in enumerate(zip(self.params, actual.params)):
            if not _fits(mine.type, theirs.type):
                return (f"{argument_label(i, mine.name)}: "
                        f"{mine.type.mlir} versus {theirs.type.mlir}"
                        f"{hint(mine.type, theirs.type)}")
        if len(self.results) != len(actual.results):
            return f"{len(self.results)} results versus {len(actual.results)}"
        for i, (mine_r, theirs_r) in enumerate(zip(self.results, actual.results)):
            if not _fits(mine_r, theirs_r):
                return (f"result #{i}: {mine_r.mlir} versus {theirs_r.mlir}"
                        f"{hint(mine_r, theirs_r)}")
        return None


#: Python's number types, as annotations: any width of their kind (numba's reading).
_ANY_WIDTH = {int: "int", float: "float", complex: "complex"}


def check_annotation(annotation: Any, actual: Type, what: str, context: str) -> None:
    """Raise :class:`SignatureError` unless a stub's ``annotation`` admits the MLIR type
    ``actual``; ``what`` names the parameter or result, ``context`` the MLIR signature.

    ``int`` admits every integer type (``i8`` to ``i64``, ``index``), ``float`` every float
    type, ``complex`` every complex type, ``numpy.ndarray`` (and ``Any``) every type;
    ``Annotated[T, x]`` is read as :func:`pymlirjit.boundary.types.to_type` reads it; a memref
    annotated without a layout admits any layout. Annotations pymlirjit does not spell
    (documentation only) admit anything.
    """
    import numpy as np

    from .types import to_type

    base = get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
    if annotation is Any or base is np.ndarray or get_origin(base) is np.ndarray:
        try:  # Annotated[np.ndarray, MemRef[...]] still says which memref
            expected = to_type(annotation)
        except TypeError:
            return
    elif isinstance(annotation, type) and annotation in _ANY_WIDTH:
        if isinstance(actual, ScalarType) and actual.kind == _ANY_WIDTH[annotation]:
            return
        raise SignatureError(f"{what}: the stub says {annotation.__name__}, MLIR has "
                             f"{actual.mlir} ({context})")
    else:
        try:
            expected = to_type(annotation)
        except TypeError:
            return  # not a type pymlirjit spells (e.g. a documentation-only annotation)
    if not _fits(expected, actual):
        raise SignatureError(f"{what}: the stub says {expected.mlir}, MLIR has {actual.mlir} "
                             f"({context})")


_KIND_ANNOTATION = {"int": "int", "float": "float", "complex": "complex", "bool": "bool"}


def _width_hint(mine: Type, theirs: Type) -> str:
    """For two scalars of one kind: how to annotate the second (a callback annotated with
    an explicit width takes only that width)."""
    if not (isinstance(mine, ScalarType) and isinstance(theirs, ScalarType)
            and mine.kind == theirs.kind):
        return ""
    from . import types

    name = next((n for n in types.__all__ if getattr(types, n) is theirs), theirs.mlir)
    return (f" (annotate it as pymlirjit.{name}, or as {_KIND_ANNOTATION[theirs.kind]} "
            f"for any width of its kind)")


def _fits(annotation: Type, actual: Type) -> bool:
    if isinstance(annotation, MemRefType) and isinstance(actual, MemRefType):
        return actual.same_as_annotation(annotation)
    return annotation == actual


def as_signature(spec: Signature | str | None, function: Callable[..., Any] | None = None,
                 ) -> Signature:
    """Normalize a signature given as a :class:`Signature`, an MLIR function type string,
    or (``spec=None``) read from ``function``'s annotations. A spec given with a
    ``function`` must be one it can be called with, by position (else SignatureError)."""
    if isinstance(spec, (Signature, str)):
        signature = spec if isinstance(spec, Signature) else _from_function_type_string(spec)
        if function is not None:
            _check_arity(function, len(signature.param_types))
        return signature
    if spec is not None:
        raise TypeError(f"a signature is a Signature or an MLIR function type string, "
                        f"got {type(spec).__name__}")
    if function is None:
        raise TypeError("a signature needs either a spec or an annotated function")
    return from_annotations(function)


def _check_arity(function: Callable[..., Any], count: int) -> None:
    """SignatureError unless ``function`` takes ``count`` positional arguments (as
    compiled code passes them); a function without an inspectable signature passes."""
    if _plain_function_takes(function, count):
        return  # the common case, without inspect.signature's ~15 us (a first unpickling)
    try:
        inspect.signature(function).bind(*range(count))
    except ValueError:
        return
    except TypeError as exc:
        raise SignatureError(f"{function_name(function)}: its signature has {count} "
                             f"parameter(s), but the function cannot take {count} "
                             f"positional argument(s) ({exc})") from None


def _plain_function_takes(function: Any, count: int) -> bool:
    """Whether ``function`` is a plain Python function that certainly takes ``count``
    positional arguments (False: not known this way)."""
    code = getattr(function, "__code__", None)
    if not inspect.isfunction(function) or code is None:
        return False
    defaults = len(function.__defaults__ or ())
    kwonly_defaults = function.__kwdefaults__ or {}
    takes_any = bool(code.co_flags & inspect.CO_VARARGS)
    return (code.co_argcount - defaults <= count
            and (count <= code.co_argcount or takes_any)
            and len(kwonly_defaults) == code.co_kwonlyargcount)

def function_name(function: Any) -> str:
    """The name of a function, or of the function a ``functools.partial`` wraps."""
    while isinstance(function, functools.partial):
        function = function.func
    name = getattr(function, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"@callback: {function!r} has no __name__: pass name=...")
    return name


def annotations_of(function: Callable[..., Any]) -> dict[str, Any]:
    """``function``'s annotations, evaluated (strings included), as written."""
    # Not typing.get_type_hints: Python 3.10's rejects values such as MemRef[f32, 1]
    # ("Forward references must evaluate to types") and adds Optional to parameters
    # defaulting to None.
    while True:  # a partial's are its function's (also under a Callback of one)
        if isinstance(function, functools.partial):
            function = function.func
        elif isinstance(getattr(function, "__wrapped__", None), functools.partial):
            function = function.__wrapped__  # type: ignore[attr-defined]
        else:
            break
    return inspect.get_annotations(function, eval_str=True)


def from_annotations(function: Callable[..., Any]) -> Signature:
    """Read a signature from ``function``'s annotations; every one must be present.

    The return annotation may be ``None`` (no result), a type, or ``tuple[T, ...]``
    for several results. Of a ``functools.partial``, the parameters it leaves unbound
    (those it binds by keyword are left out; compiled code passes the rest by position).
    """
    name = getattr(function, "__qualname__", repr(function))
    try:
        hints = annotations_of(function)
    except Exception as exc:
        raise SignatureError(f"{name}: cannot evaluate its annotations: {exc}") from exc
    params = []
    bound = _bound_by_keyword(function)
    for param in inspect.signature(function).parameters.values():
        if param.name in bound:
            continue
        if bound and param.kind is param.KEYWORD_ONLY:
            raise SignatureError(f"{name}: parameter {param.name!r} follows one the partial "
                                 f"binds by keyword ({', '.join(sorted(bound))}), so it can "
                                 f"only be passed by keyword, and compiled code passes "
                                 f"arguments by position: bind the last parameters instead")
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise SignatureError(f"{name}: *args and **kwargs cannot cross the MLIR boundary")
        if param.name not in hints:
            raise SignatureError(f"{name}: parameter {param.name!r} has no type annotation")
        params.append(Parameter(param.name, _annotation_type(hints[param.name], name,
                                                             f"parameter {param.name!r}")))
    if "return" not in hints:
        raise SignatureError(f"{name}: the return type is not annotated (use -> None)")
    return Signature(tuple(params), _result_types(hints["return"], name))


def _bound_by_keyword(function: Callable[..., Any]) -> set[str]:
    bound: set[str] = set()
    while isinstance(function, functools.partial):
        bound |= set(function.keywords)
        function = function.func
    return bound


def _annotation_type(annotation: Any, name: str, what: str) -> Type:
    try:
        return to_type(annotation)
    except TypeError as exc:
        raise SignatureError(f"{name}: {what}: {exc}") from exc


def _result_types(annotation: Any, name: str) -> tuple[Type, ...]:
    if annotation is None or annotation is type(None):
        return ()
    if get_origin(annotation) is tuple:
        return tuple(_annotation_type(a, name, f"result #{i}")
                     for i, a in enumerate(get_args(annotation)))
    return (_annotation_type(annotation, name, "result"),)


def _from_function_type_string(text: str) -> Signature:
    from mlir import ir

    with parsed_type(text, lambda reason: SignatureError(
            f"cannot parse MLIR function type {text!r}: {reason}")) as parsed:
        if not isinstance(parsed, ir.FunctionType):
            raise SignatureError(f"{text!r} is not an MLIR function type like '(f32) -> f32'")
        return _from_function_type(parsed, repr(text))


def _from_function_type(function_type: Any, where: str) -> Signature:
    from .types import from_mlir

    try:
        params = [from_mlir(t) for t in function_type.inputs]
        results = [from_mlir(t) for t in function_type.results]
    except TypeError as exc:
        raise SignatureError(f"{where}: {exc}") from exc
    return Signature.of(params, results)


def from_func_op(func_op: Any) -> Signature:
    """Read the signature of a ``func.func`` operation from the MLIR Python bindings."""
    from mlir import ir

    name = ir.StringAttr(func_op.attributes["sym_name"]).value
    function_type = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    return _from_function_type(function_type, f"@{name}")


# The serialized form (the disk cache stores it; read back without MLIR).

def encode_signature(signature: Signature) -> dict[str, Any]:
    """A JSON-ready description of ``signature`` (read back without MLIR)."""
    return {"params": [[p.name, _encode_type(p.type), *[True] * p.read_only]
                       for p in signature.params],
            "results": [_encode_type(t) for t in signature.results]}


def decode_signature(data: dict[str, Any]) -> Signature:
    return Signature(tuple(Parameter(name, _decode_type(t), bool(read_only))
                           for name, t, *read_only in data["params"]),
                     tuple(_decode_type(t) for t in data["results"]))


def _encode_type(t: Type) -> Any:
    if isinstance(t, ScalarType):
        return t.mlir
    if isinstance(t, MemRefType):
        return {"memref": t.element.mlir, "shape": list(t.shape),
                "strides": None if t.strides is None else list(t.strides), "offset": t.offset}
    if isinstance(t, UnrankedMemRefType):
        return {"unranked": t.element.mlir}
    if isinstance(t, SparseTensorType):
        return {"sparse": t.element.mlir, "shape": list(t.shape), "format": t.format.name,
                "widths": [t.pos_width, t.crd_width], "mlir": t.mlir}
    return {"tensor": t.element.mlir, "shape": list(t.shape)}


def _decode_type(data: Any) -> Type:
    if isinstance(data, str):
        return _SCALARS_BY_MLIR[data]
    if "memref" in data:
        strides = data["strides"]
        return MemRefType(_SCALARS_BY_MLIR[data["memref"]], tuple(data["shape"]),
                          None if strides is None else tuple(strides), data["offset"])
    if "unranked" in data:
        return UnrankedMemRefType(_SCALARS_BY_MLIR[data["unranked"]])
    if "sparse" in data:
        found = next(f for f in FORMATS if f.name == data["format"])
        pos_width, crd_width = data["widths"]
        return SparseTensorType(_SCALARS_BY_MLIR[data["sparse"]], tuple(data["shape"]), found,
                                pos_width, crd_width, data["mlir"])
    return TensorType(_SCALARS_BY_MLIR[data["tensor"]], tuple(data["shape"]))


_SCALARS_BY_MLIR = {t.mlir: t for t in (*SCALARS, ptr)}
