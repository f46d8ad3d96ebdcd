"""Matmul microkernels compiled once per process, then linked into every module that calls
one.

A microkernel (:mod:`pymlirjit.codegen.microkernels`) is ~200 lines of MLIR that cost
most of a matmul module's compile: ~30 of the ~45 ms of MLIR's passes and ~50 of the ~100
ms of LLVM's. It is the same function for every matmul of the same element type, layout
and options. So once the schedules have put microkernels in a module, :func:`split_off`
names each one by its MLIR and looks it up, by that MLIR and the pipeline and options that
compile it: one compiled before in this process is taken out of the module, leaving its
declaration; the others stay and are lowered with the module. After the module's passes,
:func:`link` takes each of those out too, lowered, and JIT-compiles it in an engine of its
own; the module's engine then links every microkernel's declaration to that code
(:attr:`CompiledMicrokernel.address`), and a module stored on disk gets the
microkernel's object code linked into its library (:meth:`CompiledMicrokernel.object_code`).

A microkernel's name in its module is ``__pymlirjit_matmul_`` and a digest of its MLIR, so
that two of one module never share a name, and one module's object code and its
microkernel's agree on it. Parallel microkernels stay in their module: their loops become
outlined functions calling the async runtime, which the module's engine links.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..codegen.options import CompileOptions
from ..lowering.declarations import is_declaration
from ..lowering.walk import operations, top_level_symbols
from .engine import ExecutionEngine

__all__ = ["ENABLED", "CompiledMicrokernel", "LinkedModule", "Microkernel", "clear", "link",
           "set_aside", "split_off"]

#: Whether microkernels are compiled apart and reused (tests compare with modules that
#: keep theirs).
ENABLED = True

#: Compiled microkernels kept, the least recently used dropped first (the modules linking
#: one keep it alive): one per element type, layout and set of options in use.
_KEPT = 32

#: The prefix of a microkernel's name (:mod:`pymlirjit.codegen.linalg_rewrites`).
_PREFIX = "__pymlirjit_matmul"

#: The name a microkernel's MLIR is digested under: the digest must not depend on its name.
_CANONICAL = "__pymlirjit_microkernel"

#: The attributes by which a lowered function's ops refer to other symbols.
_REFERENCES = ("callee", "global_name")

_compiled: OrderedDict[Hashable, CompiledMicrokernel] = OrderedDict()
_lock = threading.Lock()  # _compiled's
_writing = threading.Lock()  # a microkernel's object code or text, written once


class CompiledMicrokernel:
    """A microkernel's machine code, JIT-compiled in an engine of its own (kept alive by
    this object, which every module linking it keeps): ``symbol`` is its name,
    ``address`` its entry (an object with an int ``address``, as engines register)."""

    __slots__ = ("_engine", "_lowered", "_object_code", "_text", "address", "symbol")

    def __init__(self, symbol: str, engine: ExecutionEngine, lowered: bytes) -> None:
        self.symbol = symbol
        self._engine = engine
        self.address = engine.function_address(symbol)  # generates the code
        self._lowered = lowered  # bytecode of a module: the function and what it declares
        self._object_code: bytes | None = None
        self._text: tuple[str, dict[str, str]] | None = None

    def object_code(self) -> bytes:
        """The object code of the microkernel (defining :attr:`symbol`), for a module's
        shared library on disk; written once, when first asked for."""
        with _writing:
            if self._object_code is None:
                with tempfile.TemporaryDirectory(prefix="pymlirjit-") as scratch:
                    dumped = Path(scratch, "microkernel.o")
                    self._engine.dump_to_object_file(str(dumped))
                    self._object_code = dumped.read_bytes()
            return self._object_code

    def lowered_text(self) -> tuple[str, dict[str, str]]:
        """The microkernel in the LLVM dialect, as text, and the declarations it needs
        by name; printed once, when first asked for."""
        with _writing:
            if self._text is None:
                from mlir import ir

                alone = ir.Module.parse(self._lowered, ir.Context())
                symbols = top_level_symbols(alone)
                self._text = (str(symbols.pop(self.symbol)),
                              {name: str(op) for name, op in symbols.items()})
            return self._text

    def __repr__(self) -> str:
        return f"<CompiledMicrokernel @{self.symbol} at {self.address:#x}>"


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


class Microkernel:
    """A microkernel of a module being compiled: its name there (``symbol``), its key,
    and its code if it was compiled before (then it was taken out of the module)."""

    __slots__ = ("compiled", "key", "symbol")

    def __init__(self, symbol: str, key: Hashable, compiled: CompiledMicrokernel | None
                 ) -> None:
        self.symbol = symbol
        self.key = key
        self.compiled = compiled


def clear() -> None:
    """Forget every compiled microkernel (the next modules compile theirs again; those
    linking one keep it)."""
    with _lock:
        _compiled.clear()


@contextmanager
def set_aside() -> Iterator[None]:
    """Within the block, compile as a process's first modules do: the microkernels kept
    are set aside, and after it they are kept again instead of those compiled within
    (for measuring a first compile without slowing the next ones)."""
    with _lock:
        kept = _compiled.copy()
        _compiled.clear()
    try:
        yield
    finally:
        with _lock:
            _compiled.clear()
            _compiled.update(kept)


def _after_fork_in_child() -> None:
    global _lock, _writing
    # Another thread may have held them at the fork.
    _lock, _writing = threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def split_off(module: Any, pipeline: str, options: CompileOptions) -> list[Microkernel]:
    """Name each microkernel of ``module`` (MLIR about to be lowered by ``pipeline`` for
    ``options``) by a digest of its MLIR, and replace each one compiled before by its
    declaration. Returns them all, for :func:`link`. Parallel ones
    (``options.parallel_loops``) are left alone."""
    if not ENABLED or options.parallel_loops:
        return []
    from mlir import ir
    from mlir.dialects import func

    found: dict[str, Microkernel] = {}
    for op in [op for op in module.body.operations if _is_microkernel(op)]:
        name = ir.StringAttr(op.attributes["sym_name"]).value
        op.attributes["sym_name"] = ir.StringAttr.get(_CANONICAL, module.context)
        bytecode = _bytecode(op)
        symbol = f"{_PREFIX}_{hashlib.sha256(bytecode).hexdigest()[:24]}"
        ir.SymbolTable.replace_all_symbol_uses(name, symbol, module.operation)
        if symbol in found:  # the same microkernel twice: one serves both
            op.erase()
            continue
        op.attributes["sym_name"] = ir.StringAttr.get(symbol, module.context)
        key = (bytecode, pipeline, options)
        compiled = _found(key)
        if compiled is not None:
            with module.context, ir.InsertionPoint(op), op.location:
                func.FuncOp(symbol, ir.TypeAttr(op.attributes["function_type"]).value,
                            visibility="private")
            op.erase()
        found[symbol] = Microkernel(symbol, key, compiled)
    return list(found.values())


def link(module: Any, microkernels: list[Microkernel], opt_level: int
         ) -> dict[str, CompiledMicrokernel]:
    """Compile each of ``microkernels`` still in ``module`` (now lowered to the LLVM
    dialect) in an engine of its own at ``opt_level``, keep it, and leave its declaration
    in its place. Returns the code of every microkernel the module now declares, by
    name. One that refers to anything of its module but declarations stays in it (its
    code would then be the module's)."""
    from mlir import ir

    linked: dict[str, CompiledMicrokernel] = {}
    if not microkernels:
        return linked
    symbols = top_level_symbols(module)
    for kernel in microkernels:
        present = symbols.get(kernel.symbol)
        if present is None:  # nothing calls it any more: it was dropped
            continue
        compiled = kernel.compiled
        if compiled is None:
            alone = _extracted(present, symbols)
            if alone is None:
                continue
            compiled = CompiledMicrokernel(kernel.symbol, ExecutionEngine(alone, opt_level),
                                           _bytecode(alone.operation))
            _keep(kernel.key, compiled)
            with module.context, ir.InsertionPoint(present), present.location:
                ir.Operation.create("llvm.func", attributes={
                    "sym_name": ir.StringAttr.get(kernel.symbol),
                    "function_type": present.attributes["function_type"]}, regions=1)
            present.erase()
        linked[kernel.symbol] = compiled
    return linked


def _extracted(function: Any, symbols: dict[str, Any]) -> Any:
    """A module (in ``function``'s context) holding a copy of the lowered ``function``
    and of the declarations of its module (``symbols``, by name) it calls; ``None`` if
    it refers to anything else of its module."""
    from mlir import ir

    with function.context, ir.Location.unknown():
        alone = ir.Module.create()
        copy = function.operation.clone(ir.InsertionPoint(alone.body))
        referred = {ir.FlatSymbolRefAttr(op.attributes[attribute]).value
                    for op in operations(copy) for attribute in _REFERENCES
                    if attribute in op.attributes}
        for name in sorted(referred):
            if name not in symbols:
                continue
            if not is_declaration(symbols[name]):
                return None
            symbols[name].operation.clone(ir.InsertionPoint(alone.body))
        return alone


def _is_microkernel(op: Any) -> bool:
    from mlir import ir

    attributes = op.operation.attributes
    return (op.operation.name == "func.func" and "pymlirjit.in_bounds" in attributes
            and ir.StringAttr(attributes["sym_name"]).value.startswith(_PREFIX)
            and len(op.operation.regions[0].blocks) > 0)


def _bytecode(op: Any) -> bytes:
    """``op`` as MLIR bytecode: a fifth of the time printing it takes."""
    written = io.BytesIO()
    op.operation.write_bytecode(written)
    return written.getvalue()


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
            _compiled.popitem(last=False)
