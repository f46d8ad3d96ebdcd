"""Native externs: private MLIR declarations linked to native code, no Python between.

``extern(name, target, signature=None)`` links ``func.func private @name`` to ``target``:
an int address, a ctypes function pointer, anything with an ``.address`` (a numba
``cfunc``), or a compiled function or kernel of pymlirjit (its signature is known). Pass
it, or a kernel itself (linked by its MLIR name), in ``mlir_kernel(callbacks=[...])`` or
``Session.compile(callbacks=[...])``. The compiled code calls the target directly, with
the C ABI of the declaration (``_mlir_ciface_<name>``: scalars by value, memrefs as
pointers to descriptors, see :mod:`pymlirjit.boundary.abi`).

When a module is compiled, each extern is *resolved* into a :class:`LinkedExtern` (a
kernel target compiles first): an immutable value (name, address, signature) that is
part of the session's cache key, and holds what owns the target's machine code. The
module's engine keeps it, so a target's code lives as long as any code that calls it.

>>> import ctypes
>>> libm = ctypes.CDLL("libm.so.6")
>>> cos = extern("cos", libm.cos, "(f64) -> f64")
>>> cos.signature
Signature('(f64) -> f64')
"""

from __future__ import annotations

import ctypes
import pickle
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

from ..boundary.callback import Callback, Invalidated
from ..boundary.signature import Signature, as_signature
from ..boundary.types import f32, f64, i1, i8, i16, i32, i64, ptr
from ..boundary.vectorcall import NativeCallable
from ..errors import LinkError, SignatureError
from .engine import ADDRESS_KINDS, address_of
from .firstcall import first_call_running

__all__ = ["Dependents", "Extern", "Linkable", "LinkedExtern", "compile_targets", "compiling",
           "extern", "linkable", "listed_callbacks"]

#: ctypes scalar types by the MLIR type they pass as (signless: c_uint32 is an i32).
_FROM_CTYPES: dict[Any, Any] = {
    ctypes.c_double: f64, ctypes.c_float: f32, ctypes.c_bool: i1,
    ctypes.c_int8: i8, ctypes.c_uint8: i8, ctypes.c_int16: i16, ctypes.c_uint16: i16,
    ctypes.c_int32: i32, ctypes.c_uint32: i32, ctypes.c_int64: i64, ctypes.c_uint64: i64,
    ctypes.c_void_p: ptr, ctypes.c_char_p: ptr,
}


@dataclass(frozen=True)
class LinkedExtern:
    """An extern resolved for one compile: compared by ``name``, ``address``,
    ``signature``, ``calls_python`` (whether the target is a kernel that calls Python
    callbacks: the caller then opens a call record for their errors) and
    ``runs_threads`` (whether the target's code runs threads: a parallel kernel's, or
    one linking such a kernel; if it calls Python too, its caller must release the
    GIL, see :func:`pymlirjit.runtime.gilpolicy.call_policy`). ``keepalive``
    owns the target's code; while this value is referenced (by a session's cache key
    or an engine), the address cannot be reused by other code."""

    name: str
    address: int
    signature: Signature
    calls_python: bool = False
    keepalive: object = field(default=None, compare=False, repr=False)
    what: str = field(default="", compare=False, repr=False)
    runs_threads: bool = False

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        raise pickle.PicklingError(f"extern @{self.name} ({self.what}) is linked by a "
                                   f"process-specific address and cannot be pickled")


class Extern:
    """A declaration ``@name`` linked to native code (see :func:`extern`). ``target``
    is what was given; ``signature`` the declared one (a kernel target's is read when
    it compiles)."""

    def __init__(self, name: str, target: Any, signature: Signature | str | None = None
                 ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"extern: name must be a non-empty string, got {name!r}")
        self.name = name
        self.target = target
        self._signature: Signature | None = None
        if signature is not None:
            self._signature = as_signature(signature)
        if _is_function(target):
            return  # a kernel: compiled (and its signature known) when linked
        self._address = address_of(target, f"extern @{name}: target",
                                   f"{ADDRESS_KINDS} (a numba cfunc) or a kernel")
        if self._signature is None:
            self._signature = _ctypes_signature(name, target)

    @property
    def signature(self) -> Signature:
        """The signature the declaration must have (compiles a kernel target)."""
        if self._signature is not None:
            return self._signature
        return self.resolve().signature

    def resolve(self) -> LinkedExtern:
        """The target's address now (a kernel target compiles, or is fetched from its
        session's cache), with what keeps its code alive."""
        target = self.target
        if not _is_function(target):
            return LinkedExtern(self.name, self._address, self.signature, False, target,
                                _describe(target))
        with compiling(self.name, target):
            function = target.compile() if hasattr(target, "compile") else target
        signature = function.signature
        if self._signature is not None:
            self._signature.check_matches(signature, f"extern @{self.name}",
                                          "its signature", f"kernel @{function.name}",
                                          annotated=False)
        return LinkedExtern(self.name, function.address, signature,
                            bool(getattr(function, "_links_callbacks", False)),
                            (function, function.module), f"kernel @{function.name}",
                            bool(getattr(function.module, "runs_threads", False)))

    def __repr__(self) -> str:
        return f"<extern @{self.name} -> {_describe(self.target)}>"

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # A kernel target pickles (by reference or by value); an address would mean
        # other code in another process.
        if not _is_function(self.target):
            raise pickle.PicklingError(f"extern @{self.name} links {_describe(self.target)}, "
                                       f"an address of this process: it cannot be pickled")
        return Extern, (self.name, self.target, self._signature)


