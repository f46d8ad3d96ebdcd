"""Types of complex numbers in ``@jit`` code (for :mod:`.infer` and :mod:`.intrinsics`):
operators, ``.real``/``.imag``/``.conjugate()``, ``abs``, ``cmath``/numpy functions, and
which of them Python refuses (``//``, ``%``, ordering, ``int(z)``, ``math.sqrt(z)``).

A complex is a :class:`~.jtypes.Scalar` of kind ``"complex"`` (``bits`` as numpy's:
128 for ``complex<f64>``); Python's ``complex`` is weak (NEP 50: ``z64 * 1j`` stays
complex64, ``x32 * 1j`` is complex64 too).

>>> part_type(Scalar("complex", 64))
f32
"""

from __future__ import annotations

import ast
import cmath
from typing import Any

import numpy as np

from .jtypes import WEAK_COMPLEX, WEAK_FLOAT, JType, Scalar

__all__ = ["CMATH", "NP_COMPLEX", "attribute_type", "binop_type", "call_type",
           "check_compare", "method_type", "part_type"]

#: cmath functions compiled (the complex dialect's ops), and their MLIR op names.
CMATH: dict[str, str] = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin",
                         "cos": "cos", "tan": "tan", "tanh": "tanh"}
#: numpy's functions on complex scalars: np.real, np.imag, np.conj/np.conjugate.
NP_COMPLEX = {id(np.real): "real", id(np.imag): "imag", id(np.conj): "conj",
              id(np.conjugate): "conj"}
_FLOATS = {"exp", "log", "sqrt", "sin", "cos", "tan", "tanh"}


def part_type(t: Scalar) -> Scalar:
    """The type of a complex's real and imaginary parts (a weak complex: weak float)."""
    if t.kind != "complex":
        return t
    return WEAK_FLOAT if t.weak else Scalar("float", t.bits // 2)


def as_complex(t: Scalar) -> Scalar:
    """The complex type a real ``t`` becomes (numpy's: f32 -> complex64)."""
    if t.kind == "complex":
        return t
    if t.weak or t.kind != "float":
        return WEAK_COMPLEX if t.weak else Scalar("complex", 128)
    return Scalar("complex", max(64, 2 * t.bits))


def binop_type(inference: Any, op: ast.operator, a: Scalar, b: Scalar,
               node: ast.AST) -> JType | None:
    """``a op b`` with a complex operand (None: neither is complex)."""
    if a.kind != "complex" and b.kind != "complex":
        return None
    if isinstance(op, (ast.FloorDiv, ast.Mod)):
        raise inference.error(node, f"{'//' if isinstance(op, ast.FloorDiv) else '%'} of "
                              f"complex numbers is not defined (Python raises TypeError)")
    if not isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
        raise inference.error(node, f"operator {type(op).__name__} is not defined on "
                              f"complex numbers")
    from .jtypes import promote
    return promote(a, b)


def check_compare(inference: Any, node: ast.Compare, types: list[JType | None]) -> None:
    """Complex numbers compare with == and != only (Python raises TypeError)."""
    if not any(isinstance(t, Scalar) and t.kind == "complex" for t in types):
        return
    for op in node.ops:
        if not isinstance(op, (ast.Eq, ast.NotEq)):
            raise inference.error(node, "complex numbers have no order (only == and != "
                                  "compare them)", "compare abs(z) or z.real")


def attribute_type(inference: Any, node: ast.Attribute, base: Scalar) -> JType:
    """``x.real``, ``x.imag`` of a number (of any kind, as Python's)."""
    if node.attr in ("real", "imag"):
        if base.kind == "bool":
            return Scalar("int", 64, True)
        return part_type(base)
    raise inference.error(node, f"{base} has no attribute {node.attr!r} in @jit code",
                          "numbers have .real, .imag and .conjugate()")


def method_type(base: Scalar, name: str) -> JType | None:
    """``z.conjugate()`` (None: not a method of numbers)."""
    if name == "conjugate":
        return Scalar("int", 64, True) if base.kind == "bool" else base
    return None


def call_type(kind: str, op: str, scalars: list[Scalar]) -> JType | str | None:
    """The result of an intrinsic on complex numbers (None: none is complex and the
    intrinsic is not a complex one; a str: why the call is wrong)."""
    if kind == "cmath1":
        if len(scalars) != 1:
            return "takes one number"
        return WEAK_COMPLEX
    if kind == "npcomplex":
        if len(scalars) != 1:
            return "takes one number"
        return part_type(scalars[0]) if op in ("real", "imag") else scalars[0]
    if kind == "cast" and op == "complex":
        if not 1 <= len(scalars) <= 2 or any(s.kind == "complex" for s in scalars[1:]):
            return "takes one or two real numbers here"
        return WEAK_COMPLEX
    if not any(s.kind == "complex" for s in scalars):
        return None
    if kind == "abs":
        return part_type(scalars[0])
    if kind == "np1" and op in _FLOATS:
        return scalars[0].strong
    if kind == "npcast" or (kind == "cast" and op == "bool"):
        return None  # np.float64(z) keeps the real part, as numpy's (a ComplexWarning)
    if kind == "pow":
        from .jtypes import promote
        return promote(scalars[0], scalars[1]).strong
    if kind in ("math1", "math2", "math_round"):
        return "takes real numbers (use cmath's function for complex ones)"
    if kind == "cast":
        return f"cannot convert a complex number to {op} (take .real or abs())"
    return "is not defined on complex numbers"


def cmath_table() -> list[tuple[Any, str]]:
    """The cmath functions :mod:`.intrinsics` registers, with their op."""
    return [(getattr(cmath, name), op) for name, op in CMATH.items()]
