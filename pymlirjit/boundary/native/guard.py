"""Guards: functions with the exact C ABI of a compiled function that give each call
made through a raw C-ABI address (ctypes, C code, the Python path) a call record."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from ..abi import BoundaryABI
from ..callframe import FAILED
from ..relocation import FOREIGN_RECORD, HAND_OVER
from .allocations import end_allocations
from .builder import (
    _boundary_function_type,
    _FunctionBuilder,
    _i32,
    _i64,
    _ptr,
    _Unit,
)
from .failedresults import fill_failed_results


class _GuardBuilder(_FunctionBuilder):
    """Emits a guard: a function with the exact C ABI of a compiled function (its
    ``_mlir_ciface_`` entry) that gives each call a record of its own, as a native
    entry does, whoever calls it (ctypes, with or without the GIL; C code; another
    thread). Its record says the GIL is not held (trampolines then take it, which is
    right either way); with ``unwind``, a failing callback longjmps back to the guard,
    and the guard ends the call's allocation list (see
    :mod:`pymlirjit.boundary.native.allocations`). On failure the guard frees what the call
    allocated (its results too), hands the error to the enclosing call's record (or
    the foreign one), which raises it when it ends, and returns zeros."""

    def __init__(self, unit: _Unit, name: str, abi: BoundaryABI, target: int | str,
                 calls: Any, unwind: bool) -> None:
        super().__init__(unit, name, _boundary_function_type(abi))
        self.abi = abi
        self.target = target
        self.calls = calls
        self.unwind = unwind

    def build(self) -> None:
        b = self.builder
        function_type = self.function.function_type
        # holds_gil 0: trampolines take the GIL, right whatever the caller holds.
        record, previous, jump_buffer, key = self.push_call_record(
            self.calls.frame_key, self.unwind, holds_gil=False)
        if isinstance(self.target, str):  # relocatable: linked with the code
            declared = self.unit.function(self.target, function_type)
            target: ir.Value = b.bitcast(declared, function_type.as_pointer())
        else:
            target = b.inttoptr(ir.Constant(_i64, self.target), function_type.as_pointer())
        returns = not isinstance(function_type.return_type, ir.VoidType)
        result_slot = b.alloca(function_type.return_type) if returns else None
        if jump_buffer is not None:
            jumped = b.call(self.libc["_setjmp"], [jump_buffer])
            with b.if_then(b.icmp_signed("==", jumped, ir.Constant(_i32, 0))):
                returned = b.call(target, self.function.args)
                if result_slot is not None:
                    b.store(returned, result_slot)
        else:
            returned = b.call(target, self.function.args)
            if result_slot is not None:
                b.store(returned, result_slot)
        b.call(self.libc["pthread_setspecific"], [key, previous])
        failed = b.load(self.record_slot(record, FAILED))
        if jump_buffer is not None:
            # What the call's code allocated: freed if it failed (unwound, or ran on
            # after a kernel it called failed: its results are zeroed below), else the
            # caller's (handed to the caller's call if it may unwind).
            end_allocations(self, jump_buffer,
                            b.icmp_signed("!=", failed, ir.Constant(_i64, 0)), previous)
        with b.if_then(b.icmp_signed("!=", failed, ir.Constant(_i64, 0)), likely=False):
            self.hand_over(record, previous, failed)
            if result_slot is not None:
                b.store(ir.Constant(function_type.return_type, 0), result_slot)
        if result_slot is None:
            b.ret_void()
        else:
            b.ret(b.load(result_slot))

    def hand_over(self, record: ir.Value, previous: ir.Value, failed: ir.Value) -> None:
        """Fail the enclosing call (its flag first, so that it fails whatever Python
        manages), move the error to it (the GIL taken), and zero this call's results
        returned through a pointer."""
        b = self.builder
        foreign = b.inttoptr(self.integer(self.calls.foreign_record, FOREIGN_RECORD), _ptr)
        enclosing = b.bitcast(b.select(self.is_null(previous), foreign, previous),
                              _i64.as_pointer())
        enclosing_failed = self.record_slot(enclosing, FAILED)
        with b.if_then(b.icmp_signed("==", b.load(enclosing_failed), ir.Constant(_i64, 0))):
            b.store(failed, enclosing_failed)
        state = b.call(self.api["PyGILState_Ensure"], [])
        boxed = [b.call(self.api["PyLong_FromLongLong"], [b.ptrtoint(r, _i64)])
                 for r in (record, enclosing)]
        both = b.and_(b.not_(self.is_null(boxed[0])), b.not_(self.is_null(boxed[1])))
        with b.if_then(both):
            done = self.call(self.pointer(self.calls.hand_over, HAND_OVER), boxed)
            b.call(self.api["Py_DecRef"], [done])
        for obj in boxed:
            b.call(self.api["Py_DecRef"], [obj])
        b.call(self.api["PyErr_Clear"], [])
        b.call(self.api["PyGILState_Release"], [state])
        # Not zeros: compiled code calling a linked kernel may run on with its results.
        fill_failed_results(self, self.abi, self.function.args,
                            b.bitcast(previous, _i64.as_pointer()))
