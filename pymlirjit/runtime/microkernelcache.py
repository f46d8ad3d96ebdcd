"""Matmul microkernels compiled once per process, then linked into every module that calls
one.

A microkernel (:mod:`pymlirjit.codegen.microkernels`) is ~300-600 lines of MLIR that cost
most of a matmul module's first compile. It is the same function for every matmul of the
same element type, layout and register-block shape. The schedules only declare the
microkernels a module calls, each naming its recipe
(:mod:`~pymlirjit.codegen.microkernelrecipes`). :func:`split_off` then links the ones
compiled before in this process by their recipes (and opt level), without generating
them; it defines the others, names each by its MLIR and takes it out, leaving its
declaration: one compiled before in this process (for the same MLIR and opt level) is
reused, then one an earlier process kept on disk
(:mod:`~pymlirjit.runtime.microkernelstore`), and the others are compiled on their own
(:func:`~pymlirjit.runtime.microkernelbuild.build`: a short lowering and a short LLVM
pipeline, where the module's would run the whole of both on code already scheduled) and
kept on disk for the next processes.
The module's engine then links every microkernel's declaration to that code
(:attr:`CompiledMicrokernel.address`), and a module stored on disk gets the
microkernel's object code linked into its library (:meth:`CompiledMicrokernel.object_code`).

A microkernel's name in its module is ``__pymlirjit_matmul_`` and a digest of its MLIR, so
that two of one module never share a name, and one module's object code and its
microkernel's agree on it. Parallel microkernels stay in their module: their loops become
outlined functions calling the async runtime, which the module's engine links.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from ..codegen.microkernelrecipes import RECIPE, deferred, define, define_all
from ..codegen.options import CompileOptions
from ..lowering.walk import operations
from . import microkernelstore
from .microkernelbuild import CompiledMicrokernel, build, bytecode_of

__all__ = ["ENABLED", "CompiledMicrokernel", "LinkedModule", "clear", "compiled_apart", "set_aside",
           "split_off"]

#: Whether microkernels are compiled apart and reused (tests compare with modules that
#: keep theirs).
ENABLED = True

#: Compiled microkernels kept, the least recently used dropped first (the modules linking
#: one keep it alive): one per element type, layout and set of options in use.
_KEPT = 32

#: The prefix of a microkernel's name (:mod:`pymlirjit.codegen.linalg_rewrites`).
_PREFIX = "__pymlirjit_matmul"

#: The name of a microkernel compiled apart: the prefix and a digest of its MLIR.
_APART = re.compile(rf"{_PREFIX}_[0-9a-f]{{24}}")

#: The name a microkernel's MLIR is digested under: the digest must not depend on its name.
_CANONICAL = "__pymlirjit_microkernel"

_compiled: OrderedDict[Hashable, CompiledMicrokernel] = OrderedDict()
#: Their keys there by recipe (:mod:`~pymlirjit.codegen.microkernelrecipes`) and opt
#: level: a module's deferred microkernel found this way is never generated.
_by_recipe: dict[tuple[str, int], Hashable] = {}
_lock = threading.Lock()  # _compiled's and _by_recipe's


class LinkedModule:
    """A lowered module as it runs: printed, its text has each microkernel it links
    defined in place of its declaration (with the declarations that one needs)."""

    __slots__ = ("microkernels", "module")

    def __init__(self, module: Any, microkernels: dict[str, CompiledMicrokernel]) -> None:
        self.module = module
        self.microkernels = microkernels

    def __str__(self) -> str:
        text = str(self.module)
        needed: dict[str, str] = {}
        for symbol, compiled in self.microkernels.items():
            definition, declarations = compiled.lowered_text()
            declared = re.compile(rf"^  llvm\.func (?:private )?@{re.escape(symbol)}\(.*\)[^{{\n]*"
                                  rf"(?: attributes \{{[^{{}}\n]*\}})?$", re.M)
            indented = "\n".join("  " + line if line else line
                                  for line in definition.splitlines())
            found = declared.search(text)
            if found is not None:
                text = text[:found.start()] + indented + text[found.end():]
            needed.update(declarations)
        missing = [f"  {declaration}" for name, declaration in needed.items()
                   if not re.search(rf"^  llvm\.func (?:private )?@{re.escape(name)}\(",
                                    text, re.M)]
        if missing:
            end = text.rstrip().rfind("}")
            text = text[:end] + "\n".join(missing) + "\n" + text[end:]
        return text


def compiled_apart(symbol: str) -> bool:
    """Whether a function named ``symbol`` in a lowered module (a :class:`LinkedModule`'s
    text) is a microkernel compiled apart from the module (:func:`split_off` names them
    so; microkernels left in their module keep the names the rewrite gave them)."""
    return _APART.fullmatch(symbol) is not None


def clear() -> None:
    """Forget every compiled microkernel (the next modules compile theirs again; those
    linking one keep it)."""
    with _lock:
        _compiled.clear()
        _by_recipe.clear()


@contextmanager
def set_aside() -> Iterator[None]:
    """Within the block, compile as a process's first modules do: the microkernels kept
    are set aside, and after it they are kept again instead of those compiled within
    (for measuring a first compile without slowing the next ones)."""
    with _lock:
        kept, by_recipe = _compiled.copy(), _by_recipe.copy()
        _compiled.clear()
        _by_recipe.clear()
    try:
        yield
    finally:
        with _lock:
            _compiled.clear()
            _compiled.update(kept)
            _by_recipe.clear()
            _by_recipe.update(by_recipe)


def _after_fork_in_child() -> None:
    global _lock
    # Another thread may have held it at the fork.
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def split_off(module: Any, options: CompileOptions) -> dict[str, CompiledMicrokernel]:
    """Take each microkernel out of ``module`` (MLIR about to be lowered for
    ``options``), named by a digest of its MLIR, leaving its declaration, and return
    its code by name: compiled before in this process (for the same MLIR and opt level),
    or by an earlier one (:mod:`~pymlirjit.runtime.microkernelstore`), or now
    (:func:`~pymlirjit.runtime.microkernelbuild.build`, then kept on disk too).
    Parallel microkernels (``options.parallel_loops``), and any that refers to another
    symbol, stay in ``module``."""
    if not ENABLED or options.parallel_loops:
        define_all(module)
        return {}
    from mlir import ir
    from mlir.dialects import func

    linked, recipes = _link_or_define(module, options.opt_level)
    for op in [op for op in module.body.operations if _is_microkernel(op)]:
        name = ir.StringAttr(op.attributes["sym_name"]).value
        op.attributes["sym_name"] = ir.StringAttr.get(_CANONICAL, module.context)
        bytecode = bytecode_of(op)
        symbol = f"{_PREFIX}_{hashlib.sha256(bytecode).hexdigest()[:24]}"  # see _APART
        ir.SymbolTable.replace_all_symbol_uses(name, symbol, module.operation)
        if symbol in linked:  # the same microkernel twice: one serves both
            op.erase()
            continue
        op.attributes["sym_name"] = ir.StringAttr.get(symbol, module.context)
        if _refers_to_symbols(op):  # its code would be its module's
            continue
        key = (bytecode, options.opt_level)
        compiled = _found(key)
        if compiled is None:
            compiled = microkernelstore.load(bytecode, symbol, options.opt_level)
            if compiled is None:
                compiled = build(op, symbol, options.opt_level, bytecode)
                microkernelstore.save(compiled, options.opt_level)
            _keep(key, compiled)
        if name in recipes:
            with _lock:
                _by_recipe[recipes[name], options.opt_level] = key
        with module.context, ir.InsertionPoint(op), op.location:
            func.FuncOp(symbol, ir.TypeAttr(op.attributes["function_type"]).value,
                        visibility="private")
        op.erase()
        linked[symbol] = compiled
    return linked


def _link_or_define(module: Any, opt_level: int) -> tuple[dict[str, CompiledMicrokernel],
                                                          dict[str, str]]:
    """Each deferred microkernel of ``module``: compiled before in this process (at
    ``opt_level``), its declaration renamed to its code's symbol and its recipe dropped;
    else defined, once per recipe. Returns those linked, by symbol, and the recipes of
    those defined, by name."""
    from mlir import ir

    linked: dict[str, CompiledMicrokernel] = {}
    defined: dict[str, str] = {}  # the name each recipe defined now has
    for op, recipe in [(op, recipe) for op in module.body.operations
                       if (recipe := deferred(op)) is not None]:
        name = ir.StringAttr(op.attributes["sym_name"]).value
        with _lock:
            key = _by_recipe.get((recipe, opt_level))
        compiled = _found(key) if key is not None else None  # used: moved last
        if compiled is None and recipe not in defined:
            defined[recipe] = name
            define(module, op)
            continue
        symbol = compiled.symbol if compiled is not None else defined[recipe]
        ir.SymbolTable.replace_all_symbol_uses(name, symbol, module.operation)
        if compiled is None or symbol in linked:  # the same microkernel twice: one serves
            op.operation.erase()
            continue
        op.attributes["sym_name"] = ir.StringAttr.get(symbol, module.context)
        del op.attributes[RECIPE]
        linked[symbol] = compiled
    return linked, {name: recipe for recipe, name in defined.items()}


def _refers_to_symbols(function: Any) -> bool:
    from mlir import ir

    references = (ir.SymbolRefAttr, ir.FlatSymbolRefAttr)
    return any(isinstance(attributes[name], references)
               for op in operations(function)
               for attributes in [op.operation.attributes] for name in attributes
               if name != "sym_name")


def _is_microkernel(op: Any) -> bool:
    from mlir import ir

    attributes = op.operation.attributes
    return (op.operation.name == "func.func" and "pymlirjit.in_bounds" in attributes
            and ir.StringAttr(attributes["sym_name"]).value.startswith(_PREFIX)
            and len(op.operation.regions[0].blocks) > 0)


def _found(key: Hashable) -> CompiledMicrokernel | None:
    with _lock:
        compiled = _compiled.get(key)
        if compiled is not None:
            _compiled.move_to_end(key)
        return compiled


def _keep(key: Hashable, compiled: CompiledMicrokernel) -> None:
    with _lock:
        _compiled[key] = compiled
        while len(_compiled) > _KEPT:
            dropped_key, _ = _compiled.popitem(last=False)
            for recipe in [r for r, kept in _by_recipe.items() if kept == dropped_key]:
                del _by_recipe[recipe]
