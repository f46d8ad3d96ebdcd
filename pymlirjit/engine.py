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
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from mlir.execution_engine import ExecutionEngine as _UpstreamEngine

from .callframe import call_frame
from .errors import LinkError
from .pipeline import check_opt_level, new_context, parse_module, runtime_library

__all__ = ["ExecutionEngine", "address_of"]

_CAPSULE_NAME = b"mlir.execution_engine.ExecutionEngine._CAPIPtr"
_CIFACE = "_mlir_ciface_"
# Upstream's engine calls a library's init hook when it loads it, and its destroy hook
# when the engine is destroyed (see _AsyncRuntime).
_HOOK_INIT = "__mlir_execution_engine_init"
_HOOK_DESTROY = "__mlir_execution_engine_destroy"


class _StringRef(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]


@functools.cache
def _capi() -> Any:
    """The MLIR C API library the bindings load, with the prototypes used here."""
    import mlir._mlir_libs as libs

    library = ctypes.CDLL(os.path.join(os.path.dirname(libs.__file__), "libMLIRPythonCAPI.so"))
    library.mlirExecutionEngineLookup.argtypes = [ctypes.c_void_p, _StringRef]
    library.mlirExecutionEngineLookup.restype = ctypes.c_void_p
    return library


@functools.cache
def _capsule_pointer() -> Any:
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
    return get_pointer(("PyCapsule_GetPointer", ctypes.pythonapi))


def _engine_lookup(engine: _UpstreamEngine, name: str) -> int:
    """The address of ``name`` in ``engine``'s JIT (0 if nothing defines it)."""
    engine_pointer = _capsule_pointer()(engine._CAPIPtr, _CAPSULE_NAME)
    encoded = name.encode()
    return int(_capi().mlirExecutionEngineLookup(engine_pointer,
                                                 _StringRef(encoded, len(encoded))) or 0)


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


@functools.cache
def _dladdr() -> Any:
    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    return dladdr


def _object_base(address: int) -> int:
    """The load address of the library (or executable) whose code holds ``address``."""
    info = _DlInfo()
    return int(info.fbase or 0) if _dladdr()(address, ctypes.byref(info)) else 0


def _has_hooks(library: ctypes.CDLL) -> bool:
    return hasattr(library, _HOOK_INIT) and hasattr(library, _HOOK_DESTROY)


# The runtime functions through which MLIR's async runtime later runs compiled code (a
# coroutine's resume function, on a worker thread or on the thread that completes what it
# awaits), with the number of arguments before the coroutine handle and resume function.
_ASYNC_SCHEDULERS = {
    "mlirAsyncRuntimeExecute": 0,
    "mlirAsyncRuntimeAwaitTokenAndExecute": 1,
    "mlirAsyncRuntimeAwaitValueAndExecute": 1,
    "mlirAsyncRuntimeAwaitAllInGroupAndExecute": 1,
}
_SHIM_PREFIX = "pymlirjit_async_"

# Each scheduler shim counts the task in @in_flight and hands the runtime @resume with a
# heap record of the real handle and resume function; @resume runs the task and only then
# stops counting it, when no code of the engine that scheduled it runs any more.
_ASYNC_SHIMS_HEAD = """
llvm.mlir.global internal @in_flight(0 : i64) {addr_space = 0 : i32} : i64
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @free(!llvm.ptr)
llvm.func internal @resume(%record: !llvm.ptr) {
  %handle = llvm.load %record : !llvm.ptr -> !llvm.ptr
  %slot = llvm.getelementptr %record[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %resume = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  llvm.call @free(%record) : (!llvm.ptr) -> ()
  llvm.call %resume(%handle) : !llvm.ptr, (!llvm.ptr) -> ()
  %count = llvm.mlir.addressof @in_flight : !llvm.ptr
  %one = llvm.mlir.constant(1 : i64) : i64
  %old = llvm.atomicrmw sub %count, %one seq_cst : !llvm.ptr, i64
  llvm.return
}
llvm.func internal @record(%handle: !llvm.ptr, %resume: !llvm.ptr) -> !llvm.ptr {
  %count = llvm.mlir.addressof @in_flight : !llvm.ptr
  %one = llvm.mlir.constant(1 : i64) : i64
  %old = llvm.atomicrmw add %count, %one seq_cst : !llvm.ptr, i64
  %size = llvm.mlir.constant(16 : i64) : i64
  %record = llvm.call @malloc(%size) : (i64) -> !llvm.ptr
  llvm.store %handle, %record : !llvm.ptr, !llvm.ptr
  %slot = llvm.getelementptr %record[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  llvm.store %resume, %slot : !llvm.ptr, !llvm.ptr
  llvm.return %record : !llvm.ptr
}
llvm.func @pymlirjit_async_in_flight() -> i64 {
  %count = llvm.mlir.addressof @in_flight : !llvm.ptr
  %n = llvm.load %count atomic seq_cst {alignment = 8 : i64} : !llvm.ptr -> i64
  llvm.return %n : i64
}
"""


