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
import platform
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

__all__ = ["BATCH_MATMUL_SCHEDULE", "MATMUL_SCHEDULE", "PARALLEL_MATMUL_SCHEDULE",
           "SPIN_TICKS", "THREADS_VARIABLE", "VECTOR_LOWERING", "clamp_upper_bounds",
           "has_tileable_ops", "optimize", "parallel_hooks", "run_schedule",
           "serialize_nested_parallel_loops", "set_fastmath", "split_for_threads",
           "task_scheduling", "thread_count", "tile_and_vectorize", "with_parallel_loops",
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
    return tile and tile_and_vectorize(module, filename, parallel)


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


#: The async runtime's functions whose calls :func:`task_scheduling` redirects, and to what.
_REDIRECTED = {"mlirAsyncRuntimeExecute": "__pymlirjit_par_execute",
               "mlirAsyncRuntimeAwaitAllInGroup": "__pymlirjit_par_await"}

#: How long (in time-stamp counter ticks: ~40 us at 2.6 GHz) a worker that ran a task of
#: a parallel module waits for the module's next task, and a caller awaiting its tasks
#: waits before it sleeps. The runtime's pool and its awaits go through condition
#: variables: each sleep and wake-up cost a parallel call tens of microseconds on an
#: idle machine, and up to milliseconds on a loaded one, where a woken thread waits for
#: a core. After the first 2% of the wait, each turn also yields the core
#: (``sched_yield``): on a machine with more runnable threads than cores, a thread that
#: only spun would hold the core the thread it waits for needs (that made small calls
#: several times slower than not waiting at all). Measured on the 2 cores, busy (load
#: average ~4), the parallel stencil, medians of 21: 36 -> 8.5 us per call at 64^2,
#: 113 -> 49 us at 512^2 (serial 80 us). OpenMP's threads (numba's prange) spin too.
SPIN_TICKS = 100_000

# One mechanism serves every module that hands tasks to MLIR's async runtime (a
# parallel=True module, and the shims of pymlirjit.asyncruntime's owner): its tasks go
# through @__pymlirjit_par_execute. The runtime's thread pool does not survive a fork:
# in the child its workers are gone, yet counted, and a task given to it never runs
# (the call waiting for it hangs). The process that loads the code, if its pool is
# sound, claims the pool for it (@__pymlirjit_par_claim, see
# pymlirjit.asyncruntime.claim_task_pool); in any other process (a forked child, or
# code loaded in one) each task runs on a thread of its own instead.
#
# In the claiming process, a thread that ran a task waits SPIN_TICKS (spinning, then
# yielding: @__pymlirjit_par_pause) for the next one (@__pymlirjit_par_run), which
# @__pymlirjit_par_execute hands it through @__pymlirjit_par_mailbox (0: nobody waits,
# 1: a thread waits, else the task handed to it) instead of waking a worker of the
# pool; and @__pymlirjit_par_await waits as long while the module's tasks
# (@__pymlirjit_par_running) run before it sleeps.
_TASK_SCHEDULING = """
llvm.func @getpid() -> i32
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @free(!llvm.ptr)
llvm.func @pthread_create(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
llvm.func @pthread_detach(i64) -> i32
llvm.func @sched_yield() -> i32
llvm.func @mlirAsyncRuntimeExecute(!llvm.ptr, !llvm.ptr)
llvm.func @mlirAsyncRuntimeAwaitAllInGroup(!llvm.ptr)
llvm.mlir.global internal @__pymlirjit_par_pid(0 : i32) {{addr_space = 0 : i32}} : i32
llvm.mlir.global internal @__pymlirjit_par_running(0 : i64) {{addr_space = 0 : i32}} : i64
llvm.mlir.global internal @__pymlirjit_par_mailbox(0 : i64) {{addr_space = 0 : i32}} : i64
llvm.func @__pymlirjit_par_claim() {{
  %pid = llvm.call @getpid() : () -> i32
  %owner_slot = llvm.mlir.addressof @__pymlirjit_par_pid : !llvm.ptr
  llvm.store %pid, %owner_slot atomic seq_cst {{alignment = 4 : i64}} : i32, !llvm.ptr
  llvm.return
}}
llvm.func internal @__pymlirjit_par_claimed() -> i1 {{
  %pid = llvm.call @getpid() : () -> i32
  %owner_slot = llvm.mlir.addressof @__pymlirjit_par_pid : !llvm.ptr
  %owner = llvm.load %owner_slot atomic monotonic {{alignment = 4 : i64}} : !llvm.ptr -> i32
  %claimed = llvm.icmp "eq" %owner, %pid : i32
  llvm.return %claimed : i1
}}
llvm.func internal @__pymlirjit_par_pause(%start: i64) -> i1 {{{pause}
  %limit = llvm.mlir.constant({spin} : i64) : i64
  %polite = llvm.mlir.constant({yield_after} : i64) : i64
  %now = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  %spent = llvm.sub %now, %start : i64
  %long = llvm.icmp "ugt" %spent, %polite : i64
  llvm.cond_br %long, ^yield, ^done
^yield:
  %yielded = llvm.call @sched_yield() : () -> i32
  llvm.br ^done
^done:
  %over = llvm.icmp "ugt" %spent, %limit : i64
  llvm.return %over : i1
}}
llvm.func internal @__pymlirjit_par_run(%first: !llvm.ptr) -> !llvm.ptr {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %limit = llvm.mlir.constant({spin} : i64) : i64
  %running = llvm.mlir.addressof @__pymlirjit_par_running : !llvm.ptr
  %mailbox = llvm.mlir.addressof @__pymlirjit_par_mailbox : !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  llvm.br ^run(%first : !llvm.ptr)
^run(%task: !llvm.ptr):
  %handle = llvm.load %task : !llvm.ptr -> !llvm.ptr
  %slot = llvm.getelementptr %task[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %resume = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  llvm.call @free(%task) : (!llvm.ptr) -> ()
  llvm.call %resume(%handle) : !llvm.ptr, (!llvm.ptr) -> ()
  %left = llvm.atomicrmw sub %running, %one seq_cst : !llvm.ptr, i64
  %claimed = llvm.call @__pymlirjit_par_claimed() : () -> i1
  %spins = llvm.icmp "ne" %limit, %zero : i64
  %may_wait = llvm.and %claimed, %spins : i1
  llvm.cond_br %may_wait, ^offer, ^done
^offer:
  %offer = llvm.cmpxchg %mailbox, %zero, %one seq_cst seq_cst : !llvm.ptr, i64
  %waits = llvm.extractvalue %offer[1] : !llvm.struct<(i64, i1)>
  %start = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  llvm.cond_br %waits, ^wait, ^done
^wait:
  %mail = llvm.load %mailbox atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
  %handed = llvm.icmp "ne" %mail, %one : i64
  llvm.cond_br %handed, ^take(%mail : i64), ^tick
^tick:
  %over = llvm.call @__pymlirjit_par_pause(%start) : (i64) -> i1
  llvm.cond_br %over, ^withdraw, ^wait
^withdraw:
  %withdrawal = llvm.cmpxchg %mailbox, %one, %zero seq_cst seq_cst : !llvm.ptr, i64
  %withdrawn = llvm.extractvalue %withdrawal[1] : !llvm.struct<(i64, i1)>
  %late = llvm.extractvalue %withdrawal[0] : !llvm.struct<(i64, i1)>
  llvm.cond_br %withdrawn, ^done, ^take(%late : i64)
^take(%record: i64):
  llvm.store %zero, %mailbox atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
  %next = llvm.inttoptr %record : i64 to !llvm.ptr
  llvm.br ^run(%next : !llvm.ptr)
^done:
  llvm.return %null : !llvm.ptr
}}
llvm.func internal @__pymlirjit_par_resume(%task: !llvm.ptr) {{
  %null = llvm.call @__pymlirjit_par_run(%task) : (!llvm.ptr) -> !llvm.ptr
  llvm.return
}}
llvm.func internal @__pymlirjit_par_execute(%handle: !llvm.ptr, %resume: !llvm.ptr) {{
  %zero = llvm.mlir.constant(0 : i32) : i32
  %one = llvm.mlir.constant(1 : i64) : i64
  %size = llvm.mlir.constant(16 : i64) : i64
  %null = llvm.mlir.zero : !llvm.ptr
  %task = llvm.call @malloc(%size) : (i64) -> !llvm.ptr
  %no_memory = llvm.icmp "eq" %task, %null : !llvm.ptr
  llvm.cond_br %no_memory, ^unwrapped, ^made
^unwrapped:
  llvm.call @mlirAsyncRuntimeExecute(%handle, %resume) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.return
^made:
  llvm.store %handle, %task : !llvm.ptr, !llvm.ptr
  %slot = llvm.getelementptr %task[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  llvm.store %resume, %slot : !llvm.ptr, !llvm.ptr
  %running = llvm.mlir.addressof @__pymlirjit_par_running : !llvm.ptr
  %before = llvm.atomicrmw add %running, %one seq_cst : !llvm.ptr, i64
  %claimed = llvm.call @__pymlirjit_par_claimed() : () -> i1
  llvm.cond_br %claimed, ^hand, ^own
^hand:
  %mailbox = llvm.mlir.addressof @__pymlirjit_par_mailbox : !llvm.ptr
  %address = llvm.ptrtoint %task : !llvm.ptr to i64
  %handing = llvm.cmpxchg %mailbox, %one, %address seq_cst seq_cst : !llvm.ptr, i64
  %handed = llvm.extractvalue %handing[1] : !llvm.struct<(i64, i1)>
  llvm.cond_br %handed, ^done, ^pool
^own:
  %id = llvm.alloca %one x i64 : (i64) -> !llvm.ptr
  %start = llvm.mlir.addressof @__pymlirjit_par_run : !llvm.ptr
  %status = llvm.call @pthread_create(%id, %null, %start, %task)
    : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
  %started = llvm.icmp "eq" %status, %zero : i32
  llvm.cond_br %started, ^detach, ^pool
^detach:
  %thread = llvm.load %id : !llvm.ptr -> i64
  %detached = llvm.call @pthread_detach(%thread) : (i64) -> i32
  llvm.return
^pool:
  %wrapped = llvm.mlir.addressof @__pymlirjit_par_resume : !llvm.ptr
  llvm.call @mlirAsyncRuntimeExecute(%task, %wrapped) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.return
^done:
  llvm.return
}}
llvm.func internal @__pymlirjit_par_await(%group: !llvm.ptr) {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %running = llvm.mlir.addressof @__pymlirjit_par_running : !llvm.ptr
  %start = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  llvm.br ^check
^check:
  %tasks = llvm.load %running atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
  %idle = llvm.icmp "eq" %tasks, %zero : i64
  llvm.cond_br %idle, ^sleep, ^tick
^tick:
  %over = llvm.call @__pymlirjit_par_pause(%start) : (i64) -> i1
  llvm.cond_br %over, ^sleep, ^check
^sleep:
  llvm.call @mlirAsyncRuntimeAwaitAllInGroup(%group) : (!llvm.ptr) -> ()
  llvm.return
}}
"""

# A hint to the core that this thread spins (x86's pause; elsewhere none).
_PAUSE = ('\n  llvm.call_intrinsic "llvm.x86.sse2.pause"() : () -> ()'
          if platform.machine() in ("x86_64", "AMD64") else "")


def task_scheduling(module: Any, spin_ticks: int = SPIN_TICKS) -> bool:
    """Make the tasks a lowered module (LLVM dialect) hands MLIR's async runtime run in
    a forked child too, and start and finish with little latency (see
    ``_TASK_SCHEDULING``; ``spin_ticks`` 0: no waiting for tasks, no spinning); return
    whether the module schedules any. Its ``@__pymlirjit_par_claim`` must then run in
    the process that loads it (:func:`pymlirjit.asyncruntime.claim_task_pool`)."""
    from mlir import ir

    calls: list[tuple[Any, str]] = []

    def visit(op: Any) -> Any:
        if op.name == "llvm.call" and "callee" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in _REDIRECTED:
                calls.append((op, _REDIRECTED[callee]))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not any(target == _REDIRECTED["mlirAsyncRuntimeExecute"] for _, target in calls):
        return False
    declared = {ir.StringAttr(op.attributes["sym_name"]).value
                for op in module.body.operations if "sym_name" in op.attributes}
    with module.context, ir.Location.unknown():
        for op, target in calls:
            op.attributes["callee"] = ir.FlatSymbolRefAttr.get(target)
        extra = ir.Module.parse(_TASK_SCHEDULING.format(
            spin=spin_ticks, yield_after=spin_ticks // 50, pause=_PAUSE))
        for op in list(extra.body.operations):
            if ir.StringAttr(op.attributes["sym_name"]).value in declared:
                continue  # declared by the module already (malloc, free, ...)
            op.operation.detach_from_parent()
            module.body.append(op)
    return True


def parallel_hooks(threads: int) -> dict[str, Callable[[Any], object]]:
    """What runs between the passes of the default pipeline for ``parallel=True`` on
    ``threads`` threads (see :func:`pymlirjit.pipeline.lower`): before
    ``async-parallel-for``, and once the async runtime's calls exist."""
    def make_tasks(module: Any) -> None:
        clamp_upper_bounds(module)
        split_for_threads(module, threads)
        serialize_nested_parallel_loops(module)

    return {"async-parallel-for": make_tasks,
            "reconcile-unrealized-casts": task_scheduling}
