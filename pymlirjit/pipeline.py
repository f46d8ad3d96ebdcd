"""Parsing MLIR and lowering it to the LLVM dialect, with diagnostics as exceptions.

Nothing here prints: every diagnostic MLIR emits while parsing, verifying or running a
pass pipeline becomes part of an :class:`~pymlirjit.MLIRError`.

>>> module = lower(parse_module("func.func @f() { return }", new_context()))
>>> "llvm.func @f" in str(module)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import Diagnostic, MLIRError

__all__ = ["DEFAULT_PIPELINE", "lower", "new_context", "normalize_pipeline", "parse_module"]

#: Lowers func/arith/math/scf/cf/memref/linalg/tensor/complex code to the LLVM dialect.
DEFAULT_PIPELINE: tuple[str, ...] = (
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}",
    "func.func(buffer-deallocation-simplification,convert-linalg-to-loops)",
    "convert-scf-to-cf",
    "expand-strided-metadata",
    "lower-affine",
    "finalize-memref-to-llvm",
    "func.func(convert-complex-to-standard)",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-complex-to-llvm",
    "convert-arith-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "convert-index-to-llvm",
    "reconcile-unrealized-casts",
)


def normalize_pipeline(pipeline: str | Sequence[str] | None) -> str:
    """The full textual pipeline: ``None`` means the default; a list of passes is joined;
    a string without an anchor is anchored on ``builtin.module``."""
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE
    if not isinstance(pipeline, str):
        pipeline = ",".join(pipeline)
    pipeline = pipeline.strip()
    if not pipeline.startswith("builtin.module("):
        pipeline = f"builtin.module({pipeline})"
    return pipeline


def new_context() -> Any:
    """A fresh MLIR context with every upstream dialect and pass registered."""
    from mlir import ir

    context = ir.Context()
    # Diagnostics not attached to an exception would otherwise reach stderr; the bindings
    # still collect errors into the exception they raise.
    context.attach_diagnostic_handler(lambda diagnostic: True)
    return context


def _diagnostics(error: Any, filename: str) -> list[Diagnostic]:
    return [_diagnostic(d).renamed_source(filename)
            for d in getattr(error, "error_diagnostics", ())]


def _diagnostic(info: Any) -> Diagnostic:
    severity = str(info.severity).rsplit(".", 1)[-1].lower()
    return Diagnostic(severity, info.message, str(info.location),
                      tuple(_diagnostic(n) for n in info.notes))


def parse_module(source: str, context: Any, filename: str = "<source>") -> Any:
    """Parse and verify MLIR text into a module owned by ``context``."""
    from mlir import ir

    with context, ir.Location.unknown():
        try:
            return ir.Module.parse(source)
        except ir.MLIRError as exc:
            raise MLIRError(f"cannot parse MLIR from {filename}",
                            _diagnostics(exc, filename)) from None


def lower(module: Any, pipeline: str | Sequence[str] | None = None,
          filename: str = "<source>") -> Any:
    """Run ``pipeline`` (the default one if ``None``) on ``module`` in place; return it.

    ``filename`` names the source in the locations of diagnostics.
    """
    from mlir import ir
    from mlir.passmanager import PassManager

    text = normalize_pipeline(pipeline)
    with module.context:
        try:
            PassManager.parse(text)
        except ValueError as exc:
            raise MLIRError(f"invalid pass pipeline {text!r}: {exc}") from None
        for stage in _stages(text):
            _check_no_sub_byte_access(module, filename)
            try:
                PassManager.parse(stage).run(module.operation)
            except ir.MLIRError as exc:
                raise MLIRError("lowering failed", _diagnostics(exc, filename)) from None
    _check_lowered(module, filename)
    return module


_MEMREF_LOWERING = "finalize-memref-to-llvm"


def _stages(pipeline: str) -> list[str]:
    """``pipeline``, split before a top-level memref lowering pass (so that what
    bufferization produced can be checked before it is lowered)."""
    depth = 0
    for i, char in enumerate(pipeline):
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
        elif char == "," and depth == 1 and pipeline.startswith(_MEMREF_LOWERING, i + 1):
            return [pipeline[:i] + ")", "builtin.module(" + pipeline[i + 1:]]
    return [pipeline]


_MEMORY_ACCESSES = {"memref.load": 0, "memref.store": 1, "affine.load": 0, "affine.store": 1}


def _check_no_sub_byte_access(module: Any, filename: str) -> None:
    """Raise instead of letting MLIR 22 abort the process: its memref lowering asserts
    on loads and stores of integers narrower than a byte (such as i1)."""
    from mlir import ir

    found: list[Diagnostic] = []

    def visit(op: Any) -> Any:
        operand = _MEMORY_ACCESSES.get(op.name)
        if operand is not None and len(found) < 5:
            element = ir.MemRefType(op.operands[operand].type).element_type
            if isinstance(element, ir.IntegerType) and element.width < 8:
                found.append(Diagnostic(
                    "error", f"'{op.name}' of {element} cannot be lowered by MLIR 22 (its "
                    f"memref lowering aborts on elements narrower than a byte); use i8 and "
                    f"arith.trunci/arith.extui", str(op.location)).renamed_source(filename))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if found:
        raise MLIRError("unsupported memory access", found)


def _check_lowered(module: Any, filename: str) -> None:
    """Raise if an op outside the LLVM dialect survived the pipeline (the JIT rejects it)."""
    leftovers: list[Diagnostic] = []

    def visit(op: Any) -> Any:
        from mlir import ir

        name = op.name
        if not name.startswith("llvm.") and name != "builtin.module" and len(leftovers) < 5:
            leftovers.append(Diagnostic("error", f"'{name}' was not lowered to the LLVM dialect",
                                        str(op.location)).renamed_source(filename))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if leftovers:
        raise MLIRError("the pipeline left operations that cannot be JIT-compiled "
                        "(add the passes that lower them)", leftovers)
