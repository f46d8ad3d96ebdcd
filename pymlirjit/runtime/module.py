"""Compiled modules: from a lowered module or a cache entry to Python callables.

The stages after :mod:`pymlirjit.runtime.prepare`, each returning a value: :func:`build_engine`
(a lowered module -> MLIR's JIT engine), :func:`build_artifact` (-> a cache entry: a
shared library or an object file), :func:`load` (an entry -> :class:`CompiledCode`,
through the :data:`LOADERS` table), and :class:`CompiledModule`, which gives the public
functions of any :class:`CompiledCode` as :class:`~pymlirjit.runtime.function.CompiledFunction`
attributes under the module's GIL policy (:func:`call_policy`).
:func:`attach_native_entries` generates the native entry points the code lacks.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..boundary.abi import (
    boundary_abi,
    ciface_name,
    ciface_symbol,
    native_callback_supported,
    native_kernel_supported,
)
from ..boundary.callback import Callback, TrampolineHelpers, prepare_entries
from ..boundary.callframe import call_machinery, culprit_token
from ..boundary.failures import ALLOCATION_TRACKERS, FAIL_SYMBOL
from ..boundary.relocation import (
    ARRAY_FROM_DESCR,
    FINISH_CALL,
    FOREIGN_RECORD,
    FRAME_KEY,
    HAND_OVER,
    array_from_descr,
    callback_slot,
    well_known,
)
from ..boundary.signature import Signature
from ..boundary.sparseshims import with_flat_callbacks
from ..codegen.options import CompileOptions
from ..errors import LinkError, SignatureError
from ..lowering.pipeline import runtime_library, runtime_library_defining
from .cache import CachedModule
from .engine import ExecutionEngine
from .function import CompiledFunction
from .objectfile import ObjectEngine
from .prepare import PreparedModule
from .sharedlib import NativeCode, SharedLibrary, link_shared_library, supported

__all__ = ["LOADERS", "CompiledCode", "CompiledModule", "attach_native_entries",
           "UncallableFunction", "build_artifact", "build_engine", "build_native_code",
           "call_policy",
           "engine_module", "load", "runtime_library_hint", "slot_values"]


def call_policy(calls_back: bool, shared_libs: Sequence[str],
                only_on_failure: bool = False, threads: bool = False,
                ) -> tuple[bool | None, bool]:
    """Whether a module's functions release the GIL (``None``: only when other Python
    threads exist), and whether a failing callback may unwind their call at once.
    ``only_on_failure``: its only callback is checked mode's failure callback, which runs
    when a check fails, so it is no reason to keep the GIL. ``threads``: it calls a
    kernel that runs threads which call Python (a linked parallel kernel whose loop calls
    back): as for a module with shared libraries, whose threads' callbacks need the GIL,
    and whose calls must not be unwound while they run."""
    # Compiled code that calls back into Python gains nothing from dropping the GIL
    # and pays for re-taking it in every callback; but code that may start threads
    # (anything using shared libraries, such as MLIR's async runtime) must drop it,
    # or its threads' callbacks would wait for the GIL forever. Code that never calls
    # back drops it when other Python threads exist (None), for them to run.
    keeps_gil = calls_back and not only_on_failure
    threaded = bool(shared_libs) or threads
    release_gil: bool | None = True if threaded else (False if keeps_gil else None)
    # For the same reason, only code without shared libraries may be unwound
    # (longjmp) out of when a callback fails: it has no threads and no runtime state.
    return release_gil, calls_back and not threaded


def _only_failure_callback(linked: Iterable[str]) -> bool:
    return set(linked) == {FAIL_SYMBOL}


def _trackers_needed(needed: Iterable[str]) -> dict[str, int]:
    """The allocation trackers of this process among the symbols ``needed``."""
    wanted = set(ALLOCATION_TRACKERS.values()).intersection(needed)
    if not wanted:
        return {}
    from ..boundary.native.batch import process_trackers  # llvmlite loads only when needed

    return {symbol: address for symbol, address in process_trackers().items()
            if symbol in wanted}


class CompiledCode(Protocol):
    """Loaded machine code of a module, whatever its artifact kind (MLIR's
    :class:`~pymlirjit.runtime.engine.ExecutionEngine`, a
    :class:`~pymlirjit.runtime.sharedlib.SharedLibrary`, an
    :class:`~pymlirjit.runtime.objectfile.ObjectEngine`): the address of each of its functions.
    Native entry points compiled with the code, where an artifact has them, come with
    it from its loader (see :data:`LOADERS`)."""

    def function_address(self, name: str) -> int:
        """The address of the function ``name``; :class:`LinkError` if there is none."""
        ...


class CompiledModule:
    """A JIT-compiled module: its functions as attributes (or ``module["name"]``),
    ``engine``, ``source`` (the MLIR given) and ``lowered_mlir`` (after the pipeline).

    ``native_entries`` gives the addresses of native entry points already compiled
    with the code (a module loaded from the disk cache), ``guards`` those of guards
    (see :attr:`CompiledFunction.address`). The constructor generates no
    code: :func:`attach_native_entries` generates the others. ``context`` (the MLIR
    context of ``lowered``) is kept alive with the module.
    """

    def __init__(self, engine: CompiledCode, source: str,
                 lowered: Any, signatures: dict[str, tuple[Signature, str]],
                 callbacks: dict[str, Callback], shared_libs: tuple[str, ...] = (),
                 runtime_symbols: dict[str, Callback] | None = None,
                 native_entries: dict[str, int] | None = None, *,
                 context: Any = None, uncallable: Mapping[str, str] | None = None,
                 guards: dict[str, int] | None = None, calls_python: bool = False,
                 linked_threads: bool = False, threads_call_python: bool = False) -> None:
        self.engine = engine
        self.source = source
        self._lowered = lowered
        self._context = context
        self.callbacks = callbacks
        self.runtime_symbols = runtime_symbols or {}
        self.entries = signatures  # name -> (signature, C-ABI entry function)
        # Public functions Python cannot call (why): they fail when called, not before.
        self.uncallable = {name: UncallableFunction(name, why)
                           for name, why in (uncallable or {}).items()}
        # calls_python: it calls a kernel (an extern) that calls Python callbacks, whose
        # errors reach this module's call record.
        links_callbacks = bool(callbacks) or calls_python
        # linked_threads: it calls a kernel whose code runs threads;
        # threads_call_python: one whose threads call Python.
        self.runs_threads = linked_threads or any(map(_is_async_runtime, shared_libs))
        #: Whether threads this module's calls run may call Python (then a call must
        #: never keep the GIL: ``release_gil=False`` is refused).
        self.threads_call_python = threads_call_python or (
            self.runs_threads and links_callbacks)
        release_gil, unwind = call_policy(links_callbacks, shared_libs,
                                          _only_failure_callback(callbacks) and not calls_python,
                                          threads_call_python)
        guards = guards or {}
        self.functions: dict[str, CompiledFunction] = {
            name: CompiledFunction(engine, name, signature,
                                   engine.function_address(ciface_symbol(entry)),
                                   module=self, links_callbacks=links_callbacks,
                                   release_gil=release_gil, unwind=unwind,
                                   guard=guards.get(name))
            for name, (signature, entry) in signatures.items()
        }
        for name, address in (native_entries or {}).items():
            self.functions[name].use_native(address, engine)
        for name, function in self.functions.items():
            if not hasattr(type(self), name) and name not in self.__dict__:
                self.__dict__[name] = function  # plain attribute access: no __getattr__

    @property
    def lowered_mlir(self) -> str:
        """The module in the LLVM dialect, as it was JIT-compiled (or loaded)."""
        return str(self._lowered)

    def __getitem__(self, name: str) -> CompiledFunction:
        try:
            return self.functions[name]
        except KeyError:
            if name in self.uncallable:
                raise SignatureError(self.uncallable[name].reason) from None
            raise KeyError(f"the module defines no public function @{name}; it has: "
                           f"{', '.join(sorted(self.functions)) or 'none'}") from None

    def __getattr__(self, name: str) -> CompiledFunction:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]  # type: ignore[no-any-return]
        uncallable = self.__dict__.get("uncallable", {})
        if name in uncallable:
            return uncallable[name]  # type: ignore[no-any-return]
        raise AttributeError(f"the module defines no public function @{name}; it has: "
                             f"{', '.join(sorted(functions)) or 'none'}")

    def __repr__(self) -> str:
        return f"<CompiledModule with {', '.join('@' + n for n in self.functions)}>"


class UncallableFunction:
    """A public function of a module that Python cannot call (``reason`` says why):
    calling it raises :class:`~pymlirjit.errors.SignatureError`."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise SignatureError(self.reason)

    def __repr__(self) -> str:
        return f"<uncallable @{self.name}>"


