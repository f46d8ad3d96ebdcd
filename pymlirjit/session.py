"""Sessions: one lock, and memory -> store -> compile -> store for each module.

:meth:`Session.compile` returns the module compiled before from the same source,
:class:`CompileOptions` and callbacks; else loads it from the session's
:class:`~pymlirjit.runtime.cache.CacheStore`; else runs the stages
(:mod:`pymlirjit.runtime.prepare`:
parse, declarations, shims, lowering; :mod:`pymlirjit.runtime.module`: JIT engine, cache
entry, load) and stores the result. The :class:`CompiledModule` it returns gives the
module's functions as Python callables.

>>> session = Session()
>>> module = session.compile('''
... func.func @mul(%a: f64, %b: f64) -> f64 {
...   %r = arith.mulf %a, %b : f64
...   return %r : f64
... }''')
>>> module.mul(6.0, 7.0)
42.0
>>> session.cache_info().misses
1
"""

from __future__ import annotations

import os
import pickle
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, SupportsIndex

from .boundary.abi import symbol_references
from .boundary.buildgate import building
from .boundary.pickling import by_value, interned, loads_parts, pickle_token, rebuilds
from .boundary.sourcelines import read_mlir_file
from .callbacks import Callback, CallbackRegistry, Invalidated, default_registry
from .codegen.options import CompileOptions
from .errors import LinkError
from .lowering.builtsource import built_text
from .lowering.pipeline import runtime_library
from .runtime.artifacts import build_artifact, load
from .runtime.asyncruntime import claim_task_pool
from .runtime.cache import CachedModule, CacheStore, DiskCache, NullCache, default_cache_dir
from .runtime.externs import Linkable, LinkedExtern, listed_callbacks
from .runtime.externs import linkable as _linkable
from .runtime.function import CompiledFunction, set_origin
from .runtime.module import CompiledModule, build_engine, engine_module
from .runtime.prepare import builtin_callbacks, lower, prepare

__all__ = ["CacheInfo", "CompileOptions", "CompiledModule", "Session", "default_session",
           "given_session", "runtime_library"]


class _Counts(NamedTuple):
    hits: int
    misses: int
    size: int


class CacheInfo(_Counts):
    """Compile cache counters of a :class:`Session`: a named tuple of the in-memory
    ``hits`` and ``misses`` and the number of modules held (``size``), with two more
    attributes beside it: the modules loaded from the disk cache (``disk_hits``) and the
    disk entries refused, by reason (``rejected``; see :data:`pymlirjit.runtime.cache.REASONS`)."""

    disk_hits: int
    rejected: dict[str, int]

    def __new__(cls, hits: int, misses: int, size: int, disk_hits: int = 0,
                rejected: dict[str, int] | None = None) -> CacheInfo:
        info = super().__new__(cls, hits, misses, size)
        info.disk_hits = disk_hits
        info.rejected = dict(rejected or {})
        return info

    def __repr__(self) -> str:
        return (f"CacheInfo(hits={self.hits}, misses={self.misses}, size={self.size}, "
                f"disk_hits={self.disk_hits}, rejected={self.rejected})")


@dataclass(frozen=True)
class _ModuleKey:
    source: str
    options: CompileOptions
    explicit: tuple[Callback | LinkedExtern, ...]