def _async_shims() -> str:
    """The LLVM-dialect module of the scheduler shims (see _ASYNC_SHIMS_HEAD)."""
    shims = [_ASYNC_SHIMS_HEAD]
    for name, leading in _ASYNC_SCHEDULERS.items():
        objects = [f"%object{i}" for i in range(leading)]
        types = ", ".join(["!llvm.ptr"] * (leading + 2))
        params = ", ".join(f"{o}: !llvm.ptr" for o in [*objects, "%handle", "%resume"])
        args = ", ".join([*objects, "%record", "%wrapped"])
        shims.append(f"""
llvm.func @{name}({types})
llvm.func @{_SHIM_PREFIX}{name}({params}) {{
  %record = llvm.call @record(%handle, %resume) : (!llvm.ptr, !llvm.ptr) -> !llvm.ptr
  %wrapped = llvm.mlir.addressof @resume : !llvm.ptr
  llvm.call @{name}({args}) : ({types}) -> ()
  llvm.return
}}""")
    return "\n".join(shims)


class _AsyncRuntime:
    """MLIR's async runtime library, loaded and initialized once per process.

    Upstream's engine calls a library's ``__mlir_execution_engine_init`` when it is
    created (the hook fills a map of the symbols the library gives the JIT) and its
    ``__mlir_execution_engine_destroy`` when it is destroyed. The async runtime's destroy
    hook waits for every task of its thread pool, then deletes its process-wide default
    runtime, which is never created again: any engine still or later using the library
    crashes. The wait is what made freeing an engine safe: a worker may still run the end
    of a coroutine of the engine after the code that awaited it has returned.

    Here one upstream engine, never destroyed, owns the library: it runs the init hook
    once, and compiles shims of the functions that schedule compiled code which count the
    tasks in flight (see ``_ASYNC_SHIMS_HEAD``). Engines using the library get its symbols
    and the shims from it, and are freed once no task runs (:meth:`retire`). The
    library's state lives until the process exits.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _loaded: ClassVar[dict[str, _AsyncRuntime]] = {}
    # Engines kept until their runtimes are idle, with those runtimes. Reachable from the
    # owners (never freed), it is not cleared when the interpreter finalizes its modules.
    _retired: ClassVar[dict[int, tuple[Any, tuple[_AsyncRuntime, ...]]]] = {}

    def __init__(self, path: str, library: ctypes.CDLL) -> None:
        self.path = path
        self._context = new_context()
        self._owner = _UpstreamEngine(parse_module(_async_shims(), self._context), 2, [path])
        # Never freed, not even when the interpreter finalizes its modules: the destroy
        # hook must not run, nor retired engines be freed, while a worker may still run.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self))
        self._base = _object_base(ctypes.cast(getattr(library, _HOOK_INIT),
                                              ctypes.c_void_p).value or 0)
        self._symbols = {name: _engine_lookup(self._owner, _SHIM_PREFIX + name)
                         for name in _ASYNC_SCHEDULERS}
        in_flight = _engine_lookup(self._owner, _SHIM_PREFIX + "in_flight")
        if not (in_flight and all(self._symbols.values())):
            raise LinkError(f"cannot set up MLIR's async runtime {path!r}: its scheduling "
                            f"functions do not resolve", [path])
        # A Python-level function type: reading the count need not drop the GIL.
        self._in_flight = ctypes.PYFUNCTYPE(ctypes.c_int64)(in_flight)

    @classmethod
    def get(cls, path: str, library: ctypes.CDLL) -> _AsyncRuntime | None:
        """The owner of the async runtime library at ``path``; ``None`` if the library
        is not MLIR's async runtime."""
        if not all(hasattr(library, name) for name in _ASYNC_SCHEDULERS):
            return None
        with cls._lock:
            key = os.path.realpath(path)
            runtime = cls._loaded.get(key)
            if runtime is None:
                runtime = cls._loaded[key] = cls(path, library)
            return runtime

    def address(self, symbol: str) -> int:
        """Where the library (or a shim) defines ``symbol`` for the JIT; 0 if not."""
        with self._lock:
            address = self._symbols.get(symbol)
            if address is None:
                # The owner's JIT also resolves names from the process and its own
                # code: only what lies inside the library is the library's.
                address = _engine_lookup(self._owner, symbol)
                if address and _object_base(address) != self._base:
                    address = 0
                self._symbols[symbol] = address
            return address

    def in_flight(self) -> int:
        """The number of tasks scheduled through the shims that have not finished."""
        return int(self._in_flight())

    @classmethod
    def retire(cls, engine: Any, runtimes: tuple[_AsyncRuntime, ...]) -> None:
        """Called as ``engine``, which uses ``runtimes``, is about to be freed: keep it
        while any of their tasks is in flight."""
        if any(runtime.in_flight() for runtime in runtimes):
            cls._retired[id(engine)] = (engine, runtimes)  # resurrected: see collect()
        cls.collect()

    @classmethod
    def collect(cls) -> None:
        """Free the retired engines whose runtimes have no task in flight."""
        # An engine may go if the counts read after it was retired are 0: nothing refers
        # to it, so only its tasks could run its code or schedule more of it (counted
        # before the task scheduling it ends). Each step is one atomic dict operation,
        # so other threads, or a collection re-entered from a finalizer, lose nothing.
        for key in list(cls._retired):
            entry = cls._retired.get(key)
            if entry is not None and not any(runtime.in_flight() for runtime in entry[1]):
                cls._retired.pop(key, None)


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