#: What ``callbacks=[...]`` accepts: callbacks, externs, kernels and compiled functions.
Linkable = Callback | Extern | NativeCallable


def extern(name: str, target: Any, signature: Signature | str | None = None) -> Extern:
    """Link the private declaration ``@name`` to native code, with no Python between.

    ``target``: an int address, a ctypes function pointer (its ``argtypes`` and
    ``restype`` give the signature when ``signature`` is omitted), an object with an
    ``.address`` (a numba ``cfunc``, whose ``.ctypes`` gives the signature), or a
    pymlirjit kernel or compiled function (its own signature). ``signature``: an MLIR
    function type (``"(f64) -> f64"``), checked against the declaration when a module
    links it. Pass the result in ``callbacks=[...]``.
    """
    return Extern(name, target, signature)


def listed_callbacks(callbacks: Iterable[Linkable]) -> tuple[Linkable, ...]:
    """``callbacks=`` as a tuple; TypeError for one item not put in a list (a string
    or a callback given bare would be iterated, or fail as 'not iterable')."""
    if type(callbacks) is tuple:  # a list already (an unpickled kernel's): no ABC check
        return callbacks
    if (isinstance(callbacks, (Callback, Extern, str)) or _is_function(callbacks)
            or not isinstance(callbacks, Iterable)):
        raise TypeError(f"callbacks must be a list (of @callback functions, "
                        f"pymlirjit.extern(...) or kernels), got {callbacks!r}; put it in "
                        f"a list: callbacks=[...]")
    return tuple(callbacks)


def linkable(item: Linkable) -> Callback | LinkedExtern:
    """What ``callbacks=[...]`` holds, ready to link: a callback as is, an extern (or a
    kernel, linked by its MLIR name) resolved to its address now."""
    if isinstance(item, Callback):
        return item
    if isinstance(item, Extern):
        return item.resolve()
    if _is_function(item):
        return Extern(item.name, item).resolve()  # type: ignore[attr-defined]
    raise TypeError(f"callbacks must be @callback functions, pymlirjit.extern(...) or "
                    f"kernels, got {item!r}")


class Dependents:
    """The subscribers of a kernel's invalidation (the kernels linking it), weakly."""

    def __init__(self) -> None:
        self._subscribers: weakref.WeakSet[Invalidated] = weakref.WeakSet()

    def add(self, subscriber: Invalidated) -> None:
        self._subscribers.add(subscriber)

    def invalidate(self) -> None:
        for subscriber in list(self._subscribers):
            subscriber.invalidate()


def compile_targets(kernel: Any, linked: Iterable[Any]) -> None:
    """Before ``kernel`` compiles: subscribe it to the kernels it links (given in
    ``linked`` as such or as an extern's target), so that it relinks when they let go
    of their code, and compile them (outside ``kernel``'s session lock, so that two
    sessions' locks are never taken in both orders). LinkError for a cycle."""
    for item in linked:
        target = item.target if isinstance(item, Extern) else item
        if not (_is_function(target) and hasattr(target, "watch")):
            continue
        if target is kernel:
            raise LinkError(f"@mlir_kernel {kernel.name!r} links itself through callbacks=; "
                            f"call @{kernel.name} within its module instead", [kernel.name])
        target.watch(kernel)  # before compiling: no invalidation is missed
        with compiling(target.name, target):
            target.compile()


def _is_function(target: Any) -> bool:
    """A pymlirjit kernel or compiled function (``name``, ``signature``, ``address``)."""
    return isinstance(target, NativeCallable) and isinstance(getattr(target, "name", None),
                                                             str)


_in_progress = threading.local()


@contextmanager
def compiling(name: str, target: Any) -> Iterator[None]:
    """Mark ``target`` (linked as ``@name``) as compiling on this thread while the
    block runs; refuse a cycle (a kernel linking itself, or A -> B -> A): it would
    compile forever."""
    stack: list[Any] = _in_progress.__dict__.setdefault("stack", [])
    # The kernel whose compile started the chain is in no stack: it runs its first call.
    if any(t is target for t in stack) or first_call_running(target):
        raise LinkError(f"extern @{name}: kernel @{target.name} links to itself through "
                        f"callbacks= (a cycle); call it within one module instead", [name])
    stack.append(target)
    try:
        yield
    finally:
        stack.pop()


def _ctypes_signature(name: str, target: Any) -> Signature:
    """The signature of a ctypes prototype (the target's, or its ``.ctypes``')."""
    function = target if isinstance(target, ctypes._CFuncPtr) else getattr(  # type: ignore[attr-defined]
        target, "ctypes", None)
    argtypes = getattr(function, "argtypes", None)
    if function is None or argtypes is None:
        raise TypeError(f"extern @{name}: give signature= (an MLIR function type such as "
                        f"'(f64) -> f64'): {_describe(target)} does not say its C types")
    restype = function.restype
    try:
        params = [_from_ctype(t) for t in argtypes]
        results = [] if restype is None else [_from_ctype(restype)]
    except KeyError as exc:
        raise SignatureError(f"extern @{name}: ctypes type {exc.args[0].__name__} has no "
                             f"MLIR counterpart; give signature=") from None
    return Signature.of(params, results)


def _from_ctype(t: Any) -> Any:
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return ptr
    return _FROM_CTYPES[t]


def _describe(target: Any) -> str:
    if isinstance(target, int):
        return f"address {target:#x}"
    return getattr(target, "__name__", None) or type(target).__name__