class Session:
    """Compiles MLIR modules and caches one engine per module.

    ``pipeline`` (a pass pipeline string or list of passes; default
    :data:`pymlirjit.lowering.pipeline.DEFAULT_PIPELINE`), ``opt_level`` and ``shared_libs``
    are defaults for :meth:`compile`, held as one frozen
    :class:`~pymlirjit.runtime.prepare.CompileOptions` (:attr:`options`), as are ``fastmath``
    (fast-math flags on float ops, see :mod:`pymlirjit.codegen.optimize`), ``parallel``
    (loops on several threads, see ``docs/threads.md``), ``boundscheck``
    (out-of-bounds memref accesses raise IndexError, see :mod:`pymlirjit.codegen.checks`) and
    ``error_model`` (``"numpy"``: an integer division by zero gives 0, not an exception).
    ``callbacks`` is
    this session's registry:
    ``@callback(session=s)`` adds to it; callbacks registered without a session are
    visible to every session. ``cache_dir`` turns on the on-disk cache (see
    :mod:`pymlirjit.runtime.cache`): a new process then loads modules compiled before instead
    of compiling them again; ``""`` means the default folder
    (:func:`~pymlirjit.runtime.cache.default_cache_dir`), never the current one.
    ``disk_cache`` is the session's store: a
    :class:`~pymlirjit.runtime.cache.DiskCache`, or a :class:`~pymlirjit.runtime.cache.NullCache`
    without ``cache_dir``.
    """

    def __init__(self, pipeline: str | Sequence[str] | None = None, opt_level: int = 2,
                 shared_libs: Iterable[str] = (), *,
                 registry: CallbackRegistry | None = None,
                 cache_dir: str | Path | None = None, fastmath: bool = False,
                 parallel: bool = False, boundscheck: bool = False,
                 error_model: str = "python") -> None:
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir must be a folder's path (a str or pathlib.Path), got "
                            f"{type(cache_dir).__name__}")
        if cache_dir is not None and not os.fspath(cache_dir):
            cache_dir = default_cache_dir()  # as an empty $PYMLIRJIT_CACHE_DIR: not "."
        # Without a folder, the store every session shares: it keeps and counts nothing.
        self.disk_cache: CacheStore = DiskCache(cache_dir) if cache_dir is not None else _NO_CACHE
        self._disk_hits = 0
        self._rejected: dict[str, int] = {}  # disk entries refused, by reason
        self.options = CompileOptions.make(pipeline, opt_level, shared_libs, fastmath,
                                           parallel, boundscheck, error_model)
        self.callbacks = registry if registry is not None else CallbackRegistry()
        self._cache: dict[tuple[_ModuleKey, tuple[Callback | LinkedExtern | None, ...]],
                          CompiledModule] = {}
        self._declared: dict[_ModuleKey, tuple[str, ...]] = {}
        self._hits = 0
        self._misses = 0
        self._lock = threading.RLock()
        # Made by the first watch(): most sessions unpickled by a worker have none.
        self._subscribers: weakref.WeakSet[Invalidated] | None = None

    def __repr__(self) -> str:
        return f"<Session: {len(self._cache)} cached modules>"

    @property
    def pipeline(self) -> str:
        """The default pass pipeline (normalized)."""
        return self.options.pipeline

    @property
    def opt_level(self) -> int:
        """The default optimization level."""
        return self.options.opt_level

    @property
    def shared_libs(self) -> tuple[str, ...]:
        """The default shared libraries (resolved paths)."""
        return self.options.shared_libs

    def cache_info(self) -> CacheInfo:
        """Hits, misses, the number of cached modules, loads from the disk cache and
        disk entries refused by reason."""
        return CacheInfo(self._hits, self._misses, len(self._cache), self._disk_hits,
                         dict(self._rejected))

    @property
    def lock(self) -> threading.RLock:
        """The lock (reentrant) under which this session compiles, clears its cache and
        notifies its subscribers, and kernels replace and retire their compiled
        functions: none of these interleave."""
        return self._lock

    def clear_cache(self) -> None:
        """Forget every cached module. Modules already handed out keep working;
        ``@mlir_kernel`` functions compile again on their next call."""
        with self._lock:
            self._cache.clear()
            self._declared.clear()
            self._hits = self._misses = self._disk_hits = 0
            self._rejected.clear()
            for subscriber in list(self._subscribers or ()):
                subscriber.invalidate()

    def watch(self, subscriber: Invalidated) -> None:
        """Call ``subscriber.invalidate()``, under :attr:`lock`, whenever the cache is
        cleared (the subscriber is kept weakly)."""
        with self._lock:
            if self._subscribers is None:
                self._subscribers = weakref.WeakSet()
            self._subscribers.add(subscriber)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        """Pickled as its options and cache folder, not its cache nor its registry's
        callbacks (kernels ship the callbacks they link). Unpickled in another process,
        it is a new session, whose disk cache (if any) applies its own checks; unpickled
        twice in a process, it is one session. The default session is the receiver's."""
        if self is _default_session:
            return default_session, ()
        # Pickled again only when they change: a receiver that has this session's token
        # unpickles none of it, and one that has not, with pymlirjit's classes found once.
        store, options, registry = self.disk_cache, self.options, self.callbacks
        parts = self.__dict__.get("_pickled_parts")
        if parts is None or parts[:3] != (store, options, registry):
            directory = store.directory if isinstance(store, DiskCache) else None
            parts = self.__dict__["_pickled_parts"] = (store, options, registry, pickle.dumps(
                (options, directory, registry is default_registry())))
        return by_value, ("session", pickle_token(self), parts[3])

    def find_callback(self, name: str, explicit: Sequence[Any] = ()) -> Any:
        """The callback ``@name`` links to: explicit ones first (callbacks, or externs
        and kernels: see :mod:`pymlirjit.runtime.externs`), then this session's registry, then
        the default one."""
        for cb in explicit:
            if cb.name == name:
                return cb
        return self.callbacks.get(name) or default_registry().get(name)

    def compile(self, source: str | Path | Any, *, pipeline: str | Sequence[str] | None = None,
                opt_level: int | None = None, shared_libs: Iterable[str] | None = None,
                callbacks: Iterable[Linkable] = (), cache: bool | None = None,
                options: CompileOptions | None = None,
                fastmath: bool | None = None, parallel: bool | None = None,
                boundscheck: bool | None = None,
                error_model: str | None = None) -> CompiledModule:
        """Compile ``source`` (MLIR text, a path to a ``.mlir`` file, or a module built
        in Python: see :func:`pymlirjit.lowering.builtsource.built_text`), or return the
        cached module compiled from the same source text, options and callbacks.

        ``options`` replaces the session's (:attr:`options`); ``pipeline``,
        ``opt_level``, ``shared_libs``, ``fastmath``, ``parallel``, ``boundscheck`` and
        ``error_model``, where given, replace those.
        ``cache``: use the on-disk cache (``None``: if the session has a ``cache_dir``;
        ``True``: that one, or :func:`pymlirjit.runtime.cache.default_cache_dir`).
        ``callbacks`` may also hold externs and kernels (see :mod:`pymlirjit.runtime.externs`):
        a module linking one is never stored on disk (an address is the process's).
        """
        text, filename = _read_source(source)
        # Externs resolve now (kernels compile): their addresses are part of the key.
        explicit = tuple(map(_linkable, listed_callbacks(callbacks)))
        chosen = (self.options if options is None else options).replace(
            pipeline, opt_level, shared_libs, fastmath, parallel, boundscheck,
            error_model).resolved()
        key = _ModuleKey(text, chosen, explicit)
        # A fork waits for the compile (see boundary/buildgate); then this lock.
        with building(), self._lock:  # memory -> store -> compile -> store
            declared = self._declared.get(key)
            if declared is not None:
                full_key = (key, tuple(self.find_callback(n, explicit) for n in declared))
                cached = self._cache.get(full_key)
                if cached is not None:
                    self._hits += 1
                    return cached
            self._misses += 1
            module, declared = self._compile_or_load(key, filename, self._disk_cache(cache))
            if chosen.parallel_loops:
                claim_task_pool(module.engine)
            set_origin(module, _FunctionOrigin(weakref.ref(self), key))
            full_key = (key, tuple(self.find_callback(n, explicit) for n in declared))
            if any(isinstance(cb, LinkedExtern) for cb in explicit):
                self._forget_relinked(key)
            self._declared[key] = declared
            self._cache[full_key] = module
            return module

    def _forget_relinked(self, key: _ModuleKey) -> None:
        """Forget the modules of ``key``'s source and options that link the same names
        to other addresses (a kernel they link has recompiled since): kept, they would
        pin old code that no new compile asks for."""
        names = [cb.name for cb in key.explicit]
        for old in [k for k in self._cache if k[0].source == key.source
                    and k[0].options == key.options and k[0] != key
                    and [cb.name for cb in k[0].explicit] == names]:
            del self._cache[old]
            self._declared.pop(old[0], None)

    def _disk_cache(self, cache: bool | None) -> CacheStore:
        if cache is None:
            return self.disk_cache
        if not cache:
            return _NO_CACHE
        return self.disk_cache if isinstance(self.disk_cache, DiskCache) else _default_disk_cache()

    def _compile_or_load(self, key: _ModuleKey, filename: str, store: CacheStore,
                         ) -> tuple[CompiledModule, tuple[str, ...]]:
        options = key.options
        # Every callback the source could link is part of the key: those named by an
        # @symbol in it (a superset of its private declarations, known without parsing).
        linkable: dict[str, Any] = {}
        for name in symbol_references(key.source):
            cb = self.find_callback(name, key.explicit)
            if cb is not None:
                linkable[name] = cb
        if any(isinstance(cb, LinkedExtern) for cb in linkable.values()):
            store = _NO_CACHE  # linked by address: no other process can trust the code
        disk_key = store.key(key.source, options.pipeline_key, options.opt_level,
                             options.shared_libs,
                             [(n, cb.signature.mlir) for n, cb in linkable.items()])
        linkable.update(builtin_callbacks())  # linked by checked code, declared by none
        found = store.load(disk_key)
        if isinstance(found, CachedModule):
            try:
                module = load(found, key.source, linkable, options)
            except _UNLOADABLE as exc:  # e.g. a library moved: compile afresh
                found = store.reject(disk_key, "unloadable", f"{type(exc).__name__}: {exc}")
            else:
                self._disk_hits += 1
                return module, found.declared
        if found is not None:
            self._rejected[found.reason] = self._rejected.get(found.reason, 0) + 1
        prepared = lower(prepare(key.source, options,
                                 lambda name: self.find_callback(name, key.explicit),
                                 filename), options)
        engine = build_engine(prepared, options)
        if prepared.signatures:  # else nothing to call: nothing worth caching
            entry = store.save(disk_key, lambda: build_artifact(engine, prepared, options))
            if entry is not None and entry.kind == "shared":
                # Run the code every later process will load: the native entries exist
                # only there, and this process's behaviour is theirs.
                try:
                    return load(entry, key.source, linkable, options), prepared.declared
                except _UNLOADABLE as exc:
                    rejection = store.reject(disk_key, "unloadable",
                                             f"{type(exc).__name__}: {exc}")
                    self._rejected[rejection.reason] = self._rejected.get(rejection.reason, 0) + 1
        return engine_module(engine, prepared, key.source, options), prepared.declared


