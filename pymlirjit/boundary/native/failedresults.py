"""The results a failed callback (or linked kernel) gives compiled code that runs on.

A call that cannot unwind (a module with shared libraries, the worker threads of a
``parallel=True`` loop) goes on running after a callback fails or is skipped, and uses
what the callback returned. Zeros are fine for scalars; a memref result made of zeros
is a NULL descriptor, which the code reads, writes or frees. It gets instead an
allocated array of the declared rank: static dimensions as declared, dynamic ones
empty, contiguous strides, zeroed memory (at least :data:`MINIMUM_BYTES`, so that a
read of the first element of what the code believes non-empty reads a zero). The code
owns that memory as it owns a callback's real result (``memref.dealloc`` frees it);
on the allocation list of the thread's innermost call if that call can unwind. The
call raises the callback's exception when it ends, whatever it computed meanwhile.
"""

from __future__ import annotations

from llvmlite import ir

from ..abi import BoundaryABI
from ..memref import ALIGNED, ALLOCATED, OFFSET, SIZES, STRIDES
from ..types import MemRefType, TensorType
from .allocations import track_in_innermost_call
from .builder import _FunctionBuilder, _i32, _i64, _ptr, _zero_results

__all__ = ["MINIMUM_BYTES", "fill_failed_results"]

#: The least memory a failed memref result gets (zeroed), even if it has no element.
MINIMUM_BYTES = 64


def fill_failed_results(fb: _FunctionBuilder, abi: BoundaryABI, args: list[ir.Value],
                        record: ir.Value | None) -> None:
    """Emit: zero the results ``abi``'s function returns through a pointer (``args[0]``),
    then give each memref result a descriptor of fresh zeroed memory (see the module's
    docstring), tracked in the call whose record is ``record`` (an ``i64*``, or
    ``None``: not tracked). A descriptor whose memory cannot be allocated stays zero."""
    b = fb.builder
    _zero_results(b, abi, args)
    if not abi.results_via_pointer:
        return
    for i, t in enumerate(abi.boundary.results):
        if not isinstance(t, (MemRefType, TensorType)):
            continue
        field = getattr(abi.result_struct, f"r{i}").offset
        descriptor = b.gep(args[0], [ir.Constant(_i64, field)])
        sizes, strides, offset = failed_layout(t)
        span = offset + sum((size - 1) * stride for size, stride in zip(sizes, strides))
        nbytes = max(0 if 0 in sizes else (span + 1) * t.element.dtype.itemsize,
                     MINIMUM_BYTES)
        memory = b.call(_calloc(fb), [ir.Constant(_i64, 1), ir.Constant(_i64, nbytes)])
        with b.if_then(b.not_(fb.is_null(memory)), likely=True):
            if record is not None:
                track_in_innermost_call(b, fb.unit, record, memory)
            b.store(memory, fb.descriptor_field(descriptor, t.rank, ALLOCATED))
            b.store(memory, fb.descriptor_field(descriptor, t.rank, ALIGNED))
            b.store(ir.Constant(_i64, offset),
                    fb.descriptor_field(descriptor, t.rank, OFFSET))
            for axis in range(t.rank):
                index = [ir.Constant(_i32, 0), ir.Constant(_i32, axis)]
                b.store(ir.Constant(_i64, sizes[axis]),
                        b.gep(fb.descriptor_field(descriptor, t.rank, SIZES), index))
                b.store(ir.Constant(_i64, strides[axis]),
                        b.gep(fb.descriptor_field(descriptor, t.rank, STRIDES), index))


def failed_layout(t: MemRefType | TensorType) -> tuple[list[int], list[int], int]:
    """The sizes, strides and offset (in elements) of the failed result of type ``t``:
    static ones as declared (the code relies on them), dynamic sizes 0, dynamic
    strides row-major, a dynamic offset 0."""
    sizes = [size if size is not None else 0 for size in t.shape]
    declared = getattr(t, "strides", None) or [None] * t.rank
    strides = [0] * t.rank
    running = 1
    for axis in reversed(range(t.rank)):
        stride = declared[axis]
        strides[axis] = stride if stride is not None else running
        running = max(running, abs(strides[axis]) * max(sizes[axis], 1))
    offset = getattr(t, "offset", 0)
    return sizes, strides, offset if offset is not None else 0


def _calloc(fb: _FunctionBuilder) -> ir.Function:
    existing = fb.module.globals.get("calloc")
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(fb.module, ir.FunctionType(_ptr, [_i64, _i64]), "calloc")
