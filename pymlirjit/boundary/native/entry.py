"""Python -> C ABI: the vectorcall entry of a compiled function (kernel entries)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from ..abi import BoundaryABI
from ..aliases import ExactTypes as ExactTypes  # (batch.py's too)
from ..callframe import FAILED, PREVIOUS
from ..memref import ALIGNED, ALLOCATED, OFFSET, SIZES, STRIDES
from ..relocation import (
    FINISH_CALL,
    FOREIGN_RECORD,
    FRAME_KEY,
    dtype_slot,
)
from ..types import MemRefType, ScalarType, TensorType
from ..vectorcall import IN_FLIGHT_OFFSET
from .allocations import end_allocations
from .builder import (
    _POSITIONAL_CALL,
    ARRAY_DATA,
    ARRAY_DESCR,
    ARRAY_DIMENSIONS,
    ARRAY_FLAGS,
    ARRAY_ND,
    ARRAY_STRIDES,
    NPY_C_CONTIGUOUS,
    NPY_WRITEABLE,
    _i8,
    _i32,
    _i64,
    _llvm_type,
    _ptr,
    _Unit,
    descriptor_struct,
)
from .unboxing import _UNBOXED, _ArgumentsBuilder


class _EntryBuilder(_ArgumentsBuilder):
    """Emits the LLVM IR of one entry point."""

    def __init__(self, unit: _Unit, name: str, abi: BoundaryABI, target: int | str,
                 calls: Any, release_gil: bool | None,
                 unwind: bool, exact: ExactTypes = ()) -> None:
        super().__init__(unit, name, ir.FunctionType(_ptr, [_ptr, _ptr.as_pointer(), _i64,
                                                            _ptr]))
        self.abi = abi
        self.exact = exact
        self.release_gil = release_gil
        self.unwind = unwind and calls is not None
        self.fallback = self.function.append_basic_block("fallback")
        self.target = target
        self.calls = calls
        self.in_flight: ir.Value = None  # -> the counter of calls in flight (count_in)
        self.arg_allocated = []
        self.self_obj = None
        self.args = None

    def save_thread(self) -> ir.Value | None:
        """Release the GIL as the policy says; the thread state to restore (NULL if it
        was kept), or ``None`` where it is never released."""
        b = self.builder
        if self.release_gil is False:
            return None
        if self.release_gil is True:
            return b.call(self.api["PyEval_SaveThread"], [])
        # Only when other Python threads exist: alone, releasing would gain nothing and
        # cost two GIL hand-overs. (Such modules call no Python callback, so no thread
        # the compiled code starts can be waiting for the GIL.)
        head = b.call(self.api["PyInterpreterState_ThreadHead"],
                      [b.call(self.api["PyInterpreterState_Get"], [])])
        second = b.call(self.api["PyThreadState_Next"], [head])
        before = b.block
        save = self.function.append_basic_block("save_thread")
        saved = self.function.append_basic_block("thread_saved")
        b.cbranch(self.is_null(second), saved, save)
        b.position_at_end(save)
        state = b.call(self.api["PyEval_SaveThread"], [])
        b.branch(saved)
        b.position_at_end(saved)
        result = b.phi(_ptr)
        result.add_incoming(ir.Constant(_ptr, None), before)
        result.add_incoming(state, save)
        return result

    def count_in(self, self_obj: ir.Value) -> None:
        """Count this call in flight (see pymlirjit.boundary.vectorcall): while any call is, the
        entry's owner keeps its machine code and this counter alive. The counter is a
        plain int64, not atomic: every change to it happens with the GIL held."""
        b = self.builder
        self.in_flight = b.load(b.bitcast(
            b.gep(self_obj, [ir.Constant(_i64, IN_FLIGHT_OFFSET)]),
            _i64.as_pointer().as_pointer()))
        b.store(b.add(b.load(self.in_flight), ir.Constant(_i64, 1)), self.in_flight)

    def leave(self, value: ir.Value) -> None:
        """Return ``value``: the call is no longer in flight. Nothing may run after the
        decrement but the ``ret`` itself, with the GIL held, so that no thread can free
        this code in between."""
        b = self.builder
        b.store(b.sub(b.load(self.in_flight), ir.Constant(_i64, 1)), self.in_flight)
        b.ret(value)

    def array(self, obj: ir.Value, t: MemRefType | TensorType, i: int) -> ir.Value:
        b = self.builder
        element = t.element
        itemsize = element.dtype.itemsize
        rank = t.rank
        self.type_is(obj, np.ndarray, f"ndarray{i}")
        descr = self.field(obj, ARRAY_DESCR, _i64)
        self.check(b.icmp_unsigned("==", descr,
                                   self.object_id(element.dtype, dtype_slot(element.mlir))),
                   f"dtype{i}")
        nd = self.field(obj, ARRAY_ND, _i32)
        self.check(b.icmp_signed("==", nd, ir.Constant(_i32, rank)), f"rank{i}")
        flags = self.field(obj, ARRAY_FLAGS, _i32)
        required = 0
        contiguous = isinstance(t, TensorType) or t.strides is None
        if contiguous:
            required |= NPY_C_CONTIGUOUS
        if isinstance(t, MemRefType):
            required |= NPY_WRITEABLE
        if required:
            masked = b.and_(flags, ir.Constant(_i32, required))
            self.check(b.icmp_unsigned("==", masked, ir.Constant(_i32, required)),
                       f"flags{i}")
        data = self.field(obj, ARRAY_DATA, _i64)
        dims = b.bitcast(self.field(obj, ARRAY_DIMENSIONS, _ptr), _i64.as_pointer())
        strides = b.bitcast(self.field(obj, ARRAY_STRIDES, _ptr), _i64.as_pointer())
        static_offset = 0 if isinstance(t, TensorType) else (t.offset or 0)
        descriptor = b.alloca(descriptor_struct(rank))
        allocated = b.sub(data, ir.Constant(_i64, static_offset * itemsize))
        self.arg_allocated.append(allocated)
        aligned = b.inttoptr(allocated, _ptr)
        zero = ir.Constant(_i32, 0)
        b.store(aligned, b.gep(descriptor, [zero, ir.Constant(_i32, ALLOCATED)]))
        b.store(aligned, b.gep(descriptor, [zero, ir.Constant(_i32, ALIGNED)]))
        b.store(ir.Constant(_i64, static_offset),
                b.gep(descriptor, [zero, ir.Constant(_i32, OFFSET)]))
        layout = None if isinstance(t, TensorType) else t.strides
        for axis in range(rank):
            size = b.load(b.gep(dims, [ir.Constant(_i64, axis)]))
            if t.shape[axis] is not None:
                self.check(b.icmp_signed("==", size, ir.Constant(_i64, t.shape[axis])),
                           f"dim{i}_{axis}")
            stride_bytes = b.load(b.gep(strides, [ir.Constant(_i64, axis)]))
            remainder = b.srem(stride_bytes, ir.Constant(_i64, itemsize))
            self.check(b.icmp_signed("==", remainder, ir.Constant(_i64, 0)),
                       f"stride{i}_{axis}")
            stride = b.sdiv(stride_bytes, ir.Constant(_i64, itemsize))
            if layout is not None and layout[axis] is not None:
                matches = b.icmp_signed("==", stride, ir.Constant(_i64, layout[axis]))
                trivial = b.icmp_signed("<=", size, ir.Constant(_i64, 1))
                self.check(b.or_(matches, trivial), f"static_stride{i}_{axis}")
            axis_index = ir.Constant(_i32, axis)
            b.store(size, b.gep(descriptor, [zero, ir.Constant(_i32, SIZES), axis_index]))
            b.store(stride, b.gep(descriptor, [zero, ir.Constant(_i32, STRIDES), axis_index]))
        return b.bitcast(descriptor, _ptr)

    def build(self) -> None:
        b = self.builder
        self_obj, args, nargsf, kwnames = self.function.args
        self.self_obj, self.args = self_obj, args
        # First, before any check: a call handed to the Python path runs in this code too
        # (it returns here), and must keep it alive as much as a native call.
        self.count_in(self_obj)
        # Vectorcall may flag, in the count's top bit, that args[-1] is scratch space.
        nargs = b.and_(nargsf, ir.Constant(_i64, (1 << 63) - 1))
        signature = self.abi.signature
        self.check(b.icmp_unsigned("==", b.ptrtoint(kwnames, _i64), ir.Constant(_i64, 0)),
                   "no_keywords")
        self.check(b.icmp_signed("==", nargs, ir.Constant(_i64, len(signature.params))),
                   "arity")
        # From here on a call has no keywords and the arity expected: the calls handed
        # over go to a fallback that knows it, so that neither stays live in registers
        # (the counter's address takes one for the whole call).
        fallback = self.fallback
        self.fallback = self.function.append_basic_block("positional_fallback")
        if self.exact:  # a generic kernel's binding: calls of these types only
            self.check(self.has_types(args, self.exact, _UNBOXED), "exact_types")
        c_args: list[ir.Value] = []
        for i, t in enumerate(signature.param_types):
            obj = b.load(b.gep(args, [ir.Constant(_i64, i)]))
            if isinstance(t, ScalarType) and t.crossing == "pair":
                c_args.extend(self.complex_parts(obj, t, i))  # crosses as (re, im)
            elif isinstance(t, ScalarType) and t.crossing == "bits":
                c_args.append(self.half_bits(obj, t, i))  # f16, bf16: their bits
            elif isinstance(t, ScalarType):
                c_args.append(self.scalar(obj, t, i))
            else:
                assert isinstance(t, (MemRefType, TensorType))
                c_args.append(self.array(obj, t, i))
        result_types = self.abi.boundary.results
        results = None
        if self.abi.results_via_pointer:
            # Several results: the callee writes them to a struct on this stack.
            results = b.alloca(ir.ArrayType(_i8, ctypes.sizeof(self.abi.result_struct)))
            results.align = 16
            c_args.insert(0, b.bitcast(results, _ptr))
            result_types = ()
        llvm_result = _llvm_type(result_types[0]) if result_types else ir.VoidType()  # type: ignore[arg-type]
        target_type = ir.FunctionType(llvm_result, [a.type for a in c_args])
        if isinstance(self.target, str):
            target: ir.Value = self.unit.function(self.target, target_type)
        else:
            target = b.inttoptr(ir.Constant(_i64, self.target), target_type.as_pointer())
        record = None
        jump_buffer = None
        if self.calls is not None:
            record, jump_buffer = self.open_record()
        state = self.save_thread()
        wrote = None  # whether the callee returned, writing its results (an i1)
        if jump_buffer is not None:
            # A failing callback longjmps back here (see _TrampolineBuilder): the call
            # ends at once, its result undefined, and close_record raises the error.
            result_slot = b.alloca(llvm_result) if result_types else None
            jumped = b.call(self.libc["_setjmp"], [jump_buffer])
            wrote = b.icmp_signed("==", jumped, ir.Constant(_i32, 0))
            with b.if_then(wrote):
                returned = b.call(target, c_args)
                if result_slot is not None:
                    b.store(returned, result_slot)
            value = b.load(result_slot) if result_slot is not None else None
            # What the call's code allocated: freed if it unwound, else its results'.
            end_allocations(self, jump_buffer, b.not_(wrote))
        else:
            value = b.call(target, c_args)
        if state is not None:
            with b.if_then(b.not_(self.is_null(state))):
                b.call(self.api["PyEval_RestoreThread"], [state])
        if record is not None:
            # May run Python (a callback's error): still counted. A call that fails
            # frees the memory its results would have owned.
            self.close_record(record, None if results is None else
                              lambda: self.free_results(b.bitcast(results, _ptr), wrote))
        if results is not None:
            self.leave(self.box_results(b.bitcast(results, _ptr)))
        else:
            self.leave(self.box(value, result_types[0] if result_types else None))  # type: ignore[arg-type]
        b.position_at_end(self.fallback)
        self.leave(b.call(self.api[_POSITIONAL_CALL],
                          [self.python_path(self_obj), args,
                           ir.Constant(_i64, len(signature.params)), ir.Constant(_ptr, None)]))
        b.position_at_end(fallback)
        self.hand_to_python(self.python_path(self_obj), args, nargs, kwnames)

    def hand_to_python(self, python_path: ir.Value, args: ir.Value, nargs: ir.Value,
                       kwnames: ir.Value) -> None:
        """Return ``python_path(*args, **keywords)``: the keyword values follow the
        ``nargs`` positional ones in ``args``, named by the ``kwnames`` tuple (or NULL)."""
        b = self.builder
        vectorcall = self.api["PyObject_VectorcallDict"]
        positional_only = self.function.append_basic_block("positional_only")
        with_keywords = self.function.append_basic_block("with_keywords")
        b.cbranch(self.is_null(kwnames), positional_only, with_keywords)
        b.position_at_end(positional_only)
        self.leave(b.call(self.api[_POSITIONAL_CALL],
                          [python_path, args, nargs, ir.Constant(_ptr, None)]))
        b.position_at_end(with_keywords)
        count = b.call(self.api["PyTuple_Size"], [kwnames])
        keywords = b.call(self.api["PyDict_New"], [])
        self.return_if_null(keywords, "keywords_made")
        start = b.block
        head = self.function.append_basic_block("keyword")
        body = self.function.append_basic_block("add_keyword")
        done = self.function.append_basic_block("keywords_added")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(_i64)
        i.add_incoming(ir.Constant(_i64, 0), start)
        b.cbranch(b.icmp_signed("<", i, count), body, done)
        b.position_at_end(body)
        name = b.call(self.api["PyTuple_GetItem"], [kwnames, i])  # borrowed
        value = b.load(b.gep(args, [b.add(nargs, i)]))
        added = b.call(self.api["PyDict_SetItem"], [keywords, name, value])
        with b.if_then(b.icmp_signed("<", added, ir.Constant(_i32, 0)), likely=False):
            b.call(self.api["Py_DecRef"], [keywords])
            self.leave(ir.Constant(_ptr, None))
        i.add_incoming(b.add(i, ir.Constant(_i64, 1)), b.block)
        b.branch(head)
        b.position_at_end(done)
        result = b.call(vectorcall, [python_path, args, nargs, keywords])
        b.call(self.api["Py_DecRef"], [keywords])
        self.leave(result)

    def open_record(self) -> tuple[ir.Value, ir.Value | None]:
        """Make this call's record the thread's innermost one (see
        :meth:`push_call_record`); returns it and the jmp_buf, if any."""
        record, _, jump_buffer, _ = self.push_call_record(
            self.calls.frame_key, self.unwind, self.release_gil is False)
        return record, jump_buffer

    def close_record(self, record: ir.Value,
                     discard: Callable[[], None] | None = None) -> None:
        """Make the hidden record the innermost one again; if a callback of this call
        (or of a thread without a call) failed, let Python raise its exception, after
        the code ``discard`` emits (which frees the results)."""
        b = self.builder
        key = b.trunc(self.integer(self.calls.frame_key, FRAME_KEY), _i32)
        previous = b.inttoptr(b.load(self.record_slot(record, PREVIOUS)), _ptr)
        b.call(self.libc["pthread_setspecific"], [key, previous])
        foreign = b.inttoptr(self.integer(self.calls.foreign_record, FOREIGN_RECORD),
                             _i64.as_pointer())
        failed = b.or_(b.load(self.record_slot(record, FAILED)), b.load(foreign))
        with b.if_then(b.icmp_unsigned("!=", failed, ir.Constant(_i64, 0)), likely=False):
            address = b.call(self.api["PyLong_FromLongLong"], [b.ptrtoint(record, _i64)])
            self.return_if_null(address, "boxed_record", discard)
            done = self.call(self.pointer(self.calls.finish_call, FINISH_CALL), [address])
            b.call(self.api["Py_DecRef"], [address])
            self.return_if_null(done, "finished", discard)  # a callback's exception, raised
            b.call(self.api["Py_DecRef"], [done])

    def box(self, value: ir.Value, t: ScalarType | None) -> ir.Value:
        if t is None:
            none = self.pointer(None)
            self.builder.call(self.api["Py_IncRef"], [none])
            return none
        result = self.abi.signature.results[0]
        if isinstance(result, ScalarType) and result.crossing == "bits":
            t = result  # f16, bf16: their bits crossed (an i16)
        return self.box_scalar(value, t, isinstance(result, ScalarType) and result.kind == "bool")

