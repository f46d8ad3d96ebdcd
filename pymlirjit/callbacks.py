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
from typing import Any, TypeVar, overload

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
    "call_frame",
    "callback",
    "default_registry",
    "enter_call",
    "exit_call",
    "prepare_entries",
    "TrampolineHelpers",
]

F = TypeVar("F", bound=Callable[..., Any])


# -- error capture across compiled frames ------------------------------------------------

class CallRecord(ctypes.Structure):
    """The part of a call frame that native code reads: whether a callback of the call
    failed, the ``jmp_buf`` of a native kernel entry that can unwind the call, and
    whether the calling thread keeps the GIL during the call."""

    _fields_ = [("failed", ctypes.c_int64), ("jump_buffer", ctypes.c_void_p),
                ("holds_gil", ctypes.c_int64)]


class CallFrame:
    """The state of one call into compiled code: the first exception a callback raised."""

    __slots__ = ("error", "record")

    def __init__(self, jump_buffer: int = 0, holds_gil: bool = False) -> None:
        self.error: BaseException | None = None
        self.record = CallRecord(0, jump_buffer, int(holds_gil))


class _ThreadFrames(threading.local):
    def __init__(self) -> None:
        self.stack: list[CallFrame] = []


_frames = _ThreadFrames()
# Callbacks running on threads the compiled code started itself have no frame of their
# own; their errors go here and surface from the next call into compiled code that ends.
_foreign = CallFrame()
_error_lock = threading.Lock()


class _NativeFrameSlot:
    """A pthread key holding, per thread, the address of the current frame's record, so
    that a native trampoline finds it without the GIL."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        self.key = ctypes.c_uint(0)
        if libc.pthread_key_create(ctypes.byref(self.key), None) != 0:
            raise OSError("pthread_key_create failed")
        self._set = libc.pthread_setspecific
        self._set.argtypes = [ctypes.c_uint, ctypes.c_void_p]
        self._set.restype = ctypes.c_int

    def point_at(self, frame: CallFrame | None) -> None:
        self._set(self.key, ctypes.addressof(frame.record) if frame is not None else None)


@functools.cache
def native_frame_slot() -> _NativeFrameSlot:
    """The pthread key native trampolines read (created on first use)."""
    return _NativeFrameSlot()


def foreign_record_address() -> int:
    """The address of the call record of threads the compiled code started (which have
    no call of their own)."""
    return ctypes.addressof(_foreign.record)


def enter_call(jump_buffer: int = 0, holds_gil: bool = False) -> CallFrame:
    """Open a frame for a call into compiled code on this thread. ``jump_buffer`` is the
    address of a ``jmp_buf`` that a failing callback may ``longjmp`` to; ``holds_gil``
    says that this thread keeps the GIL for the whole call (callbacks on this thread
    then skip taking it)."""
    frame = CallFrame(jump_buffer, holds_gil)
    stack = _frames.stack
    stack.append(frame)
    native_frame_slot().point_at(frame)
    return frame


def exit_call(frame: CallFrame) -> None:
    """Close ``frame``; re-raise the exception a callback raised during the call, if any."""
    _pop(frame)
    error = _take_error(frame)
    if error is None and _foreign.error is not None:
        error = _take_error(_foreign)
    if error is not None:
        raise error


@contextmanager
def call_frame() -> Iterator[CallFrame]:
    """``with call_frame():`` around a call into compiled code re-raises callback errors."""
    frame = enter_call()
    try:
        yield frame
    except BaseException:
        _pop(frame)
        _take_error(frame)
        raise
    exit_call(frame)


def _pop(frame: CallFrame) -> None:
    stack = _frames.stack
    if stack and stack[-1] is frame:
        stack.pop()
        native_frame_slot().point_at(stack[-1] if stack else None)


def _current_frame() -> CallFrame:
    stack = _frames.stack
    return stack[-1] if stack else _foreign


def _record(frame: CallFrame, error: BaseException, name: str) -> None:
    """Keep the first error of a call, noting which callback raised it."""
    with _error_lock:
        if frame.error is not None:
            return
        _add_note(error, f"raised in callback {name!r} called from compiled MLIR code")
        frame.error = error
        frame.record.failed = 1


def _take_error(frame: CallFrame) -> BaseException | None:
    with _error_lock:
        error = frame.error
        frame.error = None
        frame.record.failed = 0
        return error


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
        self.frame_key = native_frame_slot().key.value
        self.foreign_record = foreign_record_address()
        results = cb.signature.results
        self.result_type = results[0] if results else None

    def record(self, error: BaseException) -> None:
        _record(_current_frame(), error, self.name)

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

    def fail(error: BaseException, frame: CallFrame) -> None:
        _record(frame, error, name)

    if abi.results_via_pointer:
        struct_type = abi.result_struct
        size = ctypes.sizeof(struct_type)

        def entry_via_pointer(out: int, *c_args: Any) -> None:
            frame = _current_frame()
            if frame.error is not None:
                ctypes.memset(out, 0, size)
                return
            try:
                values = check_count(function(*python_args(c_args)))
                struct = struct_type.from_address(out)
                for i, (t, value) in enumerate(zip(results, values)):
                    _store_result(struct, f"r{i}", t, value, result_what[i])
            except BaseException as error:
                ctypes.memset(out, 0, size)
                fail(error, frame)

        prototype = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *abi.c_params)
        return prototype(entry_via_pointer)

    if not results:
        def entry_without_result(*c_args: Any) -> None:
            frame = _current_frame()
            if frame.error is not None:
                return
            try:
                result = function(*python_args(c_args))
                if result is not None:
                    raise TypeError(f"callback {name!r} is declared to return nothing, "
                                    f"but returned {type(result).__name__}")
            except BaseException as error:
                fail(error, frame)

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
        frame = _current_frame()
        if frame.error is not None:
            return zero
        try:
            value = to_python_scalar(result_type, function(*python_args(c_args)),
                                     result_what[0])
            return as_boundary(value)
        except BaseException as error:
            fail(error, frame)
            return zero

    return ctypes.CFUNCTYPE(abi.c_result, *abi.c_params)(entry)


# -- registries and the decorator --------------------------------------------------------

class CallbackRegistry:
    """Callbacks by MLIR symbol name. Defining a name again replaces the old callback."""

    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}
        self._lock = threading.Lock()
        self._watchers: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, cb: Callback) -> Callback:
        """Register ``cb`` under its name, replacing any callback of that name; kernels
        that compiled against this registry relink on their next call."""
        with self._lock:
            self._callbacks[cb.name] = cb
            watchers = list(self._watchers)
            self._watchers.clear()
        for watcher in watchers:
            watcher.forget()
        return cb

    def watch(self, kernel: Any) -> None:
        """Call ``kernel.forget()`` when a callback is next added (kept weakly)."""
        with self._lock:
            self._watchers.add(kernel)

    def get(self, name: str) -> Callback | None:
        return self._callbacks.get(name)

    def remove(self, name: str) -> None:
        with self._lock:
            self._callbacks.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._callbacks

    def __iter__(self) -> Iterator[Callback]:
        return iter(list(self._callbacks.values()))

    def __len__(self) -> int:
        return len(self._callbacks)


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
