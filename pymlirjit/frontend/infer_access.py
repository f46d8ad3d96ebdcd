"""Types of attribute and subscript expressions (for :mod:`.infer`): ``z.real``,
``a.shape``, ``a.T``, ``t[0]``, ``a[i, j]`` and ``a[1:-1]`` (a view); ``self`` is the
:class:`.infer.Inference` running."""

from __future__ import annotations

import ast
from typing import Any

from . import complexes
from .jtypes import WEAK_INT, Array, JType, Scalar, Tuple, literal_int

__all__ = ["attribute_type", "subscript_type"]


def attribute_type(self: Any, node: ast.Attribute) -> JType | None:
    """The type of ``node.attr`` (``x.real``, ``a.shape``, ``a.T``...)."""
    base = self.expr(node.value)
    if base is None:
        return None
    if isinstance(base, Scalar):  # x.real, z.imag
        return complexes.attribute_type(self, node, base)
    if isinstance(base, Array):
        if node.attr == "shape":
            return Tuple((WEAK_INT,) * base.ndim)
        if node.attr in ("ndim", "size"):
            return WEAK_INT
        if node.attr == "flat" and base.contiguous:
            return Array(base.dtype, 1, True)
        if node.attr == "T":  # a view with the axes reversed
            return Array(base.dtype, base.ndim, False) if base.ndim > 1 else base
    raise self.error(node, f"{base} has no attribute {node.attr!r} in @jit code",
                     "arrays have .shape, .ndim, .size (and .flat when contiguous)")

def subscript_type(self: Any, node: ast.Subscript) -> JType | None:
    """The type of ``base[index]``: a tuple's item, an array's element or view."""
    base = self.expr(node.value)
    if base is None:
        return None
    if isinstance(base, Tuple):
        value = literal_int(node.slice)
        if value is None or not -len(base.items) <= value < len(base.items):
            raise self.error(node.slice, "a tuple index must be an integer literal in "
                             "range")
        return base.items[value]
    if not isinstance(base, Array):
        raise self.error(node, f"{base} cannot be indexed")
    indices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    dots = [i for i, n in enumerate(indices) if isinstance(n, ast.Constant) and n.value is ...]
    if dots and dots != [len(indices) - 1]:
        raise self.error(node.slice, "... is supported as the last index only")
    indices = indices[:-1] if dots else indices
    if len(indices) > base.ndim:
        raise self.error(node.slice, f"too many indices for a {base.ndim}-d array")
    kept = base.ndim - len(indices)
    for index in indices:
        if isinstance(index, ast.Slice):
            kept += 1
            for part in (index.lower, index.upper, index.step):
                if part is not None:
                    _int(self, part)
        else:
            _int(self, index)
    return base.dtype if kept == 0 else Array(base.dtype, kept, False)

def _int(self: Any, node: ast.expr) -> None:
    t = self.expr(node)
    if t is not None and not (isinstance(t, Scalar) and t.is_int):
        raise self.error(node, f"indices must be integers, got {t}",
                         "convert with int(); fancy (array) indexing is not supported")
