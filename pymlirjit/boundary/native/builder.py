"""The shared function builder of generated code: LLVM types, the C API and C
library functions it declares, boxing of scalars, and what entries and trampolines
both emit (zeroed results, unwinding)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
from llvmlite import ir

from ..abi import BoundaryABI
from ..aliases import ExactTypes, TypeTest
from ..callframe import FAILED, HOLDS_GIL, JUMP_BUFFER, PREVIOUS, RECORD_FIELDS
from ..memref import ALIGNED, OFFSET, SIZES, STRIDES, descriptor_type
from ..relocation import (
    ARRAY_FROM_DESCR,
    FRAME_KEY,
    SLOT_PREFIX,
    array_from_descr,
    dtype_slot,
    name_of,
)
from ..types import MemRefType, ScalarType, TensorType
from .unwindarea import (
    INLINE_ALLOCATIONS,
    LIST_CAPACITY,
    LIST_COUNT,
    LIST_INLINE,
    LIST_ITEMS,
    UNWIND_AREA_BYTES,
    allocation_list,
)

# The object fields generated code reads, as byte offsets: CPython's PyObject header and
# numpy's PyArrayObject_fields, both public ABI on 64-bit CPython 3.10-3.13 (not the
# free-threaded build) and numpy 1.x/2.x. check_object_layouts() compares them with
# this interpreter before any code is generated.
OB_TYPE = 8  # PyObject.ob_type
ARRAY_DATA = 16  # PyArrayObject.data (char *)
ARRAY_ND = 24  # PyArrayObject.nd (int)
ARRAY_DIMENSIONS = 32  # PyArrayObject.dimensions (npy_intp *)
ARRAY_STRIDES = 40  # PyArrayObject.strides (npy_intp *, in bytes)
ARRAY_BASE = 48  # PyArrayObject.base (PyObject *, owned)
ARRAY_DESCR = 56  # PyArrayObject.descr (PyArray_Descr *)
ARRAY_FLAGS = 64  # PyArrayObject.flags (int)
SCALAR_VALUE = 16  # a numpy scalar's value (obval, after the PyObject header)
# numpy's array flags (NPY_ARRAY_*), checked with the offsets.
NPY_C_CONTIGUOUS = 0x0001
NPY_ALIGNED = 0x0100
NPY_WRITEABLE = 0x0400

OBJECT_OFFSETS: Mapping[str, int] = {
    "PyObject.ob_type": OB_TYPE, "PyArrayObject.data": ARRAY_DATA,
    "PyArrayObject.nd": ARRAY_ND, "PyArrayObject.dimensions": ARRAY_DIMENSIONS,
    "PyArrayObject.strides": ARRAY_STRIDES, "PyArrayObject.base": ARRAY_BASE,
    "PyArrayObject.descr": ARRAY_DESCR,
    "PyArrayObject.flags": ARRAY_FLAGS, "numpy scalar.obval": SCALAR_VALUE,
}
ARRAY_FLAGS_BY_NAME: Mapping[str, int] = {
    "c_contiguous": NPY_C_CONTIGUOUS, "aligned": NPY_ALIGNED, "writeable": NPY_WRITEABLE,
}


def layout_mismatches(offsets: Mapping[str, int] = OBJECT_OFFSETS,
                      flags: Mapping[str, int] = ARRAY_FLAGS_BY_NAME) -> list[str]:
    """Where ``offsets`` (named as :data:`OBJECT_OFFSETS`) and ``flags`` (named after
    ``ndarray.flags`` attributes) disagree with the objects of this interpreter, read
    through ctypes: one line per field, empty if none. Pointers are followed only once
    every plain field read agrees and where they look like pointers."""
    def read(obj: object, field: str, c_type: Any) -> int:
        return int(c_type.from_address(id(obj) + offsets[field]).value or 0)

    base = np.arange(24, dtype=np.int16).reshape(4, 6)
    base.flags.writeable = False  # contiguous, read-only
    view = np.arange(24, dtype=np.int32).reshape(4, 6)[1:, ::2]  # strided, writable
    wrong: list[str] = []

    def expect(what: str, actual: object, expected: object) -> None:
        if actual != expected:
            wrong.append(f"{what}: read {actual!r}, expected {expected!r}")

    for obj in (1.5, view):
        expect(f"PyObject.ob_type at {offsets['PyObject.ob_type']} of a {type(obj).__name__}",
               read(obj, "PyObject.ob_type", ctypes.c_void_p), id(type(obj)))
    for array in (base, view):
        what = f"a {array.dtype} array of shape {array.shape}"
        expect(f"PyArrayObject.data at {offsets['PyArrayObject.data']} of {what}",
               read(array, "PyArrayObject.data", ctypes.c_void_p), array.ctypes.data)
        expect(f"PyArrayObject.nd at {offsets['PyArrayObject.nd']} of {what}",
               read(array, "PyArrayObject.nd", ctypes.c_int), array.ndim)
        expect(f"PyArrayObject.descr at {offsets['PyArrayObject.descr']} of {what}",
               read(array, "PyArrayObject.descr", ctypes.c_void_p), id(array.dtype))
        expect(f"PyArrayObject.base at {offsets['PyArrayObject.base']} of {what}",
               read(array, "PyArrayObject.base", ctypes.c_void_p),
               0 if array.base is None else id(array.base))
        raw = read(array, "PyArrayObject.flags", ctypes.c_int)
        expect(f"PyArrayObject.flags at {offsets['PyArrayObject.flags']} of {what}",
               raw, array.flags.num)
        for name, bit in flags.items():
            expect(f"flag {name} ({bit:#06x}) of {what}", bool(raw & bit),
                   bool(getattr(array.flags, name)))
    for scalar, c_type in ((np.float64(1.5), ctypes.c_double), (np.float32(-2.5), ctypes.c_float),
                           (np.int8(-5), ctypes.c_int8), (np.uint16(65000), ctypes.c_uint16),
                           (np.int32(-7), ctypes.c_int32), (np.uint64(2**64 - 3), ctypes.c_uint64)):
        expect(f"numpy scalar.obval at {offsets['numpy scalar.obval']} of {scalar!r}",
               c_type.from_address(id(scalar) + offsets["numpy scalar.obval"]).value,
               scalar.item())
    if wrong:
        return wrong
    for array in (base, view):
        what = f"a {array.dtype} array of shape {array.shape}"
        for field, values in (("PyArrayObject.dimensions", array.shape),
                              ("PyArrayObject.strides", array.strides)):
            address = read(array, field, ctypes.c_void_p)
            # Only what looks like a heap pointer is followed (the plain fields agree, so
            # a wrong offset here reads a neighbouring field: an int, NULL or a pointer).
            plausible = address % 8 == 0 and address >= 1 << 16
            actual = (tuple((ctypes.c_int64 * array.ndim).from_address(address))
                      if plausible else f"{address:#x}, not a pointer")
            expect(f"{field} at {offsets[field]} of {what}", actual, values)
    return wrong


@functools.cache
def check_object_layouts() -> None:
    """Raise ``RuntimeError`` if the object layouts generated code relies on are not
    this interpreter's (see :func:`layout_mismatches`): generating code for them would
    read the wrong fields."""
    wrong = layout_mismatches()
    if wrong:
        import sys

        raise RuntimeError(
            f"pymlirjit cannot generate native code for this interpreter (Python "
            f"{sys.version.split()[0]}, numpy {np.__version__}): its object layouts are not "
            f"the ones pymlirjit.boundary.native.builder expects: " + "; ".join(wrong))

_i8, _i32, _i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_ptr = _i8.as_pointer()
_double = ir.DoubleType()
_float = ir.FloatType()

# The C API functions the generated code calls, with their LLVM types.
_C_API: dict[str, ir.FunctionType] = {
    "PyFloat_AsDouble": ir.FunctionType(_double, [_ptr]),
    "PyFloat_FromDouble": ir.FunctionType(_ptr, [_double]),
    "PyComplex_FromDoubles": ir.FunctionType(_ptr, [_double, _double]),
    "PyLong_AsLongLongAndOverflow": ir.FunctionType(_i64, [_ptr, _i32.as_pointer()]),
    "PyLong_FromLongLong": ir.FunctionType(_ptr, [_i64]),
    "PyBool_FromLong": ir.FunctionType(_ptr, [_i64]),
    "PyEval_SaveThread": ir.FunctionType(_ptr, []),
    "PyInterpreterState_Get": ir.FunctionType(_ptr, []),
    "PyInterpreterState_ThreadHead": ir.FunctionType(_ptr, [_ptr]),
    "PyThreadState_Next": ir.FunctionType(_ptr, [_ptr]),
    "PyEval_RestoreThread": ir.FunctionType(ir.VoidType(), [_ptr]),
    "PyObject_VectorcallDict": ir.FunctionType(_ptr, [_ptr, _ptr.as_pointer(), _i64, _ptr]),
    "PyDict_New": ir.FunctionType(_ptr, []),
    "PyDict_SetItem": ir.FunctionType(_i32, [_ptr, _ptr, _ptr]),
    "PyTuple_Size": ir.FunctionType(_i64, [_ptr]),
    "PyTuple_New": ir.FunctionType(_ptr, [_i64]),
    "PyTuple_SetItem": ir.FunctionType(_i32, [_ptr, _i64, _ptr]),
    "PyTuple_GetItem": ir.FunctionType(_ptr, [_ptr, _i64]),
    "PyObject_GetAttrString": ir.FunctionType(_ptr, [_ptr, _ptr]),
    "PyCapsule_New": ir.FunctionType(_ptr, [_ptr, _ptr, _ptr]),
    "PyCapsule_GetPointer": ir.FunctionType(_ptr, [_ptr, _ptr]),
    "PyCapsule_GetContext": ir.FunctionType(_ptr, [_ptr]),
    "PyCapsule_SetContext": ir.FunctionType(_i32, [_ptr, _ptr]),
    "Py_IncRef": ir.FunctionType(ir.VoidType(), [_ptr]),
    "Py_DecRef": ir.FunctionType(ir.VoidType(), [_ptr]),
    "PyGILState_Ensure": ir.FunctionType(_i32, []),
    "PyGILState_Release": ir.FunctionType(ir.VoidType(), [_i32]),
    "PyErr_Fetch": ir.FunctionType(ir.VoidType(), [_ptr.as_pointer()] * 3),
    "PyErr_NormalizeException": ir.FunctionType(ir.VoidType(), [_ptr.as_pointer()] * 3),
    "PyException_SetTraceback": ir.FunctionType(_i32, [_ptr, _ptr]),
    "PyErr_Clear": ir.FunctionType(ir.VoidType(), []),
    "PyErr_NoMemory": ir.FunctionType(_ptr, []),
}

# Calls without keywords: PyObject_Vectorcall(callable, args, nargs, NULL), or, where
# Python does not export it (3.10), PyObject_VectorcallDict(callable, args, nargs, NULL),
# which takes one more step.
_POSITIONAL_CALL = ("PyObject_Vectorcall" if hasattr(ctypes.pythonapi, "PyObject_Vectorcall")
                    else "PyObject_VectorcallDict")
_C_API[_POSITIONAL_CALL] = _C_API["PyObject_VectorcallDict"]


# The C library functions the generated code calls: unwinding and the per-thread frame.
_LIBC: dict[str, ir.FunctionType] = {
    "_setjmp": ir.FunctionType(_i32, [_ptr]),
    "longjmp": ir.FunctionType(ir.VoidType(), [_ptr, _i32]),
    "pthread_getspecific": ir.FunctionType(_ptr, [_i32]),
    "pthread_setspecific": ir.FunctionType(_i32, [_i32, _ptr]),
    "free": ir.FunctionType(ir.VoidType(), [_ptr]),
    "malloc": ir.FunctionType(_ptr, [_i64]),
    "memcpy": ir.FunctionType(_ptr, [_ptr, _ptr, _i64]),
    "realloc": ir.FunctionType(_ptr, [_ptr, _i64]),
    "aligned_alloc": ir.FunctionType(_ptr, [_i64, _i64]),
}


def _declare_libc(module: ir.Module) -> dict[str, ir.Function]:
    functions = {n: ir.Function(module, t, n) for n, t in _LIBC.items()}
    functions["_setjmp"].attributes.add("returns_twice")
    functions["longjmp"].attributes.add("noreturn")
    return functions


def _boundary_function_type(abi: BoundaryABI) -> ir.FunctionType:
    """The LLVM type of a function with ``abi``'s C ABI (after the MLIR shim)."""
    boundary = abi.boundary
    params: list[ir.Type] = [_ptr] if abi.results_via_pointer else []
    params += [_llvm_type(t) if isinstance(t, ScalarType) else _ptr
               for t in boundary.param_types]
    result: ir.Type = ir.VoidType()
    if boundary.results and not abi.results_via_pointer:
        result = _llvm_type(boundary.results[0])  # type: ignore[arg-type]
    return ir.FunctionType(result, params)


