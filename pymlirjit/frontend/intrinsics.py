"""The callables ``@jit`` compiles itself (builtins, ``math``, numpy's scalar functions and
constructors): what each is called here, and the type of its result.

The result types follow what the plain Python call returns: ``math.sqrt(x)`` is a Python
float (weak: ``x32 * math.sqrt(2)`` stays f32, as in NumPy 2), ``np.sqrt(x32)`` a float32.
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .complexes import NP_COMPLEX, cmath_table
from .complexes import call_type as complex_call_type
from .jtypes import (
    BOOL,
    C128,
    F64,
    WEAK_BOOL,
    WEAK_FLOAT,
    WEAK_INT,
    Array,
    JType,
    NoneT,
    Scalar,
    Tuple,
    from_dtype,
    promote,
)
from .randoms import functions as random_functions
from .randoms import result_type as random_result_type

__all__ = ["CONSTANTS", "Intrinsic", "find", "result_type", "scalar_type_of"]


@dataclass(frozen=True)
class Intrinsic:
    """``kind`` says how it is typed and emitted; ``op`` the MLIR op (or a name)."""

    kind: str
    op: str


_TABLE: dict[int, tuple[Any, Intrinsic]] = {}


def _add(objs: list[Any], kind: str, op: str) -> None:
    for obj in objs:
        _TABLE[id(obj)] = (obj, Intrinsic(kind, op))


_UNARY = ["sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan",
          "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc"]
_NP_NAMES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
             "acosh": "arccosh", "atanh": "arctanh"}
for _name in [*_UNARY, "asin", "acos", "atan"]:
    if hasattr(math, _name):
        _add([getattr(math, _name)], "math1", _name)
    _np = getattr(np, _NP_NAMES.get(_name, _name), None)
    if _np is not None:
        _add([_np], "np1", _name)
_add([math.fabs], "math1", "absf")
_add([np.fabs], "np1", "absf")
for _name in ("floor", "ceil", "trunc"):
    _add([getattr(math, _name)], "math_round", _name)
    _add([getattr(np, _name)], "np1", _name)
_add([math.atan2], "math2", "atan2")
_add([np.arctan2], "np2", "atan2")
_add([math.pow], "math2", "powf")
_add([np.power], "pow", "pow")
_add([math.hypot], "math2", "hypot")
_add([np.hypot], "np2", "hypot")
_add([math.copysign], "math2", "copysign")
_add([np.copysign], "np2", "copysign")
for _name in ("isnan", "isinf", "isfinite"):
    _add([getattr(math, _name), getattr(np, _name)], "test", _name)
_add([np.minimum], "minmax2", "minimumf")
_add([np.maximum], "minmax2", "maximumf")
_add([np.fmin], "minmax2", "minnumf")
_add([np.fmax], "minmax2", "maxnumf")
_add([builtins.abs, np.abs, np.absolute], "abs", "abs")
_add([builtins.min], "minmax", "min")
_add([builtins.max], "minmax", "max")
_add([builtins.int], "cast", "int")
_add([builtins.float], "cast", "float")
_add([builtins.bool], "cast", "bool")
_add([builtins.complex], "cast", "complex")
for _f, _op in cmath_table():
    _add([_f], "cmath1", _op)
for _f, _op in random_functions():
    _add([_f], "random", _op)
for _f in (np.real, np.imag, np.conj, np.conjugate):
    _add([_f], "npcomplex", NP_COMPLEX[id(_f)])
_add([builtins.len], "len", "len")
_add([builtins.print], "print", "print")
_add([builtins.range], "iter", "range")
_add([builtins.enumerate], "iter", "enumerate")
_add([builtins.zip], "iter", "zip")
_add([np.empty, np.zeros, np.ones], "alloc", "")
_add([np.sum], "reduce", "sum")
_add([np.prod], "reduce", "prod")
_add([np.min, np.amin], "reduce", "min")
_add([np.max, np.amax], "reduce", "max")
_add([np.mean], "reduce", "mean")
_add([np.empty_like, np.zeros_like, np.ones_like], "alloc_like", "")
_add([np.sign], "ufunc", "sign")
_add([np.rint], "ufunc", "roundeven")
_add([np.where], "where", "where")
for _t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
           np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128):
    _add([_t], "npcast", np.dtype(_t).name)
_FILL = {id(np.empty): "", id(np.zeros): "0", id(np.ones): "1", id(np.empty_like): "",
         id(np.zeros_like): "0", id(np.ones_like): "1"}

#: Module constants that become literals (weak floats, as Python's).
CONSTANTS = {id(math.pi), id(math.e), id(math.tau), id(math.inf), id(math.nan)}


def find(obj: Any) -> Intrinsic | None:
    """The intrinsic ``obj`` is, if any (also numba's and pymlirjit's ``prange``)."""
    found = _TABLE.get(id(obj))
    if found is not None and found[0] is obj:
        return found[1]
    if getattr(obj, "__name__", "") == "prange" and getattr(obj, "__module__", "").split(
            ".")[0] in ("numba", "pymlirjit"):
        return Intrinsic("iter", "prange")
    return None


def fill_of(obj: Any) -> str:
    """"0", "1" or "" (np.empty): what an allocating constructor fills its array with."""
    return _FILL.get(id(obj), "")


def scalar_type_of(value: Any) -> Scalar | None:
    """The dtype spelling ``value`` (``np.float32``, ``float``, ``"int32"``) as a scalar."""
    if value is float:
        return F64
    if value is int:
        return Scalar("int", 64)
    if value is bool:
        return BOOL
    if value is complex:
        return C128
    try:
        return from_dtype(np.dtype(value))
    except TypeError:
        return None


def _float_of(t: Scalar) -> Scalar:
    """numpy's float ufunc result for ``t``: floats keep their width, others are f64."""
    return t.strong if t.kind == "float" else F64