# Sessions' parts unpickled in this process, by their bytes (all immutable: options, a
# folder's path, a flag): a session unpickled with the parts of one unpickled before (the
# default options, mostly) shares them instead of unpickling ~1 KB of options again.
_parts_seen: dict[bytes, tuple[CompileOptions, str | None, bool]] = {}


@rebuilds("session")
def _session_by_value(token: str, parts: bytes) -> Session:
    def make() -> Session:
        seen = _parts_seen.get(parts)
        if seen is None:
            if len(_parts_seen) >= 64:  # many senders' options: keep the newest only
                _parts_seen.clear()
            seen = _parts_seen[parts] = loads_parts(parts)
        options, cache_dir, default_callbacks = seen
        session = Session(registry=default_registry() if default_callbacks else None,
                          cache_dir=cache_dir)
        session.options = options
        return session
    return interned(token, make)  # type: ignore[no-any-return]


class _FunctionOrigin:
    """How a session's compiled function pickles: as the source, options and callbacks
    it was compiled from (the session held weakly: a module does not keep it)."""

    def __init__(self, session: weakref.ref[Session], key: _ModuleKey) -> None:
        self.session = session
        self.key = key

    def __call__(self, function: CompiledFunction) -> tuple[Any, ...]:
        module = function.module
        callbacks = list(self.key.explicit)
        for cb in (module.callbacks.values() if module is not None else ()):
            if cb not in callbacks:
                callbacks.append(cb)  # linked by name here: shipped, linked explicitly
        return _function_by_value, (
            self.session(), self.key.source, self.key.options, tuple(callbacks),
            function.name, function.display_name,
            tuple(p.name for p in function.signature.params), function.release_gil)


