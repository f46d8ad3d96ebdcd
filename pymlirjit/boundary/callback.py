"""A :class:`Callback`: a Python function that compiled MLIR code calls through the C ABI.

A callback holds the Python function, its signature and (built on first use) a native
entry point with the C ABI of its MLIR declaration. The entry point turns C values into
Python values (memrefs into zero-copy numpy views), calls the function, checks and
converts what it returns, and captures any exception: the exception is re-raised from
the kernel call that led to it, and every later callback of that call returns at once
without running Python. The ``@callback`` decorator and the registries by name are in
:mod:`pymlirjit.callbacks`.
"""

from __future__ import annotations

import ctypes
import functools
import pickle
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, SupportsIndex

from ..errors import SignatureError
from .abi import BoundaryABI, boundary_abi, native_callback_supported
from .callframe import ERROR_KEPT, call_failed, call_machinery, culprit_token, record_current
from .convert import from_c, result_scalar, to_c, to_memory
from .memref import (
    UnrankedDescriptor,
    array_from_descriptor,
    array_from_unranked,
    descriptor_type,
    fill_descriptor_with_copy,
    result_array,
)
from .pickling import (
    by_value,
    function_by_value,
    importable,
    interned,
    is_canonical_scalar,
    loads_parts,
    pickle_token,
    pickled_once,
    rebuilds,
    scalar_type,
)
from .signature import Parameter, Signature, as_signature, function_name
from .sourcelines import located_type_error
from .types import (
    MemRefType,
    ScalarType,
    TensorType,
    Type,
    UnrankedMemRefType,
)

__all__ = ["Callback", "CallbackRegistry", "Invalidated", "TrampolineHelpers", "default_registry",
           "prepare_entries"]

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
        name = name or function_name(function)
        try:
            checked = as_signature(signature, function)
            for i, t in enumerate((*checked.param_types, *checked.results)):
                if isinstance(t, TensorType):
                    raise SignatureError(f"callback {name!r}: {t.mlir} (position {i}) "
                                         f"is a tensor; callbacks take and return memrefs")
        except TypeError as exc:  # a signature string's, on the decorator's line
            if isinstance(signature, str):
                raise located_type_error(exc, f"@callback {name!r}", function,
                                         signature) from exc.__cause__
            raise
        self._adopt(function, checked, name)

    def _adopt(self, function: Callable[..., Any], signature: Signature, name: str) -> None:
        # What __init__ sets once it has checked the signature (unpickled: the sender has).
        self.__wrapped__ = function
        functools.update_wrapper(self, function)
        self.name, self.signature = name, signature
        self._entry: _Entry | None = None
        self._lock = threading.Lock()
        self._widths: dict[Signature, Callback] = {}  # see with_signature
        #: The callback this one serves at a declaration's widths (see with_signature).
        self.widened_from: Callback | None = None

    def with_signature(self, signature: Signature) -> Callback:
        """The callback of the same function and name with ``signature`` (the same
        object for the same signature: its native entry is built once), as
        :func:`pymlirjit.boundary.callbackwidths.at_declared_widths` links it to a
        declaration of other widths. Unchecked: the caller knows ``signature`` fits."""
        if signature == self.signature:
            return self
        with self._lock:
            found = self._widths.get(signature)
            if found is None:
                found = self._widths[signature] = Callback.__new__(Callback)
                found._adopt(self.__wrapped__, signature, self.name)
                found.widened_from = self
            return found

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
        native wrapper (which unwinds the call when the callback fails) of a ctypes
        callback."""
        if self._entry is None:
            prepare_entries([self])
        assert self._entry is not None
        return self._entry.address

    @property
    def native_entry(self) -> int:
        """Same as :attr:`address` (what ``ExecutionEngine.register_runtime`` takes)."""
        return self.address

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # By reference (module and qualified name) when importable, as functions pickle;
        # else by value: the name, the signature and the function through cloudpickle,
        # pickled once (see pymlirjit.pickling: one token, one function).
        if importable(self):
            return getattr(self, "__qualname__", self.name)
        fixed = pickled_once(self, self._parts_by_value)
        registered = _default_registry.get(self.name) is self
        return by_value, ("callback", pickle_token(self), *fixed, registered)

    def _parts_by_value(self) -> tuple[str, tuple[tuple[str, ...], ...] | None, bytes]:
        # The signature as data when its types are all pymlirjit's scalar types (their
        # names: the receiver looks them up, nothing to rebuild), else with the function.
        what, data = f"callback {self.name!r}", _scalar_signature_data(self.signature)
        if data is None:
            return self.name, None, function_by_value(self.__wrapped__, what, (self.signature,))
        return self.name, data, function_by_value(self.__wrapped__, what)

    def __copy__(self) -> Callback:
        return self  # like a function: its copies are itself

    def __deepcopy__(self, memo: dict[int, Any]) -> Callback:
        return self


# -- unpickling by value (the shared helpers: pymlirjit.pickling) ---------------------

def _scalar_signature_data(signature: Signature) -> tuple[tuple[str, ...], ...] | None:
    """``signature`` as (parameter names, parameter types, result types), the types by
    MLIR name, if each is one of pymlirjit's scalar types (else None)."""
    params, results = signature.param_types, signature.results
    if not all(is_canonical_scalar(t) for t in (*params, *results)):
        return None
    return (tuple(p.name for p in signature.params), tuple(t.mlir for t in params),
            tuple(t.mlir for t in results))


