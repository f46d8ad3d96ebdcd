"""``parallel=True``: the passes and rewrites that run ``scf.parallel``, ``scf.forall``
and linalg's parallel dimensions on the threads of MLIR's async runtime.

:func:`with_parallel_loops` puts the passes in the default pipeline;
:func:`parallel_hooks` are the rewrites that run between them: each outermost parallel
loop becomes one task per thread, and the threads share out its iterations in chunks
(:func:`split_for_threads`), so that a thread slowed by other work on its core takes fewer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ..lowering.walk import operations

__all__ = ["CHUNKS_PER_THREAD", "THREADS_VARIABLE", "clamp_upper_bounds",
           "call_record", "declare_task_markers", "mark_task", "parallel_hooks",
           "serialize_nested_parallel_loops", "split_for_threads", "thread_count",
           "with_parallel_loops"]

#: The environment variable capping the threads of a parallel loop.
THREADS_VARIABLE = "PYMLIRJIT_NUM_THREADS"


def thread_count() -> int:
    """How many threads a parallel loop is split for: ``PYMLIRJIT_NUM_THREADS`` if set
    (a positive int), else the CPUs this process may run on.

    Raises ``ValueError`` naming the variable if its value is not a positive int.
    """
    value = os.environ.get(THREADS_VARIABLE)
    if value is None or not value.strip():
        try:
            return max(len(os.sched_getaffinity(0)), 1)
        except (AttributeError, OSError):  # not Linux
            return os.cpu_count() or 1
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= _MAX_THREADS:
        raise ValueError(f"{THREADS_VARIABLE} must be a whole number of threads from 1 to "
                         f"{_MAX_THREADS}, got {value[:40]!r}")
    return int(text)


#: A bound on PYMLIRJIT_NUM_THREADS (the pass takes an int32; no machine has more).
_MAX_THREADS = 4096

#: Where :func:`with_parallel_loops` puts its passes in the default pipeline, and what
#: each becomes.
_PARALLEL_PASSES = {
    # Parallel dimensions of linalg ops become scf.parallel (reductions stay scf.for).
    "convert-linalg-to-loops": "convert-linalg-to-parallel-loops",
    # scf.forall (the matmul schedule's tiles, or the user's) and scf.parallel run as
    # tasks of MLIR's async runtime; the calling thread runs the first block itself
    # and hands out the others (not a task that hands out more: a thread running a
    # task runs whatever it would hand out itself, see codegen/scheduling).
    "async-to-async-runtime": "func.func(scf-forall-to-parallel),"
                              "async-parallel-for{{async-dispatch=false num-workers={threads} "
                              "min-task-size=1}},async-to-async-runtime",
}


def with_parallel_loops(pipeline: str, threads: int) -> str:
    """``pipeline`` (the normalized default one) with the passes that run
    ``scf.parallel``, ``scf.forall`` and linalg's parallel dimensions on ``threads``
    threads of MLIR's async runtime.

    >>> from pymlirjit.lowering.pipeline import normalize_pipeline
    >>> "async-parallel-for" in with_parallel_loops(normalize_pipeline(None), 2)
    True
    """
    for anchor, passes in _PARALLEL_PASSES.items():
        pattern = re.compile(rf"(?<=[(,]){re.escape(anchor)}(?=[,)])")
        pipeline, found = pattern.subn(passes.format(threads=threads), pipeline, count=1)
        if not found:
            raise ValueError(f"cannot make loops parallel: no {anchor!r} in the pipeline")
    return pipeline


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


def split_for_threads(module: Any, threads: int) -> int:
    """Make each outermost ``scf.parallel`` (without reductions) one of ``threads``
    tasks that share out its first dimension in chunks (:data:`CHUNKS_PER_THREAD` per
    thread; each chunk the original loop over its range); return how many loops.
    ``async-parallel-for`` then makes one task per thread, so that no more than
    ``threads`` threads run one loop; the loops inside become sequential
    (:func:`serialize_nested_parallel_loops`)."""
    outermost = [op.opview for op in operations(
        module, lambda op: not op.results and not _inside_parallel(op), names={"scf.parallel"})]
    with module.context:
        if outermost:
            declare_task_markers(module)
        for loop in outermost:
            _split(loop, threads)
    return len(outermost)


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


def _split(loop: Any, threads: int) -> None:
    """``loop`` inside ``scf.parallel (%t) = (0) to (min(threads, trips))``, whose task
    ``%t`` takes chunks through per-thread counters (atomic adds; the counters live on
    the calling thread's stack, which outlives the tasks: the call waits for them)."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf

    index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
    with _function_entry(loop), loop.location:
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
            with ir.InsertionPoint(choice.else_block):
                following = arith.AddIOp(owner, one).result
                wraps = arith.CmpIOp(arith.CmpIPredicate.eq, following, count).result
                scf.YieldOp([arith.SelectOp(wraps, zero, following).result,
                             arith.AddIOp(tried, one).result])
            scf.YieldOp(list(choice.results))
        scf.ReduceOp([], 0)
    loop.operation.move_before(ran)
    loop.operation.operands[0] = start
    loop.operation.operands[len(loop.lowerBound)] = stop
    mark_task(block, record)


def _function_entry(op: Any) -> Any:
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


def serialize_nested_parallel_loops(module: Any) -> int:
    """Turn every ``scf.parallel`` nested in another one into nested ``scf.for`` loops;
    return how many. Run before ``async-parallel-for``: a task of the async runtime
    that waits for tasks of its own (an inner parallel loop) holds a worker while it
    waits, and with every worker waiting nothing runs (a deadlock); the outer loop
    alone already gives every thread work."""
    from mlir.dialects import scf

    nested = operations(module, lambda op: not op.results and _inside_parallel(op),
                        names={"scf.parallel"})
    with module.context:
        for op in reversed(nested):  # innermost first: each body moves once
            _parallel_to_for(op.opview, scf)
    return len(nested)


def clamp_upper_bounds(module: Any) -> None:
    """Give every ``scf.parallel`` an upper bound at least its lower bound: a loop
    from 1 to 0 runs no iteration, but ``async-parallel-for`` computes a negative
    trip count from it and runs blocks outside the loop's range."""
    from mlir import ir
    from mlir.dialects import arith

    loops = [op.opview for op in operations(module, names={"scf.parallel"})]
    with module.context:
        for loop in loops:
            rank = len(loop.lowerBound)
            with ir.InsertionPoint(loop), loop.location:
                for d in range(rank):
                    clamped = arith.MaxSIOp(loop.upperBound[d], loop.lowerBound[d]).result
                    loop.operation.operands[rank + d] = clamped


def _inside_parallel(op: Any) -> bool:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.parallel":
            return True
        parent = parent.parent
    return False


def _parallel_to_for(parallel: Any, scf: Any) -> None:
    from mlir import ir

    body = parallel.regions[0].blocks[0]
    point = ir.InsertionPoint(parallel)
    inductions = []
    with parallel.location:
        for lower, upper, step in zip(parallel.lowerBound, parallel.upperBound,
                                      parallel.step, strict=True):
            with point:
                loop = scf.ForOp(lower, upper, step)
            with ir.InsertionPoint(loop.body):
                end = scf.YieldOp([])
            point = ir.InsertionPoint(end)
            inductions.append(loop.induction_variable)
    for arg, induction in zip(body.arguments, inductions, strict=True):
        arg.replace_all_uses_with(induction)
    for inner in list(body.operations)[:-1]:  # not the scf.reduce terminator
        inner.move_before(end)
    parallel.operation.erase()


def parallel_hooks(threads: int) -> dict[str, Callable[[Any], object]]:
    """What runs between the passes of the default pipeline for ``parallel=True`` on
    ``threads`` threads (see :func:`pymlirjit.lowering.pipeline.lower`): before
    ``async-parallel-for``, and once the async runtime's calls exist."""
    from .scheduling import task_scheduling

    def make_tasks(module: Any) -> None:
        clamp_upper_bounds(module)
        split_for_threads(module, threads)
        serialize_nested_parallel_loops(module)

    return {"async-parallel-for": make_tasks,
            "reconcile-unrealized-casts": task_scheduling}
