"""How a parallel loop's iterations are shared out among threads: in chunks taken
through per-thread counters (:func:`share_chunks`), by tasks marked as such for the
task scheduling (:func:`mark_task`, see :mod:`pymlirjit.codegen.scheduling`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["CHUNKS_PER_THREAD", "Chunks", "call_record", "declare_task_markers",
           "function_entry", "inside_parallel", "mark_task", "share_chunks"]

#: Each thread's equal share of a parallel loop is cut into this many chunks. A thread
#: takes the chunks of its own share in order, then the chunks of other shares that no
#: thread has started: on a quiet machine each thread runs its own share (its data stays
#: in its core's cache from call to call), and a thread slowed by other work on its core
#: hands the rest of its share to the others instead of holding up the call.
CHUNKS_PER_THREAD = 8

#: The threads' chunk counters (i64) are this many elements apart: a cache line, so a
#: thread taking its own chunks does not contend with another taking its own. Past
#: :data:`_SPREAD_THREADS` threads they are packed, so that the counters (on the
#: calling thread's stack) take at most 32 KB even at the largest thread count.
_COUNTER_STRIDE = 8
_SPREAD_THREADS = 64



class Chunks(NamedTuple):
    """What :func:`share_chunks` made: ``count`` (the threads, an index value),
    ``chunks`` (per thread), and ``bound(owner, chunk)``, which emits the value of the
    loop's first dimension where a chunk starts (``chunk`` = ``chunks``: where the
    owner's share ends). The values are defined before the loop of the tasks."""

    count: Any
    chunks: Any
    bound: Callable[[Any, Any], Any]


