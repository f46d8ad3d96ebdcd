"""A call's unwind area, on its entry's or guard's C stack: the jump buffer a failing
callback ``longjmp``s to, then the list of the memory the call's code allocated (see
:mod:`pymlirjit.boundary.native.allocations`), and the code that finds them from a call record."""

from __future__ import annotations

from llvmlite import ir

from ..callframe import JUMP_BUFFER

__all__ = ["ALLOCATIONS", "HIDDEN", "INLINE_ALLOCATIONS", "LIST_CAPACITY", "LIST_COUNT",
           "LIST_INLINE", "LIST_ITEMS", "UNWIND_AREA_BYTES", "allocation_list",
           "can_unwind_now", "unwind"]

_i32 = ir.IntType(32)
_i64 = ir.IntType(64)
_ptr = ir.IntType(8).as_pointer()

_JMP_BUF_BYTES = 512  # glibc's jmp_buf is 200 bytes on x86-64; leave room
# A call that can unwind keeps, right after its jmp_buf, the list of the memory its
# compiled code allocated and has not freed (see pymlirjit.boundary.native.allocations), by i64
# field: the items (an i64 array), their count, the array's capacity, then the first
# INLINE_ALLOCATIONS items' own room (the array while it fits there).
ALLOCATIONS = _JMP_BUF_BYTES
LIST_ITEMS, LIST_COUNT, LIST_CAPACITY, LIST_INLINE = 0, 1, 2, 3
INLINE_ALLOCATIONS = 8
# Set in a record's jump buffer (16-byte aligned) while its call runs Python.
HIDDEN = 1
UNWIND_AREA_BYTES = ALLOCATIONS + 8 * (LIST_INLINE + INLINE_ALLOCATIONS)


def can_unwind_now(b: ir.IRBuilder, jump_buffer: ir.Value) -> ir.Value:
    """Whether a call whose record holds ``jump_buffer`` (an i64) can unwind and is not
    running Python (a jump buffer, not marked :data:`HIDDEN`): an i1."""
    return b.and_(b.icmp_unsigned("!=", jump_buffer, ir.Constant(_i64, 0)),
                  b.icmp_unsigned("==", b.and_(jump_buffer, ir.Constant(_i64, HIDDEN)),
                                  ir.Constant(_i64, 0)))


def allocation_list(b: ir.IRBuilder, jump_buffer: ir.Value) -> ir.Value:
    """The allocation list (an ``i64*``, see :data:`ALLOCATIONS`) of the call whose jump
    buffer is ``jump_buffer`` (a pointer or an i64)."""
    if isinstance(jump_buffer.type, ir.IntType):
        jump_buffer = b.inttoptr(jump_buffer, _ptr)
    return b.bitcast(b.gep(jump_buffer, [ir.Constant(_i64, ALLOCATIONS)]), _i64.as_pointer())


def unwind(b: ir.IRBuilder, libc: dict[str, ir.Function], record: ir.Value) -> None:
    """``longjmp`` to the jump buffer of ``record`` (an i64 pointer to a call record) if
    it has one, not hidden (see :mod:`pymlirjit.boundary.callframe`); else go on."""
    jump_buffer = b.load(b.gep(record, [ir.Constant(_i64, JUMP_BUFFER)]))
    with b.if_then(can_unwind_now(b, jump_buffer)):
        b.call(libc["longjmp"], [b.inttoptr(jump_buffer, _ptr), ir.Constant(_i32, 1)])
        b.unreachable()
