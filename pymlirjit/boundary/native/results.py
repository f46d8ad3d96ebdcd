"""Python <- C ABI: how a kernel entry turns the results its callee wrote into Python
values (scalars; memref and tensor results as arrays owning the memory the compiled
code allocated)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

from llvmlite import ir

from ..abi import BoundaryABI
from ..memref import ALLOCATED, GLOBAL_MEMREF_MARKER
from ..types import MemRefType, ScalarType, TensorType
from ..vectorcall import PYTHON_PATH_OFFSET
from .builder import _POSITIONAL_CALL, _FunctionBuilder, _i64, _llvm_type, _ptr, _Unit
from .halffloat import _bits_to_double


class _ResultsBuilder(_FunctionBuilder):
    """The part of an entry (:class:`pymlirjit.boundary.native.entry._EntryBuilder`) that boxes
    the results its callee wrote through the result pointer."""

    abi: BoundaryABI
    self_obj: ir.Value  # the entry's arguments: the called object, its argument vector
    args: ir.Value
    # The ``allocated`` pointer (an i64) of each array argument's descriptor: a memref
    # result with one of these aliases an argument (see box_results).
    arg_allocated: list[ir.Value]

    def leave(self, value: ir.Value) -> None:
        """Return ``value`` from the entry (the entry's own: it counts the call out)."""
        raise NotImplementedError

    def box_scalar(self, value: ir.Value, t: ScalarType, as_bool: bool) -> ir.Value:
        """A new reference to the Python value of ``value``; an f16 or bf16 crosses as its
        bits, and becomes the Python float the Python path makes of them."""
        if t.crossing == "bits":
            return self.builder.call(self.api["PyFloat_FromDouble"],
                                     [_bits_to_double(self.builder, value, t.mlir)])
        return super().box_scalar(value, t, as_bool)

    def return_if_null(self, obj: ir.Value, label: str,
                       cleanup: Callable[[], None] | None = None) -> None:
        """Return NULL (an exception is set) if a C API call returned NULL, after the
        code ``cleanup`` emits."""
        b = self.builder
        failed = self.function.append_basic_block(f"{label}_failed")
        ok = self.function.append_basic_block(label)
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(obj, _i64), ir.Constant(_i64, 0)),
                  failed, ok)
        b.position_at_end(failed)
        if cleanup is not None:
            cleanup()
        self.leave(obj)
        b.position_at_end(ok)

    def python_path(self, self_obj: ir.Value) -> ir.Value:
        """What the entry hands the calls it does not take (see pymlirjit.boundary.vectorcall)."""
        offset = ir.Constant(_i64, PYTHON_PATH_OFFSET)
        return self.builder.load(self.builder.bitcast(self.builder.gep(self_obj, [offset]),
                                                      _ptr.as_pointer()))

    def box_scalar_results(self, results: ir.Value) -> ir.Value:
        """A new tuple of the scalar results the callee wrote to ``results`` (laid out
        as the ABI's ``result_struct``), or NULL with an exception set."""
        b = self.builder
        types = self.abi.boundary.results
        items = b.call(self.api["PyTuple_New"], [ir.Constant(_i64, len(types))])
        self.return_if_null(items, "tuple_made")
        for i, t in enumerate(types):
            assert isinstance(t, ScalarType)
            offset = getattr(self.abi.result_struct, f"r{i}").offset
            field = b.bitcast(b.gep(results, [ir.Constant(_i64, offset)]),
                              _llvm_type(t).as_pointer())
            item = self.box_scalar(b.load(field), t, t.kind == "bool")
            failed = self.function.append_basic_block(f"item{i}_failed")
            ok = self.function.append_basic_block(f"item{i}")
            b.cbranch(self.is_null(item), failed, ok)
            b.position_at_end(failed)
            b.call(self.api["Py_DecRef"], [items])
            self.leave(ir.Constant(_ptr, None))
            b.position_at_end(ok)
            self.set_tuple_item(items, i, item)
        return items

    def set_tuple_item(self, tuple_: ir.Value, i: int, item: ir.Value) -> None:
        """Put ``item`` (a new reference, which the tuple takes) in the empty slot ``i``
        of a new tuple: stored into its items, as ``PyTuple_SET_ITEM`` does, where this
        interpreter's tuples have the layout :func:`_tuple_items_offset` checked."""
        b = self.builder
        offset = _tuple_items_offset()
        if offset is None:
            b.call(self.api["PyTuple_SetItem"], [tuple_, ir.Constant(_i64, i), item])
            return
        slot = b.gep(tuple_, [ir.Constant(_i64, offset + 8 * i)])
        b.store(item, b.bitcast(slot, _ptr.as_pointer()))

    def box_results(self, results: ir.Value) -> ir.Value:
        """The results the callee wrote to ``results`` (laid out as the ABI's
        ``result_struct``): one value, or a new tuple of several; NULL with an exception
        set. Memref and tensor results become arrays that own the memory the compiled
        code allocated; a result whose memory is not such a fresh allocation (an
        argument's, an earlier result's, a global's, or none) is read by the Python
        path's reader instead (:meth:`read_results_in_python`), for all results."""
        b = self.builder
        types = self.abi.boundary.results
        if len(types) == 1 and isinstance(types[0], ScalarType):  # a complex number
            field = b.bitcast(results, _llvm_type(types[0]).as_pointer())
            return self.box_scalar(b.load(field), types[0], False)
        if all(isinstance(t, ScalarType) for t in types):
            return self.box_scalar_results(results)
        fields = [b.gep(results, [ir.Constant(_i64, getattr(self.abi.result_struct,
                                                            f"r{i}").offset)])
                  for i in range(len(types))]
        arrays = [(field, t) for field, t in zip(fields, types) if not isinstance(t, ScalarType)]
        self.read_results_in_python_unless_fresh(results, arrays)
        items = []
        for field, t in zip(fields, types):
            if isinstance(t, ScalarType):
                typed = b.bitcast(field, _llvm_type(t).as_pointer())
                items.append(self.box_scalar(b.load(typed), t, t.kind == "bool"))
            else:
                assert isinstance(t, (MemRefType, TensorType))
                items.append(self.owned_array(field, t))
        if len(items) == 1:
            return items[0]
        failed: ir.Value = ir.Constant(ir.IntType(1), 0)
        for item in items:
            failed = b.or_(failed, self.is_null(item))
        with b.if_then(failed, likely=False):
            for item in items:
                with b.if_then(b.not_(self.is_null(item))):
                    b.call(self.api["Py_DecRef"], [item])
            self.leave(ir.Constant(_ptr, None))
        tuple_ = b.call(self.api["PyTuple_New"], [ir.Constant(_i64, len(types))])
        with b.if_then(self.is_null(tuple_), likely=False):
            for item in items:
                b.call(self.api["Py_DecRef"], [item])
            self.leave(ir.Constant(_ptr, None))
        for i, item in enumerate(items):
            self.set_tuple_item(tuple_, i, item)
        return tuple_

    def owned_array(self, descriptor: ir.Value, t: MemRefType | TensorType) -> ir.Value:
        """A new array viewing a memref result whose ``allocated`` pointer the compiled
        code got from ``malloc`` (``memref.alloc``), owning that memory: its base is a
        capsule of the pointer whose destructor frees it with the ``free`` the compiled
        code's ``malloc`` pairs with (resolved as it is: see :func:`_owner_destructor`).
        NULL with an exception set (the memory freed) if it cannot be made.

        The destructor is this code's: the capsule's context holds a reference to what
        owns the code, the function's Python path (its ``native_code``; so an array
        keeps its function's code and engine alive until collected), which the
        destructor releases last, by a tail call, so that it never returns into code
        that releasing may free. (The Python path is at hand in the called object: no
        attribute lookup per call.)"""
        b = self.builder
        allocated = b.load(self.descriptor_field(descriptor, t.rank, ALLOCATED))
        destructor = b.bitcast(_owner_destructor(self.unit), _ptr)
        capsule = b.call(self.api["PyCapsule_New"],
                         [allocated, ir.Constant(_ptr, None), destructor])
        failed = self.function.append_basic_block("owner_failed")
        made = self.function.append_basic_block("owner_made")
        done = self.function.append_basic_block("owned_array")
        b.cbranch(self.is_null(capsule), failed, made)
        b.position_at_end(failed)
        b.call(self.libc["free"], [allocated])  # no array will own it
        b.branch(done)
        b.position_at_end(made)
        code = self.python_path(self.self_obj)
        b.call(self.api["Py_IncRef"], [code])
        b.call(self.api["PyCapsule_SetContext"], [capsule, code])  # the capsule's now
        array = self.array_of_descriptor(descriptor, t, capsule)
        made_end = b.block
        b.branch(done)
        b.position_at_end(done)
        result = b.phi(_ptr)
        result.add_incoming(ir.Constant(_ptr, None), failed)
        result.add_incoming(array, made_end)
        return result

    def free_results(self, results: ir.Value, returned: ir.Value | None) -> None:
        """Free the memory of each memref/tensor result the callee wrote to ``results``
        that :meth:`box_results` would have handed to an array (a fresh allocation: not
        NULL, not a global's mark, no argument's, not an earlier result's), with the
        ``free`` its owner would have used: for a call that failed, whose results no
        one will see. Only if ``returned`` (an i1; ``None``: always): a call unwound by
        ``longjmp`` never wrote its results, and its struct holds stack garbage (what
        it allocated is freed from its allocation list instead: see
        :mod:`pymlirjit.boundary.native.allocations`)."""
        b = self.builder
        types = self.abi.boundary.results
        arrays = [(i, t) for i, t in enumerate(types) if isinstance(t, (MemRefType, TensorType))]
        if not arrays:
            return
        done = None
        if returned is not None:
            free = self.function.append_basic_block("free_results")
            done = self.function.append_basic_block("results_freed")
            b.cbranch(returned, free, done)
            b.position_at_end(free)
        seen = [ir.Constant(_i64, 0), ir.Constant(_i64, GLOBAL_MEMREF_MARKER),
                *self.arg_allocated]
        for i, t in arrays:
            field = b.gep(results, [ir.Constant(_i64, getattr(self.abi.result_struct,
                                                              f"r{i}").offset)])
            allocated = b.load(self.descriptor_field(field, t.rank, ALLOCATED))
            address = b.ptrtoint(allocated, _i64)
            shared: ir.Value = ir.Constant(ir.IntType(1), 0)
            for value in seen:
                shared = b.or_(shared, b.icmp_unsigned("==", address, value))
            with b.if_then(b.not_(shared)):
                b.call(self.libc["free"], [allocated])
            seen.append(address)
        if done is not None:
            b.branch(done)
            b.position_at_end(done)

    def read_results_in_python_unless_fresh(self, results: ir.Value,
                                            arrays: list[tuple[ir.Value, Any]]) -> None:
        """Go on if every memref/tensor result in ``arrays`` has memory of its own, freshly
        allocated by the compiled code: an ``allocated`` pointer that is not NULL, not
        MLIR's mark of a global, and no argument's or other result's. Else return what
        the Python path's reader makes of the results (which finds each result's owner,
        and copies a tensor sharing memory)."""
        b = self.builder
        seen = list(self.arg_allocated)
        shared: ir.Value = ir.Constant(ir.IntType(1), 0)
        for field, t in arrays:
            allocated = b.ptrtoint(b.load(self.descriptor_field(field, t.rank, ALLOCATED)),
                                   _i64)
            for value in [ir.Constant(_i64, 0), ir.Constant(_i64, GLOBAL_MEMREF_MARKER),
                          *seen]:
                shared = b.or_(shared, b.icmp_unsigned("==", allocated, value))
            seen.append(allocated)
        with b.if_then(shared, likely=False):
            self.leave(self.read_results_in_python(results))

    def read_results_in_python(self, results: ir.Value) -> ir.Value:
        """``python_path.read_results(address of results, *args)`` (see
        :meth:`pymlirjit.runtime.pythoncall.PythonCall.read_results`)."""
        b = self.builder
        python_path = self.python_path(self.self_obj)
        name = self.cstring("read_results")
        method = b.call(self.api["PyObject_GetAttrString"], [python_path, name])
        self.return_if_null(method, "reader_found")
        count = len(self.abi.signature.params)
        argv = b.alloca(_ptr, count + 1)
        address = b.call(self.api["PyLong_FromLongLong"], [b.ptrtoint(results, _i64)])
        with b.if_then(self.is_null(address), likely=False):
            b.call(self.api["Py_DecRef"], [method])
            self.leave(ir.Constant(_ptr, None))
        b.store(address, argv)
        for i in range(count):
            b.store(b.load(b.gep(self.args, [ir.Constant(_i64, i)])),
                    b.gep(argv, [ir.Constant(_i64, i + 1)]))
        value = b.call(self.api[_POSITIONAL_CALL],
                       [method, argv, ir.Constant(_i64, count + 1), ir.Constant(_ptr, None)])
        b.call(self.api["Py_DecRef"], [address])
        b.call(self.api["Py_DecRef"], [method])
        return value



