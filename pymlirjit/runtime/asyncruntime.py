"""MLIR's async runtime, owned once per process: engines using it are freed only once
none of its tasks runs their code (see :class:`AsyncRuntime`)."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, ClassVar

from mlir.execution_engine import ExecutionEngine as _UpstreamEngine

from ..boundary import ffi
from ..boundary.callframe import native_frame_slot, task_slot
from ..codegen.scheduling import SETUP, task_scheduling
from ..errors import LinkError
from ..lowering.pipeline import new_context, parse_module

__all__ = ["AsyncRuntime", "claim_task_pool", "engine_lookup", "has_hooks"]

_CAPSULE_NAME = b"mlir.execution_engine.ExecutionEngine._CAPIPtr"
# Upstream's engine calls a library's init hook when it loads it, and its destroy hook
# when the engine is destroyed (see AsyncRuntime).
_HOOK_INIT = "__mlir_execution_engine_init"
_HOOK_DESTROY = "__mlir_execution_engine_destroy"


def engine_lookup(engine: _UpstreamEngine, name: str) -> int:
    """The address of ``name`` in ``engine``'s JIT (0 if nothing defines it)."""
    return ffi.execution_engine_lookup(ffi.capsule_pointer(engine._CAPIPtr, _CAPSULE_NAME),
                                       name)


def has_hooks(library: ctypes.CDLL) -> bool:
    """Whether ``library`` has the init and destroy hooks upstream's engine calls."""
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


class AsyncRuntime:
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
    _loaded: ClassVar[dict[str, AsyncRuntime]] = {}
    # Engines kept until their runtimes are idle, with those runtimes. Reachable from the
    # owners (never freed), it is not cleared when the interpreter finalizes its modules.
    _retired: ClassVar[dict[int, tuple[Any, tuple[AsyncRuntime, ...]]]] = {}

    def __init__(self, path: str, library: ctypes.CDLL) -> None:
        self.path = path
        self._context = new_context()
        shims = parse_module(_async_shims(), self._context)
        # Tasks scheduled by the shims run on threads of their own in a forked child,
        # as a parallel module's do (the one mechanism: see claim_task_pool).
        task_scheduling(shims, spin_ticks=0)
        self._owner = _UpstreamEngine(shims, 2, [path])
        # Never freed, not even when the interpreter finalizes its modules: the destroy
        # hook must not run, nor retired engines be freed, while a worker may still run.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self))
        self._base = ffi.object_base(ctypes.cast(getattr(library, _HOOK_INIT),
                                              ctypes.c_void_p).value or 0)
        self._symbols = {name: engine_lookup(self._owner, _SHIM_PREFIX + name)
                         for name in _ASYNC_SCHEDULERS}
        in_flight = engine_lookup(self._owner, _SHIM_PREFIX + "in_flight")
        if not (in_flight and all(self._symbols.values())):
            raise LinkError(f"cannot set up MLIR's async runtime {path!r}: its scheduling "
                            f"functions do not resolve", [path])
        # A Python-level function type: reading the count need not drop the GIL.
        self._in_flight = ctypes.PYFUNCTYPE(ctypes.c_int64)(in_flight)
        claim = engine_lookup(self._owner, _CLAIM)
        setup = engine_lookup(self._owner, SETUP)
        if not (claim and setup):
            raise LinkError(f"cannot set up MLIR's async runtime {path!r}: its task "
                            f"scheduling does not resolve", [path])
        _claim_task_pool(claim, setup)

    @classmethod
    def get(cls, path: str, library: ctypes.CDLL) -> AsyncRuntime | None:
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
                address = engine_lookup(self._owner, symbol)
                if address and ffi.object_base(address) != self._base:
                    address = 0
                self._symbols[symbol] = address
            return address

    def in_flight(self) -> int:
        """The number of tasks scheduled through the shims that have not finished."""
        return int(self._in_flight())

    @classmethod
    def retire(cls, engine: Any, runtimes: tuple[AsyncRuntime, ...]) -> None:
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


# -- whose thread pool tasks use: one claim per loaded code, one rule per process -------

_CLAIM = "__pymlirjit_par_claim"
_fork_handler = threading.Lock()
_pool_state = {"watching": False, "forked": False}


def _forked() -> None:
    _pool_state["forked"] = True


def claim_task_pool(code: Any) -> None:
    """Let the code ``code`` (it has ``function_address``; a parallel module's) hand its
    tasks to the async runtime's thread pool in this process, unless this process is a
    fork of one that may have started that pool (its workers are not in the child):
    tasks then run on threads of their own (see
    :func:`pymlirjit.codegen.scheduling.task_scheduling`, which made the code; the runtime's
    owner, :class:`AsyncRuntime`, claims its own code)."""
    try:
        address = code.function_address(_CLAIM)
        setup = code.function_address(SETUP)
    except LinkError:
        return  # schedules no task
    _claim_task_pool(address, setup)


def _claim_task_pool(address: int, setup: int) -> None:
    """Set the code up with this process's pthread keys (the function at ``setup``), in
    every process; call the claim function at ``address`` unless this process is a fork
    of one that claimed the pool before (whose workers the pool counts, and which are
    not here)."""
    ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(setup)(
        task_slot().key.value + 1, native_frame_slot().key.value + 1)
    with _fork_handler:
        if not _pool_state["watching"]:
            os.register_at_fork(after_in_child=_forked)
            _pool_state["watching"] = True
        if _pool_state["forked"]:
            return
    ctypes.CFUNCTYPE(None)(address)()