def descriptor_struct(rank: int) -> ir.LiteralStructType:
    """The LLVM struct of a ranked memref descriptor, field for field the ctypes one
    (:func:`pymlirjit.boundary.memref.descriptor_type`; index its fields with the constants
    :data:`~pymlirjit.boundary.memref.ALIGNED`, ...)."""
    fields: list[ir.Type] = []
    for field in descriptor_type(rank)._fields_:
        c_type: Any = field[1]
        if issubclass(c_type, ctypes.Array):
            fields.append(ir.ArrayType(_LLVM_OF_CTYPES[c_type._type_], c_type._length_))
        else:
            fields.append(_LLVM_OF_CTYPES[c_type])
    return ir.LiteralStructType(fields)


_LLVM_OF_CTYPES: dict[Any, ir.Type] = {ctypes.c_void_p: _ptr, ctypes.c_int64: _i64}


def _llvm_type(t: ScalarType) -> ir.Type:
    if t.kind == "complex":  # {re, im}: in memory (a result struct's field) only
        part = ir.FloatType() if t.bits == 64 else _double
        return ir.LiteralStructType([part, part])
    if t.crossing == "bits":  # f16, bf16, f8: their bits (see abi)
        return ir.IntType(max(t.bits, 8))
    if t.kind == "float":
        return ir.FloatType() if t.bits == 32 else _double
    if t.kind == "bool":
        return _i8  # i1 crosses the boundary as i8 (see abi)
    return ir.IntType(t.bits)


