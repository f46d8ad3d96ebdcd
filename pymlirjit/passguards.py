"""Checks run before a pass that MLIR 22 would abort the process on, raising instead.

Registered passes that abort on some input (an LLVM assertion, not a diagnostic) cannot
be caught once they run: the check looks for that input first. ``pipeline`` splits its
stages before each pass named in :data:`GUARDED` so that the check sees the module as that
pass will. A registered pipeline that runs such a pass inside itself (the sparsifier, whose
convert-to-llvm lowers memrefs) is spelled as its passes first: :func:`expand_hiding_pipelines`.
"""

from __future__ import annotations

from typing import Any

from .errors import Diagnostic, MLIRError

__all__ = ["GUARDED", "check_before", "expand_hiding_pipelines"]

#: MLIR 22's convert-math-to-apfloat casts every math.fma operand to a scalar float
#: type: on a vector or tensor it fails an assertion (the process ends).
_APFLOAT = "convert-math-to-apfloat"
#: convert-to-llvm lowers memrefs as finalize-memref-to-llvm does, with the same assertion
#: on elements narrower than a byte (the sparsifier's i1 workspace of an access pattern
#: expansion, in a sparse matrix product with a sparse result): ``pipeline`` rewrites or
#: refuses those between stages (pymlirjit.subbyte), so a stage must start there.
_TO_LLVM = "convert-to-llvm"
GUARDED = (_APFLOAT, _TO_LLVM)
#: Passes whose input is checked before they run (``pipeline`` adds its own memref
#: lowering): a registered pipeline that runs one inside is spelled as its passes.
_WATCHED = (*GUARDED, "finalize-memref-to-llvm")


def expand_hiding_pipelines(pipeline: str) -> str:
    """``pipeline`` with its registered pass pipelines (such as ``sparsifier``) spelled as
    the passes they add, if one of those is a pass the checks must see the input of;
    otherwise ``pipeline`` as given. Needs an active MLIR context."""
    from mlir.passmanager import PassManager

    expanded = str(PassManager.parse(pipeline))
    hidden = [name for name in _WATCHED if name in expanded and name not in pipeline]
    return expanded if hidden else pipeline


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
