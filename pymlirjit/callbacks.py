"""``@callback``: a type-annotated Python function that compiled MLIR code can call.

A :class:`Callback` holds the Python function, its signature and (built on first use)
a native entry point with the C ABI of its MLIR declaration. The entry point turns C
values into Python values (memrefs into zero-copy numpy views), calls the function,
checks and converts what it returns, and captures any exception: the exception is
re-raised from the kernel call that led to it, and every later callback of that call
returns at once without running Python.

>>> from pymlirjit import f32, i32
>>> @callback(registry=CallbackRegistry())
... def scale(x: f32, k: i32) -> f32:
...     return x / 2 + k / 2
>>> scale.signature
Signature('(f32, i32) -> f32')
>>> scale(42.0, 2)      # still an ordinary Python function
22.0
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, Protocol, TypeVar, overload

from .abi import BoundaryABI, boundary_abi, native_callback_supported
from .errors import SignatureError
from .memref import (
    UnrankedDescriptor,
    array_from_descriptor,
    array_from_unranked,
    descriptor_type,
    fill_descriptor_with_copy,
)
from .signature import Signature, as_signature
from .types import (
    MemRefType,
    ScalarType,
    TensorType,
    Type,
    UnrankedMemRefType,
    bits_to_half,
    half_to_bits,
    to_python_scalar,
)

__all__ = [
    "Callback",
    "CallbackRegistry",
    "CallMachinery",
    "Invalidated",
    "call_frame",
    "call_machinery",
    "callback",
    "default_registry",
    "enter_call",
    "exit_call",
    "prepare_entries",
    "TrampolineHelpers",
]

F = TypeVar("F", bound=Callable[..., Any])


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


# -- the Callback object -----------------------------------------------------------------

class Callback:
    """A Python function callable from compiled MLIR code as ``@name``.

    Attributes: ``name`` (the MLIR symbol), ``signature``, ``__wrapped__`` (the
    function) and, once built, ``address`` (its native C-ABI entry point). Calling the
    object calls the Python function.
    """

    def __init__(self, function: Callable[..., Any], signature: Signature | str | None = None,
                 name: str | None = None) -> None:
        if not callable(function):
            raise TypeError(f"@callback needs a function, got {type(function).__name__}")
        self.__wrapped__ = function
        functools.update_wrapper(self, function)
        self.name = name or function.__name__
        self.signature = as_signature(signature, function)
        for i, t in enumerate((*self.signature.param_types, *self.signature.results)):
            if isinstance(t, TensorType):
                raise SignatureError(f"callback {self.name!r}: {t.mlir} (position {i}) is a "
                                     f"tensor; callbacks take and return memrefs")
        self._entry: _Entry | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<callback @{self.name} {self.signature.mlir}>"

    @property
    def abi(self) -> BoundaryABI:
        """How its values cross the C ABI (after the MLIR shim, where one is needed)."""
        return boundary_abi(self.signature)

    @property
    def address(self) -> int:
        """The address of the native entry point compiled code calls (built on first
        use): a trampoline generated with llvmlite where the types allow one, else a
        ctypes callback."""
        if self._entry is None:
            prepare_entries([self])
        assert self._entry is not None
        return self._entry.address

    @property
    def native_entry(self) -> int:
        """Same as :attr:`address` (what ``ExecutionEngine.register_runtime`` takes)."""
        return self.address


# -- building the native entry point -----------------------------------------------------

def _param_converter(t: Type) -> tuple[int, Callable[..., Any]]:
    """(number of C arguments, function turning them into the Python value)."""
    if isinstance(t, ScalarType):
        if t.kind == "complex":
            return 2, complex
        if t.kind == "bool":
            return 1, bool
        if t.mlir in ("f16", "bf16"):
            return 1, functools.partial(bits_to_half, t)
        return 1, _identity
    if isinstance(t, MemRefType):
        struct = descriptor_type(t.rank)
        rank, element = t.rank, t.element
        return 1, lambda address: array_from_descriptor(struct.from_address(address), rank,
                                                        element)
    if isinstance(t, UnrankedMemRefType):
        element = t.element
        return 1, lambda address: array_from_unranked(UnrankedDescriptor.from_address(address),
                                                      element)
    raise SignatureError(f"{t.mlir} cannot be passed to a callback")


def _identity(value: Any) -> Any:
    return value


def _store_result(struct: Any, field: str, t: Type, value: Any, what: str) -> None:
    if isinstance(t, MemRefType):
        fill_descriptor_with_copy(getattr(struct, field), value, t, what)
        return
    if not isinstance(t, ScalarType):
        raise SignatureError(f"{what}: {t.mlir} cannot be returned by a callback")
    number = to_python_scalar(t, value, what)
    if t.kind == "complex":
        setattr(struct, field, t.ctype(number.real, number.imag))
    elif t.mlir in ("f16", "bf16"):
        setattr(struct, field, half_to_bits(t, number) & 0xFFFF)
    else:
        setattr(struct, field, number)


class _Entry:
    """A built entry point: its address and what must stay alive while it is used."""

    def __init__(self, address: int, keepalive: object) -> None:
        self.address = address
        self.keepalive = keepalive


class TrampolineHelpers:
    """The Python side of a native trampoline: what it calls in the rare cases
    (``record``, ``convert_result``) and the call machinery it reads (``frame_key``,
    ``foreign_record``)."""

    def __init__(self, cb: Callback) -> None:
        self.name = cb.name
        self.frame_key, self.foreign_record, _ = call_machinery()
        results = cb.signature.results
        self.result_type = results[0] if results else None

    def record(self, error: BaseException) -> None:
        _record(_current_record(), error, self.name)

    def convert_result(self, value: Any) -> Any:
        t = self.result_type
        if t is None:
            raise TypeError(f"callback {self.name!r} is declared to return nothing, "
                            f"but returned {type(value).__name__}")
        assert isinstance(t, ScalarType)
        return to_python_scalar(t, value, f"callback {self.name!r}: result #0")


def prepare_entries(callbacks: Iterable[Callback]) -> None:
    """Build the entry points of ``callbacks`` that have none yet, generating all native
    trampolines together (code generation has a fixed cost per batch)."""
    pending = [cb for cb in callbacks if cb._entry is None]
    native = [cb for cb in pending if native_callback_supported(cb.signature)]
    if native:
        from .native import NativeBatch  # llvmlite loads only when needed

        batch = NativeBatch()
        indices = [batch.add_callback_trampoline(cb.signature, cb.abi, cb.__wrapped__,
                                                 TrampolineHelpers(cb)) for cb in native]
        addresses, keepalive = batch.compile()
        for cb, index in zip(native, indices):
            with cb._lock:
                if cb._entry is None:
                    cb._entry = _Entry(addresses[index], keepalive)
    for cb in pending:
        with cb._lock:
            if cb._entry is None:
                cb._entry = _build_entry(cb)


def _build_entry(cb: Callback) -> _Entry:
    if native_callback_supported(cb.signature):
        prepare_entries([cb])
        assert cb._entry is not None
        return cb._entry
    entry = _build_ctypes_entry(cb)
    return _Entry(ctypes.cast(entry, ctypes.c_void_p).value or 0, entry)


def _build_ctypes_entry(cb: Callback) -> Any:
    abi = cb.abi
    signature = cb.signature
    function = cb.__wrapped__
    name = cb.name
    converters = [_param_converter(t) for t in signature.param_types]
    plain = all(count == 1 and convert is _identity for count, convert in converters)
    results = signature.results
    result_what = [f"callback {name!r}: result #{i}" for i in range(len(results))]

    def python_args(c_args: tuple[Any, ...]) -> list[Any]:
        if plain:
            return list(c_args)
        values = []
        position = 0
        for count, convert in converters:
            values.append(convert(*c_args[position:position + count]))
            position += count
        return values

    def check_count(result: Any) -> tuple[Any, ...]:
        if len(results) == 1:
            return (result,)
        if not isinstance(result, tuple) or len(result) != len(results):
            got = f"a {len(result)}-tuple" if isinstance(result, tuple) else repr(result)[:40]
            raise TypeError(f"callback {name!r} must return a tuple of {len(results)} values "
                            f"({', '.join(t.mlir for t in results)}), got {got}")
        return result

    def fail(error: BaseException, record: int) -> None:
        _record(record, error, name)

    if abi.results_via_pointer:
        struct_type = abi.result_struct
        size = ctypes.sizeof(struct_type)

        def entry_via_pointer(out: int, *c_args: Any) -> None:
            record = _current_record()
            if _failed(record):
                ctypes.memset(out, 0, size)
                return
            try:
                values = check_count(function(*python_args(c_args)))
                struct = struct_type.from_address(out)
                for i, (t, value) in enumerate(zip(results, values)):
                    _store_result(struct, f"r{i}", t, value, result_what[i])
            except BaseException as error:
                ctypes.memset(out, 0, size)
                fail(error, record)

        prototype = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *abi.c_params)
        return prototype(entry_via_pointer)

    if not results:
        def entry_without_result(*c_args: Any) -> None:
            record = _current_record()
            if _failed(record):
                return
            try:
                result = function(*python_args(c_args))
                if result is not None:
                    raise TypeError(f"callback {name!r} is declared to return nothing, "
                                    f"but returned {type(result).__name__}")
            except BaseException as error:
                fail(error, record)

        return ctypes.CFUNCTYPE(None, *abi.c_params)(entry_without_result)

    result_type = results[0]
    assert isinstance(result_type, ScalarType)  # aggregates go through the pointer
    as_boundary: Callable[[Any], Any] = _identity
    if result_type.kind == "bool":
        as_boundary = int
    elif result_type.mlir in ("f16", "bf16"):
        as_boundary = functools.partial(half_to_bits, result_type)
    zero = 0

    def entry(*c_args: Any) -> Any:
        record = _current_record()
        if _failed(record):
            return zero
        try:
            value = to_python_scalar(result_type, function(*python_args(c_args)),
                                     result_what[0])
            return as_boundary(value)
        except BaseException as error:
            fail(error, record)
            return zero

    return ctypes.CFUNCTYPE(abi.c_result, *abi.c_params)(entry)


# -- registries and the decorator --------------------------------------------------------

class Invalidated(Protocol):
    """What a :class:`CallbackRegistry` or a :class:`pymlirjit.Session` tells when what
    it linked may have changed (a callback added or removed, a cache cleared): a kernel
    then lets go of its compiled function. Subscribers are kept weakly."""

    def invalidate(self) -> None: ...


class CallbackRegistry:
    """Callbacks by MLIR symbol name. Defining a name again replaces the old callback."""

    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}
        self._lock = threading.Lock()
        self._subscribers: weakref.WeakSet[Invalidated] = weakref.WeakSet()

    def add(self, cb: Callback) -> Callback:
        """Register ``cb`` under its name, replacing any callback of that name; kernels
        that compiled against this registry relink on their next call."""
        with self._lock:
            self._callbacks[cb.name] = cb
            subscribers = list(self._subscribers)
        _invalidate(subscribers)
        return cb

    def watch(self, subscriber: Invalidated) -> None:
        """Call ``subscriber.invalidate()`` whenever a callback is added or removed (the
        subscriber is kept weakly)."""
        with self._lock:
            self._subscribers.add(subscriber)

    def get(self, name: str) -> Callback | None:
        return self._callbacks.get(name)

    def remove(self, name: str) -> None:
        """Unregister the callback ``name``; kernels linked to it relink on their next
        call (and raise :class:`pymlirjit.LinkError` if nothing else defines it)."""
        with self._lock:
            removed = self._callbacks.pop(name, None) is not None
            subscribers = list(self._subscribers)
        if removed:
            _invalidate(subscribers)

    def __contains__(self, name: object) -> bool:
        return name in self._callbacks

    def __iter__(self) -> Iterator[Callback]:
        return iter(list(self._callbacks.values()))

    def __len__(self) -> int:
        return len(self._callbacks)


def _invalidate(subscribers: Iterable[Invalidated]) -> None:
    # Outside the registry's lock: a kernel invalidates under its session's lock, and a
    # session compiling under that lock asks registries for callbacks.
    for subscriber in subscribers:
        subscriber.invalidate()


_default_registry = CallbackRegistry()


def default_registry() -> CallbackRegistry:
    """The registry ``@callback`` uses when given no session: every session sees it."""
    return _default_registry


@overload
def callback(function: F) -> Callback: ...
@overload
def callback(function: str | Signature | None = None, *, name: str | None = None,
             session: Any = None, registry: CallbackRegistry | None = None,
             ) -> Callable[[F], Callback]: ...


def callback(function: Any = None, *, name: str | None = None, session: Any = None,
             registry: CallbackRegistry | None = None) -> Any:
    """Make a Python function callable from compiled MLIR code.

    Spellings: ``@callback``, ``@callback(name=..., session=...)``, and
    ``@callback("(f32, i32) -> f32")`` where the MLIR function type replaces the
    annotations. The callback is registered under its name in ``session`` (or the
    default registry that every session sees) and links to ``func.func private`` MLIR
    declarations of that name.
    """
    spec = None
    if isinstance(function, (str, Signature)):
        spec, function = function, None

    def decorate(fn: Callable[..., Any]) -> Callback:
        cb = Callback(fn, spec, name)
        if registry is not None:
            target = registry
        elif session is not None:
            target = session.callbacks
        else:
            target = _default_registry
        return target.add(cb)

    if function is not None:
        return decorate(function)
    return decorate