class _Unit:
    """One LLVM module being generated: its declarations, and how its code refers to
    Python objects and process addresses. Code for this process embeds them as
    constants (and keeps the objects alive as long as the code); ``relocatable`` code,
    for a shared library that any process may load, reads each from a named slot (a
    global) which the loading process fills (see :mod:`pymlirjit.boundary.relocation`)."""

    def __init__(self, name: str, relocatable: bool = False) -> None:
        self.module = ir.Module(name=name)
        self.api = {n: ir.Function(self.module, t, n) for n, t in _C_API.items()}
        self.libc = _declare_libc(self.module)
        self.relocatable = relocatable
        self.embedded: list[object] = []
        self.slots: dict[str, ir.GlobalVariable] = {}

    def slot(self, name: str) -> ir.GlobalVariable:
        """The global holding the value named ``name`` (``pymlirjit_slot_<index>``)."""
        variable = self.slots.get(name)
        if variable is None:
            variable = ir.GlobalVariable(self.module, _i64, f"{SLOT_PREFIX}{len(self.slots)}")
            variable.initializer = ir.Constant(_i64, 0)
            self.slots[name] = variable
        return variable

    def function(self, name: str, function_type: ir.FunctionType) -> ir.Function:
        """The function ``name``, declared once."""
        existing = self.module.globals.get(name)
        if isinstance(existing, ir.Function):
            return existing
        return ir.Function(self.module, function_type, name)


