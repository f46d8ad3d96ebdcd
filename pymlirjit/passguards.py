"""Checks run before a pass that MLIR 22 would abort the process on, raising instead.

Registered passes that abort on some input (an LLVM assertion, not a diagnostic) cannot
be caught once they run: the check looks for that input first. ``pipeline`` splits its
stages before each pass named in :data:`GUARDED` so that the check sees the module as that
pass will.
"""

from __future__ import annotations

from typing import Any

from .errors import Diagnostic, MLIRError

__all__ = ["GUARDED", "check_before"]

#: MLIR 22's convert-math-to-apfloat casts every math.fma operand to a scalar float
#: type: on a vector or tensor it fails an assertion (the process ends).
_APFLOAT = "convert-math-to-apfloat"
GUARDED = (_APFLOAT,)


def check_before(module: Any, stage: str, filename: str) -> None:
    """Raise :class:`MLIRError` if pipeline ``stage`` runs a pass of :data:`GUARDED` on
    input it would abort on (naming the op and its location)."""
    if _APFLOAT not in stage:
        return
    from mlir import ir

    found: list[Diagnostic] = []

    def visit(op: Any) -> Any:
        if op.name == "math.fma" and len(found) < 5:
            shaped = op.results[0].type
            if not isinstance(shaped, (ir.FloatType, ir.IndexType, ir.IntegerType)):
                found.append(Diagnostic(
                    "error", f"'math.fma' on {shaped} cannot go through {_APFLOAT} in MLIR 22 "
                    f"(it aborts on vectors and tensors); lower it first (convert-math-to-llvm "
                    f"for types LLVM has, or unroll the vector)",
                    str(op.location)).renamed_source(filename))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if found:
        raise MLIRError("unsupported math.fma", found)