#: PyTupleObject.ob_item: the items follow the variable-size object header.
TUPLE_ITEMS = 24


@functools.cache
def _tuple_items_offset() -> int | None:
    """:data:`TUPLE_ITEMS` if this interpreter's tuples keep their items there (read
    back through ctypes from tuples of each length entries make), else ``None``."""
    for length in range(1, 9):
        items = tuple(object() for _ in range(length))
        stored = (ctypes.c_void_p * length).from_address(id(items) + TUPLE_ITEMS)
        if [address or 0 for address in stored] != [id(item) for item in items]:
            return None
    return TUPLE_ITEMS


_OWNER_DESTRUCTOR = "pymlirjit_free_owner"


def _owner_destructor(unit: _Unit) -> ir.Function:
    """The unit's capsule destructor for memory its entries' arrays own (see
    :meth:`_ResultsBuilder.owned_array`): ``free`` the capsule's pointer, then release its
    context, the owner of this very code, by a ``musttail`` call (a jump: nothing runs
    here after it). ``free`` resolves as the compiled code's ``malloc`` does: through
    the process's symbols in this process (as :func:`pymlirjit.boundary.ffi.free`, which the
    Python path frees with), through the same dynamic linking in a shared library."""
    existing = unit.module.globals.get(_OWNER_DESTRUCTOR)
    if isinstance(existing, ir.Function):
        return existing
    function = ir.Function(unit.module, ir.FunctionType(ir.VoidType(), [_ptr]),
                           _OWNER_DESTRUCTOR)
    function.linkage = "internal"
    b = ir.IRBuilder(function.append_basic_block("entry"))
    capsule = function.args[0]
    memory = b.call(unit.api["PyCapsule_GetPointer"], [capsule, ir.Constant(_ptr, None)])
    context = b.call(unit.api["PyCapsule_GetContext"], [capsule])
    b.call(unit.libc["free"], [memory])
    b.call(unit.api["Py_DecRef"], [context], tail="musttail")
    b.ret_void()
    return function
