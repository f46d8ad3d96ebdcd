"""``parallel=True`` for loops with reductions: an ``scf.parallel`` with ``init`` and
``scf.reduce`` (a numba ``prange`` sum) runs on every thread too.

:func:`split_reductions` shares the loop out in chunks as
:func:`pymlirjit.codegen.parallel.split_for_threads` does for the others
(:func:`pymlirjit.codegen.chunks.share_chunks`); each chunk reduces its own range,
starting from its first iteration's values, into its own slot of per-chunk partial
results; the calling thread then combines the partial results with the loop's
``init`` values, through the loop's own reductions, in chunk order (so the result
does not depend on which thread ran which chunk, only on the thread count).
"""

from __future__ import annotations

from typing import Any

from ..lowering.walk import operations
from .chunks import (
    CHUNKS_PER_THREAD,
    declare_task_markers,
    function_entry,
    inside_parallel,
    share_chunks,
)

__all__ = ["split_reductions"]


def split_reductions(module: Any, threads: int) -> int:
    """Make each outermost one-dimensional ``scf.parallel`` with reductions run as
    ``threads`` tasks sharing out chunks (see the module's docstring); return how
    many loops. Loops of several dimensions, and reductions of values that memrefs
    cannot hold (tensors, memrefs), stay serial."""
    from mlir import ir

    loops = [op.opview for op in operations(
        module, lambda op: bool(op.results) and not inside_parallel(op),
        names={"scf.parallel"})]
    with module.context, ir.Location.unknown():
        loops = [loop for loop in loops if len(loop.lowerBound) == 1
                 and all(_storable(r.type, ir) for r in loop.results)]
        if loops:
            declare_task_markers(module)
        for loop in loops:
            _split_reduction(loop, threads)
    return len(loops)


def _storable(element: Any, ir: Any) -> bool:
    try:
        ir.MemRefType.get([1], element)
    except (ValueError, TypeError, ir.MLIRError):
        return False
    return True


def _split_reduction(loop: Any, threads: int) -> None:
    from mlir import ir
    from mlir.dialects import arith, memref, scf

    index = ir.IndexType.get()
    types = [result.type for result in loop.results]
    slots = threads * CHUNKS_PER_THREAD
    with function_entry(loop), loop.location:  # once per call, on the calling thread
        partials = [memref.AllocaOp(ir.MemRefType.get([slots], t), [], []).result
                    for t in types]
    step = loop.step[0]

    def run_chunk(owner: Any, chunk: Any, start: Any, stop: Any) -> None:
        slot = arith.AddIOp(arith.MulIOp(owner, arith.ConstantOp(
            index, CHUNKS_PER_THREAD).result).result, chunk).result
        nonempty = arith.CmpIOp(arith.CmpIPredicate.slt, start, stop).result
        ran = scf.IfOp(nonempty)
        with ir.InsertionPoint(ran.then_block):
            firsts = _first_iteration(loop, start)
            second = arith.AddIOp(start, step).result
            rest = loop.operation.clone(ip=ir.InsertionPoint.current)
            rest.operands[0] = second
            rest.operands[1] = stop
            for k, first in enumerate(firsts):
                rest.operands[3 + k] = first
            for result, partial in zip(rest.results, partials, strict=True):
                memref.StoreOp(result, partial, [slot])
            scf.YieldOp([])

    chunks = share_chunks(loop, threads, run_chunk)
    with ir.InsertionPoint(loop), loop.location:
        zero, one = (arith.ConstantOp(index, v).result for v in (0, 1))
        total = arith.MulIOp(chunks.count, chunks.chunks).result
        combine = scf.ForOp(zero, total, one, list(loop.initVals))
        with ir.InsertionPoint(combine.body):
            slot = combine.induction_variable
            owner = arith.DivUIOp(slot, chunks.chunks).result
            chunk = arith.RemUIOp(slot, chunks.chunks).result
            start = chunks.bound(owner, chunk)
            stop = chunks.bound(owner, arith.AddIOp(chunk, one).result)
            nonempty = arith.CmpIOp(arith.CmpIPredicate.slt, start, stop).result
            accumulated = list(combine.inner_iter_args)
            merged = scf.IfOp(nonempty, types, has_else=True)
            with ir.InsertionPoint(merged.then_block):
                parts = [memref.LoadOp(partial, [slot]).result for partial in partials]
                scf.YieldOp(_reduced(loop, accumulated, parts))
            with ir.InsertionPoint(merged.else_block):
                scf.YieldOp(accumulated)
            scf.YieldOp(list(merged.results))
    for old, new in zip(loop.results, combine.results, strict=True):
        old.replace_all_uses_with(new)
    loop.operation.erase()


def _first_iteration(loop: Any, start: Any) -> list[Any]:
    """Emit (at the current insertion point) the body of ``loop`` for the iteration
    ``start``; return the values it reduces."""
    from mlir import ir

    peeled = loop.operation.clone(ip=ir.InsertionPoint.current)
    body = peeled.regions[0].blocks[0]
    body.arguments[0].replace_all_uses_with(start)
    operations = list(body.operations)
    for op in operations[:-1]:  # not the scf.reduce
        op.move_before(peeled)
    values = list(operations[-1].operands)
    peeled.erase()
    return values


def _reduced(loop: Any, accumulated: list[Any], parts: list[Any]) -> list[Any]:
    """Emit (at the current insertion point) ``loop``'s reductions of each
    accumulated value with a partial result (the loop's ``scf.reduce`` regions, moved
    here: ``loop`` is erased next); return their results."""
    from mlir import ir

    reduce = list(loop.regions[0].blocks[0].operations)[-1]
    results = []
    for region, lhs, rhs in zip(reduce.regions, accumulated, parts, strict=True):
        block = region.blocks[0]
        block.arguments[0].replace_all_uses_with(lhs)
        block.arguments[1].replace_all_uses_with(rhs)
        operations = list(block.operations)
        for op in operations[:-1]:  # not the scf.reduce.return
            ir.InsertionPoint.current.insert(op.detach_from_parent())
        results.append(operations[-1].operands[0])
    return results
