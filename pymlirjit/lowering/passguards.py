"""Checks run before a pass that MLIR 22 would abort the process on, raising instead.

Registered passes that abort on some input (an LLVM assertion, not a diagnostic) cannot
be caught once they run: the check looks for that input first. ``pipeline`` splits its
stages before each pass named in :data:`GUARDED` so that the check sees the module as that
pass will. A registered pipeline that runs such a pass inside itself (the sparsifier, whose
convert-to-llvm lowers memrefs) cannot be split: its first passes run on a copy of the
module, which is checked as its own LLVM conversion would see it. (Spelling it as the
passes MLIR prints for it would not do: the print loses the options the sparsifier gives
its passes in code, enable-runtime-library and create-sparse-deallocs among them, and the
code it makes then frees no temporary buffer.)
"""

from __future__ import annotations

import re
from typing import Any

from ..boundary import ffi
from ..errors import Diagnostic, MLIRError
from .checks import check_no_sub_byte_access
from .walk import operations

__all__ = ["GUARDED", "check_before"]

#: MLIR 22's convert-math-to-apfloat casts every math.fma operand to a scalar float
#: type: on a vector or tensor it fails an assertion (the process ends).
_APFLOAT = "convert-math-to-apfloat"
#: convert-to-llvm lowers memrefs as finalize-memref-to-llvm does, with the same assertion
#: on elements narrower than a byte: ``pipeline`` rewrites or refuses those between stages
#: (pymlirjit.lowering.subbyte), so a stage must start there.
_TO_LLVM = "convert-to-llvm"
GUARDED = (_APFLOAT, _TO_LLVM)
#: The sparsifier as a pipeline names it. Its own convert-to-llvm meets an i1 workspace
#: (of an access pattern expansion: a sparse matrix product with a sparse result).
_SPARSIFIER = re.compile(r"(?<![\w.-])sparsifier(?![\w-])")


def check_before(module: Any, stage: str, filename: str) -> None:
    """Raise :class:`MLIRError` if pipeline ``stage`` runs a pass of :data:`GUARDED`, or
    the sparsifier, on input it would abort on (naming the op and its location)."""
    if _SPARSIFIER.search(stage):
        _check_sparsifier(module, stage, filename)
    if _APFLOAT not in stage:
        return
    from mlir import ir

    def on_shapes(op: Any) -> bool:
        return not isinstance(op.results[0].type, (ir.FloatType, ir.IndexType, ir.IntegerType))

    found = [Diagnostic(
        "error", f"'math.fma' on {op.results[0].type} cannot go through {_APFLOAT} in MLIR 22 "
        f"(it aborts on vectors and tensors); lower it first (convert-math-to-llvm "
        f"for types LLVM has, or unroll the vector)", str(op.location)).renamed_source(filename)
        for op in operations(module, on_shapes, names={"math.fma"}, limit=5)]
    if found:
        raise MLIRError("unsupported math.fma", found)


def _check_sparsifier(module: Any, stage: str, filename: str) -> None:
    """Run ``stage`` (one running the sparsifier) up to the sparsifier's own LLVM
    conversion on a copy of ``module``, and raise if that conversion would meet memory
    accesses it aborts on. Either way of lowering sparse storage (inline or through the
    runtime library) makes the same workspaces."""
    from mlir.passmanager import PassManager

    expanded = str(PassManager.parse(stage))
    cut = expanded.find("," + _TO_LLVM)
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
                "this sparsifier cannot lower the module in MLIR 22: it makes memory "
                "accesses narrower than a byte (the workspace of an access pattern "
                "expansion), on which its own LLVM conversion aborts", made) from None
    finally:
        probe.erase()