@functools.lru_cache(maxsize=256)
def _signature_from_data(names: tuple[str, ...], params: tuple[str, ...],
                         results: tuple[str, ...]) -> Signature:
    # Signatures are immutable: callbacks unpickled with the same one share it.
    try:
        return Signature(tuple(Parameter(name, scalar_type(t))
                               for name, t in zip(names, params, strict=True)),
                         tuple(scalar_type(t) for t in results))
    except (KeyError, ValueError) as exc:
        raise pickle.UnpicklingError(f"a callback's signature names no scalar types of "
                                     f"pymlirjit: {names!r}, {params!r} -> {results!r}") from exc


@rebuilds("callback")
def _callback_by_value(token: str, name: str, signature: tuple[tuple[str, ...], ...] | None,
                       fixed: bytes, registered: bool) -> Callback:
    def make() -> Callback:
        if signature is None:
            resolved, function = loads_parts(fixed)
        else:
            resolved, (function,) = _signature_from_data(*signature), loads_parts(fixed)
        cb = Callback.__new__(Callback)  # checked by the sender: not checked again
        cb._adopt(function, resolved, name)
        # Linked by name as in the sender, unless this process defines that name itself.
        if registered and _default_registry.get(name) is None:
            _default_registry.add(cb)
        return cb
    return interned(token, make)  # type: ignore[no-any-return]


# -- building the native entry point -----------------------------------------------------

def _param_converter(t: Type) -> tuple[int, Callable[..., Any]]:
    """(number of C arguments, function turning them into the Python value)."""
    if isinstance(t, ScalarType):
        return len(t.boundary), from_c(t)
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


def _store_result(struct: Any, field: str, t: Type, value: Any, what: str) -> None:
    if isinstance(t, MemRefType):
        fill_descriptor_with_copy(getattr(struct, field), value, t, what)
        return
    if not isinstance(t, ScalarType):
        raise SignatureError(f"{what}: {t.mlir} cannot be returned by a callback")
    setattr(struct, field, to_memory(t, value, what))


class _Entry:
    """A built entry point: its address and what must stay alive while it is used."""

    def __init__(self, address: int, keepalive: object) -> None:
        self.address = address
        self.keepalive = keepalive


class TrampolineHelpers:
    """The Python side of a native trampoline (or of the native wrapper of a ctypes
    entry): what it calls in the rare cases (``record``, ``convert_result``) and the call
    machinery it reads (``frame_key``, ``foreign_record``, and ``culprit``, the token it
    stores in a failing call's record: see :func:`pymlirjit.boundary.callframe.culprit_token`)."""

    def __init__(self, cb: Callback) -> None:
        self.name = cb.name
        calls = call_machinery()
        self.frame_key, self.foreign_record = calls.frame_key, calls.foreign_record
        self.culprit = culprit_token(cb.name)
        # A C-implemented partial: one Python frame less to push when recording an
        # error near the recursion limit.
        self.record: Callable[[BaseException], None] = functools.partial(record_current,
                                                                         cb.name)
        results = cb.signature.results
        self.result_type = results[0] if results else None

    def convert_result(self, value: Any) -> Any:
        t = self.result_type
        if t is None:
            raise TypeError(f"callback {self.name!r} is declared to return nothing, "
                            f"but returned {type(value).__name__}")
        if isinstance(t, MemRefType):  # an array the trampoline copies
            return result_array(value, t, f"callback {self.name!r}: result #0")
        assert isinstance(t, ScalarType)
        return result_scalar(t, value, f"callback {self.name!r}: result #0")


def prepare_entries(callbacks: Iterable[Callback]) -> None:
    """Build the entry points of ``callbacks`` that have none yet, generating all native
    code together (code generation has a fixed cost per batch): a trampoline where the
    types allow one, else a ctypes entry behind a native wrapper that unwinds the call
    when the callback fails, as a trampoline does."""
    pending = [cb for cb in callbacks if cb._entry is None]
    if not pending:
        return
    from .native import NativeBatch  # llvmlite loads only when needed

    batch = NativeBatch()
    indices: list[int] = []
    python_entries: list[Any] = []
    for cb in pending:
        if native_callback_supported(cb.signature):
            indices.append(batch.add_callback_trampoline(cb.signature, cb.abi, cb.__wrapped__,
                                                         TrampolineHelpers(cb)))
            python_entries.append(None)
        else:
            function = _build_ctypes_entry(cb)
            target = ctypes.cast(function, ctypes.c_void_p).value or 0
            indices.append(batch.add_ctypes_wrapper(cb.abi, target, TrampolineHelpers(cb)))
            python_entries.append(function)
    addresses, keepalive = batch.compile()
    for cb, index, function in zip(pending, indices, python_entries):
        with cb._lock:
            if cb._entry is None:
                cb._entry = _Entry(addresses[index], (keepalive, function))


