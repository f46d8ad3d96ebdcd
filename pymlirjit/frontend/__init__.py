"""The Python frontend of ``@jit``: a plain Python function's source -> MLIR text.

Pure: it reads the function's AST and writes MLIR text (func, arith, math, cf, scf,
memref), each op located at the user's ``file:line:col``; it compiles nothing and imports
nothing of pymlirjit but :mod:`pymlirjit.errors` and :mod:`pymlirjit.boundary.types`.
:mod:`pymlirjit.jit` hands the text to an ordinary :class:`~pymlirjit.kernel.Kernel`.

Passes, one module each: :mod:`.source` (the AST and its locations), :mod:`.syntax` (the
subset and the names each statement assigns), :mod:`.defined` (variables possibly undefined
at a use), :mod:`.resolve` (globals, closures, modules), :mod:`.infer` (types, to a
fixpoint; :mod:`.infer_calls`, :mod:`.infer_arrays`), :mod:`.ownership` (which arrays a
function frees), then :mod:`.emit` and its parts (:mod:`.emit_base`, :mod:`.emit_ops`,
:mod:`.emit_arrays`, :mod:`.emit_elementwise`, :mod:`.emit_loops`, :mod:`.emit_calls`,
:mod:`.emit_parallel`); :mod:`.program` ties them together, :mod:`.arguments` maps a
call's arguments to types. The passes load on first use (importing pymlirjit stays cheap).
"""

from typing import Any

from .diagnostics import JitError, JitSyntaxError, JitTypeError

__all__ = ["CallbackSpec", "JitError", "JitSyntaxError", "JitTypeError", "Specialization",
           "specialize"]


def __getattr__(name: str) -> Any:
    if name in ("CallbackSpec", "Specialization", "specialize"):
        from . import program

        return getattr(program, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