def build_native_code(functions: Mapping[str, tuple[Signature, str]],
                      runtime_symbols: Mapping[str, Callback], release_gil: bool | None,
                      unwind: bool, trackers: bool = False) -> NativeCode:
    """The native entries of ``functions`` (name -> (signature, C-ABI entry name)), each
    calling ``_mlir_ciface_<entry>`` under the module's GIL and unwinding policy, and
    the functions compiled code calls for ``runtime_symbols`` (symbol -> callback): a
    trampoline where the types allow one, else a forwarder to the callback's ctypes
    entry. With callbacks, each function also gets a guard, which the Python path
    calls (see :attr:`pymlirjit.runtime.function.CompiledFunction.address`). ``trackers``: the
    code allocates through the allocation trackers, defined here."""
    from ..boundary.native import NativeBatch  # llvmlite loads only when code is generated

    batch = NativeBatch(relocatable=True)
    calls = call_machinery() if runtime_symbols else None
    if trackers:
        batch.add_allocation_trackers(call_machinery().frame_key)
    entries: dict[str, str] = {}
    guards: dict[str, str] = {}
    for i, (name, (signature, entry)) in enumerate(functions.items()):
        if native_kernel_supported(signature):
            symbol = f"pymlirjit_entry_{i}"
            batch.add_kernel_entry(boundary_abi(signature), ciface_symbol(entry), calls,
                                   release_gil, unwind, symbol)
            entries[name] = symbol
        if calls is not None:
            guards[name] = f"pymlirjit_guard_{i}"
            batch.add_guard(boundary_abi(signature), ciface_symbol(entry), calls, unwind,
                            guards[name])
    for symbol, cb in runtime_symbols.items():
        if native_callback_supported(cb.signature):
            batch.add_callback_trampoline(cb.signature, cb.abi, cb.__wrapped__,
                                          TrampolineHelpers(cb), symbol)
        else:
            batch.add_forwarder(symbol, cb.abi, callback_slot(cb.name, "entry"))
    if not batch.symbols:
        return NativeCode(None, (), {})
    return NativeCode(batch.emit_object(), tuple(batch.slot_names), entries, guards)


