"""Types of whole-array expressions (for :mod:`.infer`): ``a + b``, ``a * 2.0``, ``-a``,
``np.sqrt(a)``, ``abs(a)``, element by element, for arrays of one shape or an array and
a scalar (no broadcasting between ranks). The result is a new C-contiguous array."""

from __future__ import annotations

import ast
from typing import Any

from .jtypes import F64, Array, JType, Scalar

__all__ = ["array_binop", "array_unary"]


def array_binop(inference: Any, op: ast.operator, a: JType, b: JType,
                node: ast.AST) -> JType:
    """The type of ``a op b`` where one side is an array."""
    for side in (a, b):
        if not isinstance(side, (Array, Scalar)):
            raise inference.error(node, f"arithmetic on {a} and {b} is not supported")
    if isinstance(a, Array) and isinstance(b, Array) and a.ndim != b.ndim:
        raise inference.error(node, f"operands of ranks {a.ndim} and {b.ndim}",
                              "broadcasting between ranks is not supported: give both the "
                              "same shape, or write a loop")
    if isinstance(op, ast.MatMult):
        raise inference.error(node, "@ (matrix product) is not supported yet",
                              "write the loops (they vectorize)")
    ea = a.dtype if isinstance(a, Array) else a
    eb = b.dtype if isinstance(b, Array) else b
    assert isinstance(ea, Scalar) and isinstance(eb, Scalar)
    element = inference.binop(op, ea, eb, node)
    assert isinstance(element, Scalar)
    if isinstance(op, ast.Div) and element.weak:
        element = F64
    ndim = a.ndim if isinstance(a, Array) else b.ndim  # type: ignore[union-attr]
    if element.kind == "bool":
        raise inference.error(node, "arrays of bool are not supported yet")
    return Array(element.strong, ndim, True)


def array_unary(inference: Any, node: ast.UnaryOp, a: Array) -> JType:
    """The type of ``-a``, ``+a`` or ``~a``."""
    if isinstance(node.op, ast.Not):
        raise inference.error(node, f"the truth value of {a} is ambiguous",
                              "use a.size > 0, or compare elements in a loop")
    if isinstance(node.op, ast.Invert) and a.dtype.kind == "float":
        raise inference.error(node, "~ needs an integer array")
    return Array(a.dtype, a.ndim, True)
