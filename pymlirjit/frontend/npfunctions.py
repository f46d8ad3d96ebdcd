"""Types of the numpy functions and array methods ``@jit`` compiles beyond ufuncs (for
:mod:`.infer_calls`): reductions with and without ``axis=``, ``np.dot``/``np.matmul``/``@``,
``np.outer``, ``np.cumsum``, ``np.arange``, ``np.linspace``, ``np.full``, ``np.copy``,
``np.transpose``/``.T``, ``.reshape``, ``.copy()``, ``.astype()``. Each call gets an
:class:`~.intrinsics.Intrinsic` of kind ``"numpy"`` whose ``op`` names it; the emitters are
:mod:`.emit_numpy`, :mod:`.emit_linalg` and :mod:`.reductions`. Any other numpy function
is a compile error naming it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np

from .intrinsics import Intrinsic, scalar_type_of
from .jtypes import F64, I64, Array, JType, Scalar, Tuple, from_dtype, literal_int

__all__ = ["NOT_HANDLED", "NumpyCall", "matmul_type", "numpy_type", "reduction_type",
           "unsupported_numpy"]

NOT_HANDLED = object()


@dataclass(frozen=True)
class NumpyCall(Intrinsic):
    """A call of this module's functions: ``op`` names it; ``axis`` is a reduction's axis
    (None: all), or the axes of a transpose."""

    axis: Any = None

_FUNCTIONS: dict[int, str] = {
    id(np.sum): "sum", id(np.prod): "prod", id(np.min): "min", id(np.amin): "min",
    id(np.max): "max", id(np.amax): "max", id(np.mean): "mean", id(np.argmin): "argmin",
    id(np.argmax): "argmax", id(np.any): "any", id(np.all): "all", id(np.dot): "dot",
    id(np.matmul): "matmul", id(np.outer): "outer", id(np.cumsum): "cumsum",
    id(np.arange): "arange", id(np.linspace): "linspace", id(np.full): "full",
    id(np.copy): "copy", id(np.transpose): "transpose"}
_FUNCTIONS = {k: v for k, v in _FUNCTIONS.items()}
_METHODS = ("sum", "prod", "min", "max", "mean", "argmin", "argmax", "any", "all", "cumsum",
            "copy", "astype", "reshape", "transpose", "dot")
REDUCTIONS = ("sum", "prod", "min", "max", "mean", "argmin", "argmax", "any", "all")


def reduction_type(dtype: Scalar, op: str) -> Scalar:
    """numpy's result type of ``a.op()`` for an array of ``dtype``."""
    if op in ("any", "all"):
        return Scalar("bool", 1)
    if op in ("argmin", "argmax"):
        return I64
    if op in ("min", "max"):
        return dtype
    if op == "mean":
        return dtype if dtype.kind in ("float", "complex") else F64
    if dtype.kind in ("float", "complex"):
        return dtype
    return Scalar("uint" if dtype.kind == "uint" else "int", 64)


def unsupported_numpy(func: Any) -> str | None:
    """The name of a numpy function @jit does not compile (None: not numpy's)."""
    module = getattr(func, "__module__", None) or ""
    if isinstance(func, np.ufunc) or module == "numpy" or module.startswith("numpy."):
        inner = module.split(".")[1:] if module.startswith("numpy.") else []
        public = [p for p in inner if not p.startswith("_")]  # np.linalg, not np._core
        return ".".join(["np", *public, getattr(func, "__name__", repr(func))])
    return None


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def numpy_type(inference: Any, node: ast.Call, func: Any) -> Any:
    """The type of ``node`` if it calls a function or method of this module (None: not
    known yet), else :data:`NOT_HANDLED`."""
    args = list(node.args)
    if func is None and isinstance(node.func, ast.Attribute) and node.func.attr in _METHODS:
        base = inference.expr(node.func.value)
        if not isinstance(base, Array):
            return NOT_HANDLED if base is not None else None
        name, args = node.func.attr, [node.func.value, *args]
    elif func is not None and id(func) in _FUNCTIONS and _FUNCTIONS[id(func)] is not None:
        name = _FUNCTIONS[id(func)]
    else:
        return NOT_HANDLED
    for k in node.keywords:
        allowed = {"axis"} if name in REDUCTIONS or name == "cumsum" else \
            {"dtype"} if name in ("full", "arange") else \
            {"num", "endpoint", "dtype"} if name == "linspace" else set()
        if k.arg not in allowed:
            raise inference.error(k.value, f"{name}() does not take {k.arg}= in @jit code")
    axes: dict[str, Any] = {}
    t = _typed(inference, node, name, args, axes)
    if t is not None:
        simple = name in ("sum", "prod", "min", "max", "mean") and isinstance(t, Scalar) \
            and t.kind != "bool" and len(node.args) == (0 if func is None else 1)
        inference.targets[node] = Intrinsic("reduce", name) if simple else \
            NumpyCall("numpy", name, axes.get("axis"))
    return t


