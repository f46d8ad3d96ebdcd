"""Allocation tracking: a call unwound by ``longjmp`` frees the memory its code allocated.

A failing check or callback may end a kernel call at once (see
:func:`pymlirjit.runtime.gilpolicy.call_policy`): the compiled code never reaches its own
``free`` of a temporary buffer, nor returns the results it allocated. Compiled code
of every module therefore allocates through the trackers defined here
(:data:`~pymlirjit.boundary.failures.ALLOCATION_TRACKERS`;
:func:`pymlirjit.boundary.native.trackedcalls.track_allocations` renames its calls of
``malloc``, ``aligned_alloc`` and ``free``): kernels whose own calls cannot unwind may
be called by code whose call can.
A call that can unwind has, in its record, a jump buffer, and after it a list (see
:data:`pymlirjit.boundary.native.unwindarea.ALLOCATIONS`). A tracked allocation is added to the
list of the thread's innermost call that has a jump buffer (the calls of modules with
shared libraries, which cannot unwind, have none: what their code allocates for the
code that called them is that call's), unless that call runs Python; else it is a
plain ``malloc``. A tracked ``free`` removes the pointer from the list that holds it (the
innermost first, then those of the calls it is nested in) and frees it. A callback's
memref result, copied into ``malloc`` memory, goes on the list too
(:func:`track_in_innermost_call`); while the callback's Python code runs, its call's
jump buffer is hidden (:func:`hide_jump_buffer`), so that what kernels called from
Python allocate stays Python's. When the call ends, its entry or guard
(:func:`end_allocations`):

- unwound (or, for a guard, failed): frees everything still on the list;
- returned to Python (a native entry): drops the list, whose memory now belongs to the
  arrays and results it was returned as;
- returned to compiled code (a guard whose caller, or a call it is nested in, can
  unwind: a kernel calling another): hands the list to that call, which now owns that
  memory.

Everything here is C: no Python, no GIL, thread-safe because each thread has its own
records. A ``free`` searches the lists from their newest item (temporaries are freed
soon after they are allocated), so it costs a compare per allocation still live.
Memory returned by ``memref.get_global`` or aliasing an argument is never allocated
here, hence never on a list.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from ..callframe import JUMP_BUFFER, PREVIOUS
from ..failures import ALLOCATION_TRACKERS
from ..relocation import FRAME_KEY
from .builder import _FunctionBuilder, _i32, _i64, _ptr, _Unit
from .unwindarea import (
    HIDDEN,
    INLINE_ALLOCATIONS,
    LIST_CAPACITY,
    LIST_COUNT,
    LIST_INLINE,
    LIST_ITEMS,
    allocation_list,
    can_unwind_now,
)

__all__ = ["add_trackers", "end_allocations", "hide_jump_buffer", "restore_jump_buffer",
           "track_in_innermost_call"]

_I1 = ir.IntType(1)
_LIST = _i64.as_pointer()  # an allocation list, or a call record

def _field(b: ir.IRBuilder, allocations: ir.Value, index: int) -> ir.Value:
    return b.gep(allocations, [ir.Constant(_i64, index)])


def _inline_items(b: ir.IRBuilder, allocations: ir.Value) -> ir.Value:
    return b.ptrtoint(_field(b, allocations, LIST_INLINE), _i64)


def _internal(unit: _Unit, name: str, function_type: ir.FunctionType,
              ) -> tuple[ir.Function, ir.IRBuilder | None]:
    """The unit's internal function ``name``, and a builder at its entry if it is new
    (to be built), else ``None``."""
    existing = unit.module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing, None
    function = ir.Function(unit.module, function_type, name)
    function.linkage = "internal"
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def _track(unit: _Unit) -> ir.Function:
    """``track(list, pointer)``: append ``pointer`` (an i64) to ``list``, moving the
    items to the heap (``malloc``, then ``realloc``) when their room is full. If that
    fails the pointer goes untracked: a leak if the call unwinds, never a crash."""
    function, b = _internal(unit, "pymlirjit_track_allocation",
                            ir.FunctionType(ir.VoidType(), [_LIST, _i64]))
    if b is None:
        return function
    allocations, pointer = function.args
    count = b.load(_field(b, allocations, LIST_COUNT))
    capacity = b.load(_field(b, allocations, LIST_CAPACITY))
    items = b.load(_field(b, allocations, LIST_ITEMS))
    grow = function.append_basic_block("grow")
    append = function.append_basic_block("append")
    b.cbranch(b.icmp_unsigned("==", count, capacity), grow, append)
    b.position_at_end(grow)
    wider = b.mul(capacity, ir.Constant(_i64, 2))
    bytes_ = b.mul(wider, ir.Constant(_i64, 8))
    old = b.inttoptr(items, _ptr)
    with b.if_else(b.icmp_unsigned("==", items, _inline_items(b, allocations))) as (
            first, again):
        with first:  # leaving the inline room: copy it out
            fresh = b.call(unit.libc["malloc"], [bytes_])
            with b.if_then(b.not_(_is_null(b, fresh))):
                b.call(unit.libc["memcpy"], [fresh, old, b.mul(count, ir.Constant(_i64, 8))])
            first_block = b.block
        with again:
            moved = b.call(unit.libc["realloc"], [old, bytes_])
            again_block = b.block
    grown = b.phi(_ptr)
    grown.add_incoming(fresh, first_block)
    grown.add_incoming(moved, again_block)
    with b.if_then(_is_null(b, grown), likely=False):
        b.ret_void()
    b.store(b.ptrtoint(grown, _i64), _field(b, allocations, LIST_ITEMS))
    b.store(wider, _field(b, allocations, LIST_CAPACITY))
    b.branch(append)
    b.position_at_end(append)
    array = b.inttoptr(b.load(_field(b, allocations, LIST_ITEMS)), _LIST)
    b.store(pointer, b.gep(array, [count]))
    b.store(b.add(count, ir.Constant(_i64, 1)), _field(b, allocations, LIST_COUNT))
    b.ret_void()
    return function


def _untrack(unit: _Unit) -> ir.Function:
    """``untrack(record, pointer)``: remove ``pointer`` from the list of the first call,
    from the call record ``record`` (an ``i64*``, or NULL) outwards, whose list holds it;
    nothing if none does (memory allocated elsewhere: a callback's result, an untracked
    module's)."""
    function, b = _internal(unit, "pymlirjit_untrack_allocation",
                            ir.FunctionType(ir.VoidType(), [_LIST, _i64]))
    if b is None:
        return function
    first, pointer = function.args
    entry = b.block
    each_call = function.append_basic_block("each_call")
    has_list = function.append_basic_block("has_list")
    search = function.append_basic_block("search")
    compare = function.append_basic_block("compare")
    found = function.append_basic_block("found")
    outer = function.append_basic_block("outer_call")
    done = function.append_basic_block("done")
    b.branch(each_call)
    b.position_at_end(each_call)
    record = b.phi(_LIST)
    record.add_incoming(first, entry)
    b.cbranch(_is_null(b, record), done, has_list)
    b.position_at_end(has_list)
    # A hidden list (see hide_jump_buffer) is searched too: what is freed leaves it.
    jump_buffer = b.and_(b.load(b.gep(record, [ir.Constant(_i64, JUMP_BUFFER)])),
                         ir.Constant(_i64, ~HIDDEN))
    allocations = allocation_list(b, jump_buffer)
    is_unwinding = b.icmp_unsigned("!=", jump_buffer, ir.Constant(_i64, 0))
    b.cbranch(is_unwinding, search, outer)
    # The list's fields are read only where the call has one (a jump buffer).
    b.position_at_end(search)
    count = b.load(_field(b, allocations, LIST_COUNT))
    items = b.inttoptr(b.load(_field(b, allocations, LIST_ITEMS)), _LIST)
    search_entry = b.block
    step = function.append_basic_block("step")
    b.branch(step)
    b.position_at_end(step)
    left = b.phi(_i64)  # items not compared yet, the newest first
    left.add_incoming(count, search_entry)
    b.cbranch(b.icmp_unsigned("==", left, ir.Constant(_i64, 0)), outer, compare)
    b.position_at_end(compare)
    index = b.sub(left, ir.Constant(_i64, 1))
    slot = b.gep(items, [index])
    left.add_incoming(index, compare)
    b.cbranch(b.icmp_unsigned("==", b.load(slot), pointer), found, step)
    b.position_at_end(found)
    last = b.sub(count, ir.Constant(_i64, 1))
    b.store(b.load(b.gep(items, [last])), slot)
    b.store(last, _field(b, allocations, LIST_COUNT))
    b.ret_void()
    b.position_at_end(outer)
    previous = b.load(b.gep(record, [ir.Constant(_i64, PREVIOUS)]))
    record.add_incoming(b.inttoptr(previous, _LIST), outer)
    b.branch(each_call)
    b.position_at_end(done)
    b.ret_void()
    return function


def _release(unit: _Unit) -> ir.Function:
    """``release(list, free_them)``: free every pointer on ``list`` if ``free_them``
    (an i1), then the list's heap array if it has one; the list is empty again."""
    function, b = _internal(unit, "pymlirjit_release_allocations",
                            ir.FunctionType(ir.VoidType(), [_LIST, _I1]))
    if b is None:
        return function
    allocations, free_them = function.args
    count = b.load(_field(b, allocations, LIST_COUNT))
    raw_items = b.load(_field(b, allocations, LIST_ITEMS))
    items = b.inttoptr(raw_items, _LIST)
    with b.if_then(free_them):
        _for_each(b, items, count,
                  lambda item: b.call(unit.libc["free"], [b.inttoptr(item, _ptr)]))
    inline = _inline_items(b, allocations)
    with b.if_then(b.icmp_unsigned("!=", raw_items, inline)):
        b.call(unit.libc["free"], [b.inttoptr(raw_items, _ptr)])
    for index, value in [(LIST_ITEMS, inline), (LIST_COUNT, ir.Constant(_i64, 0)),
                         (LIST_CAPACITY, ir.Constant(_i64, INLINE_ALLOCATIONS))]:
        b.store(value, _field(b, allocations, index))
    b.ret_void()
    return function


def _hand(unit: _Unit) -> ir.Function:
    """``hand(list, record)``: move the pointers on ``list`` to the list of the innermost
    call that can unwind from the call whose record is ``record`` (an ``i64*``, or
    NULL) outwards (see :func:`_innermost_list`: it now owns the memory), else just
    empty ``list`` (the caller owns it)."""
    function, b = _internal(unit, "pymlirjit_hand_allocations",
                            ir.FunctionType(ir.VoidType(), [_LIST, _LIST]))
    if b is None:
        return function
    allocations, record = function.args
    done = _block(b, "handed")
    target, _ = _innermost_list(b, record, done)
    items = b.inttoptr(b.load(_field(b, allocations, LIST_ITEMS)), _LIST)
    count = b.load(_field(b, allocations, LIST_COUNT))
    track = _track(unit)
    _for_each(b, items, count, lambda item: b.call(track, [target, item]))
    b.branch(done)
    b.position_at_end(done)
    b.call(_release(unit), [allocations, ir.Constant(_I1, 0)])
    b.ret_void()
    return function


def _for_each(b: ir.IRBuilder, items: ir.Value, count: ir.Value,
              body: Any) -> None:
    """Emit ``body(item)`` for each of the ``count`` i64 ``items``, oldest first."""
    function = b.function
    before = b.block
    head = function.append_basic_block("each")
    loop = function.append_basic_block("each_body")
    done = function.append_basic_block("each_done")
    b.branch(head)
    b.position_at_end(head)
    index = b.phi(_i64)
    index.add_incoming(ir.Constant(_i64, 0), before)
    b.cbranch(b.icmp_unsigned("<", index, count), loop, done)
    b.position_at_end(loop)
    body(b.load(b.gep(items, [index])))
    index.add_incoming(b.add(index, ir.Constant(_i64, 1)), b.block)
    b.branch(head)
    b.position_at_end(done)


def _is_null(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return b.icmp_unsigned("==", b.ptrtoint(value, _i64), ir.Constant(_i64, 0))


def end_allocations(fb: _FunctionBuilder, jump_buffer: ir.Value, free_them: ir.Value,
                    hand_to: ir.Value | None = None) -> None:
    """Emit, in a native entry or guard (``fb``) after its call (which had the jump
    buffer ``jump_buffer``), the end of that call's allocation list: free what is on it
    if ``free_them`` (an i1: the call unwound, or failed); else drop it, or with
    ``hand_to`` (the record the call hid, an ``i8*``) hand it to that call. Costs a
    few compares where the list still fits the room it has on the stack."""
    b = fb.builder
    unit = fb.unit
    allocations = allocation_list(b, jump_buffer)
    count = b.load(_field(b, allocations, LIST_COUNT))
    items = b.load(_field(b, allocations, LIST_ITEMS))
    on_heap = b.icmp_unsigned("!=", items, _inline_items(b, allocations))
    listed = b.icmp_unsigned("!=", count, ir.Constant(_i64, 0))
    # Dropped, a list that never left its room on this stack needs nothing done.
    pending = b.or_(on_heap, b.and_(listed, free_them) if hand_to is None else listed)
    with b.if_then(pending, likely=False):
        if hand_to is None:
            b.call(_release(unit), [allocations, free_them])
        else:
            with b.if_else(free_them) as (failed, returned):
                with failed:
                    b.call(_release(unit), [allocations, ir.Constant(_I1, 1)])
                with returned:
                    b.call(_hand(unit), [allocations, b.bitcast(hand_to, _LIST)])


def _block(b: ir.IRBuilder, name: str) -> ir.Block:
    return b.function.append_basic_block(name)


def _innermost_list(b: ir.IRBuilder, record: ir.Value, otherwise: ir.Block,
                    ) -> tuple[ir.Value, ir.Value]:
    """The allocation list of the innermost call that can unwind, from the call whose
    record is ``record`` (an ``i64*``) outwards, and its count; branches to
    ``otherwise`` if there is none, or the first call with a jump buffer runs Python
    (see :func:`hide_jump_buffer`). Calls without a jump buffer (of modules with shared
    libraries, which cannot unwind) are passed over: what their code allocates for the
    compiled code that called them is that code's call's, as it is for a kernel called
    without a record of its own."""
    entry = b.block
    each_call = _block(b, "each_call")
    has_record = _block(b, "has_record")
    unwinds = _block(b, "unwinds")
    b.branch(each_call)
    b.position_at_end(each_call)
    current = b.phi(_LIST)
    current.add_incoming(record, entry)
    b.cbranch(_is_null(b, current), otherwise, has_record)
    b.position_at_end(has_record)
    jump_buffer = b.load(b.gep(current, [ir.Constant(_i64, JUMP_BUFFER)]))
    has_buffer = b.icmp_unsigned("!=", jump_buffer, ir.Constant(_i64, 0))
    with b.if_then(b.not_(has_buffer), likely=False):
        previous = b.load(b.gep(current, [ir.Constant(_i64, PREVIOUS)]))
        current.add_incoming(b.inttoptr(previous, _LIST), b.block)
        b.branch(each_call)
    b.cbranch(can_unwind_now(b, jump_buffer), unwinds, otherwise)
    b.position_at_end(unwinds)
    allocations = allocation_list(b, jump_buffer)
    return allocations, b.load(_field(b, allocations, LIST_COUNT))


def track_in_innermost_call(b: ir.IRBuilder, unit: _Unit, record: ir.Value,
                            memory: ir.Value) -> None:
    """Emit: put ``memory`` (a pointer from ``malloc``) on the allocation list of the
    call whose record is ``record`` (an ``i64*``: the thread's innermost), if that call
    can unwind, as a tracked allocation of its code would be: freed if the call unwinds,
    taken off the list by a tracked ``free``. Nothing if the call cannot unwind (or
    ``record`` is NULL)."""
    done = _block(b, "tracked")
    allocations, _ = _innermost_list(b, record, done)
    b.call(_track(unit), [allocations, b.ptrtoint(memory, _i64)])
    b.branch(done)
    b.position_at_end(done)


def hide_jump_buffer(b: ir.IRBuilder, record: ir.Value) -> ir.Value:
    """Emit, before Python runs in the call whose record is ``record`` (an ``i64*``; a
    callback): mark the call's jump buffer :data:`HIDDEN`, and return it for
    :func:`restore_jump_buffer`. The memory kernels called from Python allocate is then
    neither put on the call's list nor handed to it: Python owns it (as arrays), and the
    call must not free it if it unwinds. A tracked ``free`` still takes what it frees
    off the list. Nothing unwinds the call meanwhile: a failure in code Python calls
    ends that code's own call (and :func:`~.unwindarea.unwind` never jumps to a hidden
    buffer)."""
    slot = b.gep(record, [ir.Constant(_i64, JUMP_BUFFER)])
    saved = b.load(slot)
    # Only a call that can unwind is touched: the foreign record is shared by threads.
    with b.if_then(b.icmp_unsigned("!=", saved, ir.Constant(_i64, 0))):
        b.store(b.or_(saved, ir.Constant(_i64, HIDDEN)), slot)
    return saved


def restore_jump_buffer(b: ir.IRBuilder, record: ir.Value, saved: ir.Value) -> None:
    """Emit: give the call whose record is ``record`` its jump buffer ``saved`` back
    (see :func:`hide_jump_buffer`)."""
    with b.if_then(b.icmp_unsigned("!=", saved, ir.Constant(_i64, 0))):
        b.store(saved, b.gep(record, [ir.Constant(_i64, JUMP_BUFFER)]))


def add_trackers(unit: _Unit, frame_key: int) -> list[str]:
    """Define the trackers of :data:`~pymlirjit.boundary.failures.ALLOCATION_TRACKERS` in ``unit``
    (exported, by those names), finding the thread's call record with the pthread key
    ``frame_key`` (from its slot in relocatable code); returns their names."""
    names = []
    for c_name, symbol in ALLOCATION_TRACKERS.items():
        c_function = unit.libc[c_name]
        fb = _FunctionBuilder(unit, symbol, c_function.function_type)
        b = fb.builder
        key = b.trunc(fb.integer(frame_key, FRAME_KEY), _i32)
        if c_name == "free":
            pointer = fb.function.args[0]
            with b.if_then(b.not_(_is_null(b, pointer))):
                record = b.bitcast(b.call(unit.libc["pthread_getspecific"], [key]), _LIST)
                address = b.ptrtoint(pointer, _i64)
                # The common case inline: the newest item of the innermost call's list.
                newest = _block(b, "newest")
                search = _block(b, "search")
                freed = _block(b, "free")
                allocations, count = _innermost_list(b, record, search)
                last = b.sub(count, ir.Constant(_i64, 1))
                items = b.inttoptr(b.load(_field(b, allocations, LIST_ITEMS)), _LIST)
                nonempty = b.icmp_unsigned("!=", count, ir.Constant(_i64, 0))
                b.cbranch(nonempty, newest, search)
                b.position_at_end(newest)
                is_newest = b.icmp_unsigned("==", b.load(b.gep(items, [last])), address)
                with b.if_then(is_newest, likely=True):
                    b.store(last, _field(b, allocations, LIST_COUNT))
                    b.call(c_function, [pointer])
                    b.ret_void()
                b.branch(search)
                b.position_at_end(search)
                b.call(_untrack(unit), [record, address])
                b.branch(freed)
                b.position_at_end(freed)
                b.call(c_function, [pointer])
            b.ret_void()
        else:
            memory = b.call(c_function, list(fb.function.args))
            record = b.bitcast(b.call(unit.libc["pthread_getspecific"], [key]), _LIST)
            untracked = _block(b, "untracked")
            with b.if_then(_is_null(b, memory), likely=False):
                b.ret(memory)
            allocations, count = _innermost_list(b, record, untracked)
            # The common case inline: room on the list.
            room = b.icmp_unsigned("<", count,
                                   b.load(_field(b, allocations, LIST_CAPACITY)))
            with b.if_else(room, likely=True) as (fits, grows):
                with fits:
                    items = b.inttoptr(b.load(_field(b, allocations, LIST_ITEMS)), _LIST)
                    b.store(b.ptrtoint(memory, _i64), b.gep(items, [count]))
                    b.store(b.add(count, ir.Constant(_i64, 1)),
                            _field(b, allocations, LIST_COUNT))
                with grows:
                    b.call(_track(unit), [allocations, b.ptrtoint(memory, _i64)])
            b.ret(memory)
            b.position_at_end(untracked)
            b.ret(memory)
        names.append(symbol)
    return names
