"""What a name that is not a local variable means: a closure cell, a global of the
function's module, or a builtin, read once at compile time (frozen, as numba freezes
globals); attributes of modules (``np.sqrt``, ``math.pi``) likewise."""

from __future__ import annotations

import ast
import builtins
from typing import Any

from .diagnostics import JitTypeError
from .source import FunctionSource

__all__ = ["MISSING", "resolve"]

MISSING = object()


def _cell(function: Any, name: str) -> Any:
    """The value of ``function``'s closure cell ``name`` (MISSING: none, or not filled)."""
    code = getattr(function, "__code__", None)
    cells = getattr(function, "__closure__", None) or ()
    if code is None or name not in code.co_freevars:
        return MISSING
    for free, cell in zip(code.co_freevars, cells):
        if free == name:
            try:
                return cell.cell_contents
            except ValueError:  # a cell not filled yet
                return MISSING
    return MISSING


def lookup(source: FunctionSource, name: str) -> Any:
    """The object ``name`` means in the function's scope (MISSING if none)."""
    function = source.function
    found = _cell(function, name)
    if found is not MISSING:
        return found
    scope = getattr(function, "__globals__", {})
    if name in scope:
        return scope[name]
    return getattr(builtins, name, MISSING)


def resolve(source: FunctionSource, node: ast.expr) -> Any:
    """The Python object a ``Name`` or ``Attribute`` chain of non-locals means."""
    if isinstance(node, ast.Name):
        found = lookup(source, node.id)
        if found is MISSING:
            raise JitTypeError(f"name {node.id!r} is not defined", source.where(node))
        return found
    if isinstance(node, ast.Attribute):
        base = resolve(source, node.value)
        found = getattr(base, node.attr, MISSING)
        if found is MISSING:
            raise JitTypeError(f"{getattr(base, '__name__', repr(base))} has no attribute "
                               f"{node.attr!r}", source.where(node))
        return found
    raise JitTypeError("cannot resolve this expression at compile time", source.where(node))
