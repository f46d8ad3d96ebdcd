"""parallel=True, safe by construction (issue 31): nested parallelism never hangs,
a forked child without threads runs its loops, errors stay with their call.

Hangs and crashes are tested in child processes with timeouts, for
PYMLIRJIT_NUM_THREADS below, at and above the CPU count, with one and two Python threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, callback, f64, index, mlir_kernel
from pymlirjit.codegen.parallel import THREADS_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
CPUS = len(os.sched_getaffinity(0))
#: below (where there is room), at and above the CPU count, and well above.
THREAD_COUNTS = sorted({max(CPUS - 1, 1), CPUS, CPUS + 1, 2 * CPUS + 1})

INNER = """
func.func @inner(%c: memref<?xf64>, %k: f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %c, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f64
    %v = arith.addf %f, %k : f64
    memref.store %v, %c[%i] : memref<?xf64>
  }
  return
}
"""
OUTER = """
func.func @outer(%out: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %out, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %r = func.call @work(%i) : (index) -> f64
    memref.store %r, %out[%i] : memref<?xf64>
  }
  return
}
func.func private @work(index) -> f64
"""
LINKED = """
func.func @linked(%out: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %c64 = arith.constant 64 : index
  %n = memref.dim %out, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %buf = memref.alloc(%c64) : memref<?xf64>
    %ii = arith.index_cast %i : index to i64
    %k = arith.sitofp %ii : i64 to f64
    func.call @inner(%buf, %k) : (memref<?xf64>, f64) -> ()
    %v = memref.load %buf[%c5] : memref<?xf64>
    memref.dealloc %buf : memref<?xf64>
    memref.store %v, %out[%i] : memref<?xf64>
  }
  return
}
func.func private @inner(memref<?xf64>, f64)
"""
PRIVATE = """
func.func private @fill(%c: memref<?xf64>, %k: f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %c, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f64
    %v = arith.addf %f, %k : f64
    memref.store %v, %c[%i] : memref<?xf64>
  }
  return
}
func.func @private_nest(%out: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %c64 = arith.constant 64 : index
  %n = memref.dim %out, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %buf = memref.alloc(%c64) : memref<?xf64>
    %ii = arith.index_cast %i : index to i64
    %k = arith.sitofp %ii : i64 to f64
    func.call @fill(%buf, %k) : (memref<?xf64>, f64) -> ()
    %v = memref.load %buf[%c5] : memref<?xf64>
    memref.dealloc %buf : memref<?xf64>
    memref.store %v, %out[%i] : memref<?xf64>
  }
  return
}
"""



def _run(code: str, threads: int, timeout: float = 150) -> str:
    """Run ``code`` in a child process with ``threads`` threads per parallel loop; its
    output (a hang is a failure naming the thread count)."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                    THREADS_VARIABLE: str(threads)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung with {THREADS_VARIABLE}={threads} ({CPUS} CPUs)")
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    return done.stdout


NESTED = """
import numpy as np
from pymlirjit import Session, callback, f64, index, mlir_kernel
from tests.codegen.test_parallel_safety import INNER, LINKED, OUTER, PRIVATE
from tests.threads import run_in_threads

session = Session(parallel=True)

@mlir_kernel(source=INNER, session=session)
def inner(c, k): ...

@callback(session=session)
def work(i: index) -> f64:        # a callback in a parallel loop calling a parallel kernel
    buf = np.zeros(64)
    inner(buf, float(i))
    return float(buf[5])

@mlir_kernel(source=OUTER, session=session)
def outer(out): ...

@mlir_kernel(source=LINKED, session=session, callbacks=[inner])
def linked(out): ...              # a parallel loop calling a linked parallel kernel

@mlir_kernel(source=PRIVATE, session=session)
def private_nest(out): ...        # a parallel loop calling a function with its own

n = 200
expected = np.arange(n) + 5.0

def check(kernel):
    for _ in range(3):
        out = np.zeros(n)
        kernel(out)
        assert (out == expected).all(), (kernel, out[:8])

for kernel in (outer, linked, private_nest):
    check(kernel)                 # one Python thread
    run_in_threads(lambda _: check(kernel), range(2))  # two Python threads
print("ok")
"""


