"""The llvmlite JIT, and :class:`NativeBatch`: the entry points and trampolines
generated together, one LLVM module (:class:`_Unit`) per batch."""

from __future__ import annotations

import ctypes
import functools
import itertools
import threading
from typing import Any

from llvmlite import ir

from ..abi import BoundaryABI
from ..buildgate import building
from .allocations import add_trackers
from .builder import (
    _C_API,
    _LIBC,
    _Unit,
    check_object_layouts,
)
from .entry import ExactTypes, _EntryBuilder
from .guard import _GuardBuilder
from .trampoline import _forward, _TrampolineBuilder
from .wrapper import _CtypesWrapperBuilder

__all__ = ["NativeBatch", "process_trackers"]


class _Jit:
    """One llvmlite MCJIT engine for every generated entry point of the process."""

    def __init__(self) -> None:
        import llvmlite.binding as llvm

        check_object_layouts()  # before any code reads those fields
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        for name in _C_API:
            address = ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
            llvm.add_symbol(name, address)
        libc = ctypes.CDLL(None)
        for name in _LIBC:
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        self.llvm = llvm
        target = llvm.Target.from_default_triple()
        self.target = target
        self.machine = target.create_target_machine(opt=2)  # for the triple
        self.lock = threading.Lock()
        self.counter = itertools.count()

    def _parse(self, module: ir.Module) -> Any:
        """``module`` as LLVM's own, verified. No IR optimization pipeline follows:
        code generation at -O2 makes these small functions as fast, and llvmlite's pass
        managers leak ~60 KB per module run."""
        module.triple = self.machine.triple
        parsed = self.llvm.parse_assembly(str(module))
        parsed.verify()
        return parsed

    def emit_object(self, module: ir.Module) -> bytes:
        """Position-independent object code of ``module``, for a shared library."""
        parsed = self._parse(module)
        machine = self.target.create_target_machine(opt=2, reloc="pic", codemodel="default")
        return bytes(machine.emit_object(parsed))

    def compile_all(self, module: ir.Module, names: list[str]) -> tuple[list[int], Any]:
        """The addresses of ``names`` in ``module``, and the owner of their code (its own
        engine, so that the code is freed when the owner is collected)."""
        parsed = self._parse(module)
        with self.lock:
            # An engine takes ownership of its target machine: each gets its own.
            machine = self.target.create_target_machine(opt=2)
            engine = self.llvm.create_mcjit_compiler(parsed, machine)
            engine.finalize_object()
            addresses = [int(engine.get_function_address(name)) for name in names]
            return addresses, engine


@functools.cache
def _jit() -> _Jit:
    return _Jit()


