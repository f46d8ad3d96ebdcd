"""How a ``@jit`` call's arguments choose its specialization: the key of each argument
(cheap: every call computes it), its frontend type, the constraints of the parameter's
annotation, and the conversions at the boundary for types it lacks (unsigned integers,
optional results)."""

from __future__ import annotations

import inspect
from typing import Any, get_args, get_origin

import numpy as np

from ..boundary import types as pytypes
from .jtypes import (
    BOOL,
    WEAK_BOOL,
    WEAK_COMPLEX,
    WEAK_FLOAT,
    WEAK_INT,
    Array,
    JType,
    Optional,
    Scalar,
    Tuple,
    from_dtype,
)

__all__ = ["constrained", "converted", "eager", "jtype_of", "key_of", "signed",
           "unsigned_result"]


_PYTHON = {int: WEAK_INT, float: WEAK_FLOAT, bool: WEAK_BOOL, complex: WEAK_COMPLEX}


def key_of(value: Any) -> Any:
    """What a call's specialization depends on, per argument (cheap: every call)."""
    t = type(value)
    if t is np.ndarray:
        return (value.dtype, value.ndim, value.flags.c_contiguous)
    return t


def jtype_of(key: Any, value: Any, name: str) -> JType:
    if isinstance(key, tuple):
        dtype, ndim, contiguous = key
        if ndim == 0:
            raise TypeError(f"argument {name!r}: 0-d arrays are not supported; pass a scalar")
        try:
            return Array(from_dtype(dtype), ndim, contiguous)
        except TypeError as exc:
            raise TypeError(f"argument {name!r}: {exc}") from None
    if key in _PYTHON:
        return _PYTHON[key]
    if isinstance(value, np.ndarray):  # a subclass
        return jtype_of(key_of(np.asarray(value)), value, name)
    if isinstance(value, (np.bool_, np.integer, np.floating, np.complexfloating)):
        try:
            return from_dtype(value.dtype)
        except TypeError as exc:
            raise TypeError(f"argument {name!r}: {exc}") from None
    if isinstance(value, bool):
        return WEAK_BOOL
    if isinstance(value, int):
        return WEAK_INT
    if isinstance(value, float):
        return WEAK_FLOAT
    if isinstance(value, complex):
        return WEAK_COMPLEX
    raise TypeError(f"argument {name!r}: @jit functions take numbers and numpy arrays, "
                    f"got {type(value).__name__}")


def constrained(annotation: Any, actual: JType, name: str, fname: str) -> JType:
    """``actual`` as the annotation allows (TypeError naming the parameter if not)."""
    what = f"@jit {fname!r}: argument {name!r}"
    if annotation is inspect.Parameter.empty or annotation is Any:
        return actual
    if annotation in (int, float, bool, complex):
        if isinstance(actual, Scalar):
            if annotation is complex and actual.kind != "bool":
                return actual if actual.kind == "complex" else WEAK_COMPLEX
            if annotation is bool and actual.kind == "bool":
                return actual
            if annotation is int and actual.kind in ("int", "uint", "bool"):
                return WEAK_INT if actual.kind == "bool" else actual
            if annotation is float and actual.kind not in ("bool", "complex"):
                return actual if actual.kind == "float" else WEAK_FLOAT
        raise TypeError(f"{what} is annotated {annotation.__name__}, got {actual}")
    if annotation is np.ndarray or get_origin(annotation) is np.ndarray:
        args = get_args(get_args(annotation)[1]) if len(get_args(annotation)) > 1 else ()
        if not isinstance(actual, Array):
            raise TypeError(f"{what} is annotated an array, got {actual}")
        if args and args[0] is not Any and from_dtype(args[0]) != actual.dtype:
            raise TypeError(f"{what} is annotated an array of {np.dtype(args[0])}, got {actual}")
        return actual
    try:
        wanted = pytypes.to_type(annotation)
    except TypeError:
        return actual  # documentation only
    if isinstance(wanted, pytypes.ScalarType):
        exact = from_dtype(wanted.dtype) if wanted.mlir != "index" else Scalar("int", 64)
        if not isinstance(actual, Scalar) or (actual.kind == "float") != (exact.kind == "float"):
            raise TypeError(f"{what} is annotated {wanted.mlir}, got {actual}")
        return exact
    if isinstance(wanted, pytypes.MemRefType):
        if not isinstance(actual, Array) or actual.ndim != wanted.rank or \
                actual.dtype != from_dtype(wanted.element.dtype):
            raise TypeError(f"{what} is annotated {wanted.mlir}, got {actual}")
        return actual
    return actual


def eager(annotation: Any) -> JType | None:
    """The parameter type an annotation fixes without a value (for .compile())."""
    if annotation in (int, float, bool, complex):
        return {int: WEAK_INT, float: WEAK_FLOAT, bool: BOOL, complex: WEAK_COMPLEX}[annotation]
    try:
        wanted = pytypes.to_type(annotation)
    except TypeError:
        return None
    if isinstance(wanted, pytypes.ScalarType):
        return from_dtype(wanted.dtype) if wanted.mlir != "index" else Scalar("int", 64)
    if isinstance(wanted, pytypes.MemRefType):
        return Array(from_dtype(wanted.element.dtype), wanted.rank, wanted.strides is None)
    return None


def converted(t: JType) -> bool:
    """Whether values of ``t`` need converting at the boundary (unsigned, optional)."""
    if isinstance(t, Optional):
        return True
    if isinstance(t, Tuple):
        return any(converted(i) for i in t.items)
    if isinstance(t, Array) and t.dtype.kind == "bool":
        return True  # bools cross as bytes
    return (t.dtype if isinstance(t, Array) else t).kind == "uint" if isinstance(
        t, (Array, Scalar)) else False


def signed(args: tuple[Any, ...], unsigned: tuple[tuple[int, ...], JType]) -> list[Any]:
    out = list(args)
    for i in unsigned[0]:
        value = np.asarray(out[i])
        signed = value.view(np.int8 if value.dtype == np.bool_ else
                            value.dtype.str.replace("u", "i"))
        out[i] = signed if isinstance(out[i], np.ndarray) else signed[()]
    return out


def unsigned_result(value: Any, t: JType) -> Any:
    if isinstance(t, Optional):  # (flag, value): None where the function returned None
        return unsigned_result(value[1], t.item) if value[0] else None
    if isinstance(t, Tuple):
        return tuple(unsigned_result(v, i) for v, i in zip(value, t.items))
    if isinstance(t, Array) and t.dtype.kind in ("uint", "bool"):
        return value.view(t.dtype.dtype)
    if isinstance(t, Scalar) and t.kind == "uint":
        return t.dtype.type(int(value) & ((1 << t.bits) - 1))
    return value