def slot_values(names: Iterable[str], callbacks: Mapping[str, Callback],
                ) -> tuple[list[int], list[object]]:
    """The values of the slots ``names`` in this process, with ``callbacks`` (by
    callback name) for the slots of callbacks: the numbers to store, and the objects
    they point at (to keep alive with the code)."""
    values: list[int] = []
    objects: list[object] = []
    helpers: dict[str, TrampolineHelpers] = {}
    for name in names:
        number: int | None = None
        if name == FINISH_CALL:
            obj: object = call_machinery().finish_call
        elif name == HAND_OVER:
            obj = call_machinery().hand_over
        elif name == FRAME_KEY:
            number = call_machinery().frame_key
        elif name == FOREIGN_RECORD:
            number = call_machinery().foreign_record
        elif name == ARRAY_FROM_DESCR:
            number = array_from_descr()
        elif name.startswith("callback:"):
            callback_name, _, what = name.removeprefix("callback:").rpartition(":")
            cb = callbacks[callback_name]
            if what == "entry":
                number = cb.address
                objects.append(cb)  # which keeps its entry alive
            elif what == "function":
                obj = cb.__wrapped__
            elif what == "culprit":
                number = culprit_token(callback_name)
            elif what in ("record", "convert_result"):
                if callback_name not in helpers:
                    helpers[callback_name] = TrampolineHelpers(cb)
                obj = getattr(helpers[callback_name], what)
            else:
                raise KeyError(name)
        else:
            obj = well_known(name)
        if number is None:
            number = id(obj)
            objects.append(obj)
        values.append(number)
    return values, objects


