"""Loads and stores of integers narrower than a byte (``i1``, ``i4``) made lowerable.

MLIR 22's memref lowering (finalize-memref-to-llvm, and convert-to-llvm through it)
fails an assertion on ``memref.load``/``memref.store`` of such an element: the process
ends. Its vector lowering handles them: a one-element ``vector.load``/``vector.store``
reads and writes the same byte per element that a memref of ``i1`` is allocated with.
(The sparsifier makes such accesses inside itself, out of reach: see
:mod:`pymlirjit.lowering.passguards`.)

:func:`vectorize_sub_byte_accesses` rewrites them just before the memref lowering, and
:data:`VECTOR_LOWERING` then lowers the vector ops it made (the pipeline may have lowered
vector ops already, and have no pass left for them); whatever it leaves is refused by
:func:`pymlirjit.lowering.checks.check_no_sub_byte_access` (which, before that stage, waits
for it: :func:`deferred_to_vectorizing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .walk import operations

__all__ = ["VECTOR_LOWERING", "deferred_to_vectorizing", "vectorize_sub_byte_accesses"]

#: Passes that lower memrefs to the LLVM dialect.
_MEMREF_LOWERINGS = ("finalize-memref-to-llvm", "convert-to-llvm")
#: Run after :func:`vectorize_sub_byte_accesses` rewrote anything, before the memref
#: lowering (the memrefs it reads become unrealized casts that lowering resolves).
VECTOR_LOWERING = "builtin.module(convert-vector-to-llvm)"


def vectorize_sub_byte_accesses(module: Any, stages: Sequence[str]) -> int:
    """Rewrite ``memref.load``/``memref.store`` of sub-byte integers in ``module`` as
    one-element vector ones if ``stages`` (what is left of the pipeline, as stage texts)
    starts with a memref lowering; return how many were rewritten (if any, run
    :data:`VECTOR_LOWERING` next). Only memrefs whose innermost dimension is contiguous
    qualify (as ``vector.load`` needs); the others are left as they are."""
    if not stages or not _starts_with_memref_lowering(stages[0]):
        return 0
    found = operations(module, _qualifies, names=("memref.load", "memref.store"))
    for op in found:
        _rewrite(op)
    return len(found)


def deferred_to_vectorizing(stages: Sequence[str]) -> bool:
    """Whether the sub-byte accesses of a module about to run ``stages`` are left for a
    later stage, a memref lowering, to vectorize (rather than refused now). Never at a
    memref lowering itself: what it could not vectorize must be refused there."""
    return bool(stages) and not _starts_with_memref_lowering(stages[0]) and any(
        _starts_with_memref_lowering(stage) for stage in stages[1:])


def _starts_with_memref_lowering(stage: str) -> bool:
    body = stage.removeprefix("builtin.module(")
    return body.startswith(_MEMREF_LOWERINGS)


def _memref_operand(op: Any) -> Any:
    return op.operands[0 if op.name == "memref.load" else 1]


def _qualifies(op: Any) -> bool:
    from mlir import ir

    memref = ir.MemRefType(_memref_operand(op).type)
    element = memref.element_type
    if not isinstance(element, ir.IntegerType) or element.width >= 8:
        return False
    if memref.rank == 0:
        return False  # vector.load needs an index into the innermost dimension
    strides, _ = memref.get_strides_and_offset()
    return bool(strides[-1] == 1)


def _rewrite(op: Any) -> None:
    from mlir import ir
    from mlir.dialects import vector

    memref = _memref_operand(op)
    element = ir.MemRefType(memref.type).element_type
    location = op.location
    one = ir.VectorType.get([1], element, loc=location)
    with ir.InsertionPoint(op):
        if op.name == "memref.load":
            indices = list(op.operands[1:])
            loaded = vector.LoadOp(one, memref, indices, loc=location).result
            scalar = vector.ExtractOp(loaded, [], [0], loc=location).result
            op.results[0].replace_all_uses_with(scalar)
        else:
            indices = list(op.operands[2:])
            broadcast = vector.BroadcastOp(one, op.operands[0], loc=location).result
            vector.StoreOp(broadcast, memref, indices, loc=location)
    op.erase()
