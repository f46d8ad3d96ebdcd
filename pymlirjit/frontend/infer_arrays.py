"""Types of whole-array expressions (for :mod:`.infer`): ``a + b``, ``a < 2.0``, ``-a``,
``np.sqrt(a)``, ``np.where(c, a, b)``, element by element with numpy's broadcasting
(ranks aligned on the right). The element types are numpy's own: each operator is its
ufunc, resolved by ``ufunc.resolve_dtypes`` with Python scalars passed as their types,
which NumPy 2 treats as weak (NEP 50): ``x32 * 2.0`` is float32, ``i8 < 2.5`` compares
as float64. The result is a new C-contiguous array."""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from .jtypes import Array, JType, Scalar, from_dtype

__all__ = ["BINARY_UFUNCS", "COMPARE_UFUNCS", "ELEMENTWISE_KINDS", "array_binop", "array_call",
           "array_compare", "array_unary", "element", "in_place_type", "resolve_ufunc",
           "ufunc_of", "where_type"]

BINARY_UFUNCS: dict[type, Any] = {
    ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.true_divide,
    ast.FloorDiv: np.floor_divide, ast.Mod: np.remainder, ast.Pow: np.power,
    ast.BitAnd: np.bitwise_and, ast.BitOr: np.bitwise_or, ast.BitXor: np.bitwise_xor,
    ast.LShift: np.left_shift, ast.RShift: np.right_shift}
COMPARE_UFUNCS: dict[type, Any] = {
    ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
    ast.Eq: np.equal, ast.NotEq: np.not_equal}
_UNARY_UFUNCS: dict[type, Any] = {ast.USub: np.negative, ast.UAdd: np.positive,
                                  ast.Invert: np.invert}
#: Intrinsic kinds applied element by element to arrays.
ELEMENTWISE_KINDS = ("np1", "abs", "np2", "pow", "minmax2", "test", "ufunc", "where")
_PYTHON = {"int": int, "float": float, "bool": bool, "complex": complex}


def element(t: JType) -> Scalar:
    """The element type of an array, or the scalar itself."""
    if isinstance(t, Array):
        return t.dtype
    assert isinstance(t, Scalar)
    return t


def _numpy(t: Scalar) -> Any:
    return _PYTHON[t.kind] if t.weak else t.dtype


def resolve_ufunc(ufunc: Any, operands: list[Scalar]) -> tuple[list[Scalar], Scalar] | None:
    """numpy's loop for ``ufunc`` on operands of these types: the types the operands are
    cast to, and the result's (None: numpy has no loop, or a type @jit lacks)."""
    try:
        dtypes = ufunc.resolve_dtypes((*map(_numpy, operands), None))
        types = [from_dtype(d) for d in dtypes]
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        return None
    return types[:-1], types[-1]


def ufunc_of(func: Any) -> Any:
    """The numpy ufunc a callable applies element by element (None: not one)."""
    import builtins
    if isinstance(func, np.ufunc):
        return func
    return {id(builtins.abs): np.absolute, id(np.abs): np.absolute}.get(id(func))


def _rank(inference: Any, node: ast.AST, types: list[JType]) -> int:
    for t in types:
        if not isinstance(t, (Array, Scalar)):
            raise inference.error(node, f"element-by-element operations on {t} are not "
                                  f"supported")
    return max(t.ndim for t in types if isinstance(t, Array))


def _name(ufunc: Any) -> str:
    return f"np.{ufunc.__name__}"


def _typed(inference: Any, node: ast.AST, ufunc: Any, types: list[JType], what: str) -> Array:
    ndim = _rank(inference, node, types)
    found = resolve_ufunc(ufunc, [element(t) for t in types])
    if found is None:
        raise inference.error(node, f"{what} is not supported on "
                              f"{', '.join(map(str, types))} (numpy has no such loop)")
    return Array(found[1].strong, ndim, True)


def array_binop(inference: Any, op: ast.operator, a: JType, b: JType,
                node: ast.AST) -> JType:
    """The type of ``a op b`` where one side is an array."""
    if isinstance(op, ast.MatMult):
        from .npfunctions import matmul_type
        return matmul_type(inference, node, a, b)
    return _typed(inference, node, BINARY_UFUNCS[type(op)], [a, b],
                  f"the operator {type(op).__name__}")