def attach_native_entries(module: CompiledModule) -> None:
    """Generate the native entry points of ``module``'s functions that have none (and
    whose types allow one), all in one batch: code generation has a fixed cost per
    batch."""
    wanted = [f for f in module.functions.values()
              if f.native_entry is None and native_kernel_supported(f.signature)]
    if not wanted:
        return
    from ..boundary.native import NativeBatch  # llvmlite loads only when needed

    batch = NativeBatch()
    ready = [f.add_native_entry(batch) for f in wanted]
    addresses, code = batch.compile()
    for use in ready:
        if use is not None:
            use(addresses, code)


# The build stage: a lowered module -> artifacts (the JIT engine, then a cache entry).

def build_engine(prepared: PreparedModule, options: CompileOptions) -> ExecutionEngine:
    """JIT-compile ``prepared`` (lowered) with MLIR's engine and register the callbacks
    it calls. Raises :class:`LinkError` naming every symbol nothing defines, before any
    code runs. The module's global constructors run when the engine serves a module
    (:func:`engine_module`), not here: a module loaded from the cache entry built from
    the engine runs its own, and they must run once."""
    # All code allocates through the trackers (pymlirjit.boundary.native.allocations): a call
    # that unwinds frees what they put on its list, including what kernels it called
    # (whose own calls may not unwind) allocated for it; else they are malloc and free.
    from ..boundary.native.trackedcalls import track_allocations

    track_allocations(prepared.module)
    engine = ExecutionEngine(prepared.module, options.opt_level,
                             prepared.shared_libs(options))
    for symbol, address in _trackers_needed(engine.needed_symbols).items():
        engine.raw_register_runtime(symbol, address)
    prepare_entries(prepared.registrations.values())
    for symbol, cb in prepared.registrations.items():
        engine.raw_register_runtime(symbol, cb)  # the engine keeps the callback alive
    for symbol, native in prepared.externs.items():
        engine.raw_register_runtime(symbol, native)  # and the extern's target code
    missing = engine.missing_symbols()
    if missing:
        names = sorted({ciface_name(s) for s in missing})
        hint = runtime_library_hint(missing)
        raise LinkError(
            f"{prepared.filename}: no @callback and no shared library defines "
            f"{', '.join('@' + n for n in names)}; define them with @callback (or pass "
            f"callbacks=[...]) or pass the shared library that defines them{hint}", names)
    return engine


def runtime_library_hint(missing: Iterable[str]) -> str:
    """`` (MLIR's libX.so defines @a, @b)`` for the missing symbols a runtime library of
    MLIR's defines: the libraries mlir-runner tests pass with -shared-libs."""
    by_library: dict[str, list[str]] = {}
    for symbol in sorted(missing):
        library = runtime_library_defining(symbol)
        if library is not None:
            by_library.setdefault(library, []).append("@" + symbol)
    return "".join(f" ({library} defines {', '.join(symbols)})"
                   for library, symbols in by_library.items())


def _has_global_constructors(module: Any) -> bool:
    return any(op.operation.name == "llvm.mlir.global_ctors"
               for op in module.body.operations)