def _build_ctypes_entry(cb: Callback) -> Any:
    """The ctypes function for a callback whose types no trampoline serves. Its C ABI is
    the callback's, after a first parameter: the address of a status word that the
    native wrapper (``NativeBatch.add_ctypes_wrapper``) sets to 1 and this function
    clears when the callback succeeded, and sets to
    :data:`~pymlirjit.boundary.callframe.ERROR_KEPT` when it failed and its error was
    handed to the call's record (flag included). Anything else (Python could
    not even run it) leaves 1: the wrapper then fails the call itself."""
    abi = cb.abi
    signature = cb.signature
    function = cb.__wrapped__
    name = cb.name
    converters = [_param_converter(t) for t in signature.param_types]
    plain = all(isinstance(t, ScalarType) and t.crossing == "value"
                for t in signature.param_types)
    results = signature.results
    result_what = [f"callback {name!r}: result #{i}" for i in range(len(results))]
    status_word = ctypes.c_int64.from_address
    # Where the arguments start in what ctypes passes: after the result pointer, if any.
    skip = 1 if abi.results_via_pointer else 0

    def python_args(c_args: tuple[Any, ...]) -> tuple[Any, ...] | list[Any]:
        if plain:
            return c_args[skip:] if skip else c_args
        values = []
        position = skip
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

    # The three shapes differ only in what they do with the result: store it through
    # the pointer passed before the arguments, check that there is none, or return it
    # (``deliver`` returns what C receives).
    deliver: Callable[[Any, tuple[Any, ...]], Any]
    restype = None
    if abi.results_via_pointer:
        struct_type = abi.result_struct

        def deliver(result: Any, c_args: tuple[Any, ...]) -> Any:
            struct = struct_type.from_address(c_args[0])
            for i, (t, value) in enumerate(zip(results, check_count(result))):
                _store_result(struct, f"r{i}", t, value, result_what[i])
    elif not results:
        def deliver(result: Any, c_args: tuple[Any, ...]) -> Any:
            if result is not None:
                raise TypeError(f"callback {name!r} is declared to return nothing, "
                                f"but returned {type(result).__name__}")
    else:
        result_type = results[0]
        assert isinstance(result_type, ScalarType)  # aggregates go through the pointer
        to_boundary = to_c(result_type)
        restype = abi.c_result

        def deliver(result: Any, c_args: tuple[Any, ...]) -> Any:
            return to_boundary(result, result_what[0])[0]

    failed = None if restype is None else 0
    leading = [ctypes.c_void_p] * skip

    def entry(status: int, *c_args: Any) -> Any:
        if call_failed():  # by another thread's callback (status left failed)
            return failed
        try:
            value = deliver(function(*python_args(c_args)), c_args)
            status_word(status).value = 0
            return value
        except BaseException as error:
            # Not contextlib.suppress: it would need Python frames.
            try:
                record_current(name, error)
                status_word(status).value = ERROR_KEPT
            except BaseException:  # nothing may reach ctypes (it prints); the
                pass  # wrapper fails the call all the same
            return failed

    return ctypes.CFUNCTYPE(restype, ctypes.c_void_p, *leading, *abi.c_params)(entry)


class Invalidated(Protocol):
    """What a :class:`CallbackRegistry`, a :class:`pymlirjit.Session` or a kernel tells
    when what it linked may have changed (a callback redefined, a cache cleared, a kernel
    recompiled): a kernel then lets go of its compiled function. Kept weakly."""

    def invalidate(self) -> None: ...


class CallbackRegistry:
    """Callbacks by MLIR symbol name. Defining a name again replaces the old callback."""

    def __init__(self) -> None:
        self._callbacks: dict[str, Callback] = {}
        self._lock = threading.Lock()
        self._subscribers: weakref.WeakSet[Invalidated] | None = None  # made by watch()

    def add(self, cb: Callback) -> Callback:
        """Register ``cb`` under its name, replacing any callback of that name; kernels
        that compiled against this registry relink on their next call."""
        with self._lock:
            self._callbacks[cb.name] = cb
            subscribers = list(self._subscribers or ())
        _invalidate(subscribers)
        return cb

    def watch(self, subscriber: Invalidated) -> None:
        """Call ``subscriber.invalidate()`` whenever a callback is added or removed (the
        subscriber is kept weakly)."""
        with self._lock:
            if self._subscribers is None:
                self._subscribers = weakref.WeakSet()
            self._subscribers.add(subscriber)

    def get(self, name: str) -> Callback | None:
        return self._callbacks.get(name)

    def remove(self, name: str) -> None:
        """Unregister the callback ``name``; kernels linked to it relink on their next
        call (and raise :class:`pymlirjit.LinkError` if nothing else defines it)."""
        with self._lock:
            removed = self._callbacks.pop(name, None) is not None
            subscribers = list(self._subscribers or ())
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
