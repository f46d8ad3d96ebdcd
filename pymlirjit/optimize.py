"""The optimizing passes: fast-math flags, and linalg tiled and vectorized for the host.

Two independent steps run on a parsed module before the lowering pipeline:

- :func:`set_fastmath` marks every floating-point ``arith`` and ``math`` operation with
  ``#arith.fastmath<fast>`` (numba's ``fastmath=True``): LLVM may then reassociate, so
  floating-point reductions vectorize, and contract multiply-adds into FMAs.
- :func:`tile_and_vectorize` (:mod:`pymlirjit.linalg_schedules`) makes ``linalg.matmul``,
  ``linalg.batch_matmul`` and 2-D convolutions on memrefs fast: f32/f64 matmuls become
  generated microkernels whose register blocks are loop-carried vectors, batch matmuls
  and convolutions become such matmuls on views (:mod:`pymlirjit.linalg_rewrites`); the
  other matmuls go through transform-dialect scripts (:data:`MATMUL_SCHEDULE`, run by
  ``transform-interpreter``: tiled for the cache, then into 8x32 register tiles whose
  accumulator lives in a stack buffer, so LLVM can keep it in vector registers, a buffer
  of the caller might alias the inputs), vectorized into FMAs of the host's widest
  vectors; edges of odd sizes are masked. :data:`VECTOR_LOWERING` are the passes that
  lower what they leave.

>>> from pymlirjit.pipeline import new_context, parse_module
>>> m = parse_module('''func.func @f(%a: f64, %b: f64) -> f64 {
...   %r = arith.addf %a, %b : f64
...   return %r : f64
... }''', new_context())
>>> set_fastmath(m)
1
>>> "fastmath<fast>" in str(m)
True
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from .linalg_schedules import (
    BATCH_MATMUL_SCHEDULE,
    MATMUL_SCHEDULE,
    PARALLEL_MATMUL_SCHEDULE,
    has_tileable_ops,
    run_schedule,
    tile_and_vectorize,
)
from .linalg_tensors import prepare_tensors

__all__ = ["BATCH_MATMUL_SCHEDULE", "MATMUL_SCHEDULE", "PARALLEL_MATMUL_SCHEDULE",
           "THREADS_VARIABLE", "VECTOR_LOWERING", "clamp_upper_bounds",
           "has_tileable_ops", "optimize", "parallel_hooks",
           "run_schedule", "serialize_nested_parallel_loops", "split_for_threads",
           "set_fastmath", "thread_count", "tile_and_vectorize", "with_parallel_loops",
           "with_vector_lowering"]

#: Lower what the schedule leaves (vector transfers, masks, ``ub.poison``): inserted in
#: the default pipeline before its scf and arith lowerings.
VECTOR_LOWERING = {
    "convert-scf-to-cf": "func.func(convert-vector-to-scf{full-unroll=true})",
    "convert-arith-to-llvm": "convert-vector-to-llvm,convert-ub-to-llvm",
}


def set_fastmath(module: Any) -> int:
    """Put ``#arith.fastmath<fast>`` on every ``arith`` and ``math`` op of ``module``
    that takes fast-math flags (the float ones); return how many ops were marked."""
    from mlir import ir

    with module.context:
        fast = ir.Attribute.parse("#arith.fastmath<fast>")
    marked = 0

    def visit(op: Any) -> Any:
        nonlocal marked
        if op.name.startswith(("arith.", "math.")) and _takes_fastmath(type(op.opview)):
            op.attributes["fastmath"] = fast
            marked += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return marked


def _takes_fastmath(opview: type) -> bool:
    return isinstance(getattr(opview, "fastmath", None), property)


def with_vector_lowering(pipeline: str) -> str:
    """``pipeline`` (normalized) with :data:`VECTOR_LOWERING` inserted, unless it
    lowers the vector dialect already."""
    if "convert-vector-to-llvm" in pipeline:
        return pipeline
    for before, passes in VECTOR_LOWERING.items():
        pipeline = pipeline.replace("," + before, f",{passes},{before}", 1)
    return pipeline


def optimize(module: Any, *, fastmath: bool, tile: bool, filename: str = "<source>",
             parallel: bool = False) -> bool:
    """Apply the optimizations asked for to ``module`` (parsed, not lowered); return
    whether the lowering pipeline needs :func:`with_vector_lowering`."""
    if fastmath:
        set_fastmath(module)
    if not tile:
        return False
    prepare_tensors(module, filename)
    return tile_and_vectorize(module, filename, parallel)


# -- parallel=True ------------------------------------------------------------------------

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
    # tasks of MLIR's async runtime; the calling thread runs the first block itself.
    "async-to-async-runtime": "func.func(scf-forall-to-parallel),"
                              "async-parallel-for{{async-dispatch=true num-workers={threads} "
                              "min-task-size=1}},async-to-async-runtime",
}


def with_parallel_loops(pipeline: str, threads: int) -> str:
    """``pipeline`` (the normalized default one) with the passes that run
    ``scf.parallel``, ``scf.forall`` and linalg's parallel dimensions on ``threads``
    threads of MLIR's async runtime.

    >>> from pymlirjit.pipeline import normalize_pipeline
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
    """Split each outermost ``scf.parallel`` (without reductions) into ``threads``
    chunks of its first dimension, each the original loop over its chunk; return how
    many loops. ``async-parallel-for`` then makes one task per chunk, so that no more
    than ``threads`` threads run one loop; the loops inside become sequential
    (:func:`serialize_nested_parallel_loops`)."""
    from mlir import ir

    outermost: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "scf.parallel" and not op.results and not _inside_parallel(op):
            outermost.append(op.opview)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    with module.context:
        for loop in outermost:
            _split(loop, threads)
    return len(outermost)