def _array(inference: Any, node: ast.expr, name: str) -> Array | None:
    t = inference.expr(node)
    if t is not None and not isinstance(t, Array):
        raise inference.error(node, f"{name}() needs an array here, got {t}")
    return t


def _axis(inference: Any, node: ast.Call, args: list[ast.expr], ndim: int,
          name: str) -> int | None:
    given = _keyword(node, "axis")
    if given is None and len(args) > 1:
        given = args[1]
    if given is None or (isinstance(given, ast.Constant) and given.value is None):
        return None
    axis = literal_int(given)
    if axis is None:
        raise inference.error(given, f"{name}(): axis must be an integer literal")
    if not -ndim <= axis < ndim:
        raise inference.error(given, f"{name}(): axis {axis} is out of bounds for an array "
                              f"of dimension {ndim}")
    return axis % ndim


def _dtype(inference: Any, node: ast.expr) -> Scalar:
    found = scalar_type_of(node.value if isinstance(node, ast.Constant)
                           else inference._static(node))
    if found is None:
        raise inference.error(node, "dtype must be a numpy type known at compile time "
                              "(np.float32, float, 'int64')")
    return found


def _typed(inference: Any, node: ast.Call, name: str, args: list[ast.expr],
           found: dict[str, Any]) -> JType | None:
    if name in REDUCTIONS or name == "cumsum":
        a = _array(inference, args[0], name) if args else None
        if not args:
            raise inference.error(node, f"{name}() needs an array")
        if a is None:
            return None
        axis = _axis(inference, node, args, a.ndim, name)
        dtype = reduction_type(a.dtype, "sum" if name == "cumsum" else name)
        found["axis"] = axis
        if name == "cumsum":
            return Array(dtype, 1 if axis is None else a.ndim, True)
        found["axis"] = axis
        return dtype if axis is None or a.ndim == 1 else Array(dtype, a.ndim - 1, True)
    if name in ("dot", "matmul"):
        if len(args) != 2:
            raise inference.error(node, f"{name}() takes two arrays")
        a, b = inference.expr(args[0]), inference.expr(args[1])
        return None if a is None or b is None else matmul_type(inference, node, a, b)
    if name == "outer":
        if len(args) != 2:
            raise inference.error(node, "outer() takes two arrays")
        a, b = _array(inference, args[0], name), _array(inference, args[1], name)
        if a is None or b is None:
            return None
        product = np.multiply.resolve_dtypes((a.dtype.dtype, b.dtype.dtype, None))[-1]
        return Array(from_dtype(product), 2, True)
    if name in ("copy", "astype", "transpose", "reshape"):
        a = _array(inference, args[0], name) if args else None
        if a is None:
            return None
        if name == "copy":
            return Array(a.dtype, a.ndim, True)
        if name == "astype":
            if len(args) != 2:
                raise inference.error(node, "astype() takes a dtype")
            return Array(_dtype(inference, args[1]).strong, a.ndim, True)
        if name == "transpose":
            axes = _axes(inference, args[1:], a.ndim)
            found["axis"] = axes
            return Array(a.dtype, a.ndim, False) if a.ndim > 1 else a
        shape = args[1:]
        if len(shape) == 1 and isinstance(shape[0], ast.Tuple):
            shape = list(shape[0].elts)
        for s in shape:
            t = inference.expr(s)
            if t is not None and not (isinstance(t, Scalar) and t.is_int):
                raise inference.error(s, f"reshape() takes integers, got {t}")
        if not a.contiguous:
            raise inference.error(node, "reshape() of an array that may not be contiguous "
                                  "is not supported", "call .copy() first (a contiguous "
                                  "copy), then reshape it")
        if not shape:
            raise inference.error(node, "reshape() needs a shape")
        return Array(a.dtype, len(shape), True)
    if name == "arange":
        types = [inference.expr(a) for a in args]
        if not 1 <= len(types) <= 3 or any(t is not None and not isinstance(t, Scalar)
                                           for t in types):
            raise inference.error(node, "arange() takes 1 to 3 numbers")
        given = _keyword(node, "dtype")
        if given is not None:
            return Array(_dtype(inference, given).strong, 1, True)
        if any(isinstance(t, Scalar) and t.is_float for t in types):
            return Array(F64 if all(t is None or t.weak or t.bits == 64 for t in types)
                         else _widest(types), 1, True)
        return Array(I64, 1, True)
    if name == "linspace":
        if len(args) not in (2, 3):
            raise inference.error(node, "linspace() takes start, stop and num")
        for arg in args:
            t = inference.expr(arg)
            if t is not None and not isinstance(t, Scalar):
                raise inference.error(arg, f"linspace() takes numbers, got {t}")
        for key in ("num", "endpoint"):
            value = _keyword(node, key)
            if value is not None:
                inference.expr(value)
        given = _keyword(node, "dtype")
        return Array(_dtype(inference, given).strong if given is not None else F64, 1, True)
    assert name == "full"
    if len(args) not in (2, 3):
        raise inference.error(node, "full() takes a shape, a value and a dtype")
    shape, value = inference.expr(args[0]), inference.expr(args[1])
    if shape is None or value is None:
        return None
    if isinstance(shape, Scalar) and shape.is_int:
        ndim = 1
    elif isinstance(shape, Tuple) and all(isinstance(i, Scalar) and i.is_int
                                          for i in shape.items):
        ndim = len(shape.items)
    else:
        raise inference.error(args[0], f"a shape is an int or a tuple of ints, got {shape}")
    if not isinstance(value, Scalar):
        raise inference.error(args[1], f"full() fills with a number, got {value}")
    given = _keyword(node, "dtype") or (args[2] if len(args) == 3 else None)
    dtype = _dtype(inference, given) if given is not None else value
    if dtype.weak:
        dtype = {"int": I64, "float": F64, "bool": Scalar("bool", 1)}[dtype.kind]
    return Array(dtype.strong, ndim, True)