class NativeBatch:
    """Entry points and trampolines generated together: one LLVM module, one code
    generation (which costs milliseconds whatever the module's size)."""

    def __init__(self, relocatable: bool = False) -> None:
        self.jit = _jit()
        self.unit = _Unit(f"pymlirjit_batch_{next(self.jit.counter)}", relocatable)
        self.symbols: list[str] = []

    @property
    def relocatable(self) -> bool:
        """Whether the code reads Python objects and addresses from slots (see
        :class:`_Unit`) and is emitted as an object file rather than run here."""
        return self.unit.relocatable

    @property
    def slot_names(self) -> list[str]:
        """Relocatable code: the name of the value each slot must hold, by index."""
        return list(self.unit.slots)

    def _symbol(self, kind: str, symbol: str | None = None) -> str:
        symbol = symbol or f"pymlirjit_{kind}_{next(self.jit.counter)}"
        self.symbols.append(symbol)
        return symbol

    def add_kernel_entry(self, abi: BoundaryABI, target: int | str,
                         calls: Any, release_gil: bool | None = True, unwind: bool = False,
                         symbol: str | None = None, exact: ExactTypes = ()) -> int:
        """Add the native entry of the C-ABI function at ``target`` (an address, or
        the name of a function linked with the code); returns its index.

        ``calls`` is the call machinery (:func:`pymlirjit.boundary.callframe.call_machinery`)
        when the module links Python callbacks: each call then has a record, which its
        callbacks find and which says whether one failed; else ``None``. ``release_gil`` whether
        to release the GIL while the compiled code runs (``None``: only when other Python
        threads exist); ``unwind`` whether a failing
        callback may end the call at once with ``longjmp`` (only safe for code that
        starts no threads and holds no resources across calls). The entry is a
        vectorcall function (see :mod:`pymlirjit.boundary.vectorcall`). ``symbol`` names it
        (default: a name unique in the process). ``exact``, if given, names the exact
        argument types of the calls it takes (a generic kernel's binding: see
        :data:`pymlirjit.boundary.aliases.ExactTypes`; code for this process only).
        """
        assert not (exact and self.relocatable), "exact types are tested in-process only"
        _EntryBuilder(self.unit, self._symbol("entry", symbol), abi, target, calls,
                      release_gil, unwind, exact).build()
        return len(self.symbols) - 1

    def add_callback_trampoline(self, signature: Any, abi: BoundaryABI, function: Any,
                                helpers: Any, symbol: str | None = None) -> int:
        """Add a C function with ``abi``'s boundary signature calling the Python
        ``function``; returns its index. ``helpers`` provides ``name`` (the callback's),
        ``frame_key`` (the pthread key of the current call record), ``foreign_record``
        (the record of threads without a call), ``record(error)`` and
        ``convert_result(value)``. Relocatable code names the slots of these after
        ``callback_slot(helpers.name, ...)``."""
        _TrampolineBuilder(self.unit, self._symbol("callback", symbol), signature, abi,
                           function, helpers).build()
        return len(self.symbols) - 1

    def add_ctypes_wrapper(self, abi: BoundaryABI, target: int, helpers: Any,
                           symbol: str | None = None) -> int:
        """Add a C function with ``abi``'s boundary signature that calls the ctypes entry
        of a callback at ``target`` (see ``pymlirjit.boundary.callback._build_ctypes_entry``) and
        fails the call as a trampoline does if the callback did not succeed; returns its
        index. ``helpers`` as for :meth:`add_callback_trampoline` (``frame_key``,
        ``foreign_record``, ``culprit`` are read). In-process code only: relocatable
        code forwards to the callback's address, which is this wrapper."""
        assert not self.relocatable, "ctypes entries exist only in this process"
        _CtypesWrapperBuilder(self.unit, self._symbol("wrapper", symbol), abi, target,
                              helpers).build()
        return len(self.symbols) - 1

    def add_guard(self, abi: BoundaryABI, target: int | str, calls: Any, unwind: bool,
                  symbol: str | None = None) -> int:
        """Add a guard of the C-ABI function at ``target`` (an address, or the name of
        a function linked with the code): a function with the same C ABI that opens a
        call record around each call (see :class:`_GuardBuilder`), for callers that are
        not native entries (ctypes, through a raw address, and the Python path);
        returns its index. ``calls`` is the call machinery; ``unwind`` whether a failing
        callback may ``longjmp`` back to the guard."""
        _GuardBuilder(self.unit, self._symbol("guard", symbol), abi, target, calls,
                      unwind).build()
        return len(self.symbols) - 1

    def add_allocation_trackers(self, frame_key: int) -> list[str]:
        """Add the allocation trackers compiled code of modules without shared libraries
        calls instead of ``malloc``, ``aligned_alloc`` and ``free`` (see
        :mod:`pymlirjit.boundary.native.allocations`), exported by their reserved names, which it
        returns; ``frame_key`` is the call machinery's pthread key."""
        names = add_trackers(self.unit, frame_key)
        self.symbols.extend(names)
        return names

    def add_forwarder(self, symbol: str, abi: BoundaryABI, slot: str) -> int:
        """Relocatable code: a function ``symbol`` with ``abi``'s boundary signature
        that calls the function whose address the slot ``slot`` holds (a callback's
        ctypes entry, for types no trampoline serves); returns its index."""
        assert self.relocatable, "forwarders only serve relocatable code"
        _forward(self.unit, self._symbol("forwarder", symbol), abi, slot)
        return len(self.symbols) - 1

    def compile(self) -> tuple[list[int], object]:
        """Generate the code: the addresses (by index), and what must outlive every use
        of them (the code itself and the objects it points at)."""
        assert not self.relocatable, "relocatable code is emitted, not run here"
        if not self.symbols:
            return [], ()
        with building():  # a fork waits for it
            addresses, engine = self.jit.compile_all(self.unit.module, self.symbols)
        return addresses, (engine, self.unit.embedded)

    def emit_object(self) -> bytes:
        """Relocatable code: the object file defining every function added (by the
        names in ``symbols``), for a shared library."""
        assert self.relocatable, "only relocatable code is emitted"
        with building():  # a fork waits for it
            return self.jit.emit_object(self.unit.module)


_tracker_code: list[object] = []  # the process trackers' machine code, kept for good


@functools.cache
def process_trackers() -> dict[str, int]:
    """The allocation trackers of this process (symbol -> address; see
    :mod:`pymlirjit.boundary.native.allocations`), compiled once, which code JIT-compiled or
    linked in this process calls (a shared library defines its own)."""
    from ..callframe import call_machinery

    batch = NativeBatch()
    names = batch.add_allocation_trackers(call_machinery().frame_key)
    addresses, code = batch.compile()
    _tracker_code.append(code)
    return dict(zip(names, addresses))
