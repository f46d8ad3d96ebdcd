"""ctypes function pointers with the C ABI of a compiled function (``kernel.ctypes``).

A compiled function's C-ABI entry (``kernel.address``) takes its values as
:func:`pymlirjit.boundary.abi.boundary_abi` says: scalars by value (``!llvm.ptr`` as ``void *``),
memrefs as pointers to descriptors, and several results through a pointer passed first.
:func:`function_pointer` wraps an address in a ctypes function pointer of that prototype,
which scipy's ``LowLevelCallable`` and numba's ``@njit`` code accept, and keeps the
machine code alive as long as the pointer object lives.

An ``!llvm.ptr`` parameter is ``void *`` unless the stub annotates it with a ctypes
pointer type (``ctypes.POINTER(ctypes.c_double)``): scipy checks a callable's C
signature by its ctypes types (``double (int, double *, void *)``).

>>> import ctypes
>>> from pymlirjit.boundary.signature import as_signature
>>> proto = prototype(as_signature("(i32, !llvm.ptr) -> f64"),
...                   {1: ctypes.POINTER(ctypes.c_double)})
>>> proto._restype_.__name__, [t.__name__ for t in proto._argtypes_]
('c_double', ['c_int', 'LP_c_double'])
"""

from __future__ import annotations

import ctypes
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import SignatureError
from .abi import boundary_abi
from .signature import Signature, annotations_of, argument_label
from .types import ptr

__all__ = ["function_pointer", "pointer_annotations", "prototype"]

_C_POINTERS = (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p)


def pointer_annotations(signature: Signature, hints: Mapping[str, Any],
                        names: list[str], what: str) -> dict[int, Any]:
    """The ctypes pointer types annotating ``!llvm.ptr`` parameters (position -> type),
    from ``hints`` (a stub's annotations) with parameter ``names``; SignatureError if
    one annotates a parameter that is no pointer."""
    found: dict[int, Any] = {}
    for i, (name, t) in enumerate(zip(names, signature.param_types)):
        annotation = hints.get(name)
        if not (isinstance(annotation, type) and issubclass(annotation, _C_POINTERS)):
            continue
        if t != ptr:
            raise SignatureError(f"{what}: {argument_label(i, name)} is annotated "
                                 f"{annotation.__name__}, a pointer, but is {t.mlir} in MLIR")
        found[i] = annotation
    return found


def prototype(signature: Signature, pointers: Mapping[int, Any] | None = None) -> Any:
    """The ctypes function type (``CFUNCTYPE``) of the C-ABI entry of a function of
    ``signature``; ``pointers`` gives the ctypes types of ``!llvm.ptr`` parameters by
    position (default ``c_void_p``)."""
    abi = boundary_abi(signature)
    params = list(abi.c_params)
    if pointers:
        # Positions in the MLIR signature; the boundary ABI may expand a parameter
        # (complex: two), so map positions through the boundary forms.
        position = 0
        for i, t in enumerate(signature.param_types):
            if i in pointers:
                params[position] = pointers[i]
            position += len(getattr(t, "boundary", (t,)))
    leading = [ctypes.c_void_p] if abi.results_via_pointer else []
    return ctypes.CFUNCTYPE(abi.c_result, *leading, *params)


def function_pointer(address: int, signature: Signature, keepalive: object,
                     stub: Callable[..., Any] | None = None, what: str = "function") -> Any:
    """A ctypes function pointer to ``address`` with the prototype of ``signature`` (see
    :func:`prototype`; ``stub``'s ctypes pointer annotations type its ``!llvm.ptr``
    parameters). It references ``keepalive`` (what owns the machine code) so that the
    code lives while the pointer does."""
    if not address:
        raise ValueError("a function pointer cannot point at address 0")
    pointers = None
    if stub is not None:
        try:
            hints = annotations_of(stub)
        except Exception as exc:
            raise SignatureError(f"{what}: cannot evaluate the stub's annotations: {exc}"
                                 ) from exc
        pointers = pointer_annotations(signature, hints,
                                       list(inspect.signature(stub).parameters), what)
    function = prototype(signature, pointers)(address)
    function._pymlirjit_keepalive = keepalive
    return function
