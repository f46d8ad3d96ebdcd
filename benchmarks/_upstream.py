"""Baselines built directly on upstream MLIR's Python bindings.

The module is parsed and lowered with pymlirjit's pipeline helpers (so both sides JIT the
same LLVM-dialect code), but the engine is upstream's own
``mlir.execution_engine.ExecutionEngine``, used the way its documentation shows:
``register_runtime`` with ctypes callbacks, ``invoke`` with pointers to arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlir.execution_engine import ExecutionEngine

from pymlirjit.lowering.pipeline import lower, new_context, parse_module

__all__ = ["UpstreamModule", "compile_upstream"]


class UpstreamModule:
    """An upstream engine plus everything it needs kept alive (context, module,
    ctypes callbacks: upstream keeps none of them)."""

    def __init__(self, engine: ExecutionEngine, keepalive: list[Any]) -> None:
        self.engine = engine
        self._keepalive = keepalive

    def invoke(self, name: str, *pointers: Any) -> None:
        """Upstream ``invoke``: every argument and result passed as a ctypes pointer."""
        self.engine.invoke(name, *pointers)


def compile_upstream(source: str, callbacks: Mapping[str, Any] | None = None,
                     opt_level: int = 2) -> UpstreamModule:
    """Parse, lower and JIT ``source`` (which spells ``llvm.emit_c_interface`` itself, as
    upstream requires) and register ``callbacks`` (name -> ctypes CFUNCTYPE object)."""
    context = new_context()
    module = lower(parse_module(source, context))
    engine = ExecutionEngine(module, opt_level=opt_level)
    for name, function in (callbacks or {}).items():
        engine.register_runtime(name, function)
    return UpstreamModule(engine, [context, module, dict(callbacks or {})])

