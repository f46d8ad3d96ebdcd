"""Which memref parameters a function provably never writes: a read-only numpy array may
pass for those (numba accepts them), and only for those.

:func:`read_only_parameters` follows each memref parameter and the views made of it
(``memref.subview``, ``cast``, ``reinterpret_cast``, ``collapse_shape``,
``expand_shape``, ``transpose``) through their uses. Loads, ``memref.dim``, the source
of a ``memref.copy``, a linalg op's inputs and a ``bufferization.to_tensor`` that is
not ``writable`` only read; every other use (a store, the target of a copy, a linalg
op's outputs, a call, a branch or a yield passing it on, an op this module does not
know) counts as a write. So a parameter is read-only only when nothing can write it.

>>> from mlir import ir
>>> with ir.Context():
...     module = ir.Module.parse('''
... func.func @f(%a: memref<?xf64>, %b: memref<?xf64>) {
...   %c0 = arith.constant 0 : index
...   %x = memref.load %a[%c0] : memref<?xf64>
...   memref.store %x, %b[%c0] : memref<?xf64>
...   return
... }''')
...     read_only_parameters(module.body.operations[0])
frozenset({0})
"""

from __future__ import annotations

from typing import Any

__all__ = ["read_only_parameters"]

#: Uses that only read the memref operand (any operand position).
_READS = frozenset({
    "memref.load", "memref.dim", "memref.rank", "memref.extract_strided_metadata",
    "memref.extract_aligned_pointer_as_index", "vector.load", "vector.transfer_read",
    "vector.maskedload", "vector.gather", "vector.expandload", "affine.load",
    "affine.vector_load", "memref.prefetch", "affine.prefetch"})
#: Uses whose first result is a view of the memref operand (a write to it writes it).
_VIEWS = frozenset({
    "memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.collapse_shape",
    "memref.expand_shape", "memref.transpose", "memref.memory_space_cast"})


def read_only_parameters(function: Any) -> frozenset[int]:
    """The positions of ``function``'s (a ``func.func`` with a body) memref parameters
    that no code in it can write through (see the module's docstring)."""
    from mlir import ir

    if len(function.regions[0].blocks) == 0:
        return frozenset()
    arguments = function.regions[0].blocks[0].arguments
    return frozenset(i for i, argument in enumerate(arguments)
                     if isinstance(argument.type, ir.MemRefType)
                     and not _may_be_written(argument))


def _may_be_written(value: Any, depth: int = 0) -> bool:
    if depth > 32:  # views of views of ...: give up, as a write
        return True
    for use in value.uses:
        op = use.owner
        name = op.name
        if name in _READS:
            continue
        if name in _VIEWS and use.operand_number == 0:
            if any(_may_be_written(result, depth + 1) for result in op.results):
                return True
            continue
        if name == "memref.copy" and use.operand_number == 0:
            continue
        if name == "bufferization.to_tensor" and "writable" not in op.attributes:
            continue
        if name.startswith("linalg.") and _is_input(op, use.operand_number):
            continue
        return True
    return False


def _is_input(op: Any, number: int) -> bool:
    """Whether operand ``number`` of a linalg op is one of its inputs (``ins``)."""
    from mlir import ir

    attributes = op.attributes
    if "operandSegmentSizes" not in attributes:
        return False
    segments = list(ir.DenseI32ArrayAttr(attributes["operandSegmentSizes"]))
    return len(segments) == 2 and number < segments[0]
