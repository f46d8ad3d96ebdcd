"""Matmul microkernels deferred: in place of a microkernel's function, a declaration naming
its recipe (what :func:`~pymlirjit.codegen.microkernels.microkernel` makes it from), which
:func:`define` replaces by the function when its code is needed.

A microkernel is ~300-600 lines of MLIR: generating, parsing and walking it, and cloning
it with its module between the schedules' steps, took ~5 ms of a matmul module's ~40
(Intel Xeon), when its code was compiled already. So
:func:`~pymlirjit.runtime.microkernelcache.split_off` finds a microkernel compiled before
by its recipe, and defines only the others.

Recipes are kept for the process, one per set of the generator's inputs (element type,
layout, parallel or not, shape, threads): a few.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

from .microkernels import microkernel
from .microkernelshapes import MicrokernelShape

__all__ = ["RECIPE", "declaration", "deferred", "define", "define_all", "recipe_of"]

#: The attribute of a deferred microkernel's declaration: its recipe's name.
RECIPE = "pymlirjit.microkernel"

_Inputs = tuple[str, tuple[str, str, str], bool, MicrokernelShape, int]
_recipes: dict[str, _Inputs] = {}
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def declaration(name: str, element: str, types: tuple[str, str, str], parallel: bool,
                shape: MicrokernelShape, threads: int = 0) -> str:
    """A private declaration ``@name`` of the microkernel
    ``microkernel(name, element, types, parallel, shape, threads)`` would define, naming
    its recipe."""
    ta, tb, tc = types
    recipe = recipe_of((element, types, parallel, shape, threads))
    return (f'func.func private @{name}({ta}, {tb}, {tc}) attributes {{{RECIPE} = '
            f'"{recipe}"}}')


def recipe_of(inputs: _Inputs) -> str:
    """The name of the recipe of ``inputs`` (the generator's, but the name), kept from
    now on."""
    name = hashlib.sha256(repr(inputs).encode()).hexdigest()[:24]
    with _lock:
        _recipes.setdefault(name, inputs)
    return name


def deferred(op: Any) -> str | None:
    """The recipe ``op`` names, if it is a deferred microkernel's declaration: a
    ``func.func`` naming a recipe of this process's (what a source wrote alike is left
    alone: a declaration like any other)."""
    from mlir import ir

    attributes = op.operation.attributes
    if op.operation.name != "func.func" or RECIPE not in attributes:
        return None
    attribute = attributes[RECIPE]
    if not isinstance(attribute, ir.StringAttr):
        return None
    with _lock:
        return attribute.value if attribute.value in _recipes else None


def define(module: Any, op: Any) -> None:
    """Replace the deferred microkernel's declaration ``op`` (of ``module``) by the
    functions of its recipe, under its name. A ``ValueError`` if ``op`` is not one
    (:func:`deferred`)."""
    from mlir import ir

    recipe = deferred(op)
    if recipe is None:
        raise ValueError(f"not a deferred microkernel: {op.operation.name}")
    with _lock:
        element, types, parallel, shape, threads = _recipes[recipe]
    name = ir.StringAttr(op.attributes["sym_name"]).value
    text = microkernel(name, element, types, parallel, shape, threads)
    with module.context:
        owner = ir.Module.parse(text)  # owns the functions until they move
        for function in list(owner.body.operations):
            function.operation.detach_from_parent()
            module.body.append(function)
    op.operation.erase()


def define_all(module: Any) -> int:
    """:func:`define` every deferred microkernel of ``module``; how many there were."""
    declarations = [op for op in module.body.operations if deferred(op) is not None]
    for op in declarations:
        define(module, op)
    return len(declarations)
