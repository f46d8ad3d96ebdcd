"""Names for the process-specific values that native entry points refer to.

The entry points and trampolines of :mod:`pymlirjit.boundary.native` compare objects against
Python's and numpy's types and singletons, call Python functions and read a few
addresses (numpy's ``PyArray_NewFromDescr``, a pthread key). Generated for this
process, they embed those addresses as constants. Generated for a shared library that
other processes load (the on-disk cache), they read each one from a *slot*, a global
the loading process fills: both sides name the value the same way. This module names
the values any process can find by itself (:func:`well_known`); values that belong to
one callback or to the call machinery are named by their users.

No llvmlite here: a process loading a cached module resolves slots without it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from .types import SCALARS

__all__ = [
    "ARRAY_FROM_DESCR",
    "FINISH_CALL",
    "FOREIGN_RECORD",
    "FRAME_KEY",
    "HAND_OVER",
    "SLOT_PREFIX",
    "array_from_descr",
    "callback_slot",
    "dtype_slot",
    "name_of",
    "well_known",
]

SLOT_PREFIX = "pymlirjit_slot_"  # slots are globals named by index: pymlirjit_slot_0, ...

ARRAY_FROM_DESCR = "numpy.PyArray_NewFromDescr"  # the address array_from_descr() gives
# The call machinery of pymlirjit.boundary.callframe, the same for every module: finish_call (an
# object), the pthread key of the current call record and the address of the record of
# threads without a call (numbers); and hand_over (an object), which guards call.
FINISH_CALL = "call:finish"
HAND_OVER = "call:hand_over"
FRAME_KEY = "call:frame_key"
FOREIGN_RECORD = "call:foreign_record"


def callback_slot(callback_name: str, what: str) -> str:
    """The slot name of a callback's ``what``: ``function`` (the Python function),
    ``record`` and ``convert_result`` (its trampoline helpers), ``culprit`` (the number
    its trampoline stores in a failing call's record) or ``entry`` (the address of its
    C-ABI entry point, which a forwarder calls)."""
    return f"callback:{callback_name}:{what}"

_NPY_WRITEABLE = 0x0400

# Python and numpy objects the generated code compares against, by the name a slot
# gives them. Types and the bool and None singletons are immortal in practice.
_OBJECTS: dict[str, object] = {
    "float": float, "int": int, "complex": complex, "True": True, "False": False,
    "None": None, "numpy.complex128": np.complex128, "numpy.complex64": np.complex64,
    "numpy.ndarray": np.ndarray, "numpy.True_": np.True_, "numpy.False_": np.False_,
    "numpy.float64": np.float64, "numpy.float32": np.float32, "numpy.float16": np.float16,
    "numpy.int8": np.int8, "numpy.int16": np.int16, "numpy.int32": np.int32,
    "numpy.int64": np.int64, "numpy.uint8": np.uint8, "numpy.uint16": np.uint16,
    "numpy.uint32": np.uint32, "numpy.uint64": np.uint64,
}


def dtype_slot(mlir_type: str) -> str:
    """The slot name of the numpy dtype of the scalar type spelled ``mlir_type``."""
    return f"dtype:{mlir_type}"


def well_known(name: str) -> object:
    """The object named ``name`` in this process; ``KeyError`` if the name is not one
    of the well-known ones."""
    if name in _OBJECTS:
        return _OBJECTS[name]
    if name.startswith("dtype:"):
        for t in SCALARS:
            if dtype_slot(t.mlir) == name:
                return t.dtype
    raise KeyError(name)


@functools.cache
def _names_by_id() -> dict[int, str]:
    return {id(obj): name for name, obj in _OBJECTS.items()}


def name_of(obj: object) -> str:
    """The well-known name of ``obj`` (``KeyError`` if it has none)."""
    return _names_by_id()[id(obj)]


@functools.cache
def array_from_descr() -> int:
    """The address of numpy's ``PyArray_NewFromDescr`` (slot 94 of its C API table),
    checked once by building an array through it."""
    core = getattr(np, "_core", None) or np.core  # numpy 2.x / 1.x
    capsule = core._multiarray_umath._ARRAY_API
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    table = ctypes.cast(get_pointer(capsule, None), ctypes.POINTER(ctypes.c_void_p))
    address = int(table[94])
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                            ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)(address)
    probe = np.arange(6.0)
    dtype = probe.dtype
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(dtype))  # the function steals it
    made: Any = new(id(np.ndarray), dtype, 2, (ctypes.c_int64 * 2)(2, 3),
                    (ctypes.c_int64 * 2)(24, 8), probe.ctypes.data, _NPY_WRITEABLE, None)
    if made.shape != (2, 3) or made.ctypes.data != probe.ctypes.data:
        raise RuntimeError("numpy's C API table does not have PyArray_NewFromDescr at 94")
    return address
