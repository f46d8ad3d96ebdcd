"""The frontend's types: scalars (strong, or *weak* for Python's own int/float/bool, as in
NumPy 2's NEP 50), arrays (dtype, rank, contiguous or not), tuples and None; how they
promote, unify, and are spelled in MLIR.

>>> promote(Scalar("float", 32), WEAK_FLOAT)       # x32 * 2.0 stays f32
f32
>>> unify(WEAK_INT, Scalar("float", 64)).mlir      # acc = 0 then acc += x[i] (float)
'f64'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import numpy as np

__all__ = ["BOOL", "C128", "F32", "F64", "I64", "NONE", "WEAK_BOOL", "WEAK_COMPLEX",
           "WEAK_FLOAT", "WEAK_INT",
           "Array", "JType", "NoneT", "Optional", "Scalar", "Tuple", "from_dtype", "promote",
           "unify"]


@dataclass(frozen=True)
class Scalar:
    """``kind``: "bool", "int", "uint", "float" or "complex"; ``bits`` (numpy's: 128 for
    complex<f64>); ``weak``: a Python value (its width is the other operand's, NEP 50);
    weak ints are i64, weak floats f64, weak complexes complex128."""

    kind: str
    bits: int
    weak: bool = False

    @cached_property  # asked for at most ops the emitter writes
    def mlir(self) -> str:
        if self.kind == "float":
            return {16: "f16", 32: "f32", 64: "f64"}[self.bits]
        if self.kind == "complex":
            return f"complex<f{self.bits // 2}>"
        return f"i{self.bits}"

    @cached_property
    def dtype(self) -> np.dtype[Any]:
        if self.kind == "bool":
            return np.dtype(np.bool_)
        letter = {"int": "i", "uint": "u", "float": "f", "complex": "c"}[self.kind]
        return np.dtype(f"{letter}{self.bits // 8}")

    @property
    def strong(self) -> Scalar:
        return Scalar(self.kind, self.bits) if self.weak else self

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def __repr__(self) -> str:
        return ("weak " if self.weak else "") + (
            {"bool": "bool", "int": "int", "float": "float", "complex": "complex"}[self.kind]
            if self.weak
            else (self.mlir if self.kind != "uint" else f"ui{self.bits}"))

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class Array:
    """A numpy array: element ``dtype``, ``ndim``, and whether it is C-contiguous (an
    identity-layout memref) or any strided view."""

    dtype: Scalar
    ndim: int
    contiguous: bool = True

    @property
    def element_mlir(self) -> str:
        """The type an element is stored as (bools as bytes: i1 memrefs do not lower)."""
        return "i8" if self.dtype.kind == "bool" else self.dtype.mlir

    @cached_property
    def mlir(self) -> str:
        dims = "?x" * self.ndim
        if self.contiguous:
            return f"memref<{dims}{self.element_mlir}>"
        strides = ", ".join("?" * self.ndim) if self.ndim else ""
        return f"memref<{dims}{self.element_mlir}, strided<[{strides}], offset: ?>>"

    def __repr__(self) -> str:
        layout = "C" if self.contiguous else "A"
        return f"array({self.dtype!r}, {self.ndim}d, {layout})"

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class Tuple:
    """A tuple of known length and element types."""

    items: tuple[JType, ...]

    def __repr__(self) -> str:
        return "tuple(" + ", ".join(map(repr, self.items)) + ")"


@dataclass(frozen=True)
class NoneT:
    """``None`` (a function returning nothing)."""

    def __repr__(self) -> str:
        return "None"


@dataclass(frozen=True)
class Optional:
    """A scalar or ``None`` (a function returning None on some paths): a flag and a
    value (``items``: the types it crosses calls and slots as)."""

    item: Scalar

    @property
    def items(self) -> tuple[Scalar, Scalar]:
        return (BOOL, self.item)

    def __repr__(self) -> str:
        return f"optional({self.item!r})"


JType = Scalar | Array | Tuple | NoneT | Optional
BOOL = Scalar("bool", 1)
I64 = Scalar("int", 64)
F32 = Scalar("float", 32)
F64 = Scalar("float", 64)
WEAK_BOOL = Scalar("bool", 1, True)
WEAK_INT = Scalar("int", 64, True)
WEAK_FLOAT = Scalar("float", 64, True)
WEAK_COMPLEX = Scalar("complex", 128, True)
C128 = Scalar("complex", 128)
NONE = NoneT()
_RANK = {"bool": 0, "int": 1, "uint": 1, "float": 2, "complex": 3}


def literal_int(node: Any) -> int | None:
    """The value of an int literal node, ``-`` literals included (None: not one)."""
    import ast
    if isinstance(node, ast.Constant) and isinstance(node.value, int) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = literal_int(node.operand)
        return None if inner is None else -inner
    return None


def from_dtype(dtype: Any) -> Scalar:
    """The scalar type of a numpy dtype (TypeError for dtypes the frontend lacks)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return BOOL  # a scalar; arrays of bools are refused where arrays are made
    kinds = {"i": "int", "u": "uint", "f": "float", "c": "complex"}
    if dt.kind not in kinds or (dt.kind == "f" and dt.itemsize == 16) or \
            (dt.kind == "c" and dt.itemsize == 32):
        raise TypeError(f"arrays of {dt} are not supported by @jit (bool, ints, floats "
                        f"and complex64/complex128 are)")
    return Scalar(kinds[dt.kind], dt.itemsize * 8)


def promote(a: Scalar, b: Scalar) -> Scalar:
    """The type of ``a op b`` for arithmetic (NEP 50: a weak operand takes the strong
    one's width when its kind fits; bools count as ints, as Python's ``True + True``)."""
    if a.kind == "bool":
        a = WEAK_INT if a.weak else Scalar("int", 8)
    if b.kind == "bool":
        b = WEAK_INT if b.weak else Scalar("int", 8)
    if a.weak and b.weak:
        return a if _RANK[a.kind] >= _RANK[b.kind] else b
    if a.weak or b.weak:
        weak, strong = (a, b) if a.weak else (b, a)
        if _RANK[weak.kind] <= _RANK[strong.kind]:
            return strong
        if weak.kind == "complex" and strong.kind == "float":
            return Scalar("complex", max(64, 2 * strong.bits))  # f32 * 1j: complex64
        return C128 if weak.kind == "complex" else F64  # a Python float with an int: f64
    return _promote_strong(a, b)


@cache  # numpy's promotion is slow; there are few pairs of types
def _promote_strong(a: Scalar, b: Scalar) -> Scalar:
    return from_dtype(np.promote_types(a.dtype, b.dtype))


def unify(a: JType, b: JType) -> JType | None:
    """One type holding values of both (a variable assigned both), or None."""
    if a == b:
        return a
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        if a.kind == "bool" and b.kind == "bool":
            return BOOL
        return promote(a, b)  # a bool with a number: the number's type (as numba)
    if isinstance(a, Array) and isinstance(b, Array):
        if a.dtype == b.dtype and a.ndim == b.ndim:
            return Array(a.dtype, a.ndim, a.contiguous and b.contiguous)
        return None
    if isinstance(a, NoneT) and isinstance(b, (Scalar, Optional)):
        return b if isinstance(b, Optional) else Optional(b)
    if isinstance(b, NoneT) and isinstance(a, (Scalar, Optional)):
        return a if isinstance(a, Optional) else Optional(a)
    if isinstance(a, Optional) or isinstance(b, Optional):
        x = a.item if isinstance(a, Optional) else a
        y = b.item if isinstance(b, Optional) else b
        item = unify(x, y)
        return Optional(item) if isinstance(item, Scalar) else None
    if isinstance(a, Tuple) and isinstance(b, Tuple) and len(a.items) == len(b.items):
        items = [unify(x, y) for x, y in zip(a.items, b.items)]
        if any(i is None for i in items):
            return None
        return Tuple(tuple(i for i in items if i is not None))
    return None