def engine_module(engine: ExecutionEngine, prepared: PreparedModule, source: str,
                  options: CompileOptions) -> CompiledModule:
    """The module of code JIT-compiled in this process (no native entries yet); its
    global constructors run now, as mlir-runner runs them before its entry."""
    if _has_global_constructors(prepared.module):
        engine.initialize()
    return CompiledModule(engine, source, prepared.module, prepared.signatures,
                          prepared.linked, prepared.shared_libs(options),
                          prepared.registrations, context=prepared.context,
                          uncallable=prepared.uncallable,
                          calls_python=any(e.calls_python for e in prepared.externs.values()),
                          linked_threads=any(e.runs_threads for e in prepared.externs.values()),
                          threads_call_python=any(e.runs_threads and e.calls_python
                                                  for e in prepared.externs.values()))


def _is_async_runtime(path: str) -> bool:
    """Whether the shared library at ``path`` is MLIR's async runtime (whose threads
    run a parallel module's loops)."""
    return os.path.basename(path).startswith("libmlir_async_runtime")


def build_artifact(engine: ExecutionEngine, prepared: PreparedModule,
                   options: CompileOptions) -> CachedModule:
    """The disk-cache entry of a module JIT-compiled by ``engine``: a shared library with
    its native entry points where one can be linked, else the object code alone."""
    signatures = prepared.signatures
    engine.function_address(ciface_symbol(next(iter(signatures.values()))[1]))
    with tempfile.TemporaryDirectory(prefix="pymlirjit-") as scratch:
        dumped = Path(scratch, "module.o")
        engine.dump_to_object_file(str(dumped))  # the code generated by the lookup
        object_code = dumped.read_bytes()
    description = (signatures,
                   {symbol: cb.name for symbol, cb in prepared.registrations.items()},
                   prepared.declared, tuple(sorted(engine.needed_symbols)),
                   str(prepared.module))
    # By file name only: a loading process finds them in its own MLIR's folder.
    runtime_libs = tuple(os.path.basename(path) for path in prepared.runtime_libs)
    constructors = _initializer_symbols(prepared, object_code)
    if supported():
        release_gil, unwind = call_policy(bool(prepared.linked), prepared.shared_libs(options),
                                          _only_failure_callback(prepared.linked))
        native = build_native_code(signatures, prepared.registrations, release_gil, unwind,
                                   bool(set(ALLOCATION_TRACKERS.values())
                                        & set(engine.needed_symbols)))
        parts = [object_code] + ([native.object_code] if native.object_code else [])
        exported = tuple(f"pymlirjit_init_{i}" for i in range(len(constructors)))
        if constructors:
            parts.append(_exported_calls(dict(zip(exported, constructors))))
        try:
            return CachedModule("shared", link_shared_library(parts), *description,
                                native.slots, native.entries, native.guards, runtime_libs,
                                dict(prepared.uncallable), exported)
        except LinkError as exc:  # a compiler that cannot: the object code alone
            logging.getLogger("pymlirjit").debug("caching object code: %s", exc)
    return CachedModule("object", object_code, *description, runtime_libs=runtime_libs,
                        uncallable=dict(prepared.uncallable), initializers=constructors)


# LLVM's JIT turns a module's llvm.global_ctors into a hidden function of this name
# (suffixed with the module's name), which ExecutionEngine.initialize() calls.
_INITIALIZER = re.compile(rb"__orc_init_func\.[A-Za-z0-9_.$]+")


def _initializer_symbols(prepared: PreparedModule, object_code: bytes) -> tuple[str, ...]:
    """The functions of ``object_code`` that run the module's global constructors."""
    if not _has_global_constructors(prepared.module):
        return ()
    found = tuple(sorted({m.decode() for m in _INITIALIZER.findall(object_code)}))
    if not found:  # a later LLVM naming them otherwise: never cache ctors that won't run
        raise LinkError(f"{prepared.filename}: the object code of its global constructors "
                        f"has no __orc_init_func; compile it with cache=False")
    return found


