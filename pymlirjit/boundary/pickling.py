"""Pickling by reference when importable, else by value, as numba's dispatchers and
functions pickle: the helpers kernels, callbacks and sessions share.

An object pickled by value gets a token on its first pickling, and keeps the pickled
form of what never changes in it (its ``_pickled_parts``): later picklings only copy those
bytes, and a receiver that unpickled that token before returns the object it made then,
without unpickling the parts again. So one token is one value: every receiver rebuilds
the object from the same bytes, those of its first pickling.

A receiver keeps the objects it made last (:data:`KEPT`) even when nothing else holds
them: a Dask worker drops a task's kernel when the task ends, and the next task's
kernel, the same token, is then a lookup instead of a new kernel to build and link.
"""

from __future__ import annotations

import functools
import inspect
import io
import os
import pickle
import sys
import threading
import uuid
import weakref
from collections import ChainMap, OrderedDict
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from .types import SCALARS, ScalarType, ptr

__all__ = ["KEPT", "StandInStub", "alias_token", "being_pickled", "by_value",
           "forget_unpickled", "function_by_value", "unpickled",
           "importable", "interned", "is_canonical_scalar", "loads_parts", "pickle_token",
           "pickled_once", "rebuilds", "scalar_type"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def importable(obj: Any) -> bool:
    """Whether ``obj`` is what its ``__module__`` and ``__qualname__`` name (so another
    process, importing that module, finds the same object). Objects of ``__main__`` are
    not: a worker's ``__main__`` is not the sender's (a Dask or Ray worker, a notebook)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if module is None or module.__name__ in ("__main__", "__mp_main__"):
        return False
    found: Any = module
    for part in getattr(obj, "__qualname__", "<locals>").split("."):
        if part == "<locals>":
            return False
        found = getattr(found, part, None)
    return found is obj


# Objects unpickled by value, by the token their first pickling gave them, held weakly:
# unpickling one twice in a process (a task per chunk in a pool) gives the same object,
# which compiles once; unpickling in the sending process (or a forked child) gives the
# original. A plain dict of weak references (not a WeakValueDictionary: its Python-level
# get and setdefault were a tenth of a first unpickling), changed under the lock.
_by_token: dict[str, weakref.ref[Any]] = {}
# Reentrant: an object may die, and its entry be removed, while this thread holds it.
_token_lock = threading.RLock()


def _new_lock_in_child() -> None:
    # A thread of the parent may have held the lock at the fork; it does not run here.
    global _token_lock
    _token_lock = threading.RLock()


def _alive(token: str) -> Any:
    """The object registered with ``token``, if it still lives (else None)."""
    entry = _by_token.get(token)
    return entry() if entry is not None else None


def _register(token: str, obj: Any) -> None:
    """Register ``obj`` as ``token``'s (the lock held); its entry goes when it does."""
    def forget(entry: weakref.ref[Any]) -> None:
        lock = _token_lock
        if lock is None:  # interpreter shutdown: the module being emptied
            return
        with lock:
            if _by_token.get(token) is entry:  # not replaced meanwhile
                del _by_token[token]

    _by_token[token] = weakref.ref(obj, forget)


os.register_at_fork(after_in_child=_new_lock_in_child)

#: How many of the objects it unpickled last a process keeps alive (a kernel, its
#: session and its callbacks count one each; the sender's own objects are never kept:
#: they live as long as the sender holds them).
KEPT = 128
# Those objects, by token, the most recently unpickled last (the lock above held).
_kept: OrderedDict[str, Any] = OrderedDict()


def pickle_token(obj: Any) -> str:
    """The token ``obj`` is pickled by value with (made on first use)."""
    token: str | None = obj.__dict__.get("_pickle_token")
    if token is None:
        with _token_lock:
            token = obj.__dict__.setdefault("_pickle_token", uuid.uuid4().hex)
            if _alive(token) is None:
                _register(token, obj)
    return token


def interned(token: str, make: Callable[[], Any]) -> Any:
    """The object unpickled before with ``token`` in this process, else ``make()``'s."""
    entry = _by_token.get(token)  # _alive, inline: once per object of every unpickling
    found = entry() if entry is not None else None
    if found is not None:
        if token in _kept:
            with _token_lock:
                if token in _kept:  # not evicted meanwhile
                    _kept.move_to_end(token)
        return found
    made = make()
    # Evicted objects are let go of after the lock: an object's end may run any code.
    evicted: list[tuple[str, Any]] = []
    with _token_lock:
        found = _alive(token)  # another thread's, made meanwhile
        if found is None:
            found = made
            _register(token, made)
            made.__dict__["_pickle_token"] = token
            _kept[token] = made
            while len(_kept) > KEPT:
                evicted.append(_kept.popitem(last=False))
    return found


# How each kind of object pickled by value is made again (registered by the module that
# defines it): one reducer for every kind, so an unpickler looks up one function by
# name, not one per kind (each such lookup is an import by name: ~0.85 us).
_rebuilders: dict[str, Callable[..., Any]] = {}


def rebuilds(kind: str) -> Callable[[F], F]:
    """Register the decorated function as what :func:`by_value` calls for ``kind``."""
    def register(function: F) -> F:
        _rebuilders[kind] = function
        return function
    return register


def by_value(kind: str, *args: Any) -> Any:
    """The object of ``kind`` pickled by value as ``args`` (the reducer every pymlirjit
    object pickled by value returns, with the function registered by :func:`rebuilds`)."""
    rebuild = _rebuilders.get(kind)
    if rebuild is None:
        raise pickle.UnpicklingError(f"no kind of pymlirjit object is pickled by value as "
                                     f"{kind!r} (pickled by another version of pymlirjit?)")
    return rebuild(*args)


class StandInStub:
    """What a kernel pickled by value keeps of its stub: names, docstring, parameters."""

    def __init__(self, name: str, qualname: str, module: str, doc: str | None,
                 params: tuple[str, ...]) -> None:
        self.__name__ = name
        self.__qualname__ = qualname
        self.__module__ = module
        self.__doc__ = doc
        self.params = params
        self.__annotations__: dict[str, Any] = {}  # checked where it was written

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                  for p in self.params])

    def __call__(self, *args: Any) -> Any:
        raise TypeError(f"{self.__qualname__}: the stub of a kernel pickled by value has "
                        f"no body")


