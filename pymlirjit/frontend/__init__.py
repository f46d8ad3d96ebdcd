"""The Python frontend of ``@jit``: a plain Python function's source -> MLIR text.

Pure: it reads the function's AST and writes MLIR text (func, arith, math, cf, scf,
memref), each op located at the user's ``file:line:col``; it compiles nothing and imports
nothing of pymlirjit but :mod:`pymlirjit.errors` and :mod:`pymlirjit.types`.
:mod:`pymlirjit.jit` hands the text to an ordinary :class:`~pymlirjit.kernel.Kernel`.

Passes, one module each: :mod:`.source` (the AST and its locations), :mod:`.syntax` (the
subset and the names each statement assigns), :mod:`.defined` (variables possibly undefined
at a use), :mod:`.resolve` (globals, closures, modules), :mod:`.infer` (types, to a
fixpoint), then :mod:`.emit` and its helpers (:mod:`.emit_ops`, :mod:`.emit_arrays`,
:mod:`.emit_loops`, :mod:`.emit_calls`); :mod:`.program` ties them together.
"""

from .diagnostics import JitSyntaxError, JitTypeError
from .program import CallbackSpec, Specialization, specialize

__all__ = ["CallbackSpec", "JitSyntaxError", "JitTypeError", "Specialization", "specialize"]
