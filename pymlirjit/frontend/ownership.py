"""Which arrays a function allocates it may free itself: those that cannot outlive the
block of statements that made them.

An array made by ``np.empty``/``zeros``/``ones`` (or ``*_like``) and bound once to a
variable that no return, no assignment of an array value, no ``for`` header and no call
into a compiled or Python function ever sees, is freed when its block ends (each
iteration, for a loop body) and on every ``break``, ``continue`` and ``return`` leaving
that block (numba's reference counting frees them as well). Arrays that escape are
returned to Python, which owns them; the others would leak at every call."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from .jtypes import Array, JType

__all__ = ["freeable"]


def _names(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def freeable(tree: ast.FunctionDef, types: Mapping[ast.AST, JType],
             targets: Mapping[ast.Call, Any], counts: Mapping[str, int],
             allocating: set[ast.AST]) -> frozenset[str]:
    """The variables of ``tree`` whose allocation is freed at the end of its block.

    ``types``: the inferred type of each expression; ``targets``: what each call calls
    (intrinsics are kinds with a ``kind``; compiled or Python callees are not);
    ``counts``: how many places assign each variable; ``allocating``: the calls that
    allocate (``np.empty`` & co)."""
    candidates: set[str] = set()
    escaping: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            value = node.value
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                    value in allocating:
                candidates.add(node.targets[0].id)
                continue
            items = value.elts if isinstance(value, ast.Tuple) else [value]
            for item in items:
                if isinstance(types.get(item), Array):
                    escaping |= _names(item)  # u = t, u = t[1:], a, b = t, x
        elif isinstance(node, ast.Return):
            escaping |= _names(node.value)
        elif isinstance(node, ast.For):
            escaping |= _names(node.iter)
        elif isinstance(node, ast.Call):
            target = targets.get(node)
            if target is not None and not hasattr(target, "kind"):
                for arg in node.args:  # a callee or a callback may keep or return it
                    escaping |= _names(arg)
        elif isinstance(node, (ast.IfExp, ast.BoolOp)) and isinstance(types.get(node), Array):
            escaping |= _names(node)
    return frozenset(n for n in candidates - escaping if counts.get(n) == 1)
