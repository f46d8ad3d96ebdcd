"""Call records: how a failing callback's exception reaches the call into compiled code.

The ground of the boundary (it imports only :mod:`~pymlirjit.boundary.ffi`): the record each call
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

from . import ffi

__all__ = [
    "ERROR_KEPT",
    "FAILED",
    "HOLDS_GIL",
    "JUMP_BUFFER",
    "PREVIOUS",
    "SPARSE_CALLBACK_PREFIX",
    "CallFrame",
    "CallMachinery",
    "CallRecord",
    "call_failed",
    "call_frame",
    "call_machinery",
    "culprit_token",
    "enter_call",
    "exit_call",
    "finish_call",
    "hand_over",
    "lost_error",
    "native_frame_slot",
    "record_current",
    "task_slot",
]

#: The symbol serving a callback given sparse tensors (``__pymlirjit_sparsecb_<name>``,
#: see :mod:`pymlirjit.boundary.sparseshims`): its errors are noted with ``<name>``.
SPARSE_CALLBACK_PREFIX = "__pymlirjit_sparsecb_"

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
#
# The flag is what decides that a call fails, not the stored exception: native code
# sets it (to the failing callback's *culprit* token, see culprit_token) before Python
# is asked to keep the exception, because keeping it may fail in turn (a RecursionError
# at the recursion limit, a broken `__notes__`). A call whose flag is set and that has
# no exception raises a RuntimeError naming the callback instead: never a result.

#: The status word of a callback's ctypes entry (see ``pymlirjit.boundary.callback``)
#: when the callback failed and its error went to the call's record, flag included.
ERROR_KEPT = 2

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
        self.key = ctypes.c_uint(0)
        if ffi.pthread_key_create(ctypes.byref(self.key), None) != 0:
            raise OSError("pthread_key_create failed")
        self._set = ffi.pthread_setspecific
        self._get = ffi.pthread_getspecific

    def get(self) -> int:
        """The address of this thread's innermost record (0 if none)."""
        return self._get(self.key) or 0

    def set(self, address: int) -> None:
        self._set(self.key, address or None)


@functools.cache
def native_frame_slot() -> _NativeFrameSlot:
    """The pthread key native trampolines read (created on first use)."""
    return _NativeFrameSlot()


@functools.cache
def task_slot() -> _NativeFrameSlot:
    """The pthread key that says, per thread, whether the thread runs a task of a
    parallel loop (non-NULL): compiled code then runs a nested parallel loop on that
    thread instead of waiting for a thread pool it occupies (see
    :mod:`pymlirjit.codegen.scheduling`)."""
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
    else one a callback raised on a thread without a call, if any; if the call failed
    but its exception could not be kept, a RuntimeError naming the callback."""
    failed = ctypes.c_int64.from_address(address).value
    with _error_lock:
        error = _errors.pop(address, None)
        if _foreign.record.failed:
            # Also when this call failed itself: a parallel loop fails on the calling
            # thread and on the runtime's threads alike, and the second failure of a
            # call is ignored rather than left for the next call to raise.
            foreign = _errors.pop(_foreign.address, None)
            if error is None and not failed:
                failed, error = _foreign.record.failed, foreign
            _foreign.record.failed = 0
    if error is None and failed:
        error = lost_error(failed)
    if error is not None:
        raise error


def lost_error(failed: int) -> RuntimeError:
    """What a call raises when a callback failed (``failed``: its record's flag) but its
    exception could not be kept."""
    name = _culprits.get(failed)
    who = f"callback {name!r}" if name is not None else "a callback"
    return RuntimeError(f"{who} failed during a call into compiled MLIR code and its "
                        f"exception could not be kept (keeping it raised in turn, e.g. "
                        f"at the recursion limit)")


_culprits: dict[int, str] = {}  # culprit token -> callback name
_tokens: dict[str, int] = {}


def culprit_token(name: str) -> int:
    """The number native code stores in a record's ``failed`` flag when the callback
    ``name`` fails (never 0, nor 1, which Python code stores): :func:`finish_call` can
    then name the callback even if its exception could not be kept."""
    with _error_lock:
        token = _tokens.get(name)
        if token is None:
            token = _tokens[name] = len(_tokens) + 2
            _culprits[token] = name
        return token


def hand_over(inner: int, outer: int) -> None:
    """Move the error of the call whose record is at ``inner`` (which has ended) to the
    call at ``outer``, unless that one has an error already (the first one wins). A
    guard calls this when a call through a raw address failed (see
    ``pymlirjit.boundary.native.entry._GuardBuilder``): the enclosing call raises the error."""
    with _error_lock:
        error = _errors.pop(inner, None)
        if error is not None and outer not in _errors:
            _errors[outer] = error


class CallMachinery(NamedTuple):
    """What a native kernel entry needs to open and close a call's record:
    ``frame_key`` (the pthread key), ``foreign_record`` (the address of the record of
    threads without a call), ``finish_call`` (raises the call's error) and, for guards,
    ``hand_over`` (moves an ended call's error to the enclosing call)."""

    frame_key: int
    foreign_record: int
    finish_call: Callable[[int], None]
    hand_over: Callable[[int, int], None] = hand_over


@functools.cache
def call_machinery() -> CallMachinery:
    """What the native kernel entries of modules with callbacks use."""
    return CallMachinery(native_frame_slot().key.value, _foreign.address, finish_call,
                         hand_over)


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


def _record(address: int, error: BaseException, name: str) -> None:
    """Keep the first error of the call whose record is at ``address``, noting which
    callback raised it, and set the record's flag (with the error, under the lock that
    :func:`finish_call` reads both under). Never raises: what cannot be done is left
    undone (native code sets the flag of its thread's own call first, and the foreign
    one's if Python could not be asked to keep the error: the call still fails)."""
    try:
        flag = ctypes.c_int64.from_address(address)
        with _error_lock:  # the flag with the error: finish_call reads both under it
            if not flag.value:
                flag.value = 1
            if address in _errors:
                return
            _errors[address] = error
        name = name.removeprefix(SPARSE_CALLBACK_PREFIX)  # the user's, given views
        if not name.startswith("__pymlirjit_"):  # pymlirjit's own (checks) say where
            _add_note(error, f"raised in callback {name!r} called from compiled MLIR code")
    except BaseException:  # see the docstring
        pass


def call_failed() -> bool:
    """Whether the call running on this thread (or the foreign one) has failed: a
    callback about to run then returns at once (another thread's callback may have
    failed the call while this one waited for the GIL)."""
    return bool(ctypes.c_int64.from_address(_current_record()).value)


def record_current(name: str, error: BaseException) -> None:
    """:func:`_record` for the call running on this thread (or the foreign one)."""
    # Not contextlib.suppress: at the recursion limit its Python __enter__ fails too.
    try:  # noqa: SIM105
        _record(native_frame_slot().get() or _foreign.address, error, name)
    except BaseException:  # at the recursion limit, even calling may fail
        pass


def _add_note(error: BaseException, note: str) -> None:
    try:
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list) and note in notes:  # the same object raised again
            return
        if hasattr(error, "add_note"):
            error.add_note(note)
        else:  # Python 3.10
            error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
    except Exception:  # a note is a courtesy: the error is kept without it
        pass
