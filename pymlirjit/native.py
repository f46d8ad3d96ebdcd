"""Native entry points generated with llvmlite: crossing the boundary without ctypes.

:meth:`NativeBatch.add_kernel_entry` builds, for one compiled function, the *vectorcall*
function of the object that stands for it (see :mod:`pymlirjit.vectorcall`: CPython calls
it directly, as it calls a builtin function). It unboxes exact ``float``/``int``/``bool``
arguments and exact ``numpy.ndarray`` arguments straight from their object layout,
releases the GIL (as the function's policy says), calls the C-ABI entry point and boxes
the scalar result. Anything it does not recognise at once (a numpy scalar, a wrong dtype,
a non-contiguous array for an identity layout, keyword arguments, an error) is handed,
untouched, to the Python implementation (the object's "Python path"), which converts it
or raises the precise error.
So the native path only ever makes the common case fast; it never decides an error on its
own.

:meth:`NativeBatch.add_callback_trampoline` builds the other direction: a C function with
a callback's exact ABI that takes the GIL (unless the kernel call kept it), boxes the
arguments (memrefs as numpy arrays made with ``PyArray_NewFromDescr``, aliasing the
descriptor's memory), calls the Python function with vectorcall and unboxes an exact
result; any other result goes through a Python converter, and any exception is handed to
Python to be recorded for the kernel call.

A module with callbacks gives each kernel call a record (see :mod:`pymlirjit.callframe`):
the entry keeps it on its C stack and points a pthread key at it, and trampolines read it
there, all without Python code unless a callback fails.

Code is generated for this process (:meth:`NativeBatch.compile`, with the addresses of
Python objects as constants) or, for the on-disk cache, as relocatable object code
(``NativeBatch(relocatable=True)``, :meth:`NativeBatch.emit_object`) that reads those
addresses from named slots the loading process fills (:mod:`pymlirjit.relocation`,
:mod:`pymlirjit.sharedlib`).

The object layouts read here are CPython's ``PyObject`` header (``ob_type`` at offset
8) and numpy's ``PyArrayObject_fields`` (data, nd, dimensions, strides, base, descr,
flags): both are public, stable ABI on 64-bit CPython 3.10-3.13 and numpy 1.x/2.x.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import threading
from typing import Any

import numpy as np
from llvmlite import ir

from .abi import BoundaryABI
from .callframe import FAILED, HOLDS_GIL, JUMP_BUFFER, PREVIOUS, RECORD_FIELDS
from .relocation import (
    ARRAY_FROM_DESCR,
    FINISH_CALL,
    FOREIGN_RECORD,
    FRAME_KEY,
    SLOT_PREFIX,
    array_from_descr,
    callback_slot,
    dtype_slot,
    name_of,
)
from .types import MemRefType, ScalarType, TensorType
from .vectorcall import IN_FLIGHT_OFFSET, PYTHON_PATH_OFFSET

__all__ = ["NativeBatch"]

_NPY_C_CONTIGUOUS = 0x0001
_NPY_WRITEABLE = 0x0400

_i8, _i32, _i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_ptr = _i8.as_pointer()
_double = ir.DoubleType()

# The C API functions the generated code calls, with their LLVM types.
_C_API: dict[str, ir.FunctionType] = {
    "PyFloat_AsDouble": ir.FunctionType(_double, [_ptr]),
    "PyFloat_FromDouble": ir.FunctionType(_ptr, [_double]),
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
    "PyTuple_GetItem": ir.FunctionType(_ptr, [_ptr, _i64]),
    "Py_IncRef": ir.FunctionType(ir.VoidType(), [_ptr]),
    "Py_DecRef": ir.FunctionType(ir.VoidType(), [_ptr]),
    "PyGILState_Ensure": ir.FunctionType(_i32, []),
    "PyGILState_Release": ir.FunctionType(ir.VoidType(), [_i32]),
    "PyErr_Fetch": ir.FunctionType(ir.VoidType(), [_ptr.as_pointer()] * 3),
    "PyErr_NormalizeException": ir.FunctionType(ir.VoidType(), [_ptr.as_pointer()] * 3),
    "PyException_SetTraceback": ir.FunctionType(_i32, [_ptr, _ptr]),
    "PyErr_Clear": ir.FunctionType(ir.VoidType(), []),
}


_NPY_ALIGNED = 0x0100

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
}
_JMP_BUF_BYTES = 512  # glibc's jmp_buf is 200 bytes on x86-64; leave room


def _declare_libc(module: ir.Module) -> dict[str, ir.Function]:
    functions = {n: ir.Function(module, t, n) for n, t in _LIBC.items()}
    functions["_setjmp"].attributes.add("returns_twice")
    functions["longjmp"].attributes.add("noreturn")
    return functions


class _Jit:
    """One llvmlite MCJIT engine for every generated entry point of the process."""

    def __init__(self) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        for name in _C_API:
            address = ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
            llvm.add_symbol(name, address)
        libc = ctypes.CDLL(None)
        for name in _LIBC:
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        self.llvm = llvm
        target = llvm.Target.from_default_triple()
        self.target = target
        self.machine = target.create_target_machine(opt=2)  # for the triple
        self.lock = threading.Lock()
        self.counter = itertools.count()

    def _parse(self, module: ir.Module) -> Any:
        """``module`` as LLVM's own, verified. No IR optimization pipeline follows:
        code generation at -O2 makes these small functions as fast, and llvmlite's pass
        managers leak ~60 KB per module run."""
        module.triple = self.machine.triple
        parsed = self.llvm.parse_assembly(str(module))
        parsed.verify()
        return parsed

    def emit_object(self, module: ir.Module) -> bytes:
        """Position-independent object code of ``module``, for a shared library."""
        parsed = self._parse(module)
        machine = self.target.create_target_machine(opt=2, reloc="pic", codemodel="default")
        return bytes(machine.emit_object(parsed))

    def compile_all(self, module: ir.Module, names: list[str]) -> tuple[list[int], Any]:
        """The addresses of ``names`` in ``module``, and the owner of their code (its own
        engine, so that the code is freed when the owner is collected)."""
        parsed = self._parse(module)
        with self.lock:
            # An engine takes ownership of its target machine: each gets its own.
            machine = self.target.create_target_machine(opt=2)
            engine = self.llvm.create_mcjit_compiler(parsed, machine)
            engine.finalize_object()
            addresses = [int(engine.get_function_address(name)) for name in names]
            return addresses, engine


@functools.cache
def _jit() -> _Jit:
    return _Jit()


class _Unit:
    """One LLVM module being generated: its declarations, and how its code refers to
    Python objects and process addresses. Code for this process embeds them as
    constants (and keeps the objects alive as long as the code); ``relocatable`` code,
    for a shared library that any process may load, reads each from a named slot (a
    global) which the loading process fills (see :mod:`pymlirjit.relocation`)."""

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


class NativeBatch:
    """Entry points and trampolines generated together: one LLVM module, one code
    generation (which costs milliseconds whatever the module's size)."""

    def __init__(self, relocatable: bool = False) -> None:
        self.jit = _jit()
        self.unit = _Unit(f"pymlirjit_batch_{next(self.jit.counter)}", relocatable)
        self.symbols: list[str] = []

    @property
    def relocatable(self) -> bool:
        """Whether the code reads Python objects and addresses from slots (see
        :class:`_Unit`) and is emitted as an object file rather than run here."""
        return self.unit.relocatable

    @property
    def slot_names(self) -> list[str]:
        """Relocatable code: the name of the value each slot must hold, by index."""
        return list(self.unit.slots)

    def _symbol(self, kind: str, symbol: str | None = None) -> str:
        symbol = symbol or f"pymlirjit_{kind}_{next(self.jit.counter)}"
        self.symbols.append(symbol)
        return symbol

    def add_kernel_entry(self, abi: BoundaryABI, target: int | str,
                         calls: Any, release_gil: bool | None = True, unwind: bool = False,
                         symbol: str | None = None) -> int:
        """Add the native entry of the C-ABI function at ``target`` (an address, or
        the name of a function linked with the code); returns its index.

        ``calls`` is the call machinery (:func:`pymlirjit.callframe.call_machinery`)
        when the module links Python callbacks: each call then has a record, which its
        callbacks find and which says whether one failed; else ``None``. ``release_gil`` whether
        to release the GIL while the compiled code runs (``None``: only when other Python
        threads exist); ``unwind`` whether a failing
        callback may end the call at once with ``longjmp`` (only safe for code that
        starts no threads and holds no resources across calls). The entry is a
        vectorcall function (see :mod:`pymlirjit.vectorcall`). ``symbol`` names it
        (default: a name unique in the process).
        """
        _EntryBuilder(self.unit, self._symbol("entry", symbol), abi, target, calls,
                      release_gil, unwind).build()
        return len(self.symbols) - 1

    def add_callback_trampoline(self, signature: Any, abi: BoundaryABI, function: Any,
                                helpers: Any, symbol: str | None = None) -> int:
        """Add a C function with ``abi``'s boundary signature calling the Python
        ``function``; returns its index. ``helpers`` provides ``name`` (the callback's),
        ``frame_key`` (the pthread key of the current call record), ``foreign_record``
        (the record of threads without a call), ``record(error)`` and
        ``convert_result(value)``. Relocatable code names the slots of these after
        ``callback_slot(helpers.name, ...)``."""
        _TrampolineBuilder(self.unit, self._symbol("callback", symbol), signature, abi,
                           function, helpers).build()
        return len(self.symbols) - 1

    def add_ctypes_wrapper(self, abi: BoundaryABI, target: int, helpers: Any,
                           symbol: str | None = None) -> int:
        """Add a C function with ``abi``'s boundary signature that calls the ctypes entry
        of a callback at ``target`` (see ``pymlirjit.callbacks._build_ctypes_entry``) and
        fails the call as a trampoline does if the callback did not succeed; returns its
        index. ``helpers`` as for :meth:`add_callback_trampoline` (``frame_key``,
        ``foreign_record``, ``culprit`` are read). In-process code only: relocatable
        code forwards to the callback's address, which is this wrapper."""
        assert not self.relocatable, "ctypes entries exist only in this process"
        _CtypesWrapperBuilder(self.unit, self._symbol("wrapper", symbol), abi, target,
                              helpers).build()
        return len(self.symbols) - 1

    def add_guard(self, abi: BoundaryABI, target: int, calls: Any, unwind: bool,
                  symbol: str | None = None) -> int:
        """Add a guard of the C-ABI function at ``target``: a function with the same C
        ABI that opens a call record around each call (see :class:`_GuardBuilder`), for
        callers that are not native entries (ctypes, through a raw address, and the
        Python path); returns its index. ``calls`` is the call machinery; ``unwind``
        whether a failing callback may ``longjmp`` back to the guard. In-process code
        only."""
        assert not self.relocatable, "guards are generated in the process that runs them"
        _GuardBuilder(self.unit, self._symbol("guard", symbol), abi, target, calls,
                      unwind).build()
        return len(self.symbols) - 1

    def add_forwarder(self, symbol: str, abi: BoundaryABI, slot: str) -> int:
        """Relocatable code: a function ``symbol`` with ``abi``'s boundary signature
        that calls the function whose address the slot ``slot`` holds (a callback's
        ctypes entry, for types no trampoline serves); returns its index."""
        assert self.relocatable, "forwarders only serve relocatable code"
        _forward(self.unit, self._symbol("forwarder", symbol), abi, slot)
        return len(self.symbols) - 1

    def compile(self) -> tuple[list[int], object]:
        """Generate the code: the addresses (by index), and what must outlive every use
        of them (the code itself and the objects it points at)."""
        assert not self.relocatable, "relocatable code is emitted, not run here"
        if not self.symbols:
            return [], ()
        addresses, engine = self.jit.compile_all(self.unit.module, self.symbols)
        return addresses, (engine, self.unit.embedded)

    def emit_object(self) -> bytes:
        """Relocatable code: the object file defining every function added (by the
        names in ``symbols``), for a shared library."""
        assert self.relocatable, "only relocatable code is emitted"
        return self.jit.emit_object(self.unit.module)


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


def _llvm_type(t: ScalarType) -> ir.Type:
    if t.kind == "float":
        return ir.FloatType() if t.bits == 32 else _double
    if t.kind == "bool":
        return _i8  # i1 crosses the boundary as i8 (see abi)
    return ir.IntType(t.bits)


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

    def pointer(self, obj: object, slot: str | None = None) -> ir.Value:
        """A pointer to ``obj`` (see :meth:`object_id`)."""
        return self.builder.inttoptr(self.object_id(obj, slot), _ptr)

    def integer(self, value: int, slot: str) -> ir.Value:
        """``value``, a process-specific number, as an i64 (from ``slot`` in relocatable
        code)."""
        if not self.unit.relocatable:
            return ir.Constant(_i64, value)
        return self.builder.load(self.unit.slot(slot))

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

    def box_scalar(self, value: ir.Value, t: ScalarType, as_bool: bool) -> ir.Value:
        """A new reference to the Python float/int/bool holding ``value``."""
        b = self.builder
        if t.kind == "float":
            wide = b.fpext(value, _double) if t.bits == 32 else value
            return b.call(self.api["PyFloat_FromDouble"], [wide])
        if as_bool:
            return b.call(self.api["PyBool_FromLong"], [b.zext(value, _i64)])
        wide = b.sext(value, _i64) if t.bits < 64 else value
        return b.call(self.api["PyLong_FromLongLong"], [wide])


class _EntryBuilder(_FunctionBuilder):
    """Emits the LLVM IR of one entry point."""

    def __init__(self, unit: _Unit, name: str, abi: BoundaryABI, target: int | str,
                 calls: Any, release_gil: bool | None,
                 unwind: bool) -> None:
        super().__init__(unit, name, ir.FunctionType(_ptr, [_ptr, _ptr.as_pointer(), _i64,
                                                            _ptr]))
        self.abi = abi
        self.release_gil = release_gil
        self.unwind = unwind and calls is not None
        self.fallback = self.function.append_basic_block("fallback")
        self.target = target
        self.calls = calls
        self.in_flight: ir.Value = None  # -> the counter of calls in flight (count_in)

    def check(self, condition: ir.Value, label: str) -> None:
        """Continue if ``condition`` holds, else hand the call to the Python path."""
        ok = self.function.append_basic_block(label)
        self.builder.cbranch(condition, ok, self.fallback)
        self.builder.position_at_end(ok)

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

    def return_if_null(self, obj: ir.Value, label: str) -> None:
        """Return NULL (an exception is set) if a C API call returned NULL."""
        b = self.builder
        failed = self.function.append_basic_block(f"{label}_failed")
        ok = self.function.append_basic_block(label)
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(obj, _i64), ir.Constant(_i64, 0)),
                  failed, ok)
        b.position_at_end(failed)
        self.leave(obj)
        b.position_at_end(ok)

    def count_in(self, self_obj: ir.Value) -> None:
        """Count this call in flight (see pymlirjit.vectorcall): while any call is, the
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

    def field(self, obj: ir.Value, offset: int, field_type: ir.Type) -> ir.Value:
        b = self.builder
        address = b.gep(obj, [ir.Constant(_i64, offset)])
        return b.load(b.bitcast(address, field_type.as_pointer()))

    def type_is(self, obj: ir.Value, py_type: object, label: str) -> None:
        b = self.builder
        actual = self.field(obj, 8, _i64)
        self.check(b.icmp_unsigned("==", actual, self.object_id(py_type)), label)

    def scalar(self, obj: ir.Value, t: ScalarType, i: int) -> ir.Value:
        b = self.builder
        if t.kind == "float":
            self.type_is(obj, float, f"float{i}")
            value = b.call(self.api["PyFloat_AsDouble"], [obj])
            return b.fptrunc(value, ir.FloatType()) if t.bits == 32 else value
        if t.kind == "bool":
            is_true = b.icmp_unsigned("==", b.ptrtoint(obj, _i64), self.object_id(True))
            is_false = b.icmp_unsigned("==", b.ptrtoint(obj, _i64), self.object_id(False))
            self.check(b.or_(is_true, is_false), f"bool{i}")
            return b.zext(is_true, _i8)
        self.type_is(obj, int, f"int{i}")
        overflow = b.alloca(_i32)
        value = b.call(self.api["PyLong_AsLongLongAndOverflow"], [obj, overflow])
        self.check(b.icmp_signed("==", b.load(overflow), ir.Constant(_i32, 0)), f"fits{i}")
        if t.bits < 64:
            low = ir.Constant(_i64, -(1 << (t.bits - 1)))
            high = ir.Constant(_i64, (1 << t.bits) - 1)
            in_range = b.and_(b.icmp_signed(">=", value, low), b.icmp_signed("<=", value, high))
            self.check(in_range, f"range{i}")
            return b.trunc(value, ir.IntType(t.bits))
        return value

    def array(self, obj: ir.Value, t: MemRefType | TensorType, i: int) -> ir.Value:
        b = self.builder
        element = t.element
        itemsize = element.dtype.itemsize
        rank = t.rank
        self.type_is(obj, np.ndarray, f"ndarray{i}")
        descr = self.field(obj, 56, _i64)
        self.check(b.icmp_unsigned("==", descr,
                                   self.object_id(element.dtype, dtype_slot(element.mlir))),
                   f"dtype{i}")
        nd = self.field(obj, 24, _i32)
        self.check(b.icmp_signed("==", nd, ir.Constant(_i32, rank)), f"rank{i}")
        flags = self.field(obj, 64, _i32)
        required = 0
        contiguous = isinstance(t, TensorType) or t.strides is None
        if contiguous:
            required |= _NPY_C_CONTIGUOUS
        if isinstance(t, MemRefType):
            required |= _NPY_WRITEABLE
        if required:
            masked = b.and_(flags, ir.Constant(_i32, required))
            self.check(b.icmp_unsigned("==", masked, ir.Constant(_i32, required)),
                       f"flags{i}")
        data = self.field(obj, 16, _i64)
        dims = b.bitcast(self.field(obj, 32, _ptr), _i64.as_pointer())
        strides = b.bitcast(self.field(obj, 40, _ptr), _i64.as_pointer())
        static_offset = 0 if isinstance(t, TensorType) else (t.offset or 0)
        fields = [_ptr, _ptr, _i64] + ([ir.ArrayType(_i64, rank)] * 2 if rank else [])
        descriptor = b.alloca(ir.LiteralStructType(fields))
        aligned = b.inttoptr(b.sub(data, ir.Constant(_i64, static_offset * itemsize)), _ptr)
        zero = ir.Constant(_i32, 0)
        b.store(aligned, b.gep(descriptor, [zero, ir.Constant(_i32, 0)]))
        b.store(aligned, b.gep(descriptor, [zero, ir.Constant(_i32, 1)]))
        b.store(ir.Constant(_i64, static_offset), b.gep(descriptor, [zero, ir.Constant(_i32, 2)]))
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
            b.store(size, b.gep(descriptor, [zero, ir.Constant(_i32, 3), axis_index]))
            b.store(stride, b.gep(descriptor, [zero, ir.Constant(_i32, 4), axis_index]))
        return b.bitcast(descriptor, _ptr)

    def build(self) -> None:
        b = self.builder
        self_obj, args, nargsf, kwnames = self.function.args
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
        c_args: list[ir.Value] = []
        for i, t in enumerate(signature.param_types):
            obj = b.load(b.gep(args, [ir.Constant(_i64, i)]))
            if isinstance(t, ScalarType):
                c_args.append(self.scalar(obj, t, i))
            else:
                assert isinstance(t, (MemRefType, TensorType))
                c_args.append(self.array(obj, t, i))
        result_types = self.abi.boundary.results
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
        if jump_buffer is not None:
            # A failing callback longjmps back here (see _TrampolineBuilder): the call
            # ends at once, its result undefined, and close_record raises the error.
            result_slot = b.alloca(llvm_result) if result_types else None
            jumped = b.call(self.libc["_setjmp"], [jump_buffer])
            with b.if_then(b.icmp_signed("==", jumped, ir.Constant(_i32, 0))):
                returned = b.call(target, c_args)
                if result_slot is not None:
                    b.store(returned, result_slot)
            value = b.load(result_slot) if result_slot is not None else None
        else:
            value = b.call(target, c_args)
        if state is not None:
            with b.if_then(b.not_(self.is_null(state))):
                b.call(self.api["PyEval_RestoreThread"], [state])
        if record is not None:
            self.close_record(record)  # may run Python (a callback's error): still counted
        self.leave(self.box(value, result_types[0] if result_types else None))  # type: ignore[arg-type]
        b.position_at_end(self.fallback)
        self.leave(b.call(self.api[_POSITIONAL_CALL],
                          [self.python_path(self_obj), args,
                           ir.Constant(_i64, len(signature.params)), ir.Constant(_ptr, None)]))
        b.position_at_end(fallback)
        self.hand_to_python(self.python_path(self_obj), args, nargs, kwnames)

    def python_path(self, self_obj: ir.Value) -> ir.Value:
        """What the entry hands the calls it does not take (see pymlirjit.vectorcall)."""
        offset = ir.Constant(_i64, PYTHON_PATH_OFFSET)
        return self.builder.load(self.builder.bitcast(self.builder.gep(self_obj, [offset]),
                                                      _ptr.as_pointer()))

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

    def record_field(self, record: ir.Value, index: int) -> ir.Value:
        return self.builder.gep(record, [ir.Constant(_i32, 0), ir.Constant(_i32, index)])

    def open_record(self) -> tuple[ir.Value, ir.Value | None]:
        """Make this call's record (see pymlirjit.callframe) the thread's innermost one:
        it tells trampolines where to longjmp on failure (with ``unwind``) and whether
        this thread keeps the GIL. Returns it and the jmp_buf, if any."""
        b = self.builder
        key = b.trunc(self.integer(self.calls.frame_key, FRAME_KEY), _i32)
        record = b.alloca(ir.ArrayType(_i64, RECORD_FIELDS))
        jump_buffer = None
        address: ir.Value = ir.Constant(_i64, 0)
        if self.unwind:
            buffer = b.alloca(ir.ArrayType(_i8, _JMP_BUF_BYTES))
            buffer.align = 16
            jump_buffer = b.bitcast(buffer, _ptr)
            address = b.ptrtoint(jump_buffer, _i64)
        previous = b.call(self.libc["pthread_getspecific"], [key])
        for index, value in [(FAILED, ir.Constant(_i64, 0)), (JUMP_BUFFER, address),
                             (HOLDS_GIL, ir.Constant(_i64, int(self.release_gil is False))),
                             (PREVIOUS, b.ptrtoint(previous, _i64))]:
            b.store(value, self.record_field(record, index))
        b.call(self.libc["pthread_setspecific"], [key, b.bitcast(record, _ptr)])
        return record, jump_buffer

    def close_record(self, record: ir.Value) -> None:
        """Make the hidden record the innermost one again; if a callback of this call
        (or of a thread without a call) failed, let Python raise its exception."""
        b = self.builder
        key = b.trunc(self.integer(self.calls.frame_key, FRAME_KEY), _i32)
        previous = b.inttoptr(b.load(self.record_field(record, PREVIOUS)), _ptr)
        b.call(self.libc["pthread_setspecific"], [key, previous])
        foreign = b.inttoptr(self.integer(self.calls.foreign_record, FOREIGN_RECORD),
                             _i64.as_pointer())
        failed = b.or_(b.load(self.record_field(record, FAILED)), b.load(foreign))
        with b.if_then(b.icmp_unsigned("!=", failed, ir.Constant(_i64, 0)), likely=False):
            address = b.call(self.api["PyLong_FromLongLong"], [b.ptrtoint(record, _i64)])
            self.return_if_null(address, "boxed_record")
            done = self.call(self.pointer(self.calls.finish_call, FINISH_CALL), [address])
            b.call(self.api["Py_DecRef"], [address])
            self.return_if_null(done, "finished")  # a callback's exception, raised
            b.call(self.api["Py_DecRef"], [done])

    def box(self, value: ir.Value, t: ScalarType | None) -> ir.Value:
        if t is None:
            none = self.pointer(None)
            self.builder.call(self.api["Py_IncRef"], [none])
            return none
        result = self.abi.signature.results[0]
        return self.box_scalar(value, t, isinstance(result, ScalarType) and result.kind == "bool")


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
        params = [_llvm_type(t) if isinstance(t, ScalarType) else _ptr
                  for t in abi.boundary.param_types]
        results = abi.boundary.results
        self.result_type = _llvm_type(results[0]) if results else ir.VoidType()  # type: ignore[arg-type]
        super().__init__(unit, name, ir.FunctionType(self.result_type, params))
        self.signature = signature
        self.abi = abi
        self.helpers = helpers
        self.callee = function
        self.gil: ir.Value = None
        self.frame_record: ir.Value = None

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
        b.store(self.integer(self.helpers.culprit, self.slot_of("culprit")),
                self.record_at(FAILED))
        slots = [b.alloca(_ptr) for _ in range(3)]
        b.call(self.api["PyErr_Fetch"], slots)
        b.call(self.api["PyErr_NormalizeException"], slots)
        kind, value, traceback = (b.load(slot) for slot in slots)
        with b.if_then(b.not_(self.is_null(traceback))):
            b.call(self.api["PyException_SetTraceback"], [value, traceback])
        done = self.call(self.pointer(self.helpers.record, self.slot_of("record")), [value])
        for obj in (done, kind, value, traceback):
            b.call(self.api["Py_DecRef"], [obj])
        b.call(self.api["PyErr_Clear"], [])
        self.release_gil()
        _unwind(b, self.libc, self.frame_record)
        self.return_zero()

    def return_zero(self) -> None:
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
        return self.box_scalar(value, t, t.kind == "bool")

    def box_memref(self, descriptor: ir.Value, t: MemRefType) -> ir.Value:
        b = self.builder
        rank = t.rank
        dtype = t.element.dtype
        itemsize = dtype.itemsize
        fields = [_ptr, _ptr, _i64] + ([ir.ArrayType(_i64, rank)] * 2 if rank else [])
        typed = b.bitcast(descriptor, ir.LiteralStructType(fields).as_pointer())
        zero = ir.Constant(_i32, 0)
        aligned = b.ptrtoint(b.load(b.gep(typed, [zero, ir.Constant(_i32, 1)])), _i64)
        offset = b.load(b.gep(typed, [zero, ir.Constant(_i32, 2)]))
        data = b.add(aligned, b.mul(offset, ir.Constant(_i64, itemsize)))
        sizes: ir.Value = ir.Constant(_i64.as_pointer(), None)
        byte_strides: ir.Value = ir.Constant(_i64.as_pointer(), None)
        if rank:
            sizes = b.gep(typed, [zero, ir.Constant(_i32, 3), zero])
            byte_strides = b.alloca(_i64, rank)
            for axis in range(rank):
                stride = b.load(b.gep(typed, [zero, ir.Constant(_i32, 4),
                                              ir.Constant(_i32, axis)]))
                b.store(b.mul(stride, ir.Constant(_i64, itemsize)),
                        b.gep(byte_strides, [ir.Constant(_i64, axis)]))
        descr = self.pointer(dtype, dtype_slot(t.element.mlir))
        b.call(self.api["Py_IncRef"], [descr])  # PyArray_NewFromDescr steals it
        new_type = ir.FunctionType(_ptr, [_ptr, _ptr, _i32, _i64.as_pointer(),
                                          _i64.as_pointer(), _ptr, _i32, _ptr])
        new = b.inttoptr(self.integer(array_from_descr(), ARRAY_FROM_DESCR),
                         new_type.as_pointer())
        return b.call(new, [self.pointer(np.ndarray), descr, ir.Constant(_i32, rank), sizes,
                            byte_strides, b.inttoptr(data, _ptr),
                            ir.Constant(_i32, _NPY_WRITEABLE | _NPY_ALIGNED),
                            ir.Constant(_ptr, None)])

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
        return b.load(b.bitcast(b.gep(obj, [ir.Constant(_i64, 8)]), _i64.as_pointer()))

    def unbox_exact(self, obj: ir.Value, t: Any) -> ir.Value | None:
        b = self.builder
        if t is None:
            return None
        if t.kind == "float":
            value = b.call(self.api["PyFloat_AsDouble"], [obj])
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
        # No PyErr_CheckSignals here: the callback's own bytecode checks for signals, and
        # a pending Ctrl-C raises KeyboardInterrupt inside it (cheaper than checking).
        boxed = [self.box(value, t)
                 for t, value in zip(self.signature.param_types, self.function.args)]
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
        self.leave(self.unbox_result(result))



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


def _unwind(b: ir.IRBuilder, libc: dict[str, ir.Function], record: ir.Value) -> None:
    """``longjmp`` to the jump buffer of ``record`` (an i64 pointer to a call record) if
    it has one (see :mod:`pymlirjit.callframe`); else go on."""
    jump_buffer = b.load(b.gep(record, [ir.Constant(_i64, JUMP_BUFFER)]))
    with b.if_then(b.icmp_unsigned("!=", jump_buffer, ir.Constant(_i64, 0))):
        b.call(libc["longjmp"], [b.inttoptr(jump_buffer, _ptr), ir.Constant(_i32, 1)])
        b.unreachable()


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

    def return_zero(self) -> None:
        b = self.builder
        _zero_results(b, self.abi, self.function.args)
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
            self.return_zero()
        status = b.alloca(_i64)
        b.store(ir.Constant(_i64, 1), status)
        function_type = self.function.function_type
        target_type = ir.FunctionType(function_type.return_type,
                                      [_ptr, *function_type.args])
        target = b.inttoptr(ir.Constant(_i64, self.target), target_type.as_pointer())
        returned = b.call(target, [b.bitcast(status, _ptr), *self.function.args])
        with b.if_then(b.icmp_signed("!=", b.load(status), ir.Constant(_i64, 0)),
                       likely=False):
            with b.if_then(b.icmp_signed("==", b.load(failed), ir.Constant(_i64, 0))):
                b.store(ir.Constant(_i64, self.helpers.culprit), failed)
            _unwind(b, self.libc, record)
            self.return_zero()
        if isinstance(function_type.return_type, ir.VoidType):
            b.ret_void()
        else:
            b.ret(returned)


class _GuardBuilder(_FunctionBuilder):
    """Emits a guard: a function with the exact C ABI of a compiled function (its
    ``_mlir_ciface_`` entry) that gives each call a record of its own, as a native
    entry does, whoever calls it (ctypes, with or without the GIL; C code; another
    thread). Its record says the GIL is not held (trampolines then take it, which is
    right either way); with ``unwind``, a failing callback longjmps back to the guard.
    On failure the guard hands the error to the enclosing call's record (or the
    foreign one), which raises it when it ends, and returns zeros."""

    def __init__(self, unit: _Unit, name: str, abi: BoundaryABI, target: int, calls: Any,
                 unwind: bool) -> None:
        super().__init__(unit, name, _boundary_function_type(abi))
        self.abi = abi
        self.target = target
        self.calls = calls
        self.unwind = unwind

    def field(self, record: ir.Value, index: int) -> ir.Value:
        return self.builder.gep(record, [ir.Constant(_i64, index)])

    def build(self) -> None:
        b = self.builder
        function_type = self.function.function_type
        key = b.trunc(self.integer(self.calls.frame_key, FRAME_KEY), _i32)
        previous = b.call(self.libc["pthread_getspecific"], [key])
        record = b.bitcast(b.alloca(ir.ArrayType(_i64, RECORD_FIELDS)), _i64.as_pointer())
        jump_buffer = None
        address: ir.Value = ir.Constant(_i64, 0)
        if self.unwind:
            buffer = b.alloca(ir.ArrayType(_i8, _JMP_BUF_BYTES))
            buffer.align = 16
            jump_buffer = b.bitcast(buffer, _ptr)
            address = b.ptrtoint(jump_buffer, _i64)
        for index, value in [(FAILED, ir.Constant(_i64, 0)), (JUMP_BUFFER, address),
                             (HOLDS_GIL, ir.Constant(_i64, 0)),
                             (PREVIOUS, b.ptrtoint(previous, _i64))]:
            b.store(value, self.field(record, index))
        b.call(self.libc["pthread_setspecific"], [key, b.bitcast(record, _ptr)])
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
        failed = b.load(self.field(record, FAILED))
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
        enclosing_failed = self.field(enclosing, FAILED)
        with b.if_then(b.icmp_signed("==", b.load(enclosing_failed), ir.Constant(_i64, 0))):
            b.store(failed, enclosing_failed)
        state = b.call(self.api["PyGILState_Ensure"], [])
        boxed = [b.call(self.api["PyLong_FromLongLong"], [b.ptrtoint(r, _i64)])
                 for r in (record, enclosing)]
        both = b.and_(b.not_(self.is_null(boxed[0])), b.not_(self.is_null(boxed[1])))
        with b.if_then(both):
            done = self.call(self.pointer(self.calls.hand_over), boxed)
            b.call(self.api["Py_DecRef"], [done])
        for obj in boxed:
            b.call(self.api["Py_DecRef"], [obj])
        b.call(self.api["PyErr_Clear"], [])
        b.call(self.api["PyGILState_Release"], [state])
        _zero_results(b, self.abi, self.function.args)