def _split(loop: Any, threads: int) -> None:
    from mlir import ir
    from mlir.dialects import arith, scf

    index = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        zero, one, count = (arith.ConstantOp(index, v).result for v in (0, 1, threads))
        lower, upper, step = loop.lowerBound[0], loop.upperBound[0], loop.step[0]
        trips = arith.CeilDivSIOp(arith.SubIOp(upper, lower).result, step).result
        per_chunk = arith.CeilDivSIOp(trips, count).result
        chunks = scf.ParallelOp([], [zero], [count], [one], [])
        block = chunks.regions[0].blocks.append(index)

    def bound(first_trip: Any) -> Any:  # the first-dimension value starting a chunk
        trip = arith.MinSIOp(arith.MulIOp(first_trip, per_chunk).result, trips)
        start = arith.AddIOp(lower, arith.MulIOp(trip.result, step).result)
        return arith.MinSIOp(start.result, upper).result

    with ir.InsertionPoint(block), loop.location:
        chunk = block.arguments[0]
        start, stop = bound(chunk), bound(arith.AddIOp(chunk, one).result)
        end = scf.ReduceOp([], 0)
    loop.operation.move_before(end)
    loop.operation.operands[0] = start
    loop.operation.operands[len(loop.lowerBound)] = stop


def serialize_nested_parallel_loops(module: Any) -> int:
    """Turn every ``scf.parallel`` nested in another one into nested ``scf.for`` loops;
    return how many. Run before ``async-parallel-for``: a task of the async runtime
    that waits for tasks of its own (an inner parallel loop) holds a worker while it
    waits, and with every worker waiting nothing runs (a deadlock); the outer loop
    alone already gives every thread work."""
    from mlir import ir
    from mlir.dialects import scf

    nested: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "scf.parallel" and not op.results and _inside_parallel(op):
            nested.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
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

    loops: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "scf.parallel":
            loops.append(op.opview)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
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
    ``threads`` threads (see :func:`pymlirjit.pipeline.lower`): before
    ``async-parallel-for``, and once the async runtime's calls exist."""
    from .scheduling import task_scheduling

    def make_tasks(module: Any) -> None:
        clamp_upper_bounds(module)
        split_for_threads(module, threads)
        serialize_nested_parallel_loops(module)

    return {"async-parallel-for": make_tasks,
            "reconcile-unrealized-casts": task_scheduling}
