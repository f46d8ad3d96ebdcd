"""Compiled modules: from a lowered module or a cache entry to Python callables.

The stages after :mod:`pymlirjit.runtime.prepare`, each returning a value: :func:`build_engine`
(a lowered module -> MLIR's JIT engine), then :mod:`pymlirjit.runtime.artifacts`'
``build_artifact`` (-> a cache entry) and ``load`` (an entry -> :class:`CompiledCode`),
and :class:`CompiledModule`, which gives the public
functions of any :class:`CompiledCode` as :class:`~pymlirjit.runtime.function.CompiledFunction`
attributes under the module's GIL policy (:func:`call_policy`).
:func:`attach_native_entries` generates the native entry points the code lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
from ..boundary.failures import ALLOCATION_TRACKERS
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
from ..codegen.options import CompileOptions
from ..errors import LinkError, SignatureError
from ..lowering.pipeline import runtime_library_defining
from .engine import ExecutionEngine
from .function import CompiledFunction
from .gilpolicy import call_policy, is_async_runtime, only_failure_callback
from .microkernelcache import LinkedModule
from .prepare import PreparedModule
from .sharedlib import NativeCode

__all__ = ["CompiledCode", "CompiledModule", "UncallableFunction", "attach_native_entries",
           "build_engine", "build_native_code", "engine_module", "has_global_constructors",
           "runtime_library_hint", "slot_values", "trackers_needed"]


def trackers_needed(needed: Iterable[str]) -> dict[str, int]:
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
        self.runs_threads = linked_threads or any(map(is_async_runtime, shared_libs))
        #: Whether threads this module's calls run may call Python (then a call must
        #: never keep the GIL: ``release_gil=False`` is refused).
        self.threads_call_python = threads_call_python or (
            self.runs_threads and links_callbacks)
        release_gil, unwind = call_policy(links_callbacks, shared_libs,
                                          only_failure_callback(callbacks) and not calls_python,
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
    for symbol, address in trackers_needed(engine.needed_symbols).items():
        engine.raw_register_runtime(symbol, address)
    prepare_entries(prepared.registrations.values())
    for symbol, cb in prepared.registrations.items():
        engine.raw_register_runtime(symbol, cb)  # the engine keeps the callback alive
    for symbol, native in prepared.externs.items():
        engine.raw_register_runtime(symbol, native)  # and the extern's target code
    for symbol, compiled in prepared.microkernels.items():
        engine.raw_register_runtime(symbol, compiled)  # and the microkernel's
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


def has_global_constructors(module: Any) -> bool:
    """Whether the lowered ``module`` has global constructors (``llvm.mlir.global_ctors``)."""
    return any(op.operation.name == "llvm.mlir.global_ctors"
               for op in module.body.operations)


def engine_module(engine: ExecutionEngine, prepared: PreparedModule, source: str,
                  options: CompileOptions) -> CompiledModule:
    """The module of code JIT-compiled in this process (no native entries yet); its
    global constructors run now, as mlir-runner runs them before its entry."""
    if has_global_constructors(prepared.module):
        engine.initialize()
    lowered = (LinkedModule(prepared.module, prepared.microkernels) if prepared.microkernels
               else prepared.module)
    return CompiledModule(engine, source, lowered, prepared.signatures,
                          prepared.linked, prepared.shared_libs(options),
                          prepared.registrations, context=prepared.context,
                          uncallable=prepared.uncallable,
                          calls_python=any(e.calls_python for e in prepared.externs.values()),
                          linked_threads=any(e.runs_threads for e in prepared.externs.values()),
                          threads_call_python=any(e.runs_threads and e.calls_python
                                                  for e in prepared.externs.values()))


