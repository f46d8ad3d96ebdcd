"""What a call in a ``@jit`` function calls, decided at compile time: an intrinsic
(:mod:`.intrinsics`), another Python function compiled into the same module (a ``@jit``
function, a numba dispatcher's ``py_func``, or a plain function in the subset), a
``@callback``, or any other annotated Python callable as an automatic typed callback."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from ..boundary import types as pytypes
from .diagnostics import JitError, JitTypeError
from .host import Host
from .intrinsics import Intrinsic, find
from .jtypes import NONE, Array, JType, NoneT, Optional, Scalar, Tuple, from_dtype
from .source import FunctionSource

__all__ = ["Callee", "ForeignCall", "Target", "mlir_of", "target_of"]


@dataclass(frozen=True)
class Callee:
    """A Python function compiled into the module as ``func.func private @symbol``."""

    symbol: str
    params: tuple[JType, ...]
    result: JType


@dataclass(frozen=True)
class ForeignCall:
    """A call into Python through a callback ``@symbol`` (declared in the module)."""

    symbol: str
    params: tuple[JType, ...]
    result: JType


Target = Intrinsic | Callee | ForeignCall


def mlir_of(t: JType) -> str:
    """The MLIR types a value of ``t`` crosses a call as (a tuple: comma-separated)."""
    if isinstance(t, (Scalar, Array)):
        return t.mlir
    if isinstance(t, (Tuple, Optional)):
        return ", ".join(mlir_of(i) for i in t.items)
    return ""


def _from_pytype(t: Any, what: str) -> JType:
    if isinstance(t, pytypes.ScalarType):
        if t.mlir == "index":
            return Scalar("int", 64)
        try:
            return from_dtype(t.dtype)
        except TypeError:
            pass
    if isinstance(t, pytypes.MemRefType):
        return Array(from_dtype(t.element.dtype), t.rank, t.strides is None)
    raise TypeError(f"{what}: {t!r} is not a type @jit passes to callbacks")


def _strong(t: JType) -> JType:
    if isinstance(t, Scalar):
        return t.strong
    if isinstance(t, Tuple):
        return Tuple(tuple(_strong(i) for i in t.items))
    return t


def _is_callback(obj: Any) -> bool:
    """A @callback, an @mlir_kernel kernel or an extern(): linked as declared."""
    return type(obj).__name__ in ("Callback", "Kernel", "BoundKernel", "Extern") \
        and hasattr(obj, "signature") and hasattr(obj, "name")


def _python_function(obj: Any) -> Any:
    """The Python function ``obj`` compiles as (a @jit's or numba dispatcher's py_func)."""
    inner = getattr(obj, "py_func", None)
    if inner is not None and inspect.isfunction(inner):
        return inner
    return obj if inspect.isfunction(obj) else None


def target_of(program: Host, source: FunctionSource, node: ast.Call, obj: Any,
              args: list[JType]) -> Target:
    """What the call ``node`` (of ``obj``, with arguments of types ``args``) calls."""
    intrinsic = find(obj)
    if intrinsic is not None:
        return intrinsic
    if _is_callback(obj):
        sig = obj.signature  # a kernel's compiles it
        what = f"{type(obj).__name__.lower()} {obj.name!r}"
        params = tuple(_from_pytype(t, what) for t in sig.param_types)
        results = [_from_pytype(t, what) for t in sig.results]
        result: JType = NONE if not results else results[0] if len(results) == 1 \
            else Tuple(tuple(results))
        program.use_callback(obj)
        return ForeignCall(obj.name, params, result)
    function = _python_function(obj)
    failure: JitError | None = None
    if function is not None:
        try:
            symbol, result = program.callee(function, tuple(args), source.where(node))
            return Callee(symbol, tuple(args), result)
        except JitError as exc:
            if getattr(exc, "recursion", False):
                raise
            failure = exc
    return _auto_callback(program, source, node, obj, args, failure)


def _auto_callback(program: Host, source: FunctionSource, node: ast.Call, obj: Any,
                   args: list[JType], failure: JitError | None) -> ForeignCall:
    name = getattr(obj, "__name__", type(obj).__name__)
    try:
        annotation = inspect.signature(obj).return_annotation
    except (TypeError, ValueError):
        annotation = inspect.Signature.empty
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, getattr(obj, "__globals__", {}))
        except Exception:
            annotation = inspect.Signature.empty
    if callable(obj) and annotation is not inspect.Signature.empty:
        result: JType
        if annotation is None or annotation is type(None):
            result = NoneT()
        else:
            try:
                result = _from_pytype(pytypes.to_type(annotation), f"{name}'s return")
            except TypeError as exc:
                raise JitTypeError(str(exc), source.where(node),
                                   "annotate the return as float, int, bool, a numpy "
                                   "scalar type or None") from None
        params = tuple(_strong(a) for a in args)
        if any(isinstance(p, (Tuple, NoneT)) for p in params):
            raise JitTypeError(f"cannot pass a tuple or None to Python function {name!r}",
                               source.where(node), "pass its items one by one")
        symbol = program.auto_callback(obj, params, result)
        return ForeignCall(symbol, params, result)
    why = f" ({failure.reason} at {failure.where})" if failure is not None and \
        failure.where is not None else ""
    raise JitTypeError(f"cannot compile the call of {name!r}{why}", source.where(node),
                       f"annotate its return type (def {name}(...) -> float:) to call it as "
                       f"a Python callback")
