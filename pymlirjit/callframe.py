"""Call records: how a failing callback's exception reaches the call into compiled code.

The ground floor of the package (it imports nothing from pymlirjit): the record each call
into compiled code has, the per-thread pointer to the innermost one, and the Python side
of error capture (``enter_call``/``exit_call`` for calls made from Python,
``finish_call`` for native entries, :class:`CallMachinery` for the code generators).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

__all__ = [
    "FAILED",
    "HOLDS_GIL",
    "JUMP_BUFFER",
    "PREVIOUS",
    "CallFrame",
    "CallMachinery",
    "CallRecord",
    "call_frame",
    "call_machinery",
    "enter_call",
    "exit_call",
    "finish_call",
    "native_frame_slot",
]

# -- error capture across compiled frames ------------------------------------------------
#
# Each call into compiled code has a record (a C struct): native kernel entries keep it
# on their C stack, the Python path in a ctypes struct. A per-thread pthread key points
# at the record of the innermost call running on the thread, and each record points at
# the one it hides, restored when the call ends. A failing callback stores its exception
# under its call's record address and sets the record's `failed` flag; later callbacks
# of the call see the flag and return at once; the call, when it ends, raises the
# exception. Callbacks on threads the compiled code started itself find no record on
# their thread: theirs is a process-wide one, `_foreign`, whose error any call ending
# next raises.

# The record's fields, by index (each one 64 bits), as the IR builders address them.
FAILED = 0
JUMP_BUFFER = 1
HOLDS_GIL = 2
PREVIOUS = 3
RECORD_FIELDS = 4


class CallRecord(ctypes.Structure):
    """The record of one call into compiled code, as native code reads it: whether a
    callback of the call failed, the ``jmp_buf`` of a native kernel entry that can unwind
    the call, whether the calling thread keeps the GIL during the call, and the record of
    the call it is nested in."""

    _fields_ = [("failed", ctypes.c_int64), ("jump_buffer", ctypes.c_void_p),
                ("holds_gil", ctypes.c_int64), ("previous", ctypes.c_void_p)]


class CallFrame:
    """A call into compiled code made from Python (not through a native entry): its
    record, and its address."""

    __slots__ = ("address", "record")

    def __init__(self, jump_buffer: int = 0, holds_gil: bool = False) -> None:
        self.record = CallRecord(0, jump_buffer, int(holds_gil), None)
        self.address = ctypes.addressof(self.record)


_foreign = CallFrame()
_errors: dict[int, BaseException] = {}  # record address -> the first error of that call
_error_lock = threading.Lock()


class _NativeFrameSlot:
    """The pthread key holding, per thread, the address of the innermost call's record,
    so that native code finds it without the GIL."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        self.key = ctypes.c_uint(0)
        if libc.pthread_key_create(ctypes.byref(self.key), None) != 0:
            raise OSError("pthread_key_create failed")
        self._set = libc.pthread_setspecific
        self._set.argtypes = [ctypes.c_uint, ctypes.c_void_p]
        self._set.restype = ctypes.c_int
        self._get = libc.pthread_getspecific
        self._get.argtypes = [ctypes.c_uint]
        self._get.restype = ctypes.c_void_p

    def get(self) -> int:
        """The address of this thread's innermost record (0 if none)."""
        return self._get(self.key) or 0

    def set(self, address: int) -> None:
        self._set(self.key, address or None)


@functools.cache
def native_frame_slot() -> _NativeFrameSlot:
    """The pthread key native trampolines read (created on first use)."""
    return _NativeFrameSlot()


def enter_call(jump_buffer: int = 0, holds_gil: bool = False) -> CallFrame:
    """Open a frame for a call into compiled code on this thread. ``jump_buffer`` is the
    address of a ``jmp_buf`` that a failing callback may ``longjmp`` to; ``holds_gil``
    says that this thread keeps the GIL for the whole call (callbacks on this thread
    then skip taking it)."""
    frame = CallFrame(jump_buffer, holds_gil)
    slot = native_frame_slot()
    frame.record.previous = slot.get() or None
    slot.set(frame.address)
    return frame


def exit_call(frame: CallFrame) -> None:
    """Close ``frame``; re-raise the exception a callback raised during the call, if any."""
    native_frame_slot().set(frame.record.previous or 0)
    if frame.record.failed or _foreign.record.failed:
        finish_call(frame.address)


def finish_call(address: int) -> None:
    """Raise the exception of the call whose record is at ``address`` (which has ended),
    else one a callback raised on a thread without a call, if any."""
    with _error_lock:
        error = _errors.pop(address, None)
        if error is None and _foreign.record.failed:
            error = _errors.pop(_foreign.address, None)
            _foreign.record.failed = 0
    if error is not None:
        raise error


class CallMachinery(NamedTuple):
    """What a native kernel entry needs to open and close a call's record:
    ``frame_key`` (the pthread key), ``foreign_record`` (the address of the record of
    threads without a call) and ``finish_call`` (raises the call's error)."""

    frame_key: int
    foreign_record: int
    finish_call: Callable[[int], None]


@functools.cache
def call_machinery() -> CallMachinery:
    """What the native kernel entries of modules with callbacks use."""
    return CallMachinery(native_frame_slot().key.value, _foreign.address, finish_call)


@contextmanager
def call_frame() -> Iterator[CallFrame]:
    """``with call_frame():`` around a call into compiled code re-raises callback errors."""
    frame = enter_call()
    try:
        yield frame
    except BaseException:
        native_frame_slot().set(frame.record.previous or 0)
        with _error_lock:
            _errors.pop(frame.address, None)  # the exception raised instead wins
        raise
    exit_call(frame)


def _current_record() -> int:
    """The address of the record of the call this thread runs (or the foreign one)."""
    return native_frame_slot().get() or _foreign.address


def _failed(address: int) -> bool:
    return bool(ctypes.c_int64.from_address(address).value)


def _record(address: int, error: BaseException, name: str) -> None:
    """Keep the first error of the call whose record is at ``address``, noting which
    callback raised it."""
    with _error_lock:
        if address in _errors:
            return
        _add_note(error, f"raised in callback {name!r} called from compiled MLIR code")
        _errors[address] = error
        ctypes.c_int64.from_address(address).value = 1


def _add_note(error: BaseException, note: str) -> None:
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10
        error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
