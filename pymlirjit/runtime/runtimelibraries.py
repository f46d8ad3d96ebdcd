"""The runtime libraries of MLIR's that a lowered module needs linked, found from the
functions it declares (and whether its text names bf16)."""

from __future__ import annotations

from typing import Any

from ..lowering.declarations import is_declaration
from ..lowering.pipeline import runtime_library

__all__ = ["BF16_LIBRARY", "external_declarations", "needed_runtime_libraries"]

#: Runtime libraries linked whenever the lowered module calls them, by symbol prefix:
#: the lowering of the async dialect calls MLIR's async runtime; arithmetic on floats
#: LLVM lacks (f8, f6, f4) calls MLIR's APFloat wrappers in the C runner utilities.
_AUTOMATIC_LIBRARIES = {"mlirAsyncRuntime": "mlir_async_runtime",
                        "_mlir_apfloat_": "mlir_c_runner_utils"}

#: Rounding to bf16 is a call of ``__truncsfbf2``/``__truncdfbf2`` on CPUs without
#: AVX512-BF16 (LLVM's lowering of ``fptrunc`` and of bf16 arithmetic), which libgcc before
#: GCC 13 lacks; MLIR's float16 utilities define both, so modules naming bf16 link them.
BF16_LIBRARY = "mlir_float16_utils"


def external_declarations(module: Any) -> list[str]:
    """The names of the ``llvm.func`` declarations of a lowered ``module``."""
    from mlir import ir

    return [ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
            if is_declaration(op)]


def needed_runtime_libraries(module: Any, names_bf16: bool) -> tuple[str, ...]:
    """The paths of the runtime libraries a lowered ``module`` calls into, and MLIR's
    float16 utilities if its source named bf16 (``names_bf16``)."""
    needed = []
    for name in external_declarations(module):
        for prefix, library in _AUTOMATIC_LIBRARIES.items():
            path = runtime_library(library)
            if name.startswith(prefix) and path not in needed:
                needed.append(path)
    if names_bf16:
        needed.append(runtime_library(BF16_LIBRARY))
    return tuple(needed)
