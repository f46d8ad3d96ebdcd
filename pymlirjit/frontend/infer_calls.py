"""Types of calls (for :mod:`.infer`): intrinsics, the numpy constructors (their shape
and dtype), ``print``, and what :func:`.calls.target_of` decides for any other callee."""

from __future__ import annotations

import ast
from typing import Any

from .calls import target_of
from .complexes import method_type
from .infer_arrays import ELEMENTWISE_KINDS, array_call, where_type
from .intrinsics import Intrinsic, fill_of, find, result_type, scalar_type_of
from .jtypes import F64, NONE, Array, JType, NoneT, Scalar, Tuple
from .npfunctions import NOT_HANDLED, numpy_type, unsupported_numpy

__all__ = ["type_call"]


REDUCTIONS = ("sum", "prod", "min", "max", "mean")


def reduction_type(dtype: Scalar, op: str) -> Scalar:
    """numpy's result type of ``a.op()`` for an array of ``dtype``."""
    if op in ("min", "max") or dtype.kind == "complex":
        return dtype
    if op == "mean":
        return dtype if dtype.kind == "float" else F64
    if dtype.kind == "float":
        return dtype
    return Scalar("uint" if dtype.kind == "uint" else "int", 64)


def type_call(self: Any, node: ast.Call) -> JType | None:
    func = self._static_or_none(node.func)
    typed = numpy_type(self, node, func)  # np.dot, a.sum(axis=0), a.T, np.arange...
    if typed is not NOT_HANDLED:
        return typed  # type: ignore[no-any-return]
    if func is None and isinstance(node.func, ast.Attribute) and \
            node.func.attr in REDUCTIONS and not node.args:  # a.sum(), a.max(), ...
        base = self.expr(node.func.value)
        if base is None:
            return None
        if isinstance(base, Array):
            self.targets[node] = Intrinsic("reduce", node.func.attr)
            return reduction_type(base.dtype, node.func.attr)
    if func is None and isinstance(node.func, ast.Attribute) and not node.args and \
            node.func.attr == "conjugate":  # z.conjugate()
        base = self.expr(node.func.value)
        if base is None:
            return None
        method = method_type(base, "conjugate") if isinstance(base, Scalar) else None
        if method is not None:
            self.targets[node] = Intrinsic("npcomplex", "conj")
            return method
    intrinsic = find(func) if func is not None else None
    if intrinsic is not None and intrinsic.kind == "reduce":
        if len(node.args) != 1:
            raise self.error(node, "takes one array here (no axis=)")
        base = self.expr(node.args[0])
        if base is None:
            return None
        if not isinstance(base, Array):
            raise self.error(node.args[0], f"needs an array, got {base}")
        self.targets[node] = intrinsic
        return reduction_type(base.dtype, intrinsic.op)
    if func is None:
        raise self.error(node.func, "only functions known at compile time can be called",
                         "of array methods, sum/prod/min/max/mean are supported; call "
                         "numpy's function (np.sqrt(x)), or a @jit function")
    if intrinsic is not None and intrinsic.kind in ("alloc", "alloc_like"):
        self.targets[node] = intrinsic
        return _alloc(self, node, intrinsic, fill_of(func))
    if intrinsic is not None and intrinsic.kind == "print":
        for a in node.args:
            if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                t = self.expr(a)
                if t is not None and not isinstance(t, Scalar):
                    raise self.error(a, f"print() of {t} is not supported",
                                     "print scalars and string literals")
        self.targets[node] = intrinsic
        return NONE
    args = [self.expr(a) for a in node.args]
    if any(a is None for a in args):
        return None
    known = [a for a in args if a is not None]
    if intrinsic is not None and intrinsic.kind == "where":
        self.targets[node] = intrinsic
        return where_type(self, node, known)
    if intrinsic is not None and intrinsic.kind in ELEMENTWISE_KINDS and (
            intrinsic.kind == "ufunc" or any(isinstance(a, Array) for a in known)):
        self.targets[node] = intrinsic  # np.sqrt(a), abs(a), np.sign(x): element by element
        return array_call(self, node, func, known)
    if intrinsic is not None:
        t = result_type(intrinsic, known)
        if isinstance(t, str):
            raise self.error(node, f"{getattr(func, '__name__', func)}() {t}")
        self.targets[node] = intrinsic
        return t
    if any(isinstance(a, NoneT) for a in known):
        raise self.error(node, "None cannot be passed")
    numpy_name = unsupported_numpy(func)
    if numpy_name is not None:
        raise self.error(node.func, f"{numpy_name}() is not supported in @jit code",
                         "see the table of supported numpy functions in docs/jit.md")
    target = target_of(self.program, self.source, node, func, known)
    self.targets[node] = target
    return target.result if not isinstance(target, Intrinsic) else None

def _alloc(self: Any, node: ast.Call, intrinsic: Intrinsic, fill: str) -> JType | None:
    dtype_node = next((k.value for k in node.keywords if k.arg == "dtype"), None)
    if dtype_node is None and len(node.args) > 1:
        dtype_node = node.args[1]
    if not node.args:
        raise self.error(node, "needs a shape" if intrinsic.kind == "alloc" else
                         "needs an array")
    first = self.expr(node.args[0])
    if first is None:
        return None
    dtype = None
    if dtype_node is not None:
        dtype = scalar_type_of(dtype_node.value if isinstance(dtype_node, ast.Constant)
                               else self._static(dtype_node))
        if dtype is None:
            raise self.error(dtype_node, "dtype must be a numpy type known at compile "
                             "time (np.float32, float, 'int64')")
    if dtype is not None and dtype.kind == "bool":
        raise self.error(dtype_node, "arrays of bool are not supported yet",
                         "use np.uint8 (0 and 1)")
    if intrinsic.kind == "alloc_like":
        if not isinstance(first, Array):
            raise self.error(node.args[0], f"needs an array, got {first}")
        return Array(dtype or first.dtype, first.ndim, True)
    if isinstance(first, Scalar) and first.is_int:
        ndim = 1
    elif isinstance(first, Tuple) and all(isinstance(i, Scalar) and i.is_int
                                          for i in first.items):
        ndim = len(first.items)
    else:
        raise self.error(node.args[0], f"a shape is an int or a tuple of ints, got {first}")
    return Array(dtype or F64, ndim, True)