def address_of(callback: Any) -> int:
    """The native address of ``callback``: an int, a ctypes function pointer, a
    ``c_void_p``, or an object with an ``address`` attribute."""
    if isinstance(callback, int) and not isinstance(callback, bool):
        address = callback
    elif isinstance(callback, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        address = ctypes.cast(callback, ctypes.c_void_p).value or 0
    elif isinstance(callback, ctypes.c_void_p):
        address = callback.value or 0
    elif hasattr(callback, "address"):
        address = int(callback.address)
    else:
        raise TypeError(f"cannot take the native address of {type(callback).__name__}: pass "
                        f"a ctypes function pointer, an int address or an object with .address")
    if not address:
        raise ValueError("a runtime symbol cannot be registered at address 0")
    return address


def _external_symbols(module: Any) -> tuple[frozenset[str], frozenset[str]]:
    """(declared but undefined, defined) function names of an LLVM-dialect module."""
    from mlir import ir

    declared: set[str] = set()
    defined: set[str] = set()
    for op in module.body.operations:
        if op.operation.name != "llvm.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if len(op.regions[0].blocks) == 0:
            linkage = str(op.attributes["linkage"]) if "linkage" in op.attributes else ""
            if "extern_weak" not in linkage and not name.startswith("llvm."):
                declared.add(name)
        else:
            defined.add(name)
    return frozenset(declared), frozenset(defined)


_engines_never_destroyed: list[ExecutionEngine] = []


class ExecutionEngine(_UpstreamEngine):  # type: ignore[misc]
    """MLIR's ExecutionEngine, JIT-compiling an LLVM-dialect ``module``.

    ``ExecutionEngine(module, opt_level=2, shared_libs=[...])`` as upstream. The module
    must already be lowered to the LLVM dialect (see :func:`pymlirjit.pipeline.lower`).

    >>> import ctypes
    >>> from pymlirjit.pipeline import lower, new_context, parse_module
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
        # LLVM aborts the process on an optimization level outside 0..3.
        opt_level = check_opt_level(opt_level)
        self._needed, self._defined = _external_symbols(module)
        # Absolute paths only: dlopen would search the current folder for a bare name.
        self._shared_libs = tuple(runtime_library(str(path)) for path in shared_libs)
        # Load them here first: LLVM aborts the process on a file that is not a library.
        self._libraries = [_load_library(path) for path in self._shared_libs]
        _load_compiler_runtime()
        # MLIR's async runtime is not given to upstream's engine, which would run its
        # destroy hook when freed: a process-wide owner serves it (see _AsyncRuntime).
        self._runtimes: tuple[_AsyncRuntime, ...] = ()
        plain: list[str] = []
        kept = False
        for path, library in zip(self._shared_libs, self._libraries, strict=True):
            runtime = _AsyncRuntime.get(path, library) if _has_hooks(library) else None
            if runtime is not None:
                self._runtimes += (runtime,)
                runtime.collect()
            else:
                plain.append(path)
                kept = kept or _has_hooks(library)
        super().__init__(module, opt_level, plain, **options)
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
        self._register(_CIFACE + name, ctypes_callback)

    def raw_register_runtime(self, name: str, callback: Any) -> None:
        """Define the runtime symbol ``name`` (no prefix added) at ``callback``'s address."""
        self._register(name, callback)

    def _register(self, symbol: str, callback: Any) -> None:
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
                    f"{s} (@{s[len(_CIFACE):]})" if s.startswith(_CIFACE) else s
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
        func = self.raw_lookup(_CIFACE + name)
        if not func:
            raise LinkError(f"Unknown function {name}: the module defines no function "
                            f"@{name} with llvm.emit_c_interface", [name])
        return ctypes.CFUNCTYPE(None, ctypes.c_void_p)(func)

    def invoke(self, name: str, *ctypes_args: Any) -> None:
        """Call ``name`` through its packed interface with pointers to its arguments and
        (last) to its results, as upstream; an exception raised in a pymlirjit callback
        during the call is re-raised here."""
        func = self.lookup(name)
        packed = (ctypes.c_void_p * len(ctypes_args))()
        for i, arg in enumerate(ctypes_args):
            packed[i] = ctypes.cast(arg, ctypes.c_void_p)
        with call_frame():
            func(packed)

    def function_address(self, name: str) -> int:
        """The C-ABI address of the compiled function ``name`` (e.g. ``add`` or
        ``_mlir_ciface_add``), callable with its native signature."""
        self._check_linked()
        address = _engine_lookup(self, name)
        if not address:
            raise LinkError(f"Unknown function {name}: the module defines no such function",
                            [name])
        return int(address)
