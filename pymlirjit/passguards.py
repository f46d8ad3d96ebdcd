"""Checks run before a pass that MLIR 22 would abort the process on, raising instead.

Registered passes that abort on some input (an LLVM assertion, not a diagnostic) cannot
be caught once they run: the check looks for that input first. ``pipeline`` splits its
stages before each pass named in :data:`GUARDED` so that the check sees the module as that
pass will. A composite pipeline (the sparsifier) makes that input itself, out of sight: its
first passes run on a copy, which is checked as its own LLVM conversion would see it.
"""

from __future__ import annotations

import re
from typing import Any

from . import ffi
from .errors import Diagnostic, MLIRError
from .loweringchecks import check_no_sub_byte_access

__all__ = ["GUARDED", "check_before"]

#: MLIR 22's convert-math-to-apfloat casts every math.fma operand to a scalar float
#: type: on a vector or tensor it fails an assertion (the process ends).
_APFLOAT = "convert-math-to-apfloat"
#: MLIR 22's sparsifier stores to memrefs of i1 (the workspace of an access pattern
#: expansion, as in a sparse matrix product with a sparse result) and then its own LLVM
#: conversion fails an assertion on them: mlir-opt --sparsifier ends there too.
_SPARSIFIER = "sparsifier"
GUARDED = (_APFLOAT, _SPARSIFIER)
#: Where the sparsifier's own pipeline (as MLIR prints it) converts to the LLVM dialect.
_SPARSIFIER_LLVM_CONVERSION = ",convert-to-llvm"


def check_before(module: Any, stage: str, filename: str) -> None:
    """Raise :class:`MLIRError` if pipeline ``stage`` runs a pass of :data:`GUARDED` on
    input it would abort on (naming the op and its location). A stage running the
    sparsifier is first tried on a copy of ``module``."""
    if re.search(rf"(?<![\w-]){_SPARSIFIER}(?![\w-])", stage):
        _check_sparsifier(module, stage, filename)
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


def _check_sparsifier(module: Any, stage: str, filename: str) -> None:
    """Run ``stage`` up to the sparsifier's LLVM conversion on a copy of ``module`` and
    check the memory accesses it made. As MLIR prints the sparsifier's passes, some of its
    options are left out (such as enable-runtime-library), but either way of lowering
    sparse storage makes the same workspaces."""
    from mlir.passmanager import PassManager

    expanded = str(PassManager.parse(stage))
    cut = expanded.find(_SPARSIFIER_LLVM_CONVERSION)
    if cut < 0:
        return
    probe = module.operation.clone()
    try:
        # A copy the probe failed on says nothing: the real run reports its errors.
        handler = module.context.attach_diagnostic_handler(lambda diagnostic: True)
        try:
            passes = PassManager.parse(expanded[:cut] + ")")
            if not ffi.pass_manager_run_on_op(ffi.capsule_pointer(passes._CAPIPtr),
                                              ffi.capsule_pointer(probe._CAPIPtr)):
                return
        finally:
            handler.detach()
        try:
            check_no_sub_byte_access(probe, filename)
        except MLIRError as exc:
            made = [Diagnostic("error", "the sparsifier makes a " + d.message.split(" cannot")[0]
                               + " here, on which MLIR 22's LLVM conversion aborts (mlir-opt "
                               "--sparsifier too)", d.location) for d in exc.diagnostics]
            raise MLIRError(
                "the sparsifier cannot lower this module in MLIR 22: it makes memory "
                "accesses narrower than a byte (the workspace of an access pattern "
                "expansion), on which its own LLVM conversion aborts", made) from None
    finally:
        probe.erase()
