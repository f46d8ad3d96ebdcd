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
            manager = PassManager.parse(text)
        except ValueError as exc:
            raise MLIRError(f"invalid pass pipeline {text!r}: {exc}") from None
        try:
            manager.run(module.operation)
        except ir.MLIRError as exc:
            raise MLIRError("lowering failed", _diagnostics(exc, filename)) from None
    _check_lowered(module, filename)
    return module


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
