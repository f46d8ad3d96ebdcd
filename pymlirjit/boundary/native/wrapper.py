"""The native wrappers of callbacks' ctypes entries (for the types no trampoline
serves): the callback's C ABI for compiled code, the failure rule of a trampoline, and
the memory of memref results on the call's allocation list."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from ..abi import BoundaryABI
from ..callframe import ERROR_KEPT, FAILED
from ..memref import ALLOCATED
from ..relocation import FOREIGN_RECORD, FRAME_KEY
from ..types import MemRefType
from .allocations import hide_jump_buffer, restore_jump_buffer, track_in_innermost_call
from .builder import (
    _boundary_function_type,
    _FunctionBuilder,
    _i32,
    _i64,
    _ptr,
    _Unit,
    _zero_results,
)
from .failedresults import fill_failed_results
from .unwindarea import unwind


class _CtypesWrapperBuilder(_FunctionBuilder):
    """Emits the native wrapper of a callback's ctypes entry: the callback's C ABI, so
    that compiled code calls it as it calls a trampoline, and the same failure rule. A
    failed call skips it; after the ctypes entry returns (its Python frames gone), a
    status word still set says the callback did not succeed: the wrapper then sets the
    call's failed flag (the callback's culprit token) and unwinds the call, or returns
    zeros where the call cannot be unwound."""

    def __init__(self, unit: _Unit, name: str, abi: BoundaryABI, target: int,
                 helpers: Any) -> None:
        super().__init__(unit, name, _boundary_function_type(abi))
        self.abi = abi
        self.target = target
        self.helpers = helpers

    def memref_result_copies(self) -> list[ir.Value]:
        """Where the ctypes entry stores the ``malloc`` memory of each memref result's
        copy (``fill_descriptor_with_copy``): the ``allocated`` field (an ``i8**``) of
        its descriptor in the results written through the first argument."""
        struct = self.abi.result_struct
        if struct is None:
            return []
        b = self.builder
        copies = []
        for index, t in enumerate(self.abi.signature.results):
            if isinstance(t, MemRefType):
                offset = getattr(struct, f"r{index}").offset + ALLOCATED * 8
                field = b.gep(self.function.args[0], [ir.Constant(_i64, offset)])
                copies.append(b.bitcast(field, _ptr.as_pointer()))
        return copies

    def return_zero(self, record: ir.Value) -> None:
        b = self.builder
        fill_failed_results(self, self.abi, self.function.args, record)
        return_type = self.function.function_type.return_type
        if isinstance(return_type, ir.VoidType):
            b.ret_void()
        else:
            b.ret(ir.Constant(return_type, 0))

    def build(self) -> None:
        b = self.builder
        key = b.trunc(self.integer(self.helpers.frame_key, FRAME_KEY), _i32)
        record = b.call(self.libc["pthread_getspecific"], [key])
        foreign = b.inttoptr(self.integer(self.helpers.foreign_record, FOREIGN_RECORD), _ptr)
        record = b.bitcast(b.select(self.is_null(record), foreign, record), _i64.as_pointer())
        failed = b.gep(record, [ir.Constant(_i64, FAILED)])
        with b.if_then(b.icmp_signed("!=", b.load(failed), ir.Constant(_i64, 0)),
                       likely=False):
            self.return_zero(record)
        status = b.alloca(_i64)
        b.store(ir.Constant(_i64, 1), status)
        copies = self.memref_result_copies()
        if copies:  # NULL until the entry stores the copy of that result
            _zero_results(b, self.abi, self.function.args)
        function_type = self.function.function_type
        target_type = ir.FunctionType(function_type.return_type,
                                      [_ptr, *function_type.args])
        target = b.inttoptr(ir.Constant(_i64, self.target), target_type.as_pointer())
        jump_buffer = hide_jump_buffer(b, record)
        returned = b.call(target, [b.bitcast(status, _ptr), *self.function.args])
        restore_jump_buffer(b, record, jump_buffer)
        with b.if_then(b.icmp_signed("!=", b.load(status), ir.Constant(_i64, 0)),
                       likely=False):
            # The copies of the results stored before the failure are no one's.
            for copy in copies:
                b.call(self.libc["free"], [b.load(copy)])
            # Not the foreign record's if its error was kept: the flag went with it,
            # and another call may have raised and cleared both since.
            kept = b.and_(b.icmp_signed("==", b.load(status), ir.Constant(_i64, ERROR_KEPT)),
                          b.icmp_unsigned("==", b.ptrtoint(record, _i64), b.ptrtoint(
                              foreign, _i64)))
            with b.if_then(b.and_(b.not_(kept), b.icmp_signed("==", b.load(failed),
                                                               ir.Constant(_i64, 0)))):
                b.store(ir.Constant(_i64, self.helpers.culprit), failed)
            unwind(b, self.libc, record)
            self.return_zero(record)
        for copy in copies:  # the call's now, as trampolines' copies are
            memory = b.load(copy)
            with b.if_then(b.not_(self.is_null(memory))):
                track_in_innermost_call(b, self.unit, record, memory)
        if isinstance(function_type.return_type, ir.VoidType):
            b.ret_void()
        else:
            b.ret(returned)
