"""Sessions: compile MLIR source, link its callbacks, and cache one engine per module.

:meth:`Session.compile` parses the source, marks every public function and every
callback declaration with ``llvm.emit_c_interface``, adds the ABI shims some types
need, lowers the module, JIT-compiles it, registers the callbacks it declares and
returns a :class:`CompiledModule` whose functions are Python callables. Compiling the
same source again with the same options and callbacks returns the cached module.

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

import logging
import re
import tempfile
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import abi
from .abi import RESERVED_PREFIX, boundary_abi, callback_shim, kernel_shim
from .cache import (
    CachedModule,
    CacheStore,
    DiskCache,
    NullCache,
    ObjectEngine,
    default_cache_dir,
)
from .callbacks import Callback, CallbackRegistry, Invalidated, default_registry, prepare_entries
from .engine import ExecutionEngine
from .errors import Diagnostic, LinkError, MLIRError
from .function import CompiledFunction
from .pipeline import check_opt_level as _check_opt_level
from .pipeline import lower, new_context, normalize_pipeline, parse_module, runtime_library
from .sharedlib import (
    SharedLibrary,
    build_native_code,
    link_shared_library,
    slot_values,
    supported,
)
from .signature import Signature, from_func_op
from .types import TensorType

__all__ = ["CacheInfo", "CompiledModule", "Session", "default_session", "runtime_library"]


class CacheInfo(NamedTuple):
    """Compile cache counters of a :class:`Session`: in-memory ``hits`` and ``misses``,
    the number of modules held (``size``), the modules loaded from the disk cache
    (``disk_hits``) and the disk entries refused, by reason (``rejected``; see
    :data:`pymlirjit.cache.REASONS`)."""

    hits: int
    misses: int
    size: int
    disk_hits: int
    rejected: dict[str, int]


@dataclass(frozen=True)
class _ModuleKey:
    source: str
    pipeline: str
    opt_level: int
    shared_libs: tuple[str, ...]
    explicit: tuple[Callback, ...]


def call_policy(calls_back: bool, shared_libs: Sequence[str]) -> tuple[bool | None, bool]:
    """Whether a module's functions release the GIL (``None``: only when other Python
    threads exist), and whether a failing callback may unwind their call at once."""
    # Compiled code that calls back into Python gains nothing from dropping the GIL
    # and pays for re-taking it in every callback; but code that may start threads
    # (anything using shared libraries, such as MLIR's async runtime) must drop it,
    # or its threads' callbacks would wait for the GIL forever. Code that never calls
    # back drops it when other Python threads exist (None), for them to run.
    release_gil: bool | None = True if shared_libs else (False if calls_back else None)
    # For the same reason, only code without shared libraries may be unwound
    # (longjmp) out of when a callback fails: it has no threads and no runtime state.
    return release_gil, calls_back and not shared_libs


class CompiledModule:
    """A JIT-compiled module: its functions as attributes (or ``module["name"]``),
    ``engine``, ``source`` (the MLIR given) and ``lowered_mlir`` (after the pipeline).

    ``native_entries`` gives the addresses of native entry points already compiled
    with the code (a module loaded from the disk cache); the others are generated.
    """

    def __init__(self, engine: ExecutionEngine | ObjectEngine | SharedLibrary, source: str,
                 lowered: Any, signatures: dict[str, tuple[Signature, str]],
                 callbacks: dict[str, Callback], shared_libs: tuple[str, ...] = (),
                 runtime_symbols: dict[str, Callback] | None = None,
                 native_entries: dict[str, int] | None = None) -> None:
        self.engine = engine
        self.source = source
        self._lowered = lowered
        self.callbacks = callbacks
        self.runtime_symbols = runtime_symbols or {}
        self.entries = signatures  # name -> (signature, C-ABI entry function)
        release_gil, unwind = call_policy(bool(callbacks), shared_libs)
        self.functions: dict[str, CompiledFunction] = {
            name: CompiledFunction(engine, name, signature,
                                   engine.function_address(abi.ciface_symbol(entry)),
                                   module=self, links_callbacks=bool(callbacks),
                                   release_gil=release_gil, unwind=unwind)
            for name, (signature, entry) in signatures.items()
        }
        if native_entries is None:
            self._prepare_native_entries()
        else:
            for name, address in native_entries.items():
                self.functions[name].use_native(address, engine)
        for name, function in self.functions.items():
            if not hasattr(type(self), name) and name not in self.__dict__:
                self.__dict__[name] = function  # plain attribute access: no __getattr__

    def _prepare_native_entries(self) -> None:
        from .abi import native_kernel_supported

        if not any(native_kernel_supported(f.signature) for f in self.functions.values()):
            return
        from .native import NativeBatch  # llvmlite loads only when needed

        batch = NativeBatch()
        ready = [f.add_native_entry(batch) for f in self.functions.values()]
        addresses, code = batch.compile()
        for use in ready:
            if use is not None:
                use(addresses, code)

    @property
    def lowered_mlir(self) -> str:
        """The module in the LLVM dialect, as it was JIT-compiled (or loaded)."""
        return str(self._lowered)

    def __getitem__(self, name: str) -> CompiledFunction:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"the module defines no public function @{name}; it has: "
                           f"{', '.join(sorted(self.functions)) or 'none'}") from None

    def __getattr__(self, name: str) -> CompiledFunction:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]  # type: ignore[no-any-return]
        raise AttributeError(f"the module defines no public function @{name}; it has: "
                             f"{', '.join(sorted(functions)) or 'none'}")

    def __repr__(self) -> str:
        return f"<CompiledModule with {', '.join('@' + n for n in self.functions)}>"


class Session:
    """Compiles MLIR modules and caches one engine per module.

    ``pipeline`` (a pass pipeline string or list of passes; default
    :data:`pymlirjit.pipeline.DEFAULT_PIPELINE`), ``opt_level`` and ``shared_libs``
    are defaults for :meth:`compile`. ``callbacks`` is this session's registry:
    ``@callback(session=s)`` adds to it; callbacks registered without a session are
    visible to every session. ``cache_dir`` turns on the on-disk cache (see
    :mod:`pymlirjit.cache`): a new process then loads modules compiled before instead
    of compiling them again. ``disk_cache`` is the session's store: a
    :class:`~pymlirjit.cache.DiskCache`, or a :class:`~pymlirjit.cache.NullCache`
    without ``cache_dir``.
    """

    def __init__(self, pipeline: str | Sequence[str] | None = None, opt_level: int = 2,
                 shared_libs: Iterable[str] = (), *,
                 registry: CallbackRegistry | None = None,
                 cache_dir: str | Path | None = None) -> None:
        self.disk_cache: CacheStore = (DiskCache(cache_dir) if cache_dir is not None
                                       else NullCache())
        self._disk_hits = 0
        self._rejected: Counter[str] = Counter()
        self.pipeline = normalize_pipeline(pipeline)
        self.opt_level = _check_opt_level(opt_level)
        self.shared_libs = tuple(runtime_library(str(p)) for p in shared_libs)
        self.callbacks = registry if registry is not None else CallbackRegistry()
        self._cache: dict[Any, CompiledModule] = {}
        self._declared: dict[_ModuleKey, tuple[str, ...]] = {}
        self._hits = 0
        self._misses = 0
        self._lock = threading.RLock()
        self._subscribers: weakref.WeakSet[Invalidated] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"<Session: {len(self._cache)} cached modules>"

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
            for subscriber in list(self._subscribers):
                subscriber.invalidate()

    def watch(self, subscriber: Invalidated) -> None:
        """Call ``subscriber.invalidate()``, under :attr:`lock`, whenever the cache is
        cleared (the subscriber is kept weakly)."""
        with self._lock:
            self._subscribers.add(subscriber)

    def find_callback(self, name: str, explicit: Sequence[Callback] = ()) -> Callback | None:
        """The callback ``@name`` links to: explicit ones first, then this session's
        registry, then the default one."""
        for cb in explicit:
            if cb.name == name:
                return cb
        return self.callbacks.get(name) or default_registry().get(name)

    def compile(self, source: str | Path, *, pipeline: str | Sequence[str] | None = None,
                opt_level: int | None = None, shared_libs: Iterable[str] | None = None,
                callbacks: Iterable[Callback] = (), cache: bool | None = None,
                ) -> CompiledModule:
        """Compile ``source`` (MLIR text or a path to a ``.mlir`` file), or return the
        cached module compiled from the same source, options and callbacks.

        ``cache``: use the on-disk cache (``None``: if the session has a ``cache_dir``;
        ``True``: that one, or :func:`pymlirjit.cache.default_cache_dir`).
        """
        text, filename = _read_source(source)
        explicit = tuple(callbacks)
        for cb in explicit:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be @callback functions, got {cb!r}")
        key = _ModuleKey(
            text,
            self.pipeline if pipeline is None else normalize_pipeline(pipeline),
            self.opt_level if opt_level is None else _check_opt_level(opt_level),
            self.shared_libs if shared_libs is None
            else tuple(runtime_library(str(p)) for p in shared_libs),
            explicit,
        )
        with self._lock:
            declared = self._declared.get(key)
            if declared is not None:
                full_key = (key, tuple(self.find_callback(n, explicit) for n in declared))
                cached = self._cache.get(full_key)
                if cached is not None:
                    self._hits += 1
                    return cached
            self._misses += 1
            module, declared = self._compile_or_load(key, filename, self._disk_cache(cache))
            full_key = (key, tuple(self.find_callback(n, explicit) for n in declared))
            self._declared[key] = declared
            self._cache[full_key] = module
            return module

    def _disk_cache(self, cache: bool | None) -> CacheStore:
        if cache is None:
            return self.disk_cache
        if not cache:
            return _NO_CACHE
        return self.disk_cache if isinstance(self.disk_cache, DiskCache) else _default_disk_cache()

    def _compile_or_load(self, key: _ModuleKey, filename: str, store: CacheStore,
                         ) -> tuple[CompiledModule, tuple[str, ...]]:
        # Every callback the source could link is part of the key: those named by an
        # @symbol in it (a superset of its private declarations, known without parsing).
        linkable = {}
        for name in set(_SYMBOL_REFERENCE.findall(key.source)):
            cb = self.find_callback(name, key.explicit)
            if cb is not None:
                linkable[name] = cb
        disk_key = store.key(key.source, key.pipeline, key.opt_level, key.shared_libs,
                             [(n, cb.signature.mlir) for n, cb in linkable.items()])
        found = store.load(disk_key)
        if isinstance(found, CachedModule):
            try:
                module = self._load(found, key, linkable)
            except _UNLOADABLE as exc:  # e.g. a library moved: compile afresh
                found = store.reject(disk_key, "unloadable", f"{type(exc).__name__}: {exc}")
            else:
                self._disk_hits += 1
                return module, found.declared
        if found is not None:
            self._rejected[found.reason] += 1
        built = self._build(key, filename)
        if not built.signatures:  # nothing to call: nothing worth caching
            return built.module(key), built.declared
        entry = store.save(disk_key, lambda: built.cache_entry(key.shared_libs))
        if entry is not None and entry.kind == "shared":
            # Run the code every later process will load: the native entries exist only
            # there, and this process's behaviour is theirs.
            try:
                return self._load(entry, key, linkable), built.declared
            except _UNLOADABLE as exc:
                rejection = store.reject(disk_key, "unloadable", f"{type(exc).__name__}: {exc}")
                self._rejected[rejection.reason] += 1
        return built.module(key), built.declared

    def _load(self, entry: CachedModule, key: _ModuleKey,
              linkable: dict[str, Callback]) -> CompiledModule:
        """The module of a cache entry, its callbacks bound to ``linkable`` ones and its
        shared libraries those of ``key`` (an entry names none: they are key inputs)."""
        symbols = {symbol: linkable[name] for symbol, name in entry.callbacks.items()}
        callbacks = {name: linkable[name] for name in entry.callbacks.values()}
        if entry.kind == "shared":
            library = SharedLibrary(entry.code, key.shared_libs)
            library.bind(*slot_values(entry.slots, callbacks))
            native = {name: library.function_address(symbol)
                      for name, symbol in entry.native_entries.items()}
            return CompiledModule(library, key.source, entry.lowered_mlir, entry.functions,
                                  callbacks, key.shared_libs, symbols, native)
        prepare_entries(symbols.values())
        engine = ObjectEngine(entry.code, symbols, key.shared_libs, entry.needed)
        return CompiledModule(engine, key.source, entry.lowered_mlir, entry.functions,
                              callbacks, key.shared_libs, symbols)

    def _build(self, key: _ModuleKey, filename: str) -> _Built:
        from mlir import ir

        context = new_context()
        module = parse_module(key.source, context, filename)
        _check_reserved_names(module, filename)
        unit = ir.UnitAttr.get(context)
        signatures: dict[str, tuple[Signature, str]] = {}
        linked: dict[str, Callback] = {}
        registrations: list[tuple[str, Callback]] = []
        declared: list[str] = []
        shims: list[str] = []
        with context, ir.Location.unknown():
            for op in list(module.body.operations):
                if op.operation.name != "func.func":
                    continue
                name = ir.StringAttr(op.attributes["sym_name"]).value
                signature = from_func_op(op)
                is_declaration = len(op.regions[0].blocks) == 0
                private = ("sym_visibility" in op.attributes
                           and ir.StringAttr(op.attributes["sym_visibility"]).value == "private")
                if is_declaration:
                    declared.append(name)
                    cb = self.find_callback(name, key.explicit)
                    if cb is None:  # left to shared libraries or the process, as written
                        continue
                    cb.signature.check_matches(signature, f"callback @{name}",
                                               "its Python annotations", "its MLIR declaration")
                    linked[name] = cb
                    if boundary_abi(signature).needs_shim:
                        symbol = abi.callback_shim_symbol(name)
                        shims.append(callback_shim(name, symbol, signature))
                        op.operation.erase()
                    else:
                        symbol = name
                        op.attributes["llvm.emit_c_interface"] = unit
                    registrations.append((abi.ciface_symbol(symbol), cb))
                elif not private:
                    op.attributes["llvm.emit_c_interface"] = unit
                    _make_tensor_arguments_read_only(op, signature)
                    entry = name
                    if boundary_abi(signature).needs_shim:
                        entry = abi.entry_shim_symbol(name)
                        shims.append(kernel_shim(name, entry, signature))
                    signatures[name] = (signature, entry)
            if shims:
                shim_module = parse_module("\n".join(shims), context, "<pymlirjit shims>")
                for op in list(shim_module.body.operations):
                    shim_name = ir.StringAttr(op.attributes["sym_name"]).value
                    if shim_name in signatures:  # the kernel's declaration: defined already
                        continue
                    op.operation.detach_from_parent()
                    module.body.append(op)
        lower(module, key.pipeline, filename)
        engine = ExecutionEngine(module, key.opt_level, key.shared_libs)
        prepare_entries(cb for _, cb in registrations)
        for symbol, cb in registrations:
            engine.raw_register_runtime(symbol, cb)  # the engine keeps the callback alive
        missing = engine.missing_symbols()
        if missing:
            names = sorted({abi.ciface_name(s) for s in missing})
            raise LinkError(
                f"{filename}: no @callback and no shared library defines "
                f"{', '.join('@' + n for n in names)}; define them with @callback (or pass "
                f"callbacks=[...]) or pass the shared library that defines them", names)
        return _Built(engine, context, module, signatures, linked, dict(registrations),
                      tuple(declared))


@dataclass
class _Built:
    """A module compiled by MLIR's engine, before it becomes a :class:`CompiledModule`."""

    engine: ExecutionEngine
    context: Any
    lowered: Any  # the MLIR module, in the LLVM dialect
    signatures: dict[str, tuple[Signature, str]]
    linked: dict[str, Callback]  # callback name -> callback
    registrations: dict[str, Callback]  # runtime symbol -> callback
    declared: tuple[str, ...]

    def module(self, key: _ModuleKey) -> CompiledModule:
        compiled = CompiledModule(self.engine, key.source, self.lowered, self.signatures,
                                  self.linked, key.shared_libs, self.registrations)
        compiled._context = self.context  # type: ignore[attr-defined]
        return compiled

    def cache_entry(self, shared_libs: tuple[str, ...]) -> CachedModule:
        """The disk-cache entry of this module: a shared library with its native entry
        points where one can be linked, else the object code alone."""
        engine = self.engine
        engine.function_address(abi.ciface_symbol(next(iter(self.signatures.values()))[1]))
        with tempfile.TemporaryDirectory(prefix="pymlirjit-") as scratch:
            dumped = Path(scratch, "module.o")
            engine.dump_to_object_file(str(dumped))  # the code generated by the lookup
            object_code = dumped.read_bytes()
        description = (self.signatures,
                       {symbol: cb.name for symbol, cb in self.registrations.items()},
                       self.declared, tuple(sorted(engine.needed_symbols)), str(self.lowered))
        if supported():
            release_gil, unwind = call_policy(bool(self.linked), shared_libs)
            native = build_native_code(self.signatures, self.registrations, release_gil,
                                       unwind)
            parts = [object_code] + ([native.object_code] if native.object_code else [])
            try:
                return CachedModule("shared", link_shared_library(parts), *description,
                                    native.slots, native.entries)
            except LinkError as exc:  # a compiler that cannot: the object code alone
                logging.getLogger("pymlirjit").debug("caching object code: %s", exc)
        return CachedModule("object", object_code, *description)