def forget_unpickled() -> None:
    """Let go of the objects this process unpickled by value and keeps (see
    :data:`KEPT`): each then lives only as long as something else holds it."""
    with _token_lock:
        kept = list(_kept.values())
        _kept.clear()
    del kept  # after the lock (see interned)


def function_by_value(function: Callable[..., Any], what: str,
                      along: tuple[Any, ...] = ()) -> bytes:
    """``(*along, function)`` pickled by value through cloudpickle (the function's code,
    and the current values of the globals and cells it uses), in one pickle, pymlirjit's
    scalar types by reference; ``what`` names its owner in the error."""
    try:
        pickler = _function_pickler()
    except ImportError:
        raise pickle.PicklingError(
            f"cannot pickle {what}: its function {function!r} is not importable by module "
            f"and name (defined in __main__, a notebook or a function?), and pickling a "
            f"function by value needs cloudpickle (pip install cloudpickle)") from None
    try:
        with io.BytesIO() as file:
            pickler(file).dump((*along, function))
            return file.getvalue()
    except Exception as exc:
        raise pickle.PicklingError(f"cannot pickle {what}: cloudpickle cannot pickle its "
                                   f"function {function!r}: {exc}") from exc


def scalar_type(mlir: str) -> ScalarType:
    """The scalar type spelled ``mlir`` (how a scalar type pickled by reference is found
    again: unpickled by value, each of a signature's and an annotation's scalar types
    cost as much as the rest of a callback's parts, and was not ``is`` its type)."""
    return _CANONICAL[mlir]


def is_canonical_scalar(t: Any) -> bool:
    """Whether ``t`` is one of pymlirjit's scalar types (not one made apart)."""
    return isinstance(t, ScalarType) and _CANONICAL.get(t.mlir) is t


_CANONICAL = {t.mlir: t for t in (*SCALARS, ptr)}


def _reduce_scalar(scalar: ScalarType) -> Any:
    if _CANONICAL.get(scalar.mlir) is scalar:
        return scalar_type, (scalar.mlir,)
    return scalar.__reduce_ex__(pickle.HIGHEST_PROTOCOL)  # made apart: by value


@functools.cache
def _function_pickler() -> Callable[[io.BytesIO], pickle.Pickler]:
    import cloudpickle

    class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        dispatch_table: ClassVar[ChainMap[type, Any]] = ChainMap(
            {ScalarType: _reduce_scalar}, cloudpickle.Pickler.dispatch_table)

    return Pickler


def pickled_once(obj: Any, make: Callable[[], T]) -> T:
    """``obj``'s pickled parts: what ``make()`` returns, made on its first pickling (the
    first of two threads pickling it at once wins, so a token never names two values).
    While ``make()`` runs, :func:`being_pickled` says so on this thread (a callback whose
    function refers to a kernel linking it: that kernel is then pickled as a reference)."""
    parts: T | None = obj.__dict__.get("_pickled_parts")
    if parts is None:
        making = _making()
        making.append(obj)
        try:
            parts = obj.__dict__.setdefault("_pickled_parts", make())
        finally:
            making.pop()
    return parts


_pickling = threading.local()


def _making() -> list[Any]:
    stack: list[Any] | None = getattr(_pickling, "stack", None)
    if stack is None:
        stack = _pickling.stack = []
    return stack


def being_pickled(obj: Any) -> bool:
    """Whether this thread is making ``obj``'s pickled parts (see :func:`pickled_once`)."""
    return any(made is obj for made in _making())


def alias_token(token: str, obj: Any) -> None:
    """Register ``obj`` as ``token``'s too (a second token of a sender's object), so that
    unpickling ``token`` in this process gives ``obj`` itself."""
    with _token_lock:
        if _alive(token) is None:
            _register(token, obj)


def unpickled(token: str) -> Any:
    """The object registered with ``token`` in this process, or ``None``."""
    return _alive(token)


def loads_parts(data: bytes) -> Any:
    """``pickle.loads(data)`` for parts pymlirjit pickled itself (a callback's, a
    session's): the same objects, but the functions and classes of pymlirjit and
    cloudpickle they name are found once per process, not imported again by name at
    every unpickling (~1 us each: a callback's parts name six)."""
    return _PartsUnpickler(io.BytesIO(data)).load()


# What _PartsUnpickler found, by (module, name): only pymlirjit's and cloudpickle's, whose
# module-level names do not change; anything else is looked up as pickle.loads does.
_found: dict[tuple[str, str], Any] = {}


class _PartsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _found.get((module, name))
        if found is None:
            found = super().find_class(module, name)
            if module.partition(".")[0] in ("pymlirjit", "cloudpickle"):
                _found[module, name] = found
        return found
