"""How kernels pickle and copy (docs/distributed.md): by reference (module and qualified
name) when importable, else by value, and how a kernel pickled by value is made again.

:class:`~pymlirjit.kernel.Kernel`, ``GenericKernel`` and ``BoundKernel`` delegate their
``__getstate__``, ``__reduce_ex__`` and ``__copy__`` here; :mod:`pymlirjit.kernel`
registers the rebuilders with the classes they make (this module imports no kernel
class: the kernels import it).
"""

from __future__ import annotations

import hashlib
import inspect
import pickle
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .boundary.abi import symbol_references
from .boundary.pickling import (
    StandInStub,
    alias_token,
    being_pickled,
    by_value,
    importable,
    interned,
    pickle_token,
    rebuilds,
    unpickled,
)
from .callbacks import Callback
from .codegen.options import OptionOverrides
from .runtime.externs import Linkable
from .session import Session

__all__ = ["KernelByToken", "PicklableKernel", "copied_state", "rebuilt_bound", "rebuilt_generic",
           "rebuilt_kernel", "reduce_bound", "reduce_generic", "reduce_kernel"]

K = TypeVar("K")


class PicklableKernel(Protocol):
    """What pickling reads of a kernel (:class:`pymlirjit.kernel.Kernel`)."""

    __wrapped__: Callable[..., Any] | None
    __qualname__: str
    __module__: str
    __doc__: str | None
    __dict__: dict[str, Any]
    name: str
    release_gil: bool | None
    _overrides: OptionOverrides
    _cache: bool | None
    _callbacks: tuple[Linkable, ...]
    _session: Session | None

    @property
    def session(self) -> Session: ...

    @property
    def mlir(self) -> str: ...


def copied_state(kernel: PicklableKernel) -> dict[str, Any]:
    """A kernel's ``__getstate__``: what a copy keeps of it."""
    # A copy shares no compiled function: it compiles (or hits the session's cache)
    # on its first call, and so subscribes to invalidation itself.
    state = {**kernel.__dict__, "_compiled": None, "_module": None, "_retired": [],
             "_options": None, "_ctypes": None}
    state.pop("_dependents", None)  # nothing links the copy yet
    return state


def reduce_kernel(kernel: PicklableKernel) -> Any:
    """A kernel's ``__reduce_ex__`` (see :meth:`pymlirjit.kernel.Kernel.__reduce_ex__`)."""
    if importable(kernel):
        return kernel.__qualname__
    parts = kernel.__dict__.get("_pickled_parts")
    if parts is None:  # made once: what never changes, pickled (unpickled if needed)
        stub = kernel.__wrapped__  # builtins only: nothing for the receiver to import
        stand_in = None if stub is None else (stub.__name__, kernel.__qualname__,
            kernel.__module__, kernel.__doc__, tuple(inspect.signature(stub).parameters))
        text, given = kernel.mlir, kernel._overrides.given()
        fixed = pickle.dumps((text, kernel.name, given, kernel._cache, stand_in))
        parts = kernel.__dict__["_pickled_parts"] = (
            fixed, sorted(symbol_references(text)))
    fixed, symbols = parts
    session = kernel.session
    callbacks = list(kernel._callbacks)
    for name in symbols:
        cb = session.find_callback(name, kernel._callbacks)
        if cb is not None and cb not in callbacks:
            callbacks.append(cb)  # linked by name here: shipped (then linked) explicitly
    token = _content_token(kernel, callbacks)
    if any(being_pickled(cb) for cb in callbacks):
        # Reached from the function of a callback it links (which calls the kernel):
        # that callback is being pickled for this kernel, which follows it. A reference.
        return by_value, ("kernel_ref", token)
    return by_value, ("kernel", token, fixed, tuple(callbacks),
                      kernel._session, kernel.release_gil)


def _content_token(kernel: PicklableKernel, callbacks: list[Any]) -> str:
    """The kernel's token, and what names the callbacks it links now: a callback
    redefined (a new object) makes a new token, so a receiver that unpickled the kernel
    with the old one makes a new kernel rather than reusing it."""
    base = pickle_token(kernel).split(":")[0]
    names = [f"{getattr(cb, '__module__', '')}.{getattr(cb, '__qualname__', '')}"
             if importable(cb) or not hasattr(cb, "__dict__") else pickle_token(cb)
             for cb in callbacks]
    token = f"{base}:{hashlib.sha256(chr(0).join(names).encode()).hexdigest()[:16]}"
    alias_token(token, kernel)  # unpickled in this process: the kernel itself
    return token


class KernelByToken:
    """A kernel pickled by value, as a callback's function refers to it (a kernel whose
    callback calls the kernel again): unpickled before the kernel itself, it finds it by
    its token when used."""

    def __init__(self, token: str) -> None:
        self._token = token

    def _kernel(self) -> Any:
        kernel = unpickled(self._token)
        if kernel is None:
            raise RuntimeError(f"the kernel pickled by value as {self._token} is gone "
                               f"from this process")
        return kernel

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._kernel()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_token":
            raise AttributeError(name)
        return getattr(self._kernel(), name)

    def __reduce__(self) -> Any:
        kernel = unpickled(self._token)
        return (KernelByToken, (self._token,)) if kernel is None else (_same, (kernel,))


def _same(obj: Any) -> Any:
    return obj


@rebuilds("kernel_ref")
def rebuilt_kernel_ref(token: str) -> Any:
    """The kernel pickled by value as ``token`` if this process has it, else a
    :class:`KernelByToken` finding it when used."""
    kernel = unpickled(token)
    return kernel if kernel is not None else KernelByToken(token)


def reduce_generic(kernel: Any, template: PicklableKernel) -> Any:
    """A generic kernel's ``__reduce_ex__``: by reference when importable, else by value,
    its template (a kernel of the unbound source, pickled by value)."""
    if importable(kernel):
        return kernel.__qualname__
    return by_value, ("generic", pickle_token(kernel), template)


def reduce_bound(generic: Any, binding: dict[str, str]) -> Any:
    """A bound kernel's ``__reduce_ex__``: its generic kernel and binding."""
    return by_value, ("bound", generic, binding)


def rebuilt_kernel(make_kernel: Callable[..., K], token: str, fixed: bytes,
                   callbacks: tuple[Callback, ...], session: Session | None,
                   release_gil: bool | None) -> K:
    """The kernel pickled by value as ``token`` (made by ``make_kernel``, the class,
    unless this process unpickled that token before)."""
    def make() -> K:
        source, name, overrides, cache, stub = pickle.loads(fixed)
        return make_kernel(stub and StandInStub(*stub), source, name, callbacks=callbacks,
                           session=session, release_gil=release_gil, cache=cache,
                           **overrides)
    return interned(token, make)  # type: ignore[no-any-return]


def rebuilt_generic(make_generic: Callable[[Any, str], K], token: str,
                    template: PicklableKernel) -> K:
    """The generic kernel pickled by value as ``token``, over ``template``."""
    def make() -> K:
        return make_generic(template, template.mlir)
    return interned(token, make)  # type: ignore[no-any-return]


def rebuilt_bound(generic: Any, binding: dict[str, str]) -> Any:
    """The kernel ``generic`` makes for ``binding``."""
    return generic.specialize(**binding)
