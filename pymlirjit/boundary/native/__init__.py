"""Native entry points generated with llvmlite: crossing the boundary without ctypes.

:meth:`NativeBatch.add_kernel_entry` builds, for one compiled function, the *vectorcall*
function of the object that stands for it (see :mod:`pymlirjit.boundary.vectorcall`: CPython calls
it directly, as it calls a builtin function). It unboxes exact ``float``/``int``/``bool``
arguments, numpy scalars of the exactly convertible types (``np.float64``/``np.float32``,
``np.int8``..``np.uint64``, ``np.bool_``) and exact ``numpy.ndarray`` arguments straight
from their object layout, releases the GIL (as the function's policy says), calls the
C-ABI entry point and boxes the results (several as a tuple): scalars, and memref or
tensor results as numpy arrays; an array the compiled code allocated owns that memory
(a capsule whose destructor frees it: ``results._ResultsBuilder.owned_array``),
any other result memory is read by the Python path's reader. Anything it does not
recognise at once (another numpy scalar, a wrong dtype,
a non-contiguous array for an identity layout, keyword arguments, an error) is handed,
untouched, to the Python implementation (the object's "Python path"), which converts it
or raises the precise error.
So the native path only ever makes the common case fast; it never decides an error on its
own.

:meth:`NativeBatch.add_callback_trampoline` builds the other direction: a C function with
a callback's exact ABI that takes the GIL (unless the kernel call kept it), boxes the
arguments (complex pairs and f16/bf16 bits as Python numbers; ranked and unranked
memrefs as numpy arrays made with ``PyArray_NewFromDescr``, aliasing the descriptor's
memory), calls the Python function with vectorcall and unboxes an exact result (f16/bf16
rounded to their bits as numpy rounds; a C-contiguous array copied to fresh ``malloc``
memory for a memref result); any other result goes through a Python converter, and any
exception is handed to Python to be recorded for the kernel call.

A module with callbacks gives each kernel call a record (see :mod:`pymlirjit.boundary.callframe`):
the entry keeps it on its C stack and points a pthread key at it, and trampolines read it
there, all without Python code unless a callback fails.

Code is generated for this process (:meth:`NativeBatch.compile`, with the addresses of
Python objects as constants) or, for the on-disk cache, as relocatable object code
(``NativeBatch(relocatable=True)``, :meth:`NativeBatch.emit_object`) that reads those
addresses from named slots the loading process fills (:mod:`pymlirjit.boundary.relocation`,
:mod:`pymlirjit.runtime.sharedlib`).

The object layouts read here are CPython's ``PyObject`` header (``ob_type``) and numpy's
``PyArrayObject_fields`` (data, nd, dimensions, strides, descr, flags): both are public,
stable ABI on 64-bit CPython 3.10-3.13 and numpy 1.x/2.x. Their offsets are named once
(:mod:`pymlirjit.boundary.native.builder`) and compared with the running interpreter's objects
before any code is generated: a mismatch raises instead of generating wrong code.

The modules: :mod:`~pymlirjit.boundary.native.batch` (the llvmlite JIT and :class:`NativeBatch`),
:mod:`~pymlirjit.boundary.native.builder` (what every generated function shares),
:mod:`~pymlirjit.boundary.native.unwindarea` (a call's jump buffer and allocation list),
:mod:`~pymlirjit.boundary.native.entry` (Python -> C ABI: kernel entries),
:mod:`~pymlirjit.boundary.native.results` (the results entries box),
:mod:`~pymlirjit.boundary.native.guard` (guards: a call record for calls through raw addresses),
:mod:`~pymlirjit.boundary.native.trampoline` (C ABI -> Python: trampolines, forwarders) with
:mod:`~pymlirjit.boundary.native.halffloat` (f16/bf16 without libcalls), and
:mod:`~pymlirjit.boundary.native.wrapper` (the native wrappers of callbacks' ctypes entries).
"""

from .batch import NativeBatch

__all__ = ["NativeBatch"]
