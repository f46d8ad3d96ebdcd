"""Python objects whose calls go straight to a native entry point (CPython's vectorcall).

Calling an instance of a Python class runs its ``__call__`` through CPython's generic
slot: a method lookup and an argument tuple, ~25 ns, more than a native kernel entry
takes for the whole call. Instances of a :class:`NativeCallable` subclass are made of a
companion type (:func:`fast_type`) that extends the class's layout with three fields and
declares the first as its *vectorcall* function: once :func:`set_entry` stores a native
entry there, CPython calls it directly, as it calls a builtin function. Until then, and
after :func:`clear_entry`, the pointer is NULL and calls go to ``__call__`` as usual.

The second field is the object the entry hands any call it does not take itself (see
:mod:`pymlirjit.boundary.native`): a borrowed reference, which the instance must keep alive. The
third points at a counter of the calls running through the entry (an int64 the entry
increments first thing and decrements right before it returns, whether it served the
call or handed it over; not atomic: both happen with the GIL held). Whoever replaces or
clears an entry must keep its machine code, and the counter, alive while that counter is
not 0 (see :meth:`pymlirjit.Kernel.invalidate`).

The companion type is built with ``PyType_FromSpecWithBases`` and the
``__vectorcalloffset__`` member, both in CPython's stable API since 3.9.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, SupportsIndex

from . import ffi

__all__ = ["ENTRY_OFFSET", "IN_FLIGHT_OFFSET", "PYTHON_PATH_OFFSET", "EntryCaller",
           "NativeCallable", "clear_entry", "fast_type", "has_entry", "set_entry"]

_T_PYSSIZET = 19  # PyMemberDef types and flags (structmember.h)
_READONLY = 1
_PY_TP_MEMBERS = 72  # the PyType_Slot id of tp_members (typeslots.h)
_HAVE_VERSION_TAG = 1 << 18  # Py_TPFLAGS_DEFAULT
_HAVE_VECTORCALL = 1 << 11


class _MemberDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int),
                ("offset", ctypes.c_ssize_t), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


class _Slot(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _Spec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("basicsize", ctypes.c_int),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_uint),
                ("slots", ctypes.POINTER(_Slot))]



class NativeCallable:
    """A base for classes whose instances may be called through a native entry.

    Constructing one makes an instance of the class's companion type
    (:func:`fast_type`), which behaves as the class in every other way. Subclasses must
    not declare ``__slots__``: every companion type puts its pointers at the same
    offsets.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(fast_type(cls))

    def __getstate__(self) -> dict[str, Any]:
        # object's own refuses instances larger than their class declares (the companion
        # type's fields); those are no state: a copy runs __call__ until given an entry.
        return self.__dict__

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        # The default reduction names the companion type, which pickle cannot find by its
        # name (that name is the public class's): name the public class instead, whose
        # __new__ makes the companion again. Subclasses may pickle otherwise.
        cls: Any = type(self)
        if "_spec_memory" in cls.__dict__:
            cls = cls.__base__
        return _new_instance, (cls,), self.__getstate__()


def _new_instance(cls: type) -> Any:
    """An instance of ``cls``'s companion type, its state to be set (by unpickling)."""
    return object.__new__(fast_type(cls))


ENTRY_OFFSET = NativeCallable.__basicsize__  # the vectorcall function pointer
PYTHON_PATH_OFFSET = ENTRY_OFFSET + 8  # what the entry hands the calls it does not take
IN_FLIGHT_OFFSET = ENTRY_OFFSET + 16  # -> how many calls run through the entry (int64)
_SIZE = ENTRY_OFFSET + 24

_types: dict[type, type] = {}
_lock = threading.Lock()


def fast_type(cls: type) -> type:
    """The companion type of ``cls`` (a :class:`NativeCallable` subclass), made once."""
    if cls.__flags__ & _HAVE_VECTORCALL and cls.__basicsize__ == _SIZE:
        return cls  # a companion type already
    with _lock:
        made = _types.get(cls)
        if made is None:
            if cls.__basicsize__ != ENTRY_OFFSET:
                raise TypeError(f"{cls.__qualname__} changes the instance layout (__slots__?): "
                                f"it cannot be a NativeCallable")
            members = (_MemberDef * 2)(
                _MemberDef(b"__vectorcalloffset__", _T_PYSSIZET, ENTRY_OFFSET, _READONLY, None),
                _MemberDef())
            slots = (_Slot * 2)(_Slot(_PY_TP_MEMBERS, ctypes.cast(members, ctypes.c_void_p)),
                                _Slot(0, None))
            name = f"{cls.__module__}.{cls.__qualname__}".encode()
            spec = _Spec(name, _SIZE, 0, _HAVE_VERSION_TAG | _HAVE_VECTORCALL, slots)
            made = ffi.type_from_spec_with_bases(ctypes.byref(spec), (cls,))
            made.__doc__ = cls.__doc__
            # The type keeps pointers into the spec's name and members.
            made._spec_memory = (name, members, slots, spec)
            _types[cls] = made
        return made


def set_entry(obj: NativeCallable, entry: int, python_path: object,
              in_flight: ctypes.c_int64) -> None:
    """Call ``obj`` through the native entry at ``entry`` from now on, which hands the
    calls it does not take to ``python_path`` and counts the calls running in
    ``in_flight`` (both kept alive by the caller, as long as the entry is set)."""
    pointers = _pointers(obj)
    # The entry last, and any previous one cleared first: an entry never runs with
    # another's Python path or counter (Python may switch threads between these stores).
    pointers[0] = 0
    pointers[1] = id(python_path)
    pointers[2] = ctypes.addressof(in_flight)
    pointers[0] = entry


class _HandBack:
    """What an :class:`EntryCaller`'s entry hands calls to: ``owner``'s method
    ``method``; any other attribute the entry asks for (such as ``read_results``) is
    ``owner``'s. ``owner`` is held weakly."""

    __slots__ = ("_method", "_owner")

    def __init__(self, owner: Any, method: str) -> None:
        self._owner = weakref.ref(owner)
        self._method = method

    def __call__(self, *args: Any) -> Any:
        return getattr(self._owner(), self._method)(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner(), name)


class EntryCaller(NativeCallable):
    """Another way into the native ``entry`` of ``owner``'s function: the calls the entry
    does not take go to ``owner``'s method ``hand_back``, and count in ``owner``'s
    ``in_flight``. ``owner`` (the one calling) is held weakly: it holds this object."""

    def __init__(self, entry: int, owner: Any, hand_back: str) -> None:
        self._handed = _HandBack(owner, hand_back)  # the entry's borrowed reference
        set_entry(self, entry, self._handed, owner.in_flight)

    def __call__(self, *args: Any) -> Any:  # what the entry does not take
        return self._handed(*args)


def has_entry(obj: NativeCallable) -> bool:
    """Whether calls of ``obj`` go to a native entry."""
    return bool(_pointers(obj)[0])


def clear_entry(obj: NativeCallable) -> None:
    """Call ``obj`` through its ``__call__`` again."""
    pointers = _pointers(obj)
    pointers[0] = 0
    pointers[1] = 0
    pointers[2] = 0


def _pointers(obj: NativeCallable) -> Any:
    if type(obj).__basicsize__ != _SIZE:
        raise TypeError(f"{type(obj).__qualname__} instances have no native entry")
    return (ctypes.c_uint64 * 3).from_address(id(obj) + ENTRY_OFFSET)
