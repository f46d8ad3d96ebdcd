"""Transform scripts left in a lowered module: erased, as they are no code to run.

Upstream's runner tests keep a schedule (``transform.named_sequence @__transform_main``,
in a nested ``module attributes {transform.with_named_sequence}``) next to the code it
transforms; their RUN lines apply it with ``-transform-interpreter`` or not, then drop it
with ``-test-transform-dialect-erase-schedule``, a test-only pass that the wheel's mlir-opt
lacks. So with MLIR 22's registered passes alone, a pipeline can apply a schedule but never
remove it, and its transform ops cannot become LLVM IR. Any pipeline's result therefore
goes without them. The default pipeline does not apply a schedule (as mlir-runner, it runs
the code as written): give ``transform-interpreter`` in the pipeline to apply it.
"""

from __future__ import annotations

from typing import Any

from ..errors import Diagnostic, MLIRError, error_diagnostics

__all__ = ["apply_script", "erase_schedules"]

_MARK = "transform.with_named_sequence"


def _is_script(op: Any) -> bool:
    """Whether a top-level ``op`` is transform code: a transform op, or a nested module
    marked as holding named sequences that holds transform ops only."""
    name = op.operation.name
    if name.startswith("transform."):
        return True
    if name != "builtin.module" or _MARK not in op.operation.attributes:
        return False
    return all(inner.operation.name.startswith("transform.")
               for inner in op.regions[0].blocks[0].operations)


def erase_schedules(module: Any) -> int:
    """Erase the transform scripts at ``module``'s top level, and the mark saying that
    it holds named sequences; return how many scripts went."""
    scripts = [op for op in module.body.operations if _is_script(op)]
    for op in scripts:
        op.operation.erase()
    attributes = module.operation.attributes
    if _MARK in attributes:
        del attributes[_MARK]
    return len(scripts)


def apply_script(module: Any, script: str, filename: str, failure: str) -> None:
    """Apply the transform ``script`` (a module holding ``@__transform_main`` first) to
    ``module`` in place; raise :class:`MLIRError` ``failure`` with the interpreter's error
    diagnostics (located in ``filename``) if it reports any."""
    from mlir import ir
    from mlir.dialects.transform import interpreter

    with module.context, ir.Location.unknown():
        parsed = ir.Module.parse(script)
        with error_diagnostics(module.context, filename) as errors:
            try:
                interpreter.apply_named_sequence(module.operation, parsed.body.operations[0],
                                                 parsed.operation)
            except Exception as exc:  # the bindings raise what the interpreter reported
                errors.append(Diagnostic("error", str(exc), "unknown"))
    if errors:
        raise MLIRError(failure, errors)