def _exported_calls(calls: Mapping[str, str]) -> bytes:
    """An object file of exported functions (name -> the hidden function it calls): a
    shared library exports no hidden symbol, and the initializers are hidden."""
    import llvmlite.binding as llvm  # loaded already: the native entries were generated

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = "".join(f'declare hidden void @"{target}"()\n'
                   f'define void @{name}() {{\n  call void @"{target}"()\n  ret void\n}}\n'
                   for name, target in calls.items())
    machine = llvm.Target.from_default_triple().create_target_machine(reloc="pic")
    module = llvm.parse_assembly(text)
    module.triple = machine.triple
    return bytes(machine.emit_object(module))


# The load stage: an artifact -> CompiledCode, one loader per kind of artifact.

Loader = Callable[[CachedModule, dict[str, Callback], dict[str, Callback], CompileOptions],
                  tuple[CompiledCode, dict[str, int], dict[str, int]]]


def _load_shared(entry: CachedModule, symbols: dict[str, Callback],
                 callbacks: dict[str, Callback], options: CompileOptions,
                 ) -> tuple[CompiledCode, dict[str, int], dict[str, int]]:
    library = SharedLibrary(entry.code, options.shared_libs)
    library.bind(*slot_values(entry.slots, callbacks))
    return (library, {name: library.function_address(symbol)
                      for name, symbol in entry.native_entries.items()},
            {name: library.function_address(symbol) for name, symbol in entry.guards.items()})


def _load_object(entry: CachedModule, symbols: dict[str, Callback],
                 callbacks: dict[str, Callback], options: CompileOptions,
                 ) -> tuple[CompiledCode, dict[str, int], dict[str, int]]:
    prepare_entries(symbols.values())
    natives: dict[str, Any] = {**symbols, **_trackers_needed(entry.needed)}
    return ObjectEngine(entry.code, natives, options.shared_libs, entry.needed), {}, {}


#: The loader of each artifact kind a cache entry holds (``CachedModule.kind``): given
#: the entry, its runtime symbols' callbacks, its callbacks by name and the options, the
#: loaded code, the native entries and the guards compiled with it (function ->
#: address).
LOADERS: dict[str, Loader] = {"shared": _load_shared, "object": _load_object}


def load(entry: CachedModule, source: str, linkable: Mapping[str, Callback],
         options: CompileOptions) -> CompiledModule:
    """The module of a cache entry, its callbacks bound to ``linkable`` ones (by name)
    and its shared libraries those of ``options`` (key inputs) and the MLIR runtime
    libraries the entry names, found in MLIR's own folder. Its global constructors run
    once the code is loaded. Native entries the artifact lacks are not generated here
    (see :func:`attach_native_entries`)."""
    linkable = with_flat_callbacks(linkable, entry.callbacks.values())  # sparse ones
    symbols = {symbol: linkable[name] for symbol, name in entry.callbacks.items()}
    callbacks = {name: linkable[name] for name in entry.callbacks.values()}
    shared_libs = options.shared_libs + tuple(
        path for path in map(_runtime_library_named, entry.runtime_libs)
        if path not in options.shared_libs)
    code, native, guards = LOADERS[entry.kind](
        entry, symbols, callbacks, dataclasses.replace(options, shared_libs=shared_libs))
    for symbol in entry.initializers:
        ctypes.CFUNCTYPE(None)(code.function_address(symbol))()
    return CompiledModule(code, source, entry.lowered_mlir, entry.functions, callbacks,
                          shared_libs, symbols, native, guards=guards,
                          uncallable=entry.uncallable)


def _runtime_library_named(name: str) -> str:
    """The path of the MLIR runtime library file ``name``, in MLIR's folder only."""
    if os.path.basename(name) != name or name in ("", ".", ".."):
        raise ValueError(f"a cache entry names a runtime library by a path: {name!r}")
    return runtime_library(name)
