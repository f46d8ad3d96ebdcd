"""C ABI -> Python: callback trampolines, the native wrappers of callbacks' ctypes
entries, and the forwarders of relocatable code."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ..abi import BoundaryABI
from ..callframe import FAILED, HOLDS_GIL
from ..memref import ALIGNED, ALLOCATED, OFFSET, SIZES, STRIDES
from ..relocation import (
    FOREIGN_RECORD,
    FRAME_KEY,
    callback_slot,
    dtype_slot,
)
from ..types import MemRefType, ScalarType, UnrankedMemRefType
from .allocations import hide_jump_buffer, restore_jump_buffer, track_in_innermost_call
from .builder import (
    ARRAY_DATA,
    ARRAY_DESCR,
    ARRAY_DIMENSIONS,
    ARRAY_FLAGS,
    ARRAY_ND,
    NPY_ALIGNED,
    NPY_C_CONTIGUOUS,
    NPY_WRITEABLE,
    OB_TYPE,
    _boundary_function_type,
    _double,
    _FunctionBuilder,
    _i8,
    _i32,
    _i64,
    _ptr,
    _Unit,
)
from .failedresults import fill_failed_results
from .halffloat import _BITS_LAYOUTS, _bits_to_double, _double_to_bits
from .unwindarea import unwind


def _forward(unit: _Unit, name: str, abi: BoundaryABI, slot: str) -> None:
    function_type = _boundary_function_type(abi)
    function = ir.Function(unit.module, function_type, name)
    b = ir.IRBuilder(function.append_basic_block("entry"))
    target = b.inttoptr(b.load(unit.slot(slot)), function_type.as_pointer())
    returned = b.call(target, function.args, tail=True)
    if isinstance(function_type.return_type, ir.VoidType):
        b.ret_void()
    else:
        b.ret(returned)


_GIL_ALREADY_HELD = -1  # not a PyGILState_STATE value: nothing to release

# Exact results a trampoline unboxes without calling the Python converter (these
# objects are immortal: types and the bool singletons).
_BOOLS: list[object] = [True, False, np.True_, np.False_]
_FLOAT_TYPES: list[object] = [float, np.float64, np.float32, np.float16]
_INT_TYPES: list[object] = [int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                            np.uint32, np.uint64]


class _TrampolineBuilder(_FunctionBuilder):
    """Emits the LLVM IR of one callback trampoline."""

    def __init__(self, unit: _Unit, name: str, signature: Any, abi: BoundaryABI,
                 function: Any, helpers: Any) -> None:
        # A memref result is written through a pointer passed first.
        function_type = _boundary_function_type(abi)
        self.result_type = function_type.return_type
        super().__init__(unit, name, function_type)
        self.signature = signature
        self.abi = abi
        self.helpers = helpers
        self.callee = function
        self.gil: ir.Value = None
        self.frame_record: ir.Value = None
        self.jump_buffer: ir.Value = None  # the call's, hidden while Python runs

    def slot_of(self, what: str) -> str:
        return callback_slot(self.helpers.name, what)

    def record_at(self, index: int) -> ir.Value:
        """The address of field ``index`` of the call's record."""
        return self.builder.gep(self.frame_record, [ir.Constant(_i64, index)])

    def zero(self) -> ir.Value | None:
        if isinstance(self.result_type, ir.VoidType):
            return None
        return ir.Constant(self.result_type, 0)

    def release_gil(self) -> None:
        b = self.builder
        with b.if_then(b.icmp_signed("!=", self.gil, ir.Constant(_i32, _GIL_ALREADY_HELD))):
            b.call(self.api["PyGILState_Release"], [self.gil])

    def leave(self, value: ir.Value | None) -> None:
        b = self.builder
        restore_jump_buffer(b, self.frame_record, self.jump_buffer)
        self.release_gil()
        if value is None:
            b.ret_void()
        else:
            b.ret(value)

    def record_error_and_leave(self) -> None:
        """Fail the call (its record's flag, set here so that the call fails even if
        Python cannot keep the exception), hand the raised exception to Python
        (``helpers.record``), then unwind to the call's entry or return zero."""
        b = self.builder
        culprit = self.integer(self.helpers.culprit, self.slot_of("culprit"))
        # The foreign record (threads without a call) is read by whichever call ends
        # next: its flag is set with the error, under Python's lock (helpers.record),
        # lest that call see a failure whose error is still on its way; here only if
        # Python could not even be asked to keep it.
        foreign = b.icmp_unsigned("==", b.ptrtoint(self.frame_record, _i64),
                                  self.integer(self.helpers.foreign_record, FOREIGN_RECORD))
        with b.if_then(b.not_(foreign)):
            b.store(culprit, self.record_at(FAILED))
        slots = [b.alloca(_ptr) for _ in range(3)]
        b.call(self.api["PyErr_Fetch"], slots)
        b.call(self.api["PyErr_NormalizeException"], slots)
        kind, value, traceback = (b.load(slot) for slot in slots)
        with b.if_then(b.not_(self.is_null(traceback))):
            b.call(self.api["PyException_SetTraceback"], [value, traceback])
        done = self.call(self.pointer(self.helpers.record, self.slot_of("record")), [value])
        with b.if_then(self.is_null(done), likely=False):  # kept nothing, not even it
            b.store(culprit, self.record_at(FAILED))
        for obj in (done, kind, value, traceback):
            b.call(self.api["Py_DecRef"], [obj])
        b.call(self.api["PyErr_Clear"], [])
        self.release_gil()
        # After the last Python (finalizers of what Py_DecRef releases included).
        restore_jump_buffer(b, self.frame_record, self.jump_buffer)
        unwind(b, self.libc, self.frame_record)
        self.return_zero()

    def return_zero(self) -> None:
        # Memref results get an allocated empty array: a call that cannot unwind runs on.
        fill_failed_results(self, self.abi, self.function.args, self.frame_record)
        zero = self.zero()
        if zero is None:
            self.builder.ret_void()
        else:
            self.builder.ret(zero)

    def branch_on_error(self, failed: ir.Value, label: str) -> None:
        b = self.builder
        error = self.function.append_basic_block(f"{label}_error")
        ok = self.function.append_basic_block(label)
        b.cbranch(failed, error, ok)
        b.position_at_end(error)
        self.record_error_and_leave()
        b.position_at_end(ok)

    def box(self, value: ir.Value, t: Any) -> ir.Value:
        if isinstance(t, MemRefType):
            return self.box_memref(value, t)
        if isinstance(t, UnrankedMemRefType):
            return self.box_unranked(value, t)
        return self.box_scalar(value, t, t.kind == "bool")

    def box_crossing(self, values: list[ir.Value], t: ScalarType) -> ir.Value:
        """A new reference to the Python value of a scalar parameter that crosses as
        ``values`` (see ``ScalarType.boundary``): the value the callback's ctypes entry
        would make of them (``pymlirjit.boundary.convert.from_c``)."""
        b = self.builder
        if t.crossing == "pair":
            re, im = (b.fpext(v, _double) if v.type != _double else v for v in values)
            return b.call(self.api["PyComplex_FromDoubles"], [re, im])
        if t.crossing == "bits":
            return b.call(self.api["PyFloat_FromDouble"],
                          [_bits_to_double(b, values[0], t.mlir)])
        return self.box(values[0], t)

    def box_memref(self, descriptor: ir.Value, t: MemRefType) -> ir.Value:
        return self.array_of_descriptor(descriptor, t)

    def box_unranked(self, unranked: ir.Value, t: UnrankedMemRefType) -> ir.Value:
        """A new writable array viewing what the unranked descriptor ``{rank,
        descriptor*}`` at ``unranked`` describes (NULL with an exception set)."""
        b = self.builder
        itemsize = t.element.dtype.itemsize
        fields = b.bitcast(unranked, _i64.as_pointer())
        rank = b.load(fields)
        ranked = b.inttoptr(b.load(b.gep(fields, [ir.Constant(_i64, 1)])), _i64.as_pointer())
        # {allocated, aligned, offset, sizes[rank], strides[rank]}, all 8 bytes wide.
        aligned = b.load(b.gep(ranked, [ir.Constant(_i64, ALIGNED)]))
        offset = b.load(b.gep(ranked, [ir.Constant(_i64, OFFSET)]))
        data = b.add(aligned, b.mul(offset, ir.Constant(_i64, itemsize)))
        sizes = b.gep(ranked, [ir.Constant(_i64, OFFSET + 1)])
        strides = b.gep(sizes, [rank])
        byte_strides = b.alloca(_i64, b.add(rank, ir.Constant(_i64, 1)))
        start = b.block
        head = self.function.append_basic_block("unranked_axis")
        body = self.function.append_basic_block("unranked_stride")
        done = self.function.append_basic_block("unranked_strides")
        b.branch(head)
        b.position_at_end(head)
        axis = b.phi(_i64)
        axis.add_incoming(ir.Constant(_i64, 0), start)
        b.cbranch(b.icmp_signed("<", axis, rank), body, done)
        b.position_at_end(body)
        stride = b.load(b.gep(strides, [axis]))
        b.store(b.mul(stride, ir.Constant(_i64, itemsize)), b.gep(byte_strides, [axis]))
        axis.add_incoming(b.add(axis, ir.Constant(_i64, 1)), body)
        b.branch(head)
        b.position_at_end(done)
        descr = self.pointer(t.element.dtype, dtype_slot(t.element.mlir))
        b.call(self.api["Py_IncRef"], [descr])  # PyArray_NewFromDescr steals it
        return self.new_array(descr, b.trunc(rank, _i32), sizes, byte_strides,
                              b.inttoptr(data, _ptr), NPY_WRITEABLE | NPY_ALIGNED)

    def store_memref_result(self, result: ir.Value, out: ir.Value, t: MemRefType) -> None:
        """Write to the descriptor at ``out`` a copy of the array ``result`` (a new
        reference, released here) in fresh ``malloc`` memory, which the compiled code
        owns (and may ``free``), as ``fill_descriptor_with_copy`` does, on the call's
        allocation list if it can unwind (freed if it does). Anything but a
        C-contiguous array of the right dtype, rank and static sizes goes through the
        Python converter first, which checks it (raising the precise error)."""
        b = self.builder
        rank = t.rank
        itemsize = t.element.dtype.itemsize
        exact = self.function.append_basic_block("exact_array")
        convert = self.function.append_basic_block("convert_array")
        join = self.function.append_basic_block("array_checked")

        def then_check(condition: ir.Value, label: str) -> None:
            ok = self.function.append_basic_block(label)
            b.cbranch(condition, ok, convert)
            b.position_at_end(ok)

        then_check(b.icmp_unsigned("==", self.type_of(result), self.object_id(np.ndarray)),
                   "is_array")
        then_check(b.and_(
            b.icmp_unsigned("==", self.read_field(result, ARRAY_DESCR, _i64),
                            self.object_id(t.element.dtype, dtype_slot(t.element.mlir))),
            b.icmp_signed("==", self.read_field(result, ARRAY_ND, _i32),
                          ir.Constant(_i32, rank))), "dtype_and_rank")
        flags = self.read_field(result, ARRAY_FLAGS, _i32)
        contiguous = b.and_(flags, ir.Constant(_i32, NPY_C_CONTIGUOUS))
        fits = b.icmp_unsigned("!=", contiguous, ir.Constant(_i32, 0))
        dims = b.bitcast(self.read_field(result, ARRAY_DIMENSIONS, _ptr), _i64.as_pointer())
        for axis, size in enumerate(t.shape):
            if size is not None:
                actual = b.load(b.gep(dims, [ir.Constant(_i64, axis)]))
                fits = b.and_(fits, b.icmp_signed("==", actual, ir.Constant(_i64, size)))
        b.cbranch(fits, exact, convert)
        b.position_at_end(convert)
        converted = self.call(self.pointer(self.helpers.convert_result,
                                           self.slot_of("convert_result")), [result])
        b.call(self.api["Py_DecRef"], [result])
        self.branch_on_error(self.is_null(converted), "array_converted")
        converted_block = b.block
        b.branch(join)
        b.position_at_end(exact)
        b.branch(join)
        b.position_at_end(join)
        array = b.phi(_ptr)
        array.add_incoming(result, exact)
        array.add_incoming(converted, converted_block)
        dims = b.bitcast(self.read_field(array, ARRAY_DIMENSIONS, _ptr), _i64.as_pointer())
        sizes = [b.load(b.gep(dims, [ir.Constant(_i64, axis)])) for axis in range(rank)]
        nbytes: ir.Value = ir.Constant(_i64, itemsize)
        for size in sizes:
            nbytes = b.mul(nbytes, size)
        one = ir.Constant(_i64, 1)
        memory = b.call(self.libc["malloc"], [
            b.select(b.icmp_signed("<", nbytes, one), one, nbytes)])
        with b.if_then(self.is_null(memory), likely=False):
            b.call(self.api["Py_DecRef"], [array])
            b.call(self.api["PyErr_NoMemory"], [])
            self.record_error_and_leave()
        b.call(self.libc["memcpy"], [memory, self.read_field(array, ARRAY_DATA, _ptr), nbytes])
        b.call(self.api["Py_DecRef"], [array])
        # Owned by the call from here on (no Python runs after this): freed if the call
        # unwinds before it frees it.
        restore_jump_buffer(b, self.frame_record, self.jump_buffer)
        track_in_innermost_call(b, self.unit, self.frame_record, memory)
        b.store(memory, self.descriptor_field(out, rank, ALLOCATED))
        b.store(memory, self.descriptor_field(out, rank, ALIGNED))
        b.store(ir.Constant(_i64, 0), self.descriptor_field(out, rank, OFFSET))
        stride: ir.Value = one
        for axis in reversed(range(rank)):
            index = [ir.Constant(_i32, 0), ir.Constant(_i32, axis)]
            b.store(sizes[axis], b.gep(self.descriptor_field(out, rank, SIZES), index))
            b.store(stride, b.gep(self.descriptor_field(out, rank, STRIDES), index))
            stride = b.mul(stride, b.select(b.icmp_signed("<", sizes[axis], one), one,
                                            sizes[axis]))

    def read_field(self, obj: ir.Value, offset: int, field_type: ir.Type) -> ir.Value:
        b = self.builder
        return b.load(b.bitcast(b.gep(obj, [ir.Constant(_i64, offset)]),
                                field_type.as_pointer()))

    def unbox_result(self, result: ir.Value) -> ir.Value | None:
        """The C value of ``result`` (a new reference, released here)."""
        b = self.builder
        t = self.signature.results[0] if self.signature.results else None
        exact = self.function.append_basic_block("exact")
        convert = self.function.append_basic_block("convert")
        join = self.function.append_basic_block("join")
        if t is None:
            fits = self.is_one_of(result, [None])
        elif t.kind == "bool":
            fits = self.is_one_of(result, _BOOLS)
        else:
            # Python and numpy scalars of the right kind convert exactly through
            # PyFloat_AsDouble / PyLong_AsLongLongAndOverflow (numpy's __float__/__index__).
            types = _FLOAT_TYPES if t.kind == "float" else _INT_TYPES
            fits = self.is_one_of(b.inttoptr(self.type_of(result), _ptr), types)
        b.cbranch(fits, exact, convert)
        # The Python converter checks the value (raising the precise error) and returns
        # an exact float/int/bool, or None for a void callback.
        b.position_at_end(convert)
        converted = self.call(self.pointer(self.helpers.convert_result,
                                           self.slot_of("convert_result")), [result])
        b.call(self.api["Py_DecRef"], [result])
        self.branch_on_error(self.is_null(converted), "converted")
        converted_block = b.block
        b.branch(join)
        b.position_at_end(exact)
        b.branch(join)
        b.position_at_end(join)
        value = b.phi(_ptr)
        value.add_incoming(result, exact)
        value.add_incoming(converted, converted_block)
        unboxed = self.unbox_exact(value, t)
        b.call(self.api["Py_DecRef"], [value])
        return unboxed

    def is_one_of(self, obj: ir.Value, candidates: list[object]) -> ir.Value:
        b = self.builder
        address = b.ptrtoint(obj, _i64)
        found: ir.Value = ir.Constant(ir.IntType(1), 0)
        for candidate in candidates:
            found = b.or_(found, b.icmp_unsigned("==", address, self.object_id(candidate)))
        return found

    def type_of(self, obj: ir.Value) -> ir.Value:
        b = self.builder
        return b.load(b.bitcast(b.gep(obj, [ir.Constant(_i64, OB_TYPE)]), _i64.as_pointer()))

    def unbox_exact(self, obj: ir.Value, t: Any) -> ir.Value | None:
        b = self.builder
        if t is None:
            return None
        if t.kind == "float":
            value = self.range_checked(b.call(self.api["PyFloat_AsDouble"], [obj]), obj, t)
            if t.mlir in _BITS_LAYOUTS:
                return _double_to_bits(b, value, *_BITS_LAYOUTS[t.mlir])
            return b.fptrunc(value, ir.FloatType()) if t.bits == 32 else value
        if t.kind == "bool":
            return b.zext(self.is_one_of(obj, [True, np.True_]), _i8)
        overflow = b.alloca(_i32)
        value = b.call(self.api["PyLong_AsLongLongAndOverflow"], [obj, overflow])
        # The converter returns ints already wrapped to the signed range of the type,
        # so only an exact int straight from the callback can be out of range here.
        low = ir.Constant(_i64, -(1 << (t.bits - 1)))
        high = ir.Constant(_i64, (1 << (t.bits - 1)) - 1)
        in_range = b.and_(b.icmp_signed(">=", value, low), b.icmp_signed("<=", value, high))
        fits = b.and_(b.icmp_signed("==", b.load(overflow), ir.Constant(_i32, 0)), in_range)
        slow = self.function.append_basic_block("wrap")
        done = self.function.append_basic_block("wrapped")
        entry_block = b.block
        b.cbranch(fits, done, slow)
        b.position_at_end(slow)
        converted = self.call(self.pointer(self.helpers.convert_result,
                                           self.slot_of("convert_result")), [obj])
        self.branch_on_error(self.is_null(converted), "range_checked")
        wrapped = b.call(self.api["PyLong_AsLongLongAndOverflow"], [converted, overflow])
        b.call(self.api["Py_DecRef"], [converted])
        slow_block = b.block
        b.branch(done)
        b.position_at_end(done)
        result = b.phi(_i64)
        result.add_incoming(value, entry_block)
        result.add_incoming(wrapped, slow_block)
        return b.trunc(result, ir.IntType(t.bits)) if t.bits < 64 else result

    def range_checked(self, value: ir.Value, obj: ir.Value, t: ScalarType) -> ir.Value:
        """``value`` (the double of the result ``obj``) where it rounds to a finite ``t``
        or is a NaN; else what the Python converter makes of ``obj``: it raises for a
        finite value ``t`` cannot hold (as for a kernel argument) and returns an inf."""
        if t.bits == 64:
            return value
        b = self.builder
        exponent_bits, mantissa_bits, _ = _BITS_LAYOUTS.get(t.mlir, (8, 23, False))
        # Halfway between the largest finite value and the next power of two: from
        # there on, rounding to nearest even gives inf (the largest is odd).
        bias = (1 << (exponent_bits - 1)) - 1
        limit = ir.Constant(_double, (2.0 - 2.0 ** -(mantissa_bits + 1)) * 2.0 ** bias)
        # |value| < limit, or a NaN: the sign bit cleared (what LLVM makes an fabs).
        magnitude = b.bitcast(b.and_(b.bitcast(value, _i64), ir.Constant(_i64, (1 << 63) - 1)),
                              _double)
        fits = b.fcmp_unordered("<", magnitude, limit)
        slow = self.function.append_basic_block("float_range")
        done = self.function.append_basic_block("float_range_checked")
        entry_block = b.block
        b.cbranch(fits, done, slow)
        b.position_at_end(slow)
        converted = self.call(self.pointer(self.helpers.convert_result,
                                           self.slot_of("convert_result")), [obj])
        self.branch_on_error(self.is_null(converted), "float_converted")
        checked = b.call(self.api["PyFloat_AsDouble"], [converted])
        b.call(self.api["Py_DecRef"], [converted])
        slow_block = b.block
        b.branch(done)
        b.position_at_end(done)
        result = b.phi(_double)
        result.add_incoming(value, entry_block)
        result.add_incoming(checked, slow_block)
        return result

    def build(self) -> None:
        b = self.builder
        # This thread's current call record ({failed, jump_buffer, holds_gil}), or the one of
        # threads the compiled code started; a failed call skips callbacks, GIL-free.
        key = b.trunc(self.integer(self.helpers.frame_key, FRAME_KEY), _i32)
        record = b.call(self.libc["pthread_getspecific"], [key])
        foreign = b.inttoptr(self.integer(self.helpers.foreign_record, FOREIGN_RECORD),
                             _ptr)
        record = b.select(self.is_null(record), foreign, record)
        self.frame_record = b.bitcast(record, _i64.as_pointer())
        with b.if_then(b.icmp_signed("!=", b.load(self.record_at(FAILED)),
                                     ir.Constant(_i64, 0))):
            self.return_zero()
        self.jump_buffer = hide_jump_buffer(b, self.frame_record)
        # A kernel call that kept the GIL on this thread says so in its record: the GIL
        # is then held already, and taking it again would only cost time.
        holds_gil = b.load(self.record_at(HOLDS_GIL))
        before = b.block
        take = self.function.append_basic_block("take_gil")
        taken = self.function.append_basic_block("gil_taken")
        b.cbranch(b.icmp_signed("!=", holds_gil, ir.Constant(_i64, 0)), taken, take)
        b.position_at_end(take)
        state = b.call(self.api["PyGILState_Ensure"], [])
        b.branch(taken)
        b.position_at_end(taken)
        self.gil = b.phi(_i32)
        self.gil.add_incoming(ir.Constant(_i32, _GIL_ALREADY_HELD), before)
        self.gil.add_incoming(state, take)
        # Again with the GIL: a callback of the call on another thread (a parallel
        # loop's) may have failed it while this one waited for the GIL.
        with b.if_then(b.icmp_signed("!=", b.load(self.record_at(FAILED)),
                                     ir.Constant(_i64, 0)), likely=False):
            restore_jump_buffer(b, self.frame_record, self.jump_buffer)
            self.release_gil()
            self.return_zero()
        # No PyErr_CheckSignals here: the callback's own bytecode checks for signals, and
        # a pending Ctrl-C raises KeyboardInterrupt inside it (cheaper than checking).
        args = iter(self.function.args)
        out = next(args) if self.abi.results_via_pointer else None
        boxed = [self.box(next(args), t) if not isinstance(t, ScalarType)
                 else self.box_crossing([next(args) for _ in t.boundary], t)
                 for t in self.signature.param_types]
        failed: ir.Value = ir.Constant(ir.IntType(1), 0)
        for obj in boxed:
            failed = b.or_(failed, self.is_null(obj))
        with b.if_then(failed):
            for obj in boxed:
                b.call(self.api["Py_DecRef"], [obj])
        self.branch_on_error(failed, "boxed")
        result = self.call(self.pointer(self.callee, self.slot_of("function")), boxed)
        for obj in boxed:
            b.call(self.api["Py_DecRef"], [obj])
        self.branch_on_error(self.is_null(result), "called")
        results = self.signature.results
        if results and isinstance(results[0], MemRefType):
            assert out is not None
            self.store_memref_result(result, out, results[0])
            self.leave(None)
        else:
            self.leave(self.unbox_result(result))
