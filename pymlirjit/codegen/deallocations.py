"""Deallocations of the buffers a function forgets: a ``memref.alloc`` without a
``memref.dealloc`` no longer leaks (numba users never free memory, and 200 calls of a
kernel with an 8 MB scratch buffer grew the process by 1.6 GB).

:func:`insert_deallocations` works as MLIR's ownership-based buffer deallocation does
for the buffers a function owns and never hands on: a buffer allocated in a block, used
only there (and in the regions of that block's ops) by ops that read, write or view it
(loads, stores into it, ``memref.dim``, ``memref.copy``, linalg and vector ops, views of
it followed the same way), is freed before the block's terminator: at the end of the
function, of a loop iteration or of an ``scf.if`` branch. A buffer the function returns,
yields, branches with, passes to a call, stores as a value or frees itself (through any
view) is left alone: a returned one stays owned by its array, as before.

>>> from mlir import ir
>>> with ir.Context():
...     module = ir.Module.parse('''
... func.func @f(%n: index) -> f64 {
...   %c0 = arith.constant 0 : index
...   %m = memref.alloc(%n) : memref<?xf64>
...   %x = memref.load %m[%c0] : memref<?xf64>
...   return %x : f64
... }''')
...     insert_deallocations(module)
1
"""

from __future__ import annotations

from typing import Any

from ..lowering.walk import operations

__all__ = ["insert_deallocations"]

#: Ops that use a buffer without handing it on, by name -> the operand positions where
#: the buffer may sit (None: any position).
_USES: dict[str, frozenset[int] | None] = {
    "memref.load": None, "memref.dim": None, "memref.rank": None, "memref.copy": None,
    "memref.store": frozenset({1}), "memref.atomic_rmw": frozenset({1}),
    "memref.prefetch": None, "vector.load": None, "vector.store": frozenset({1}),
    "vector.transfer_read": None, "vector.transfer_write": frozenset({1}),
    "vector.maskedload": None, "vector.maskedstore": frozenset({0}),
    "affine.load": None, "affine.store": frozenset({1})}
#: Ops whose first result is a view of their first operand.
_VIEWS = frozenset({
    "memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.collapse_shape",
    "memref.expand_shape", "memref.transpose", "memref.memory_space_cast", "memref.view"})


def insert_deallocations(module: Any) -> int:
    """Free each ``memref.alloc`` of ``module`` that its function forgets (see the
    module's docstring); returns how many deallocations it added."""
    from mlir import ir
    from mlir.dialects import memref

    added = 0
    with module.context:
        for alloc in operations(module, names={"memref.alloc"}):
            block = alloc.operation.block
            if not _forgotten(alloc.results[0], block):
                continue
            terminator = block.operations[len(block.operations) - 1]
            with ir.InsertionPoint(terminator), alloc.location:
                memref.DeallocOp(alloc.results[0])
            added += 1
    return added


def _forgotten(value: Any, block: Any, depth: int = 0) -> bool:
    """Whether every use of ``value`` (and of its views) only reads, writes or views it,
    inside ``block``."""
    if depth > 16:
        return False
    for use in value.uses:
        op = use.owner
        if not _within(op, block):
            return False
        name = op.name
        if name in _VIEWS and use.operand_number == 0:
            if not _forgotten(op.results[0], block, depth + 1):
                return False
            continue
        if name.startswith("linalg.") and name not in ("linalg.yield", "linalg.index"):
            continue
        if name not in _USES:
            return False  # returned, yielded, passed on, freed, or unknown: left alone
        positions = _USES[name]
        if positions is not None and use.operand_number not in positions:
            return False
    return True


def _within(op: Any, block: Any) -> bool:
    """Whether ``op`` is in ``block`` or nested in the regions of its ops (not in an
    ``async.execute`` region, which may still run when the block ends)."""
    while op is not None:
        if op.operation.block == block:
            return True
        op = op.parent
        if op is None or op.name in ("func.func", "builtin.module", "async.execute"):
            return False
    return False
