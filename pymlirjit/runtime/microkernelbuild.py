"""Building one matmul microkernel on its own (for
:mod:`pymlirjit.runtime.microkernelcache`): lowered by :data:`LOWERING` in a module of
its own, then compiled to host code by :func:`~pymlirjit.runtime.objectcode.object_code`
and linked by an :class:`~pymlirjit.runtime.objectfile.ObjectEngine`.

A microkernel compiled so costs ~75-80 ms (Intel Xeon, the host's f32 shape): ~14 ms of
MLIR passes, ~4 translating to LLVM IR, ~15 of LLVM passes, ~45 generating code. Within
its module, through MLIR's engine, it cost ~140 ms: ~30 in the module's passes, ~60
building the engine (LLVM's default pipeline, unrolling and vectorizing again what the
schedules had blocked and vectorized), ~25 generating code, the rest in walks over its
ops. (Building its LLVM work on a thread of its own, while the module is lowered and its
engine built, saved nothing measurable: the module has ~20 ms of its own to do, and
llvmlite runs every LLVM call under one process-wide lock.) So
:mod:`~pymlirjit.runtime.microkernelstore` keeps what this compiles on disk.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any

from ..codegen.optimize import attach_loop_annotations
from ..lowering.pipeline import new_context, run_pipeline
from ..lowering.walk import top_level_symbols
from .objectcode import object_code, translate_module
from .objectfile import ObjectEngine
from .runtimelibraries import external_declarations

__all__ = ["LOWERING", "CompiledMicrokernel", "build", "bytecode_of", "lowered_alone"]

#: The passes lowering a microkernel on its own: vectors, loops and memrefs of f32 or
#: f64 (~12 ms, where the default pipeline took ~30 on one in its module; Intel Xeon).
#: The last, cse, merges the memref descriptors' repeated reads the conversions leave
#: (~1.5 ms): LLVM then gets 1,336 lines of IR where it got 2,438, and the first matmul
#: module of a process compiled in 2.51x its naive lowering, where it took 2.68x (9 ms
#: less), for the same machine code (one ``lea`` became an ``add``).
LOWERING = ("builtin.module(convert-scf-to-cf,expand-strided-metadata,lower-affine,"
            "convert-vector-to-llvm,convert-to-llvm,reconcile-unrealized-casts,cse)")

_printing = threading.Lock()  # a microkernel's text, printed once


def _after_fork_in_child() -> None:
    global _printing
    _printing = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CompiledMicrokernel:
    """A microkernel's machine code, linked in this process by an engine of its own
    (kept alive by this object, which every module linking it keeps): ``symbol`` is its
    name, ``address`` its entry (an object with an int ``address``, as engines
    register), ``needed`` the external symbols it calls. ``source`` is the
    microkernel's MLIR as bytecode (a ``func.func``, under any name), from which
    :meth:`lowered_text` lowers it again when asked. A :class:`LinkError` if ``code``
    is not an object file of this machine, does not define ``symbol``, or calls a
    symbol this process lacks."""

    __slots__ = ("_engine", "_object_code", "_source", "_text", "address", "needed",
                 "symbol")

    def __init__(self, symbol: str, code: bytes, needed: frozenset[str],
                 source: bytes) -> None:
        self.symbol = symbol
        self.needed = needed
        self._object_code = code
        self._engine = ObjectEngine(code, {}, needed=needed)
        self.address = self._engine.function_address(symbol)
        self._source = source
        self._text: tuple[str, dict[str, str]] | None = None

    def object_code(self) -> bytes:
        """The object code of the microkernel (defining :attr:`symbol`), for a module's
        shared library on disk."""
        return self._object_code

    def source(self) -> bytes:
        """The microkernel's MLIR (bytecode of its ``func.func``), as compiled."""
        return self._source

    def lowered_text(self) -> tuple[str, dict[str, str]]:
        """The microkernel in the LLVM dialect, as text, and the declarations it needs
        by name; lowered and printed once, when first asked for (~20 ms)."""
        with _printing:
            if self._text is None:
                from mlir import ir

                source = ir.Module.parse(self._source, new_context())
                alone = lowered_alone(source.body.operations[0], self.symbol)
                symbols = top_level_symbols(alone)
                self._text = (str(symbols.pop(self.symbol)),
                              {name: str(op) for name, op in symbols.items()})
            return self._text

    def __repr__(self) -> str:
        return f"<CompiledMicrokernel @{self.symbol} at {self.address:#x}>"


def build(function: Any, symbol: str, opt_level: int, source: bytes) -> CompiledMicrokernel:
    """The microkernel ``function`` (a ``func.func``; its MLIR ``source``, as bytecode)
    compiled in a module of its own as ``symbol``: lowered by :func:`lowered_alone`, its
    code made at ``opt_level``."""
    alone = lowered_alone(function, symbol)
    return CompiledMicrokernel(symbol, object_code(translate_module(alone), opt_level),
                               frozenset(external_declarations(alone)), source)


def lowered_alone(function: Any, symbol: str) -> Any:
    """A new module (in ``function``'s context) of a copy of the microkernel
    ``function``, named ``symbol`` and public, lowered by :data:`LOWERING`."""
    from mlir import ir

    with function.context, ir.Location.unknown():
        alone = ir.Module.create()
        copy = function.operation.clone(ir.InsertionPoint(alone.body))
        copy.attributes["sym_name"] = ir.StringAttr.get(symbol)
        if "sym_visibility" in copy.attributes:  # private in a module of its own: dropped
            del copy.attributes["sym_visibility"]
    run_pipeline(alone, LOWERING, "<microkernel>")
    # Not needed by PASSES (no unrolling, no vectorizing), but its text then says how
    # its loops may be transformed, as the module's would, to LLVM's default pipeline
    # too (which inspect_llvm() and inspect_asm() run).
    attach_loop_annotations(alone)
    return alone


def bytecode_of(op: Any) -> bytes:
    """``op`` as MLIR bytecode: a fifth of the time printing it takes."""
    written = io.BytesIO()
    op.operation.write_bytecode(written)
    return written.getvalue()
