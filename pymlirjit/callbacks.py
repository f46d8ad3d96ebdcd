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
from typing import Any, TypeVar, overload

from .abi import BoundaryABI, boundary_abi, native_callback_supported
from .callframe import _current_record, _failed, _record, call_machinery
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
    "callback",
    "default_registry",
    "prepare_entries",
    "TrampolineHelpers",
]

F = TypeVar("F", bound=Callable[..., Any])


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