@pytest.mark.parametrize("threads", THREAD_COUNTS)
def test_nested_parallel_loops_never_hang(threads: int) -> None:
    """A parallel loop nested in a task, reached through a callback, a linked kernel or
    a function of the module, runs serially on the task's thread: a task never waits on
    the pool it occupies (they hung once the pool's threads were all busy)."""
    assert _run(NESTED, threads) == "ok\n"


FORK_WITHOUT_THREADS = """
import os, resource, threading, time, warnings
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
import numpy as np
from pymlirjit import Session
from tests.codegen.test_parallel import ADD
add = Session(parallel=True).compile(ADD)
a = np.arange(5000.0); c = np.zeros(5000)
add.add(a, a, c)                  # the runtime's pool runs in the parent
pid = os.fork()
if pid == 0:
    # No room for another thread's stack: the child's threads cannot start.
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, ((vm + 2048) * 1024, resource.RLIM_INFINITY))
    hold = threading.Event()
    held = []
    try:
        for _ in range(200):      # the stacks glibc kept of the parent's threads first
            thread = threading.Thread(target=hold.wait)
            thread.start()
            held.append(thread)
        os._exit(5)               # threads still start: nothing would be tested
    except RuntimeError:
        pass
    c[:] = 0
    add.add(a, a, c)
    ok = (c == 2 * a).all()
    hold.set()
    for thread in held:
        thread.join()
    os._exit(0 if ok else 3)
deadline = time.monotonic() + 60
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status))
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("child hung")
        break
    time.sleep(0.05)
"""


@pytest.mark.parametrize("threads", [2, CPUS + 1])
def test_forked_child_whose_threads_cannot_start_runs_the_loop_itself(threads: int) -> None:
    assert _run(FORK_WITHOUT_THREADS, threads) == "child 0\n"



SERIAL_LINKING = """
func.func @serial(%out: memref<?xf64>) {
  func.call @outer(%out) : (memref<?xf64>) -> ()
  return
}
func.func private @outer(memref<?xf64>)
"""

GIL_LINKED = """
import threading, time
import numpy as np
from pymlirjit import Session, callback, f64, index, mlir_kernel
from tests.codegen.test_parallel_safety import OUTER, SERIAL_LINKING

session = Session()

@callback(session=session)
def work(i: index) -> f64:
    if threading.current_thread() is not threading.main_thread():
        time.sleep(0.0002)        # a worker still calls back once the caller is done
    return float(i) + 5.0

@mlir_kernel(source=OUTER, session=session, parallel=True)
def outer(out): ...

@mlir_kernel(source=SERIAL_LINKING, session=session, callbacks=[outer])
def serial(out): ...              # default options, serial, no callback of its own

out = np.zeros(20000)
serial(out)
assert (out == np.arange(20000) + 5.0).all()
print(serial.compile().release_gil)
"""


def test_a_kernel_linking_a_parallel_kernel_that_calls_back_releases_the_gil() -> None:
    """The GIL policy follows what a call can reach: the serial kernel kept the GIL
    while the linked kernel's workers waited for it in their callbacks (a hang)."""
    assert _run(GIL_LINKED, 2) == "True\n"


def test_keeping_the_gil_where_threads_call_python_is_refused() -> None:
    session = Session()

    @callback(session=session)
    def work(i: index) -> f64:
        return float(i)

    @mlir_kernel(source=OUTER, session=session, parallel=True, release_gil=False)
    def outer(out): ...  # type: ignore[no-untyped-def]

    with pytest.raises(ValueError, match="kernel 'outer': release_gil=False would hang"):
        outer.compile()

    @mlir_kernel(source=OUTER, session=session, parallel=True, name="outer")
    def linked(out): ...  # type: ignore[no-untyped-def]

    @mlir_kernel(source=SERIAL_LINKING, session=session, release_gil=False,
                 callbacks=[linked])
    def serial(out): ...  # type: ignore[no-untyped-def]

    with pytest.raises(ValueError, match="kernel 'serial': release_gil=False would hang"):
        serial.compile()