def array_compare(inference: Any, node: ast.Compare, a: JType, b: JType) -> JType:
    """The type of ``a < b`` (an array of bools) where one side is an array."""
    if len(node.ops) != 1:
        raise inference.error(node, "chained comparisons of arrays are ambiguous",
                              "write (a < b) & (b < c)")
    op = node.ops[0]
    if type(op) not in COMPARE_UFUNCS:
        raise inference.error(node, f"the {type(op).__name__} operator is not supported "
                              f"on arrays")
    return _typed(inference, node, COMPARE_UFUNCS[type(op)], [a, b], "this comparison")


def array_unary(inference: Any, node: ast.UnaryOp, a: Array) -> JType:
    """The type of ``-a``, ``+a`` or ``~a``."""
    if isinstance(node.op, ast.Not):
        raise inference.error(node, f"the truth value of {a} is ambiguous",
                              "use a.size > 0, np.any(a), or ~ for a bool array")
    return _typed(inference, node, _UNARY_UFUNCS[type(node.op)], [a],
                  f"the operator {type(node.op).__name__}")


def in_place_type(inference: Any, node: ast.AugAssign, target: Array, value: JType) -> Scalar:
    """The element type ``target op= value`` computes in (numpy's loop for the operator,
    whose result must cast to the target's dtype under numpy's same-kind rule)."""
    ufunc = BINARY_UFUNCS.get(type(node.op))
    if ufunc is None or not isinstance(value, (Array, Scalar)):
        raise inference.error(node, f"{type(node.op).__name__}= is not supported on {target}")
    found = resolve_ufunc(ufunc, [target.dtype, element(value)])
    if found is None or not np.can_cast(found[1].dtype, target.dtype, "same_kind"):
        got = found[1] if found is not None else element(value)
        raise inference.error(node, f"cannot store the {got} result of "
                              f"{type(node.op).__name__} in an array of {target.dtype}",
                              "numpy refuses it too (casting='same_kind'); use "
                              "a = a op b, or .astype()")
    return found[1].strong


def array_call(inference: Any, node: ast.Call, func: Any, args: list[JType]) -> JType:
    """The type of ``np.sqrt(a)``, ``np.arctan2(a, 2.0)``, ``abs(a)``... on an array."""
    ufunc = ufunc_of(func)
    name = getattr(func, "__name__", repr(func))
    if ufunc is None:
        raise inference.error(node, f"{getattr(func, '__module__', '') or ''}.{name}() takes "
                              f"scalars, not arrays".lstrip("."),
                              f"use np.{name} for arrays, or loop over the elements")
    if ufunc.nin != len(args) or ufunc.nout != 1:
        raise inference.error(node, f"{_name(ufunc)}() takes {ufunc.nin} arguments here")
    if not any(isinstance(t, Array) for t in args):  # np.sign(x) of a scalar
        found = resolve_ufunc(ufunc, [element(t) for t in args])
        if found is None:
            raise inference.error(node, f"{_name(ufunc)}() is not supported on "
                                  f"{', '.join(map(str, args))}")
        return found[1].strong
    return _typed(inference, node, ufunc, args, f"{_name(ufunc)}()")


def where_type(inference: Any, node: ast.Call, args: list[JType]) -> JType:
    """``np.where(c, x, y)``: an array if any argument is one, else a scalar; the values'
    type is numpy's ``result_type`` of ``x`` and ``y`` (Python scalars weak)."""
    if len(args) != 3:
        raise inference.error(node, "np.where() takes three arguments here (c, x, y)",
                              "np.where(c) (the indices) is not supported")
    for t in args:
        if not isinstance(t, (Array, Scalar)):
            raise inference.error(node, f"np.where() of {t} is not supported")
    x, y = element(args[1]), element(args[2])
    reps = [{"int": 0, "float": 0.0, "bool": False}[t.kind] if t.weak else t.dtype
            for t in (x, y)]
    try:
        values = from_dtype(np.result_type(*reps))
    except TypeError as exc:
        raise inference.error(node, f"np.where(): {exc}") from None
    if x.weak and y.weak and x.kind == y.kind:
        values = x
    if not any(isinstance(t, Array) for t in args):
        return values
    return Array(values.strong, max(t.ndim for t in args if isinstance(t, Array)), True)
