"""An upstream-compatible MLIR ExecutionEngine without upstream's traps.

:class:`ExecutionEngine` is MLIR's own ``mlir.execution_engine.ExecutionEngine`` (code
written for upstream runs unchanged: ``invoke``, ``lookup``, ``raw_lookup``,
``register_runtime``, ``raw_register_runtime``), plus:

- every registered callback is kept alive as long as the engine;
- ``register_runtime`` also takes a raw address, a ctypes function pointer or any object
  with an ``address`` attribute (a pymlirjit ``@callback``, a numba ``cfunc``);
- :meth:`ExecutionEngine.function_address` gives the C-ABI address of a function;
- registering a name twice raises instead of aborting the process, and a lookup made
  while runtime symbols are missing raises :class:`~pymlirjit.LinkError` naming them,
  before anything is materialized, so the engine still works once they are registered;
- an exception raised in a pymlirjit ``@callback`` during ``invoke`` reaches the caller;
- MLIR's async runtime (a shared library with execution-engine hooks) is initialized
  once per process and never torn down, so a later engine still finds it working; an
  engine using it is freed once none of the runtime's tasks is in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

from mlir.execution_engine import ExecutionEngine as _UpstreamEngine

from ..boundary.abi import ciface_name, ciface_symbol
from ..boundary.callframe import call_frame
from ..codegen.options import listed_option
from ..errors import EngineCreationError, LinkError, MLIRError
from ..lowering.checks import check_lowered
from ..lowering.pipeline import check_opt_level, runtime_library
from ..lowering.stderrcapture import stderr_captured
from .asyncruntime import AsyncRuntime, engine_lookup, has_hooks

__all__ = ["ExecutionEngine", "address_of"]

#: What LLVM's JIT prints when generating a module's code needs symbols nothing defines.
_MISSING_SYMBOLS = re.compile(r"Symbols not found: \[(?P<symbols>[^\]]*)\]")

@functools.cache
def _load_compiler_runtime() -> None:
    """Make libgcc's soft-float routines (``__truncdfhf2``, ``__extendhfsf2``, ...)
    visible to the JIT: LLVM calls them for f16 arithmetic, and nothing else loads them."""
    path = _loaded_library_path("libgcc_s.so")
    if path:
        with contextlib.suppress(OSError):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _loaded_library_path(prefix: str) -> str | None:
    """The absolute path of a library already mapped in this process whose file name
    starts with ``prefix`` (dlopen of a bare name would search the library path, which
    may include the current folder)."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").partition("/")[2]
            if path and os.path.basename(path).startswith(prefix):
                return "/" + path
    return None


def _load_library(path: str) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        raise LinkError(f"cannot load shared library {path!r}: {exc}", [path]) from None


ADDRESS_KINDS = "an int address, a ctypes function pointer or an object with an int .address"