def _widest(types: list[JType | None]) -> Scalar:
    found = [t for t in types if isinstance(t, Scalar) and not t.weak]
    return from_dtype(np.result_type(*[t.dtype for t in found])) if found else F64


def _axes(inference: Any, args: list[ast.expr], ndim: int) -> tuple[int, ...]:
    if not args:
        return tuple(reversed(range(ndim)))
    items = args[0].elts if len(args) == 1 and isinstance(args[0], ast.Tuple) else args
    axes = [literal_int(i) for i in items]
    if any(a is None for a in axes) or sorted(a % ndim for a in axes if a is not None) != \
            list(range(ndim)) or len(axes) != ndim:
        raise inference.error(args[0], "transpose() takes a permutation of the axes as "
                              "integer literals")
    return tuple(a % ndim for a in axes if a is not None)


def matmul_type(inference: Any, node: ast.AST, a: JType, b: JType) -> JType:
    """The type of ``a @ b`` / ``np.dot(a, b)``: 1-D and 2-D arrays of numbers."""
    if not isinstance(a, Array) or not isinstance(b, Array) or a.ndim > 2 or b.ndim > 2:
        raise inference.error(node, f"matrix products of {a} and {b} are not supported",
                              "@ and np.dot take 1-D and 2-D arrays")
    found = np.matmul.resolve_dtypes((a.dtype.dtype, b.dtype.dtype, None))[-1]
    dtype = from_dtype(found)
    if dtype.kind == "bool":
        raise inference.error(node, "matrix products of bool arrays are not supported")
    ndim = a.ndim + b.ndim - 2
    return dtype if ndim == 0 else Array(dtype, ndim, True)