def _function_by_value(session: Session | None, source: str, options: CompileOptions,
                       callbacks: tuple[Callback, ...], name: str, display_name: str,
                       params: tuple[str, ...], release_gil: bool | None,
                       ) -> CompiledFunction:
    session = session if session is not None else default_session()
    function = session.compile(source, options=options, callbacks=callbacks)[name]
    if (display_name, params, release_gil) == (
            function.display_name, tuple(p.name for p in function.signature.params),
            function.release_gil):
        return function
    return function.with_options(display_name, list(params), release_gil)


def _read_source(source: str | Path | Any) -> tuple[str, str]:
    if isinstance(source, Path):
        return read_mlir_file(source), str(source)
    if not isinstance(source, str):
        return built_text(source), "<python-built module>"
    return source, "<source>"



# What an authentic entry may fail with in this process (a callback or library missing).
_UNLOADABLE = (LinkError, OSError, RuntimeError, KeyError, ValueError)
_NO_CACHE = NullCache()
_default_disk: DiskCache | None = None


def _default_disk_cache() -> DiskCache:
    global _default_disk
    with _default_lock:
        if _default_disk is None:
            _default_disk = DiskCache(default_cache_dir())
        return _default_disk


_default_session: Session | None = None
_default_lock = threading.Lock()


def given_session(session: object) -> Session | None:
    """``session`` as a ``session=`` argument: a :class:`Session` or None, else
    ``TypeError`` naming what was given."""
    if session is not None and not isinstance(session, Session):
        raise TypeError(f"session= takes a pymlirjit Session, got {type(session).__name__}")
    return session


def default_session() -> Session:
    """The session the decorators use when given none (created on first use)."""
    global _default_session
    if _default_session is None:
        with _default_lock:
            if _default_session is None:
                _default_session = Session(registry=default_registry())
    return _default_session
