"""Which allocations of a lowered module go through the trackers of
:mod:`pymlirjit.boundary.native.allocations` (:func:`track_allocations`)."""

from __future__ import annotations

from typing import Any

from ..failures import ALLOCATION_TRACKERS

__all__ = ["track_allocations"]

_ASYNC_RUNTIME = "mlirAsyncRuntime"  # the prefix of the async runtime's functions

# LLVM's function attributes of an allocator (allockind: alloc 1, free 4,
# uninitialized 8, aligned 32; allocsize: the size argument's index << 32, 0xFFFFFFFF
# for no element count), by C function.
_ALLOCATOR_ATTRIBUTES = {
    "malloc": [("allockind", "9"), ("allocsize", str(0xFFFFFFFF)), ("alloc-family", "malloc")],
    "aligned_alloc": [("allockind", "41"), ("allocsize", str(1 << 32 | 0xFFFFFFFF)),
                      ("alloc-family", "malloc")],
    "free": [("allockind", "4"), ("alloc-family", "malloc")],
}


def track_allocations(module: Any) -> tuple[str, ...]:
    """Make the lowered (LLVM dialect) MLIR ``module`` allocate and free through the
    trackers instead of ``malloc``, ``aligned_alloc`` and ``free`` (what
    ``memref.alloc``/``dealloc`` and bufferization's buffers lower to). Returns the
    trackers it calls.

    A module that hands tasks to MLIR's async runtime (``parallel=True``) keeps the C
    library's allocations where memory goes from one thread to another: in its
    coroutines (their frames, from ``aligned_alloc``, end on a worker thread) and in
    pymlirjit's task scheduling (``@__pymlirjit_par_*``: a task's record is freed by
    the thread that runs it). A tracked allocation is freed by the thread that made it
    or is still on its call's list, which that call would free again if it unwound; a
    tracked ``free`` of memory never tracked is a plain ``free``, so all of its frees
    are tracked."""
    from mlir import ir as mlir_ir

    table = mlir_ir.SymbolTable(module.operation)
    names = [_symbol_name(op) for op in module.body.operations]
    # Only code calling the async runtime has coroutines or task scheduling.
    threaded = {name for name, op in zip(names, module.body.operations)
                if _hands_memory_to_threads(op)} \
        if any(name.startswith(_ASYNC_RUNTIME) for name in names) else set()
    used = []
    with module.context:
        for name, tracker in ALLOCATION_TRACKERS.items():
            if name not in table or len(table[name].regions[0].blocks) > 0:
                continue  # not called, or the module's own function of that name
            declaration = table[name]
            if not threaded or name == "free":
                mlir_ir.SymbolTable.replace_all_symbol_uses(name, tracker, module.operation)
                mlir_ir.SymbolTable.set_symbol_name(declaration, tracker)
            else:
                declaration = declaration.operation.clone(
                    ip=mlir_ir.InsertionPoint.after(declaration))
                mlir_ir.SymbolTable.set_symbol_name(declaration, tracker)
                for op in module.body.operations:
                    if _symbol_name(op) not in threaded and op.regions \
                            and op.regions[0].blocks:
                        mlir_ir.SymbolTable.replace_all_symbol_uses(name, tracker, op)
            # What LLVM knows of the C functions by name, said of the trackers (which
            # behave alike): it may then still remove an allocation nothing reads.
            declaration.attributes["passthrough"] = mlir_ir.ArrayAttr.get([
                mlir_ir.ArrayAttr.get([mlir_ir.StringAttr.get(k), mlir_ir.StringAttr.get(v)])
                for k, v in _ALLOCATOR_ATTRIBUTES[name]])
            if name == "free":
                declaration.attributes["arg_attrs"] = mlir_ir.ArrayAttr.get([
                    mlir_ir.DictAttr.get({"llvm.allocptr": mlir_ir.UnitAttr.get()})])
            used.append(tracker)
    return tuple(used)


def _symbol_name(op: Any) -> str:
    from mlir import ir as mlir_ir

    if "sym_name" not in op.attributes:
        return ""
    return str(mlir_ir.StringAttr(op.attributes["sym_name"]).value)


def _hands_memory_to_threads(op: Any) -> bool:
    """Whether ``op`` (a top-level op of a lowered module) is a function that may free
    memory on another thread than the one that allocated it: a coroutine (an async
    runtime task) or pymlirjit's task scheduling (see :mod:`pymlirjit.codegen.scheduling`)."""
    from mlir import ir as mlir_ir

    if _symbol_name(op).startswith("__pymlirjit_par_"):
        return True
    if not op.regions or not op.regions[0].blocks:
        return False
    found = []

    def visit(inner: Any) -> Any:
        if inner.name.startswith("llvm.intr.coro."):
            found.append(inner)
            return mlir_ir.WalkResult.INTERRUPT
        return mlir_ir.WalkResult.ADVANCE

    op.operation.walk(visit)
    return bool(found)