def test_a_worker_failure_belongs_to_the_call_that_started_the_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A callback failing on a worker of a parallel loop fails that loop's call (which
    raises it), never a call on another Python thread; and once the call failed, no
    thread of it enters Python again (issue 31.5, 31.6)."""
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    session = Session()
    caller: list[int] = []
    calls = {"worker": 0, "after": 0, "failed": False}

    @callback(session=session)
    def work(i: index) -> f64:
        if calls["failed"]:
            calls["after"] += 1       # a callback entered after the call failed
        if threading.get_ident() != caller[0]:
            calls["worker"] += 1
            calls["failed"] = True
            raise ZeroDivisionError(f"on a worker at {i}")
        deadline = time.monotonic() + 5
        while not calls["worker"] and time.monotonic() < deadline:
            time.sleep(0.0005)        # the caller waits until a worker calls back
        return 0.0

    @callback(session=session)
    def same(x: f64) -> f64:
        return x

    outer = session.compile(OUTER, parallel=True).outer
    serial = session.compile(SERIAL_CALLING).twice
    stop = threading.Event()
    wrong: list[BaseException] = []

    def unrelated() -> None:          # serial calls that end while workers fail
        while not stop.is_set():
            try:
                assert serial(2.0) == 4.0
            except BaseException as error:
                wrong.append(error)
                return

    other = threading.Thread(target=unrelated)
    other.start()
    try:
        caller.append(threading.get_ident())
        for _ in range(20):
            calls.update(worker=0, after=0, failed=False)
            with pytest.raises(ZeroDivisionError, match="on a worker"):
                outer(np.zeros(400))
            assert calls["after"] == 0
    finally:
        stop.set()
        other.join()
    assert wrong == []


SERIAL_CALLING = """
func.func @twice(%x: f64) -> f64 {
  %y = func.call @same(%x) : (f64) -> f64
  %r = arith.addf %y, %y : f64
  return %r : f64
}
func.func private @same(f64) -> f64
"""

INTERRUPTED = """
import os, signal, threading
import numpy as np
from pymlirjit import Session, callback, f64, index
from tests.codegen.test_parallel_safety import OUTER

session = Session(parallel=True)
main = threading.get_ident()
seen = {"worker": 0, "after": 0, "interrupted": False}

def interrupt(signum, frame):
    seen["interrupted"] = True
    raise KeyboardInterrupt

signal.signal(signal.SIGINT, interrupt)

@callback(session=session)
def work(i: index) -> f64:
    if seen["interrupted"]:
        seen["after"] += 1
    if threading.get_ident() != main:
        seen["worker"] += 1
        if seen["worker"] == 20:
            os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C, handled on the main thread
    else:
        while not seen["interrupted"]:
            pass                  # the caller's callback runs Python: it sees Ctrl-C
    return 0.0

outer = session.compile(OUTER).outer
try:
    outer(np.zeros(4000))
except KeyboardInterrupt:
    print("interrupted", seen["after"])
"""


@pytest.mark.parametrize("threads", [2, CPUS + 1])
def test_after_ctrl_c_no_thread_of_the_call_enters_python(threads: int) -> None:
    assert _run(INTERRUPTED, threads) == "interrupted 0\n"


DIVIDE = """
func.func @divide(%a: memref<?xi64>, %b: memref<?xi64>, %c: memref<?xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xi64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %x = memref.load %a[%i] : memref<?xi64>
    %y = memref.load %b[%i] : memref<?xi64>
    %q = arith.divsi %x, %y : i64
    memref.store %q, %c[%i] : memref<?xi64>
  }
  return
}
"""


def test_a_checked_division_failing_in_a_parallel_loop_fails_only_its_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked mode's failures take the callbacks' path: with a zero divisor at the end
    (a worker's share), the parallel call raises ZeroDivisionError every time, and
    serial checked calls on another Python thread never do (issue 31.5)."""
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    session = Session()
    parallel = session.compile(DIVIDE, parallel=True).divide
    serial = session.compile(DIVIDE).divide
    a = np.arange(1, 20001, dtype=np.int64)
    zero_late, ones = a.copy(), np.ones_like(a)
    zero_late[-3] = 0
    out = np.zeros_like(a)
    stop = threading.Event()
    wrong: list[BaseException] = []

    def unrelated() -> None:
        mine = np.zeros_like(a)
        while not stop.is_set():
            try:
                serial(a, ones, mine)
            except BaseException as error:
                wrong.append(error)
                return

    other = threading.Thread(target=unrelated)
    other.start()
    try:
        for _ in range(100):
            with pytest.raises(ZeroDivisionError):
                parallel(a, zero_late, out)
    finally:
        stop.set()
        other.join()
    assert wrong == []
