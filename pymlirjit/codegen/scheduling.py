"""How compiled code hands tasks to MLIR's async runtime: safely after a fork, and
without a sleep and a wake-up per parallel call (:func:`task_scheduling`)."""

from __future__ import annotations

import platform
from typing import Any

from ..lowering.walk import operations

__all__ = ["ADOPT_RECORD", "CALL_RECORD", "ENTER_TASK", "LEAVE_TASK", "MARKERS", "SETUP",
           "SPIN_TICKS", "task_scheduling"]

#: What a parallel loop's rewrite (:mod:`pymlirjit.codegen.parallel`) calls: on the
#: calling thread, ``CALL_RECORD: () -> i64`` (the call's record tasks may share, 0 for
#: none); around the block of the loop each thread runs (the caller's own included),
#: ``ENTER_TASK: () -> i64`` (marks the thread as running a task) and ``ADOPT_RECORD:
#: (i64 record) -> i64`` (makes the record the thread's innermost), each returning what
#: ``LEAVE_TASK: (i64, i64) -> ()`` restores. :func:`task_scheduling` defines them.
CALL_RECORD = "__pymlirjit_par_record"
ENTER_TASK = "__pymlirjit_par_enter"
ADOPT_RECORD = "__pymlirjit_par_adopt"
LEAVE_TASK = "__pymlirjit_par_leave"
MARKERS = (CALL_RECORD, ENTER_TASK, ADOPT_RECORD, LEAVE_TASK)
#: ``(i64 task key + 1, i64 frame key + 1) -> ()``: called once the code is loaded, with
#: the process-wide pthread keys (0: unknown) of :mod:`pymlirjit.boundary.callframe`.
SETUP = "__pymlirjit_par_setup"

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
# parallel=True module, and the shims of pymlirjit.runtime.asyncruntime's owner): its tasks go
# through @__pymlirjit_par_execute. The runtime's thread pool does not survive a fork:
# in the child its workers are gone, yet counted, and a task given to it never runs
# (the call waiting for it hangs). The process that loads the code, if its pool is
# sound, claims the pool for it (@__pymlirjit_par_claim, see
# pymlirjit.runtime.asyncruntime.claim_task_pool); in any other process (a forked child, or
# code loaded in one) each task runs on a thread of its own instead, or on the caller
# if no thread can be started. Nothing ever waits for a pool that may be absent.
#
# A task never waits on a pool it occupies: a thread running a task (of any module:
# the key @__pymlirjit_par_task_key names is process-wide, set up by
# @__pymlirjit_par_setup when the code is loaded) runs the tasks it would hand out
# itself, at once (@__pymlirjit_par_in_task), so that a parallel loop nested in a task
# (through a callback, a linked kernel or a function of the module) runs serially on
# that thread. @__pymlirjit_par_once marks a task's thread; @__pymlirjit_par_enter and
# @__pymlirjit_par_leave mark the block of a loop the calling thread runs itself the
# same way (see pymlirjit.codegen.parallel).
#
# The threads running a parallel loop's blocks share the record of the call that runs
# the loop (@__pymlirjit_par_record, read on the calling thread: its innermost record,
# through the process-wide key of pymlirjit.boundary.callframe): each makes it its
# innermost for the time of its block (@__pymlirjit_par_adopt), so that a callback
# failing on any thread fails that call (its error is raised by that call, never by
# another), and once the call failed, no thread of it enters Python again
# (trampolines check the record's flag). Only for the block: the record lives on the
# calling thread's stack, which may return as soon as the last block is done. A record
# is shared only if it says the GIL is not held and no call it is nested in can unwind
# now (a jump buffer not hidden): a task must never longjmp, nor track its
# allocations in another thread's list; else the tasks run with no record (the
# process-wide foreign one).
#
# In the claiming process, a thread that ran a task waits SPIN_TICKS (spinning, then
# yielding: @__pymlirjit_par_pause) for the next one (@__pymlirjit_par_run), which
# @__pymlirjit_par_execute hands it through @__pymlirjit_par_mailbox (0: nobody waits,
# 1: a thread waits, else the task handed to it) instead of waking a worker of the
# pool; and @__pymlirjit_par_await waits as long while the module's tasks
# (@__pymlirjit_par_running) run before it sleeps (not in a task: its nested tasks
# have all run).
_TASK_SCHEDULING = """
llvm.func @getpid() -> i32
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @free(!llvm.ptr)
llvm.func @pthread_create(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
llvm.func @pthread_detach(i64) -> i32
llvm.func @pthread_getspecific(i32) -> !llvm.ptr
llvm.func @pthread_setspecific(i32, !llvm.ptr) -> i32
llvm.func @sched_yield() -> i32
llvm.func @mlirAsyncRuntimeExecute(!llvm.ptr, !llvm.ptr)
llvm.func @mlirAsyncRuntimeAwaitAllInGroup(!llvm.ptr)
llvm.mlir.global internal @__pymlirjit_par_pid(0 : i32) {{addr_space = 0 : i32}} : i32
llvm.mlir.global internal @__pymlirjit_par_running(0 : i64) {{addr_space = 0 : i32}} : i64
llvm.mlir.global internal @__pymlirjit_par_mailbox(0 : i64) {{addr_space = 0 : i32}} : i64
llvm.mlir.global internal @__pymlirjit_par_task_key(0 : i64) {{addr_space = 0 : i32}} : i64
llvm.mlir.global internal @__pymlirjit_par_frame_key(0 : i64) {{addr_space = 0 : i32}} : i64
llvm.func @__pymlirjit_par_claim() {{
  %pid = llvm.call @getpid() : () -> i32
  %owner_slot = llvm.mlir.addressof @__pymlirjit_par_pid : !llvm.ptr
  llvm.store %pid, %owner_slot atomic seq_cst {{alignment = 4 : i64}} : i32, !llvm.ptr
  llvm.return
}}
llvm.func @__pymlirjit_par_setup(%task_key: i64, %frame_key: i64) {{
  %task_slot = llvm.mlir.addressof @__pymlirjit_par_task_key : !llvm.ptr
  %frame_slot = llvm.mlir.addressof @__pymlirjit_par_frame_key : !llvm.ptr
  llvm.store %task_key, %task_slot atomic seq_cst {{alignment = 8 : i64}} : i64, !llvm.ptr
  llvm.store %frame_key, %frame_slot atomic seq_cst {{alignment = 8 : i64}} : i64, !llvm.ptr
  llvm.return
}}
llvm.func internal @__pymlirjit_par_get(%slot: !llvm.ptr) -> !llvm.ptr {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %null = llvm.mlir.zero : !llvm.ptr
  %stored = llvm.load %slot atomic monotonic {{alignment = 8 : i64}} : !llvm.ptr -> i64
  %unknown = llvm.icmp "eq" %stored, %zero : i64
  llvm.cond_br %unknown, ^none, ^get
^none:
  llvm.return %null : !llvm.ptr
^get:
  %wide = llvm.sub %stored, %one : i64
  %key = llvm.trunc %wide : i64 to i32
  %value = llvm.call @pthread_getspecific(%key) : (i32) -> !llvm.ptr
  llvm.return %value : !llvm.ptr
}}
llvm.func internal @__pymlirjit_par_set(%slot: !llvm.ptr, %value: !llvm.ptr) {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %stored = llvm.load %slot atomic monotonic {{alignment = 8 : i64}} : !llvm.ptr -> i64
  %unknown = llvm.icmp "eq" %stored, %zero : i64
  llvm.cond_br %unknown, ^done, ^set
^set:
  %wide = llvm.sub %stored, %one : i64
  %key = llvm.trunc %wide : i64 to i32
  %status = llvm.call @pthread_setspecific(%key, %value) : (i32, !llvm.ptr) -> i32
  llvm.br ^done
^done:
  llvm.return
}}
llvm.func internal @__pymlirjit_par_in_task() -> i1 {{
  %null = llvm.mlir.zero : !llvm.ptr
  %task_slot = llvm.mlir.addressof @__pymlirjit_par_task_key : !llvm.ptr
  %flag = llvm.call @__pymlirjit_par_get(%task_slot) : (!llvm.ptr) -> !llvm.ptr
  %inside = llvm.icmp "ne" %flag, %null : !llvm.ptr
  llvm.return %inside : i1
}}
llvm.func internal @__pymlirjit_par_enter() -> i64 {{
  %one = llvm.mlir.constant(1 : i64) : i64
  %task_slot = llvm.mlir.addressof @__pymlirjit_par_task_key : !llvm.ptr
  %outer = llvm.call @__pymlirjit_par_get(%task_slot) : (!llvm.ptr) -> !llvm.ptr
  %flag = llvm.inttoptr %one : i64 to !llvm.ptr
  llvm.call @__pymlirjit_par_set(%task_slot, %flag) : (!llvm.ptr, !llvm.ptr) -> ()
  %saved = llvm.ptrtoint %outer : !llvm.ptr to i64
  llvm.return %saved : i64
}}
llvm.func internal @__pymlirjit_par_adopt(%record: i64) -> i64 {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %frame_slot = llvm.mlir.addressof @__pymlirjit_par_frame_key : !llvm.ptr
  %outer = llvm.call @__pymlirjit_par_get(%frame_slot) : (!llvm.ptr) -> !llvm.ptr
  %none = llvm.icmp "eq" %record, %zero : i64
  llvm.cond_br %none, ^done, ^adopt
^adopt:
  %call = llvm.inttoptr %record : i64 to !llvm.ptr
  llvm.call @__pymlirjit_par_set(%frame_slot, %call) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.br ^done
^done:
  %saved = llvm.ptrtoint %outer : !llvm.ptr to i64
  llvm.return %saved : i64
}}
llvm.func internal @__pymlirjit_par_leave(%task: i64, %frame: i64) {{
  %task_slot = llvm.mlir.addressof @__pymlirjit_par_task_key : !llvm.ptr
  %frame_slot = llvm.mlir.addressof @__pymlirjit_par_frame_key : !llvm.ptr
  %outer_task = llvm.inttoptr %task : i64 to !llvm.ptr
  %outer_frame = llvm.inttoptr %frame : i64 to !llvm.ptr
  llvm.call @__pymlirjit_par_set(%frame_slot, %outer_frame) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.call @__pymlirjit_par_set(%task_slot, %outer_task) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.return
}}
llvm.func internal @__pymlirjit_par_record() -> i64 {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %hidden = llvm.mlir.constant({hidden} : i64) : i64
  %null = llvm.mlir.zero : !llvm.ptr
  %frame_slot = llvm.mlir.addressof @__pymlirjit_par_frame_key : !llvm.ptr
  %record = llvm.call @__pymlirjit_par_get(%frame_slot) : (!llvm.ptr) -> !llvm.ptr
  %none = llvm.icmp "eq" %record, %null : !llvm.ptr
  llvm.cond_br %none, ^foreign, ^gil
^gil:
  %holds_slot = llvm.getelementptr %record[{holds_gil}] : (!llvm.ptr) -> !llvm.ptr, i64
  %holds = llvm.load %holds_slot : !llvm.ptr -> i64
  %held = llvm.icmp "ne" %holds, %zero : i64
  llvm.cond_br %held, ^foreign, ^walk(%record : !llvm.ptr)
^walk(%call: !llvm.ptr):
  %outermost = llvm.icmp "eq" %call, %null : !llvm.ptr
  llvm.cond_br %outermost, ^share, ^look
^look:
  %buffer_slot = llvm.getelementptr %call[{jump_buffer}] : (!llvm.ptr) -> !llvm.ptr, i64
  %buffer = llvm.load %buffer_slot : !llvm.ptr -> i64
  %no_buffer = llvm.icmp "eq" %buffer, %zero : i64
  llvm.cond_br %no_buffer, ^outer, ^buffered
^outer:
  %previous_slot = llvm.getelementptr %call[{previous}] : (!llvm.ptr) -> !llvm.ptr, i64
  %previous = llvm.load %previous_slot : !llvm.ptr -> i64
  %next = llvm.inttoptr %previous : i64 to !llvm.ptr
  llvm.br ^walk(%next : !llvm.ptr)
^buffered:
  %mark = llvm.and %buffer, %hidden : i64
  %runs_python = llvm.icmp "ne" %mark, %zero : i64
  llvm.cond_br %runs_python, ^share, ^foreign
^share:
  %address = llvm.ptrtoint %record : !llvm.ptr to i64
  llvm.return %address : i64
^foreign:
  llvm.return %zero : i64
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
llvm.func internal @__pymlirjit_par_once(%task: !llvm.ptr) {{
  %one = llvm.mlir.constant(1 : i64) : i64
  %handle = llvm.load %task : !llvm.ptr -> !llvm.ptr
  %slot = llvm.getelementptr %task[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %resume = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  llvm.call @free(%task) : (!llvm.ptr) -> ()
  %task_slot = llvm.mlir.addressof @__pymlirjit_par_task_key : !llvm.ptr
  %outer_task = llvm.call @__pymlirjit_par_get(%task_slot) : (!llvm.ptr) -> !llvm.ptr
  %flag = llvm.inttoptr %one : i64 to !llvm.ptr
  llvm.call @__pymlirjit_par_set(%task_slot, %flag) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.call %resume(%handle) : !llvm.ptr, (!llvm.ptr) -> ()
  llvm.call @__pymlirjit_par_set(%task_slot, %outer_task) : (!llvm.ptr, !llvm.ptr) -> ()
  %running = llvm.mlir.addressof @__pymlirjit_par_running : !llvm.ptr
  %left = llvm.atomicrmw sub %running, %one seq_cst : !llvm.ptr, i64
  llvm.return
}}
llvm.func internal @__pymlirjit_par_run(%first: !llvm.ptr) -> !llvm.ptr {{
  %zero = llvm.mlir.constant(0 : i64) : i64
  %one = llvm.mlir.constant(1 : i64) : i64
  %limit = llvm.mlir.constant({spin} : i64) : i64
  %mailbox = llvm.mlir.addressof @__pymlirjit_par_mailbox : !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  llvm.br ^run(%first : !llvm.ptr)
^run(%task: !llvm.ptr):
  llvm.call @__pymlirjit_par_once(%task) : (!llvm.ptr) -> ()
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
  %nested = llvm.call @__pymlirjit_par_in_task() : () -> i1
  llvm.cond_br %nested, ^inline, ^start
^inline:
  llvm.call %resume(%handle) : !llvm.ptr, (!llvm.ptr) -> ()
  llvm.return
^start:
  %task = llvm.call @malloc(%size) : (i64) -> !llvm.ptr
  %no_memory = llvm.icmp "eq" %task, %null : !llvm.ptr
  llvm.cond_br %no_memory, ^inline, ^made
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
  llvm.cond_br %started, ^detach, ^here
^detach:
  %thread = llvm.load %id : !llvm.ptr -> i64
  %detached = llvm.call @pthread_detach(%thread) : (i64) -> i32
  llvm.return
^here:
  llvm.call @__pymlirjit_par_once(%task) : (!llvm.ptr) -> ()
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
  %nested = llvm.call @__pymlirjit_par_in_task() : () -> i1
  %start = llvm.call_intrinsic "llvm.readcyclecounter"() : () -> i64
  llvm.cond_br %nested, ^sleep, ^check
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
    the process that loads it (:func:`pymlirjit.runtime.asyncruntime.claim_task_pool`)."""
    from mlir import ir

    def callee(op: Any) -> str:
        return str(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)

    calls = [(op, _REDIRECTED[callee(op)]) for op in operations(
        module, lambda op: "callee" in op.attributes and callee(op) in _REDIRECTED,
        names={"llvm.call"})]
    markers = [op for op in module.body.operations if "sym_name" in op.attributes
               and ir.StringAttr(op.attributes["sym_name"]).value in MARKERS]
    if not markers and not any(target == _REDIRECTED["mlirAsyncRuntimeExecute"]
                               for _, target in calls):
        return False
    for declaration in markers:  # defined below
        declaration.operation.erase()
    declared = {ir.StringAttr(op.attributes["sym_name"]).value
                for op in module.body.operations if "sym_name" in op.attributes}
    from ..boundary.callframe import HOLDS_GIL, JUMP_BUFFER, PREVIOUS

    with module.context, ir.Location.unknown():
        for op, target in calls:
            op.attributes["callee"] = ir.FlatSymbolRefAttr.get(target)
        extra = ir.Module.parse(_TASK_SCHEDULING.format(
            spin=spin_ticks, yield_after=spin_ticks // 50, pause=_PAUSE,
            hidden=_HIDDEN, holds_gil=HOLDS_GIL, jump_buffer=JUMP_BUFFER,
            previous=PREVIOUS))
        for op in list(extra.body.operations):
            if ir.StringAttr(op.attributes["sym_name"]).value in declared:
                continue  # declared by the module already (malloc, free, ...)
            op.operation.detach_from_parent()
            module.body.append(op)
    return True


# The mark of a jump buffer hidden while its call runs Python
# (pymlirjit.boundary.native.unwindarea.HIDDEN, which loads llvmlite).
_HIDDEN = 1