def result_type(intrinsic: Intrinsic, args: list[JType]) -> JType | str:
    """The result type of a call with these argument types (a str: why it is wrong)."""
    kind = intrinsic.kind
    scalars = [a for a in args if isinstance(a, Scalar)]
    if kind == "random":
        return random_result_type(intrinsic.op, args)
    if len(scalars) == len(args):
        on_complex = complex_call_type(kind, intrinsic.op, scalars)
        if on_complex is not None:
            return on_complex
    if kind in ("math1", "math_round", "np1", "test", "abs") and (
            len(args) != 1 or len(scalars) != 1):
        return "takes one scalar argument"
    if kind in ("math2", "np2", "pow", "minmax2") and (len(args) != 2 or len(scalars) != 2):
        return "takes two scalar arguments"
    if kind == "math1":
        return WEAK_FLOAT
    if kind == "math_round":
        return WEAK_INT
    if kind == "np1":
        return _float_of(scalars[0])
    if kind == "math2":
        return WEAK_FLOAT
    if kind == "np2":
        return _float_of(promote(scalars[0], scalars[1]))
    if kind == "pow":
        return promote(scalars[0], scalars[1]).strong
    if kind == "minmax2":
        return promote(scalars[0], scalars[1]).strong
    if kind == "test":
        return BOOL
    if kind == "abs":
        t = scalars[0]
        return WEAK_INT if t.kind == "bool" else t
    if kind == "minmax":
        if len(args) < 2 or len(scalars) != len(args):
            return "takes two or more scalar arguments (not an array: loop over it)"
        result = scalars[0]
        for t in scalars[1:]:
            result = promote(result, t) if result != t else result
        return result
    if kind == "cast":
        if len(args) != 1 or len(scalars) != 1:
            return "takes one scalar argument"
        return {"int": WEAK_INT, "float": WEAK_FLOAT, "bool": WEAK_BOOL}[intrinsic.op]
    if kind == "npcast":
        if len(args) != 1 or len(scalars) != 1:
            return "takes one scalar argument"
        return from_dtype(np.dtype(intrinsic.op))
    if kind == "len":
        if len(args) != 1 or not isinstance(args[0], (Array, Tuple)):
            return "takes an array or a tuple"
        return WEAK_INT
    if kind == "print":
        return NoneT()
    return "is only supported as the iterable of a for loop" if kind == "iter" else \
        "is not supported here"
