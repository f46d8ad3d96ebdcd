"""Compiled modules: a module's functions as Python callables, and its GIL policy.

A :class:`CompiledModule` wraps compiled code (anything with ``function_address``: an
ExecutionEngine, a :class:`~pymlirjit.sharedlib.SharedLibrary`, an
:class:`~pymlirjit.objectfile.ObjectEngine`) and gives its public functions as
:class:`~pymlirjit.function.CompiledFunction` attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .abi import boundary_abi, native_callback_supported, native_kernel_supported
from .callbacks import Callback, TrampolineHelpers
from .callframe import call_machinery, culprit_token
from .engine import ExecutionEngine
from .function import CompiledFunction
from .objectfile import ObjectEngine
from .relocation import (
    ARRAY_FROM_DESCR,
    FINISH_CALL,
    FOREIGN_RECORD,
    FRAME_KEY,
    array_from_descr,
    callback_slot,
    well_known,
)
from .sharedlib import NativeCode, SharedLibrary
from .signature import Signature

__all__ = ["CompiledModule", "build_native_code", "call_policy", "slot_values"]


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
                                   engine.function_address("_mlir_ciface_" + entry),
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


def build_native_code(functions: Mapping[str, tuple[Signature, str]],
                      runtime_symbols: Mapping[str, Callback], release_gil: bool | None,
                      unwind: bool) -> NativeCode:
    """The native entries of ``functions`` (name -> (signature, C-ABI entry name)), each
    calling ``_mlir_ciface_<entry>`` under the module's GIL and unwinding policy, and
    the functions compiled code calls for ``runtime_symbols`` (symbol -> callback): a
    trampoline where the types allow one, else a forwarder to the callback's ctypes
    entry."""
    from .native import NativeBatch  # llvmlite loads only when code is generated

    batch = NativeBatch(relocatable=True)
    calls = call_machinery() if runtime_symbols else None
    entries: dict[str, str] = {}
    for i, (name, (signature, entry)) in enumerate(functions.items()):
        if native_kernel_supported(signature):
            symbol = f"pymlirjit_entry_{i}"
            batch.add_kernel_entry(boundary_abi(signature), "_mlir_ciface_" + entry, calls,
                                   release_gil, unwind, symbol)
            entries[name] = symbol
    for symbol, cb in runtime_symbols.items():
        if native_callback_supported(cb.signature):
            batch.add_callback_trampoline(cb.signature, cb.abi, cb.__wrapped__,
                                          TrampolineHelpers(cb), symbol)
        else:
            batch.add_forwarder(symbol, cb.abi, callback_slot(cb.name, "entry"))
    if not batch.symbols:
        return NativeCode(None, (), {})
    return NativeCode(batch.emit_object(), tuple(batch.slot_names), entries)


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
