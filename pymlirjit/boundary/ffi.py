"""Every C function the package calls through ctypes, each prototype declared once.

Four sources: libc (through the process's own symbols), pthread, the CPython C API
(``ctypes.pythonapi``) and MLIR's C API in ``libMLIRPythonCAPI.so``. The MLIR library is
opened on first use only: importing this module loads neither MLIR nor LLVM.

Which prototypes keep the GIL matters: a function declared with ``PYFUNCTYPE`` (or
loaded through ``PyDLL``) runs with it held, one loaded through ``CDLL`` without it.

This module imports nothing else of pymlirjit, so that every floor may use it.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

__all__ = [
    "MlirStringRef",
    "capsule_pointer",
    "dlclose",
    "execution_engine_lookup",
    "fflush",
    "free",
    "llvm_parse_command_line_options",
    "malloc",
    "mlir_capi_path",
    "pass_manager_run_on_op",
    "pthread_getspecific",
    "pthread_key_create",
    "pthread_setspecific",
    "python_api_address",
    "type_from_spec_with_bases",
    "ufunc_from_loops",
    "ufunc_keep_alive",
]

# -- libc and pthread (the process's own symbols) ----------------------------------------

# A CDLL instance of our own: prototypes set on a shared one (``ctypes.CDLL(None)``
# elsewhere) would change what other code calls.
_process = ctypes.CDLL(None)


def _declare(library: Any, name: str, restype: Any, *argtypes: Any) -> Any:
    function = getattr(library, name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


#: ``void *malloc(size_t)``
malloc = _declare(_process, "malloc", ctypes.c_void_p, ctypes.c_size_t)
#: ``void free(void *)``
free = _declare(_process, "free", None, ctypes.c_void_p)
#: ``int fflush(FILE *)``: ``fflush(None)`` flushes every C output stream.
fflush = _declare(_process, "fflush", ctypes.c_int, ctypes.c_void_p)
#: ``int pthread_key_create(pthread_key_t *, void (*destructor)(void *))``
pthread_key_create = _declare(_process, "pthread_key_create", ctypes.c_int,
                              ctypes.POINTER(ctypes.c_uint), ctypes.c_void_p)
#: ``int pthread_setspecific(pthread_key_t, const void *)``
pthread_setspecific = _declare(_process, "pthread_setspecific", ctypes.c_int,
                               ctypes.c_uint, ctypes.c_void_p)
#: ``void *pthread_getspecific(pthread_key_t)``
pthread_getspecific = _declare(_process, "pthread_getspecific", ctypes.c_void_p,
                               ctypes.c_uint)


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


#: ``int dladdr(const void *, Dl_info *)``
_dladdr = _declare(_process, "dladdr", ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_DlInfo))


def object_base(address: int) -> int:
    """The load address of the library (or executable) whose code holds ``address``
    (0 if none does)."""
    info = _DlInfo()
    return int(info.fbase or 0) if _dladdr(address, ctypes.byref(info)) else 0


def process_exports(name: str) -> bool:
    """Whether a library the process has loaded exports the symbol ``name``."""
    return hasattr(_process, name)


def dlclose(handle: int) -> None:
    """Unload the library ``handle`` (a ``CDLL._handle``); ``OSError`` if dlclose fails."""
    import _ctypes

    _ctypes.dlclose(handle)


# -- the CPython C API ---------------------------------------------------------------------

# Prototypes of their own rather than ``ctypes.pythonapi.X``: that object is shared
# with every other user of ctypes in the process.

#: ``PyObject *PyType_FromSpecWithBases(PyType_Spec *, PyObject *bases)``: the spec is
#: passed by ``ctypes.byref``; a NULL result raises the Python error set.
type_from_spec_with_bases = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p,
                                              ctypes.py_object)(
    ("PyType_FromSpecWithBases", ctypes.pythonapi))
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def python_api_address(name: str) -> int:
    """The address of the CPython C API function ``name`` (for compiled code to call)."""
    return int(ctypes.cast(ctypes.pythonapi[name], ctypes.c_void_p).value or 0)


def capsule_pointer(capsule: object, name: bytes | None = None) -> int:
    """The pointer a ``PyCapsule`` holds, asked for under ``name`` (by default the
    capsule's own name); ``ValueError`` if ``capsule`` is not one or has another name."""
    return int(_capsule_get_pointer(capsule, name or _capsule_name(capsule)) or 0)


# -- MLIR's C API, from the library the Python bindings load -------------------------------

class MlirStringRef(ctypes.Structure):
    """MLIR's ``MlirStringRef`` (a pointer and a length; no terminating zero needed)."""

    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]


def mlir_capi_path() -> str:
    """The path of ``libMLIRPythonCAPI.so`` (importing the MLIR bindings' package)."""
    import mlir._mlir_libs as libs

    return os.path.join(os.path.dirname(libs.__file__), "libMLIRPythonCAPI.so")