def address_of(target: Any, what: str = "a runtime symbol", kinds: str = ADDRESS_KINDS) -> int:
    """The native address ``target`` stands for: an int, a ctypes function pointer, a
    ``c_void_p``, or an object with an int ``address`` attribute (a numba ``cfunc``).
    Errors say ``what`` the address is for and which ``kinds`` of target it accepts."""
    address: Any = None
    if isinstance(target, int) and not isinstance(target, bool):
        address = target
    elif isinstance(target, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        address = ctypes.cast(target, ctypes.c_void_p).value or 0
    elif isinstance(target, ctypes.c_void_p):
        address = target.value or 0
    elif hasattr(target, "address"):
        address = target.address
        if not isinstance(address, int) or isinstance(address, bool):
            raise TypeError(f"{what}: {type(target).__name__}.address must be an int, got "
                            f"{address!r}")
    if address is None:
        raise TypeError(f"{what}: cannot take the native address of {target!r}; give {kinds}")
    if not 0 < address < 1 << 64:
        raise ValueError(f"{what}: address {address:#x} is not a valid address")
    return int(address)


def _external_symbols(module: Any) -> tuple[frozenset[str], dict[str, int]]:
    """The function names an LLVM-dialect module declares but does not define, and
    those it defines with the number of pointers their packed entry reads (one per
    parameter, then one for the result unless it returns void)."""
    from mlir import ir

    declared: set[str] = set()
    defined: dict[str, int] = {}
    for op in module.body.operations:
        if op.operation.name != "llvm.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if len(op.regions[0].blocks) == 0:
            linkage = str(op.attributes["linkage"]) if "linkage" in op.attributes else ""
            if "extern_weak" not in linkage and not name.startswith("llvm."):
                declared.add(name)
        else:
            returns = not str(op.attributes["function_type"]).startswith("!llvm.func<void ")
            defined[name] = len(op.regions[0].blocks[0].arguments) + returns
    return frozenset(declared), defined


_engines_never_destroyed: list[ExecutionEngine] = []


class ExecutionEngine(_UpstreamEngine):  # type: ignore[misc]
    """MLIR's ExecutionEngine, JIT-compiling an LLVM-dialect ``module``.

    ``ExecutionEngine(module, opt_level=2, shared_libs=[...])`` as upstream. The module
    must already be lowered to the LLVM dialect (see :func:`pymlirjit.lowering.pipeline.lower`).

    >>> import ctypes
    >>> from pymlirjit.lowering.pipeline import lower, new_context, parse_module
    >>> module = lower(parse_module('''
    ... func.func @twice(%x: f64) -> f64 attributes {llvm.emit_c_interface} {
    ...   %y = arith.addf %x, %x : f64
    ...   return %y : f64
    ... }''', new_context()))
    >>> engine = ExecutionEngine(module)
    >>> x, y = ctypes.c_double(21.0), ctypes.c_double()
    >>> engine.invoke("twice", ctypes.pointer(x), ctypes.pointer(y))
    >>> y.value
    42.0
    """

    def __init__(self, module: Any, opt_level: int = 2, shared_libs: Sequence[str] = (),
                 **options: Any) -> None:
        from mlir import ir

        if not isinstance(module, ir.Module):
            raise TypeError(f"ExecutionEngine takes an mlir.ir.Module lowered to the LLVM "
                            f"dialect, got {type(module).__name__}")
        # LLVM aborts the process on an optimization level outside 0..3.
        opt_level = check_opt_level(opt_level)
        self._needed, self._defined = _external_symbols(module)
        # Absolute paths only: dlopen would search the current folder for a bare name.
        self._shared_libs = tuple(runtime_library(str(path)) for path in listed_option(
            "shared_libs", shared_libs, "a list of libraries (paths, or MLIR runtime library "
            "names)", (str, os.PathLike)))
        # Load them here first: LLVM aborts the process on a file that is not a library.
        self._libraries = [_load_library(path) for path in self._shared_libs]
        _load_compiler_runtime()
        # MLIR's async runtime is not given to upstream's engine, which would run its
        # destroy hook when freed: a process-wide owner serves it (see AsyncRuntime).
        self._runtimes: tuple[AsyncRuntime, ...] = ()
        plain: list[str] = []
        kept = False
        for path, library in zip(self._shared_libs, self._libraries, strict=True):
            runtime = AsyncRuntime.get(path, library) if has_hooks(library) else None
            if runtime is not None:
                self._runtimes += (runtime,)
                runtime.collect()
            else:
                plain.append(path)
                kept = kept or has_hooks(library)
        try:
            super().__init__(module, opt_level, plain, **options)
        except RuntimeError:  # upstream says only "Failure while creating the ..."
            try:
                check_lowered(module, "<module>")  # names the ops outside the LLVM dialect
            except MLIRError as exc:  # both, as upstream's tests expect a RuntimeError
                raise EngineCreationError(exc.summary, exc.diagnostics) from None
            raise
        if kept:
            # Another library with hooks: what its destroy hook tears down is unknown,
            # and so is whether it runs compiled code later; such engines live until exit.
            _engines_never_destroyed.append(self)
        # As upstream, what the runtime exports (here, its scheduling functions through
        # the shims) is defined in the engine itself.
        self._library_symbols: dict[str, str] = {}
        for runtime in self._runtimes:
            for symbol in sorted(self._needed - self._library_symbols.keys()):
                address = runtime.address(symbol)
                if address:
                    super().raw_register_runtime(symbol, ctypes.c_void_p(address))
                    self._library_symbols[symbol] = runtime.path
        self._process = ctypes.CDLL(None)
        self._registered: dict[str, Any] = {}
        self._linked = False
        self._lock = threading.RLock()

    def __del__(self) -> None:
        # Runs before upstream frees the engine's code, which a worker of the async
        # runtime may still be running (the end of a coroutine whose result was awaited,
        # or a task nobody awaits): such engines wait until no task is in flight.
        runtimes = getattr(self, "_runtimes", ())
        if runtimes:
            runtimes[0].retire(self, runtimes)  # no global: this may run at exit

    # -- registration -------------------------------------------------------------------

    def register_runtime(self, name: str, ctypes_callback: Any) -> None:
        """Make ``ctypes_callback`` the function the compiled code calls as ``@name``.

        As upstream, the symbol is ``_mlir_ciface_<name>`` (declare the function with
        ``llvm.emit_c_interface``). The callback is kept alive with the engine; it may be
        a ctypes function pointer, an int address or any object with ``.address``.
        """
        self._register(ciface_symbol(name), ctypes_callback)

    def raw_register_runtime(self, name: str, callback: Any) -> None:
        """Define the runtime symbol ``name`` (no prefix added) at ``callback``'s address."""
        self._register(name, callback)

    def _register(self, symbol: str, callback: Any) -> None:
        if not isinstance(symbol, str) or not symbol:  # LLVM asserts on an empty name
            raise ValueError(f"a runtime symbol needs a name, got {symbol!r}")
        address = address_of(callback)
        with self._lock:
            if symbol in self._registered:
                raise LinkError(f"runtime symbol {symbol!r} is already registered in this "
                                f"engine; a JIT symbol cannot be redefined", [symbol])
            if symbol in self._defined:
                raise LinkError(f"runtime symbol {symbol!r} is defined by the module itself "
                                f"and cannot be registered", [symbol])
            if symbol in self._library_symbols:
                raise LinkError(f"runtime symbol {symbol!r} is defined in this engine by "
                                f"the shared library {self._library_symbols[symbol]!r} "
                                f"and cannot be registered", [symbol])
            super().raw_register_runtime(symbol, ctypes.c_void_p(address))
            self._registered[symbol] = callback

    @property
    def needed_symbols(self) -> frozenset[str]:
        """The external symbols the module declares (callbacks, libc, libraries)."""
        return self._needed

    @property
    def registered_symbols(self) -> tuple[str, ...]:
        """The runtime symbols registered so far."""
        return tuple(self._registered)

    # -- lookup ---------------------------------------------------------------------------

    def missing_symbols(self) -> list[str]:
        """Symbols the module declares that nothing (registration, shared libs, the
        process) defines yet."""
        return sorted(s for s in self._needed
                      if s not in self._registered and s not in self._library_symbols
                      and not self._resolvable(s))

    def _resolvable(self, symbol: str) -> bool:
        return hasattr(self._process, symbol) or any(hasattr(lib, symbol)
                                                     for lib in self._libraries)

    def _check_linked(self) -> None:
        if self._linked:
            return
        with self._lock:
            missing = self.missing_symbols()
            if missing:
                names = ", ".join(
                    f"{s} (@{ciface_name(s)})" if ciface_name(s) != s else s
                    for s in missing)
                raise LinkError(f"unresolved runtime symbols: {names}; register them "
                                f"(register_runtime) or pass the shared libraries that "
                                f"define them before looking up a function", missing)
            self._linked = True

    def raw_lookup(self, func_name: str) -> int:
        """The packed entry ``_mlir_<name>(void **)`` of a function, or 0 if unknown."""
        self._check_linked()
        return int(super().raw_lookup(func_name))

    def lookup(self, name: str) -> Any:
        """A ctypes callable for the packed interface of ``name`` (as upstream)."""
        func = self.raw_lookup(ciface_symbol(name))
        if not func:
            raise LinkError(f"Unknown function {name}: the module defines no function "
                            f"@{name} with llvm.emit_c_interface", [name])
        return ctypes.CFUNCTYPE(None, ctypes.c_void_p)(func)

    def invoke(self, name: str, *ctypes_args: Any) -> None:
        """Call ``name`` through its packed interface with pointers to its arguments and
        (last) to its results, as upstream; an exception raised in a pymlirjit callback
        during the call is re-raised here."""
        func = self.lookup(name)
        wanted = self._defined.get(ciface_symbol(name), 0)
        if len(ctypes_args) < wanted:  # the packed entry would read past the array
            raise TypeError(f"invoke({name!r}): @{name} reads {wanted} pointer(s) (one per "
                            f"argument, then one for its result), got {len(ctypes_args)}")
        packed = (ctypes.c_void_p * len(ctypes_args))()
        for i, arg in enumerate(ctypes_args):
            packed[i] = ctypes.cast(arg, ctypes.c_void_p)
        with call_frame():
            func(packed)

    def function_address(self, name: str) -> int:
        """The C-ABI address of the compiled function ``name`` (e.g. ``add`` or
        ``_mlir_ciface_add``), callable with its native signature."""
        self._check_linked()
        if not name:  # LLVM asserts (ends the process) on an empty name
            raise LinkError(f"Unknown function {name}: the module defines no such function",
                            [name])
        try:
            # The first lookup generates the code; LLVM prints why that failed (a symbol
            # no library defines) on stderr and returns 0: the error says it instead.
            with stderr_captured() as printed:
                address = engine_lookup(self, name)
                if not address:
                    raise LinkError(f"Unknown function {name}: the module defines no such "
                                    f"function", [name])
        except LinkError as exc:
            missing = _MISSING_SYMBOLS.search(printed.text)
            if missing is None:
                raise
            symbols = [s.strip() for s in missing["symbols"].split(",") if s.strip()]
            raise LinkError(f"the module's code cannot be linked: nothing defines "
                            f"{', '.join(symbols)} (a symbol the code refers to, or a "
                            f"function LLVM calls for an operation the CPU lacks); pass a "
                            f"library defining it in shared_libs=", symbols) from exc
        return int(address)