def share_chunks(loop: Any, threads: int,
                 run_chunk: Callable[[Any, Any, Any, Any], None]) -> Chunks:
    """Emit before ``loop`` (an ``scf.parallel``) ``scf.parallel (%t) = (0) to
    (min(threads, trips))``, whose task ``%t`` takes chunks of ``loop``'s first
    dimension through per-thread counters (atomic adds; the counters live on the
    calling thread's stack, which outlives the tasks: the call waits for them), and
    runs each chunk as ``run_chunk(owner, chunk, start, stop)`` emits it (at the
    insertion point it is called with: the thread's share, the chunk's number in it,
    and its range, which may be empty). The tasks run marked (:func:`mark_task`)."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf

    index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
    with function_entry(loop), loop.location:
        stride = _COUNTER_STRIDE if threads <= _SPREAD_THREADS else 1
        counters = memref.AllocaOp(ir.MemRefType.get([threads, stride], i64), [], []).result
    with ir.InsertionPoint(loop), loop.location:
        zero, one, count, chunks = (arith.ConstantOp(index, v).result
                                    for v in (0, 1, threads, CHUNKS_PER_THREAD))
        lower, upper, step = loop.lowerBound[0], loop.upperBound[0], loop.step[0]
        trips = arith.CeilDivSIOp(arith.SubIOp(upper, lower).result, step).result
        share = arith.CeilDivSIOp(trips, count).result  # trips per thread
        per_chunk = arith.CeilDivSIOp(share, chunks).result
        zeroing = scf.ForOp(zero, count, one)
        with ir.InsertionPoint(zeroing.body):
            memref.StoreOp(arith.ConstantOp(i64, 0).result, counters,
                           [zeroing.induction_variable, zero])
            scf.YieldOp([])
        tasks = arith.MinSIOp(count, trips).result
        record = call_record(loop)
        workers = scf.ParallelOp([], [zero], [tasks], [one], [])
        block = workers.regions[0].blocks.append(index)

    def bound(owner: Any, chunk: Any) -> Any:  # the first-dimension value starting a chunk
        within = arith.MinSIOp(arith.MulIOp(chunk, per_chunk).result, share).result
        first = arith.AddIOp(arith.MulIOp(owner, share).result, within).result
        trip = arith.MinSIOp(first, trips).result
        start = arith.AddIOp(lower, arith.MulIOp(trip, step).result)
        return arith.MinSIOp(start.result, upper).result

    with ir.InsertionPoint(block), loop.location:
        # (owner, owners tried): take owner's next chunk; once it has none, the next owner's.
        search = scf.WhileOp([index, index], [block.arguments[0], zero])
        before = search.before.blocks.append(index, index)
        after = search.after.blocks.append(index, index)
        with ir.InsertionPoint(before):
            untried = arith.CmpIOp(arith.CmpIPredicate.slt, before.arguments[1], count).result
            scf.ConditionOp(untried, list(before.arguments))
        with ir.InsertionPoint(after):
            owner, tried = after.arguments
            taken = memref.AtomicRMWOp(arith.AtomicRMWKind.addi,
                                       arith.ConstantOp(i64, 1).result, counters,
                                       [owner, zero]).result
            taken = arith.IndexCastOp(index, taken).result
            left = arith.CmpIOp(arith.CmpIPredicate.slt, taken, chunks).result
            choice = scf.IfOp(left, [index, index], has_else=True)
            with ir.InsertionPoint(choice.then_block):
                start = bound(owner, taken)
                stop = bound(owner, arith.AddIOp(taken, one).result)
                ran = scf.YieldOp([owner, tried])
            with ir.InsertionPoint(ran):
                run_chunk(owner, taken, start, stop)
            with ir.InsertionPoint(choice.else_block):
                following = arith.AddIOp(owner, one).result
                wraps = arith.CmpIOp(arith.CmpIPredicate.eq, following, count).result
                scf.YieldOp([arith.SelectOp(wraps, zero, following).result,
                             arith.AddIOp(tried, one).result])
            scf.YieldOp(list(choice.results))
        scf.ReduceOp([], 0)
    mark_task(block, record)
    return Chunks(count, chunks, bound)


def function_entry(op: Any) -> Any:
    """The insertion point at the start of the function around ``op`` (where an
    ``alloca`` runs once per call, not once per turn of a loop around ``op``), or right
    before ``op`` outside a function."""
    from mlir import ir

    parent = op.operation.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    if parent is None:
        return ir.InsertionPoint(op)
    return ir.InsertionPoint.at_block_begin(parent.regions[0].blocks[0])


def declare_task_markers(module: Any) -> None:
    """Declare, once, the functions :func:`mark_task` calls (defined once the module is
    lowered, by :func:`pymlirjit.codegen.scheduling.task_scheduling`)."""
    from mlir import ir
    from mlir.dialects import func

    from .scheduling import ADOPT_RECORD, CALL_RECORD, ENTER_TASK, LEAVE_TASK

    names = {ir.StringAttr(op.attributes["sym_name"]).value
             for op in module.body.operations if "sym_name" in op.attributes}
    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(module.body), ir.Location.unknown():
        for name, inputs, results in [(CALL_RECORD, [], [i64]), (ENTER_TASK, [], [i64]),
                                      (ADOPT_RECORD, [i64], [i64]),
                                      (LEAVE_TASK, [i64, i64], [])]:
            if name not in names:
                func.FuncOp(name, ir.FunctionType.get(inputs, results),
                            visibility="private")


def call_record(loop: Any) -> Any:
    """Emit before ``loop`` (on the calling thread) the read of the record of the call
    running it, which its tasks share (an i64, 0 for none): see :func:`mark_task`."""
    from mlir import ir
    from mlir.dialects import func

    from .scheduling import CALL_RECORD

    with ir.InsertionPoint(loop), loop.location:
        return func.CallOp([ir.IntegerType.get_signless(64)],
                           ir.FlatSymbolRefAttr.get(CALL_RECORD), []).result


def mark_task(block: Any, record: Any) -> None:
    """Mark the thread running ``block`` (the body of a parallel loop's task, the
    calling thread's included) while it does: as running a task, so that parallel
    loops nested in it, however they are reached (a callback calling a parallel kernel,
    a linked kernel, a function of the module), run on that thread, serially (a task
    waiting for tasks of its own may hold every thread of the pool in waits: a
    deadlock); and as running the call whose record is ``record`` (from
    :func:`call_record`), so that a callback failing on any thread fails that call, and
    stops the callbacks of the others (see :mod:`pymlirjit.codegen.scheduling`)."""
    from mlir import ir
    from mlir.dialects import func

    from .scheduling import ADOPT_RECORD, ENTER_TASK, LEAVE_TASK

    i64 = ir.IntegerType.get_signless(64)
    terminator = list(block.operations)[-1]
    with ir.InsertionPoint.at_block_begin(block), terminator.location:
        task = func.CallOp([i64], ir.FlatSymbolRefAttr.get(ENTER_TASK), []).result
        frame = func.CallOp([i64], ir.FlatSymbolRefAttr.get(ADOPT_RECORD), [record]).result
    with ir.InsertionPoint(terminator), terminator.location:
        func.CallOp([], ir.FlatSymbolRefAttr.get(LEAVE_TASK), [task, frame])


def inside_parallel(op: Any) -> bool:
    """Whether ``op`` is nested in an ``scf.parallel`` (of its function)."""
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.parallel":
            return True
        parent = parent.parent
    return False