@functools.cache
def _mlir_capi_keeping_gil() -> ctypes.PyDLL:
    return ctypes.PyDLL(mlir_capi_path())


@functools.cache
def _mlir_capi_releasing_gil() -> ctypes.CDLL:
    return ctypes.CDLL(mlir_capi_path())


@functools.cache
def _pass_manager_run_on_op() -> Any:
    # The GIL stays held (as the bindings do): their diagnostic handlers call Python
    # without taking it.
    return _declare(_mlir_capi_keeping_gil(), "mlirPassManagerRunOnOp",
                    ctypes.c_int8, ctypes.c_void_p, ctypes.c_void_p)


def pass_manager_run_on_op(pass_manager: int, operation: int) -> bool:
    """``mlirPassManagerRunOnOp`` on C API pointers; whether it reported success."""
    return bool(_pass_manager_run_on_op()(pass_manager, operation) == 1)


@functools.cache
def _execution_engine_lookup() -> Any:
    return _declare(_mlir_capi_releasing_gil(), "mlirExecutionEngineLookup",
                    ctypes.c_void_p, ctypes.c_void_p, MlirStringRef)


def execution_engine_lookup(engine: int, name: str) -> int:
    """``mlirExecutionEngineLookup``: the address of ``name`` in the engine (a C API
    pointer), 0 if it has none. The GIL is released meanwhile (the lookup may compile)."""
    data = name.encode()
    return int(_execution_engine_lookup()(engine, MlirStringRef(data, len(data))) or 0)


@functools.cache
def llvm_parse_command_line_options() -> Any:
    """``void LLVMParseCommandLineOptions(int argc, const char *const *argv, const char *)``
    of the LLVM that MLIR's C API links (found through it). It ignores an unknown option,
    reports a bad value on stderr only and ends the process on ``-help``:
    :mod:`pymlirjit.lowering.llvmoptions` checks options in a child process before calling it."""
    return _declare(_mlir_capi_keeping_gil(), "LLVMParseCommandLineOptions", None,
                    ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p)


# -- numpy's ufunc C API (the table its _UFUNC_API capsule points to) ----------------------

#: Index of ``PyUFunc_FromFuncAndDataAndSignatureAndIdentity`` in numpy's ufunc API table
#: (``__ufunc_api.h``, the same from numpy 1.16 to 2.x).
_UFUNC_FROM_LOOPS = 42


@functools.cache
def _ufunc_from_loops() -> Any:
    import importlib

    try:
        umath = importlib.import_module("numpy._core._multiarray_umath")  # numpy 2
    except ImportError:
        umath = importlib.import_module("numpy.core._multiarray_umath")  # numpy 1.x
    table = ctypes.cast(capsule_pointer(umath._UFUNC_API), ctypes.POINTER(ctypes.c_void_p))
    # The GIL stays held: numpy builds Python objects. A NULL result raises numpy's error.
    prototype = ctypes.PYFUNCTYPE(
        ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
        ctypes.c_int, ctypes.c_char_p, ctypes.py_object)
    return prototype(table[_UFUNC_FROM_LOOPS])


def ufunc_from_loops(functions: int, data: int, types: int, ntypes: int, nin: int, nout: int,
                     identity: int, name: bytes, doc: bytes, signature: bytes | None,
                     identity_value: object) -> Any:
    """``PyUFunc_FromFuncAndDataAndSignatureAndIdentity``: a new ``numpy.ufunc`` over
    ``ntypes`` loops (``functions``, ``data``: arrays of pointers; ``types``: ``ntypes *
    (nin + nout)`` type numbers, one byte each). numpy keeps the arrays, ``name`` and
    ``doc`` without copying them: the caller keeps them alive as long as the ufunc."""
    return _ufunc_from_loops()(functions, data, types, ntypes, nin, nout, identity, name, doc,
                               0, signature, identity_value)


_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))


def ufunc_keep_alive(ufunc: Any, functions: int, data: int, types: int, keep: object) -> bool:
    """Make ``ufunc`` own a reference to ``keep`` through its ``obj`` field (numpy's
    ``ufunc_dealloc`` drops it), as ``np.frompyfunc`` keeps its function. The layout of
    ``PyUFuncObject`` is checked first, by the fields just set from ``functions``, ``data``
    and ``types``: False (nothing written) if they are not where numpy 1.x and 2.x have
    them, or if ``obj`` is already used."""
    base = id(ufunc) + object.__basicsize__
    counts = (ctypes.c_int * 2).from_address(base)  # nin, nout
    loops = (ctypes.c_void_p * 2).from_address(base + 16)  # functions, data
    tail = (ctypes.c_void_p * 5).from_address(base + 40)  # name, types, doc, ptr, obj
    if (tuple(counts) != (ufunc.nin, ufunc.nout) or tuple(loops) != (functions, data)
            or tail[1] != types or tail[4] is not None):
        return False
    _incref(keep)
    tail[4] = id(keep)
    return True