class _FunctionBuilder:
    """What both kinds of generated function need: their unit, the IR builder, and
    boxing of scalars."""

    def __init__(self, unit: _Unit, name: str, function_type: ir.FunctionType) -> None:
        self.unit = unit
        self.module = unit.module
        self.api = unit.api
        self.libc = unit.libc
        self.function = ir.Function(self.module, function_type, name)
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))

    def object_id(self, obj: object, slot: str | None = None) -> ir.Value:
        """The address of ``obj`` as an i64 (read from the slot ``slot``, by default its
        well-known name, in relocatable code)."""
        if not self.unit.relocatable:
            self.unit.embedded.append(obj)
            return ir.Constant(_i64, id(obj))
        return self.builder.load(self.unit.slot(slot or name_of(obj)))

    def has_types(self, args: ir.Value, exact: ExactTypes, known: Collection[type]) -> ir.Value:
        """Whether the objects ``args`` (a ``PyObject **``) have exact types that
        ``exact`` takes (see pymlirjit.boundary.aliases.ExactTypes), types not in ``known`` taken
        for none: type pointers compared, nothing else read."""
        b = self.builder
        true, false = ir.Constant(ir.IntType(1), 1), ir.Constant(ir.IntType(1), 0)
        types = {p: b.load(b.bitcast(b.gep(b.load(b.gep(args, [ir.Constant(_i64, p)])),
                                           [ir.Constant(_i64, OB_TYPE)]), _i64.as_pointer()))
                 for group in exact for route in group for test in route for p, _ in test}

        def any_of(test: TypeTest) -> ir.Value:
            return functools.reduce(b.or_, [b.icmp_unsigned("==", types[p], self.object_id(t))
                                            for p, ts in test for t in ts if t in known], false)

        def holds(allowed: TypeTest, required: TypeTest) -> ir.Value:
            tests = [any_of((test,)) for test in allowed] + [any_of(required)] * bool(required)
            return functools.reduce(b.and_, tests, true)

        return functools.reduce(b.and_, [functools.reduce(b.or_, [holds(*r) for r in group],
                                                          false) for group in exact], true)

    def pointer(self, obj: object, slot: str | None = None) -> ir.Value:
        """A pointer to ``obj`` (see :meth:`object_id`)."""
        return self.builder.inttoptr(self.object_id(obj, slot), _ptr)

    def integer(self, value: int, slot: str) -> ir.Value:
        """``value``, a process-specific number, as an i64 (from ``slot`` in relocatable
        code)."""
        if not self.unit.relocatable:
            return ir.Constant(_i64, value)
        return self.builder.load(self.unit.slot(slot))

    def record_slot(self, record: ir.Value, index: int) -> ir.Value:
        """A pointer to field ``index`` (see pymlirjit.boundary.callframe) of the call record
        ``record`` (an ``i64*``)."""
        return self.builder.gep(record, [ir.Constant(_i64, index)])

    def push_call_record(self, frame_key: int, unwind: bool, holds_gil: bool,
                         ) -> tuple[ir.Value, ir.Value, ir.Value | None, ir.Value]:
        """Make a new call record on the stack the thread's innermost one (see
        pymlirjit.boundary.callframe): it says whether a callback failed, where a failing one may
        ``longjmp`` to (a jump buffer, with ``unwind``, followed by the call's empty
        allocation list: see :data:`~.unwindarea.ALLOCATIONS`), and whether this thread keeps the
        GIL. Returns the record (an ``i64*``), the record it hides, the jump buffer if
        any, and the thread key (an i32) to restore the hidden one with."""
        b = self.builder
        key = b.trunc(self.integer(frame_key, FRAME_KEY), _i32)
        previous = b.call(self.libc["pthread_getspecific"], [key])
        record = b.bitcast(b.alloca(ir.ArrayType(_i64, RECORD_FIELDS)), _i64.as_pointer())
        jump_buffer = None
        address: ir.Value = ir.Constant(_i64, 0)
        if unwind:
            buffer = b.alloca(ir.ArrayType(_i8, UNWIND_AREA_BYTES))
            buffer.align = 16
            jump_buffer = b.bitcast(buffer, _ptr)
            address = b.ptrtoint(jump_buffer, _i64)
            allocations = allocation_list(b, jump_buffer)
            inline = b.gep(allocations, [ir.Constant(_i64, LIST_INLINE)])
            for index, value in [(LIST_ITEMS, b.ptrtoint(inline, _i64)),
                                 (LIST_COUNT, ir.Constant(_i64, 0)),
                                 (LIST_CAPACITY, ir.Constant(_i64, INLINE_ALLOCATIONS))]:
                b.store(value, b.gep(allocations, [ir.Constant(_i64, index)]))
        for index, value in [(FAILED, ir.Constant(_i64, 0)), (JUMP_BUFFER, address),
                             (HOLDS_GIL, ir.Constant(_i64, int(holds_gil))),
                             (PREVIOUS, b.ptrtoint(previous, _i64))]:
            b.store(value, self.record_slot(record, index))
        b.call(self.libc["pthread_setspecific"], [key, b.bitcast(record, _ptr)])
        return record, previous, jump_buffer, key

    def cstring(self, text: str) -> ir.Value:
        """A pointer to a constant NUL-terminated copy of ``text`` (ASCII)."""
        data = bytearray(text.encode("ascii") + b"\0")
        name = f"pymlirjit_str_{text}"
        variable = self.module.globals.get(name)
        if variable is None:
            variable = ir.GlobalVariable(self.module, ir.ArrayType(_i8, len(data)), name)
            variable.initializer = ir.Constant(ir.ArrayType(_i8, len(data)), data)
            variable.global_constant = True
            variable.linkage = "internal"
        return self.builder.bitcast(variable, _ptr)

    def is_null(self, value: ir.Value) -> ir.Value:
        return self.builder.icmp_unsigned("==", self.builder.ptrtoint(value, _i64),
                                          ir.Constant(_i64, 0))

    def call(self, function: ir.Value, args: list[ir.Value]) -> ir.Value:
        """``function(*args)`` (a new reference, or NULL with an exception set)."""
        b = self.builder
        argv = b.alloca(_ptr, max(len(args), 1))
        for i, arg in enumerate(args):
            b.store(arg, b.gep(argv, [ir.Constant(_i64, i)]))
        return b.call(self.api[_POSITIONAL_CALL],
                      [function, argv, ir.Constant(_i64, len(args)), ir.Constant(_ptr, None)])

    def descriptor_field(self, descriptor: ir.Value, rank: int, index: int) -> ir.Value:
        """A pointer to field ``index`` (:data:`~pymlirjit.boundary.memref.ALIGNED`, ...) of the
        ranked descriptor at ``descriptor`` (an ``i8*``)."""
        b = self.builder
        typed = b.bitcast(descriptor, descriptor_struct(rank).as_pointer())
        return b.gep(typed, [ir.Constant(_i32, 0), ir.Constant(_i32, index)])

    def new_array(self, descr: ir.Value, rank: int | ir.Value, sizes: ir.Value,
                  byte_strides: ir.Value, data: ir.Value, flags: int) -> ir.Value:
        """``PyArray_NewFromDescr(ndarray, descr, ...)``: a new reference, or NULL with an
        exception set. It steals ``descr`` (also when it fails)."""
        b = self.builder
        new_type = ir.FunctionType(_ptr, [_ptr, _ptr, _i32, _i64.as_pointer(),
                                          _i64.as_pointer(), _ptr, _i32, _ptr])
        new = b.inttoptr(self.integer(array_from_descr(), ARRAY_FROM_DESCR),
                         new_type.as_pointer())
        nd = ir.Constant(_i32, rank) if isinstance(rank, int) else rank
        return b.call(new, [self.pointer(np.ndarray), descr, nd, sizes,
                            byte_strides, data, ir.Constant(_i32, flags),
                            ir.Constant(_ptr, None)])

    def array_of_descriptor(self, descriptor: ir.Value, t: MemRefType | TensorType,
                            owner: ir.Value | None = None) -> ir.Value:
        """A new writable numpy array viewing what the ranked descriptor at
        ``descriptor`` (an ``i8*``) describes, or NULL with an exception set. ``owner``
        (a new reference, or none) becomes the array's base, the object keeping its
        memory alive (as ``PyArray_SetBaseObject`` makes it); it is released if the
        array cannot be made."""
        b = self.builder
        rank = t.rank
        dtype = t.element.dtype
        itemsize = dtype.itemsize
        aligned = b.ptrtoint(b.load(self.descriptor_field(descriptor, rank, ALIGNED)), _i64)
        offset = b.load(self.descriptor_field(descriptor, rank, OFFSET))
        data = b.add(aligned, b.mul(offset, ir.Constant(_i64, itemsize)))
        sizes: ir.Value = ir.Constant(_i64.as_pointer(), None)
        byte_strides: ir.Value = ir.Constant(_i64.as_pointer(), None)
        if rank:
            sizes = b.gep(self.descriptor_field(descriptor, rank, SIZES),
                          [ir.Constant(_i32, 0), ir.Constant(_i32, 0)])
            strides = self.descriptor_field(descriptor, rank, STRIDES)
            byte_strides = b.alloca(_i64, rank)
            for axis in range(rank):
                stride = b.load(b.gep(strides, [ir.Constant(_i32, 0), ir.Constant(_i32, axis)]))
                b.store(b.mul(stride, ir.Constant(_i64, itemsize)),
                        b.gep(byte_strides, [ir.Constant(_i64, axis)]))
        descr = self.pointer(dtype, dtype_slot(t.element.mlir))
        b.call(self.api["Py_IncRef"], [descr])  # PyArray_NewFromDescr steals it
        array = self.new_array(descr, rank, sizes, byte_strides, b.inttoptr(data, _ptr),
                               NPY_WRITEABLE | NPY_ALIGNED)
        if owner is not None:
            with b.if_else(self.is_null(array)) as (no_array, has_array):
                with no_array:
                    b.call(self.api["Py_DecRef"], [owner])
                with has_array:
                    base = b.bitcast(b.gep(array, [ir.Constant(_i64, ARRAY_BASE)]),
                                     _ptr.as_pointer())
                    b.store(owner, base)
        return array

    def box_scalar(self, value: ir.Value, t: ScalarType, as_bool: bool) -> ir.Value:
        """A new reference to the Python float/int/bool/complex holding ``value``."""
        b = self.builder
        if t.kind == "complex":
            re, im = (b.extract_value(value, n) for n in (0, 1))
            if t.bits == 64:
                re, im = b.fpext(re, _double), b.fpext(im, _double)
            return b.call(self.api["PyComplex_FromDoubles"], [re, im])
        if t.kind == "float":
            wide = b.fpext(value, _double) if t.bits == 32 else value
            return b.call(self.api["PyFloat_FromDouble"], [wide])
        if as_bool:
            return b.call(self.api["PyBool_FromLong"], [b.zext(value, _i64)])
        wide = b.sext(value, _i64) if t.bits < 64 else value
        return b.call(self.api["PyLong_FromLongLong"], [wide])


def _zero_results(b: ir.IRBuilder, abi: BoundaryABI, args: list[ir.Value]) -> None:
    """Zero the results a function with ``abi``'s C ABI returns through a pointer (its
    first argument, ``args[0]``), if it does."""
    if not abi.results_via_pointer:
        return
    size = ctypes.sizeof(abi.result_struct)
    offset = 0
    while offset < size:
        chunk = next(n for n in (8, 4, 2, 1) if n <= size - offset)
        width = ir.IntType(8 * chunk)
        b.store(ir.Constant(width, 0),
                b.bitcast(b.gep(args[0], [ir.Constant(_i64, offset)]), width.as_pointer()))
        offset += chunk
