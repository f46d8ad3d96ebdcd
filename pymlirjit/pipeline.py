"""Parsing MLIR and lowering it to the LLVM dialect, for the low-level engine.

The documented import path of :mod:`pymlirjit.lowering.pipeline`, where it is defined
(see docs/engine.md).
"""

from .lowering.pipeline import (
    DEFAULT_PIPELINE,
    default_pipeline_for,
    lower,
    new_context,
    parse_module,
)

__all__ = ["DEFAULT_PIPELINE", "default_pipeline_for", "lower", "new_context", "parse_module"]