def _check_reserved_names(module: Any, filename: str) -> None:
    """Refuse symbols named like pymlirjit's shims: the session would call a function
    defined by the user with a shim's ABI."""
    from mlir import ir

    found = []
    for op in module.body.operations:
        attributes = op.operation.attributes
        if "sym_name" not in attributes:
            continue
        name = ir.StringAttr(attributes["sym_name"]).value
        if name.startswith(RESERVED_PREFIX):
            found.append(Diagnostic(
                "error", f"@{name}: symbols starting with {RESERVED_PREFIX!r} are reserved "
                f"for pymlirjit's own functions; rename it", str(op.location),
            ).renamed_source(filename))
    if found:
        raise MLIRError("reserved symbol names", found)


def _make_tensor_arguments_read_only(op: Any, signature: Signature) -> None:
    """Tell bufferization not to write into tensor arguments: they alias the caller's
    numpy arrays, and a tensor is a value."""
    from mlir import ir

    if not any(isinstance(t, TensorType) for t in signature.param_types):
        return
    existing = (list(ir.ArrayAttr(op.attributes["arg_attrs"])) if "arg_attrs" in op.attributes
                else [ir.DictAttr.get({})] * len(signature.params))
    updated = []
    for t, attrs in zip(signature.param_types, existing):
        entries = {named.name: named.attr for named in ir.DictAttr(attrs)}
        if isinstance(t, TensorType):
            entries["bufferization.writable"] = ir.BoolAttr.get(False)
        updated.append(ir.DictAttr.get(entries))
    op.attributes["arg_attrs"] = ir.ArrayAttr.get(updated)


def _read_source(source: str | Path) -> tuple[str, str]:
    if isinstance(source, Path):
        try:
            return source.read_text(), str(source)
        except OSError as exc:
            raise FileNotFoundError(f"cannot read MLIR source {source}: {exc}") from exc
    if not isinstance(source, str):
        raise TypeError(f"source must be MLIR text or a pathlib.Path, "
                        f"got {type(source).__name__}")
    return source, "<source>"


_SYMBOL_REFERENCE = re.compile(r"@([A-Za-z_$.][\w$.]*)")

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


def default_session() -> Session:
    """The session the decorators use when given none (created on first use)."""
    global _default_session
    if _default_session is None:
        with _default_lock:
            if _default_session is None:
                _default_session = Session(registry=default_registry())
    return _default_session
