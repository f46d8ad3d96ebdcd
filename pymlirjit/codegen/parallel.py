"""``parallel=True``: the passes and rewrites that run ``scf.parallel``, ``scf.forall``
and linalg's parallel dimensions on the threads of MLIR's async runtime.

:func:`with_parallel_loops` puts the passes in the default pipeline;
:func:`parallel_hooks` are the rewrites that run between them: each outermost parallel
loop becomes one task per thread, and the threads share out its iterations in chunks
(:func:`split_for_threads`), so that a thread slowed by other work on its core takes fewer;
loops with reductions too (:mod:`pymlirjit.codegen.parallel_reductions`). A parallel
loop nested in a task, however it is reached, runs serially on the task's thread (see
:mod:`pymlirjit.codegen.scheduling`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ..lowering.walk import operations
from .chunks import CHUNKS_PER_THREAD, declare_task_markers, share_chunks

__all__ = ["CHUNKS_PER_THREAD", "THREADS_VARIABLE", "clamp_upper_bounds", "parallel_hooks",
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


def _split(loop: Any, threads: int) -> None:
    """``loop`` run by ``threads`` tasks, in chunks (see :func:`share_chunks`): each
    chunk is the loop over the chunk's range."""

    def run_chunk(owner: Any, chunk: Any, start: Any, stop: Any) -> None:
        from mlir import ir

        loop.operation.move_before(ir.InsertionPoint.current.ref_operation)
        loop.operation.operands[0] = start
        loop.operation.operands[len(loop.lowerBound)] = stop

    share_chunks(loop, threads, run_chunk)


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
    from .parallel_reductions import split_reductions
    from .scheduling import task_scheduling

    def make_tasks(module: Any) -> None:
        clamp_upper_bounds(module)
        split_for_threads(module, threads)
        split_reductions(module, threads)
        serialize_nested_parallel_loops(module)

    return {"async-parallel-for": make_tasks,
            "reconcile-unrealized-casts": task_scheduling}
