"""parallel=True: loops on several threads of MLIR's async runtime (docs/threads.md)."""

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
from pymlirjit.codegen.parallel import (
    CHUNKS_PER_THREAD,
    THREADS_VARIABLE,
    serialize_nested_parallel_loops,
    split_for_threads,
    thread_count,
    with_parallel_loops,
)
from pymlirjit.lowering.pipeline import new_context, normalize_pipeline, parse_module
from pymlirjit.runtime.prepare import CompileOptions
from tests.threads import run_in_threads

ROOT = Path(__file__).resolve().parents[2]

SIZES = [0, 1, 2, 7, 13, 97, 1009]

ADD = """
func.func @add(%a: memref<?xf64>, %b: memref<?xf64>, %c: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = memref.load %b[%i] : memref<?xf64>
    %s = arith.addf %x, %y : f64
    memref.store %s, %c[%i] : memref<?xf64>
  }
  return
}
"""

# 5-point stencil written as nested scf.parallel loops (the inner one runs serially
# inside each task of the outer one).
STENCIL = """
func.func @stencil(%u: memref<?x?xf64>, %v: memref<?x?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %quarter = arith.constant 0.25 : f64
  %n = memref.dim %u, %c0 : memref<?x?xf64>
  %m = memref.dim %u, %c1 : memref<?x?xf64>
  %n1 = arith.subi %n, %c1 : index
  %m1 = arith.subi %m, %c1 : index
  scf.parallel (%i) = (%c1) to (%n1) step (%c1) {
    scf.parallel (%j) = (%c1) to (%m1) step (%c1) {
      %im = arith.subi %i, %c1 : index
      %ip = arith.addi %i, %c1 : index
      %jm = arith.subi %j, %c1 : index
      %jp = arith.addi %j, %c1 : index
      %a = memref.load %u[%im, %j] : memref<?x?xf64>
      %b = memref.load %u[%ip, %j] : memref<?x?xf64>
      %c = memref.load %u[%i, %jm] : memref<?x?xf64>
      %d = memref.load %u[%i, %jp] : memref<?x?xf64>
      %s1 = arith.addf %a, %b : f64
      %s2 = arith.addf %c, %d : f64
      %s = arith.addf %s1, %s2 : f64
      %r = arith.mulf %s, %quarter : f64
      memref.store %r, %v[%i, %j] : memref<?x?xf64>
    }
  }
  return
}
"""

MATMUL = """
func.func @mm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

SCALE = """
func.func @scale(%a: tensor<?x?xf64>) -> tensor<?x?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %a, %c0 : tensor<?x?xf64>
  %m = tensor.dim %a, %c1 : tensor<?x?xf64>
  %k = arith.constant 3.0 : f64
  %init = tensor.empty(%n, %m) : tensor<?x?xf64>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
                                        affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<?x?xf64>) outs(%init : tensor<?x?xf64>) {
  ^bb0(%x: f64, %o: f64):
    %y = arith.mulf %x, %k : f64
    linalg.yield %y : f64
  } -> tensor<?x?xf64>
  return %r : tensor<?x?xf64>
}
"""


def _stencil_numpy(u: np.ndarray) -> np.ndarray:
    v = np.zeros_like(u)
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


@pytest.fixture
def two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parallel code for two threads, whatever this machine has."""
    monkeypatch.setenv(THREADS_VARIABLE, "2")


def _schedules_tasks(module: object) -> bool:
    return "mlirAsyncRuntimeExecute" in str(module.lowered_mlir)  # type: ignore[attr-defined]


@pytest.mark.parametrize("n", SIZES)
def test_parallel_loop_matches_serial_and_numpy(n: int, two_threads: None) -> None:
    serial = Session().compile(ADD)
    parallel = Session(parallel=True).compile(ADD)
    assert _schedules_tasks(parallel) and not _schedules_tasks(serial)
    rng = np.random.default_rng(n)
    a, b = rng.random(n), rng.random(n)
    expected, got = np.full(n, np.nan), np.full(n, np.nan)
    serial.add(a, b, expected)
    parallel.add(a, b, got)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, a + b)


@pytest.mark.parametrize("n", [1, 2, 3, 13, 97, 211])
def test_nested_parallel_stencil_matches_numpy(n: int, two_threads: None) -> None:
    module = Session(parallel=True).compile(STENCIL)
    u = np.random.default_rng(n).random((n, n + 2))
    v = np.zeros_like(u)
    module.stencil(u, v)
    np.testing.assert_allclose(v, _stencil_numpy(u), rtol=1e-15, atol=0)


@pytest.mark.parametrize("n", [1, 2, 13, 97, 300])
def test_parallel_tiled_matmul_matches_numpy(n: int, two_threads: None) -> None:
    module = Session(parallel=True, opt_level=3).compile(MATMUL)
    assert _schedules_tasks(module)
    rng = np.random.default_rng(n)
    a = rng.random((n, n + 1), dtype=np.float32)
    b = rng.random((n + 1, n + 3), dtype=np.float32)
    c = np.zeros((n, n + 3), np.float32)
    module.mm(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (7, 13), (97, 31)])
def test_parallel_linalg_on_tensors_matches_numpy(shape: tuple[int, int],
                                                  two_threads: None) -> None:
    @mlir_kernel(source=SCALE, parallel=True, session=Session())
    def scale(a: np.ndarray) -> np.ndarray: ...

    a = np.random.default_rng(1).random(shape)
    np.testing.assert_array_equal(scale(a), 3.0 * a)


def test_without_parallel_nothing_changes() -> None:
    options = CompileOptions.make()
    assert options.resolved() == options
    assert options.pipeline_key == normalize_pipeline(None) + " +linalg-schedules"
    assert not options.parallel_loops


def test_thread_count_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert thread_count() == len(os.sched_getaffinity(0))
    monkeypatch.setenv(THREADS_VARIABLE, " 3 ")
    assert thread_count() == 3
    options = CompileOptions.make(parallel=True).resolved()
    assert options.threads == 3 and options.parallel_loops
    assert options.pipeline_key.endswith("+parallel=3")
    assert "num-workers=3" in with_parallel_loops(options.pipeline, options.threads)


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "", "99999999", "٣"])
def test_bad_thread_count_is_an_error_naming_the_variable(
        value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, value)
    if not value:  # empty: as if unset
        assert thread_count() >= 1
        return
    session = Session(parallel=True)  # read when a parallel module compiles, not before
    with pytest.raises(ValueError, match=THREADS_VARIABLE):
        session.compile(ADD)
    Session().compile(ADD)  # serial modules do not read it


def test_one_thread_compiles_serial_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    module = Session(parallel=True).compile(ADD)
    assert not _schedules_tasks(module)
    c = np.zeros(5)
    module.add(np.ones(5), np.ones(5), c)
    assert (c == 2).all()


def test_thread_count_is_part_of_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session(parallel=True)
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    two = session.compile(ADD)
    monkeypatch.setenv(THREADS_VARIABLE, "3")
    three = session.compile(ADD)
    assert two is not three
    assert "num-workers" not in str(three.lowered_mlir)  # lowered: only the code differs
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    assert session.compile(ADD) is two


def test_user_pipeline_runs_as_written(two_threads: None) -> None:
    pipeline = normalize_pipeline(None)
    module = Session(pipeline=pipeline + " ", parallel=True).compile(ADD)
    assert _schedules_tasks(module)  # the same text: the default pipeline
    custom = pipeline.replace("convert-scf-to-cf", "convert-scf-to-cf,canonicalize")
    module = Session(pipeline=custom, parallel=True).compile(ADD)
    assert not _schedules_tasks(module)


def test_nested_parallel_loops_become_sequential() -> None:
    module = parse_module(STENCIL, new_context())
    assert serialize_nested_parallel_loops(module) == 1
    text = str(module)
    assert text.count("scf.parallel") == 1 and text.count("scf.for") == 1


REPEATED = """
func.func @repeat(%a: memref<?xf64>, %times: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f64
  %n = memref.dim %a, %c0 : memref<?xf64>
  scf.for %t = %c0 to %times step %c1 {
    scf.parallel (%i) = (%c0) to (%n) step (%c1) {
      %x = memref.load %a[%i] : memref<?xf64>
      %y = arith.addf %x, %one : f64
      memref.store %y, %a[%i] : memref<?xf64>
    }
  }
  return
}
"""


def test_split_loop_shares_chunks_through_counters_made_once_per_call() -> None:
    module = parse_module(REPEATED, new_context())
    assert split_for_threads(module, 3) == 1
    module.operation.verify()
    function = module.body.operations[0]
    entry = function.regions[0].blocks[0]
    first = entry.operations[0]
    # Allocated at the function's entry, not once per turn of the loop around the tasks.
    assert first.name == "memref.alloca" and "memref<3x8xi64>" in str(first.result.type)
    text = str(module)
    assert text.count("memref.atomic_rmw addi") == 1 and text.count("scf.parallel") == 2


def test_repeated_parallel_loop_runs_every_chunk_each_time(two_threads: None) -> None:
    module = Session(parallel=True).compile(REPEATED)
    for n in (0, 1, 2 * CHUNKS_PER_THREAD - 1, 2 * CHUNKS_PER_THREAD + 1, 1009):
        a = np.zeros(n)
        module.repeat(a, 300)
        np.testing.assert_array_equal(a, np.full(n, 300.0))


COUNTS = """
func.func @visit(%a: memref<?xi64>, %lower: index, %upper: index, %step: index) {
  %one = arith.constant 1 : i64
  scf.parallel (%i) = (%lower) to (%upper) step (%step) {
    %old = memref.atomic_rmw addi %one, %a[%i] : (i64, memref<?xi64>) -> i64
  }
  return
}
"""


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_every_iteration_runs_once_whatever_the_chunks(
        threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, str(threads))
    module = Session(parallel=True).compile(COUNTS)
    for lower, trips, step in [(0, 0, 1), (0, 1, 1), (3, 2, 2), (1, threads - 1, 1),
                               (0, threads * CHUNKS_PER_THREAD + 1, 1), (5, 20, 3),
                               (0, 1009, 1), (2, 997, 7)]:
        upper = lower + trips * step
        visits = np.zeros(upper + step, dtype=np.int64)
        for _ in range(3):
            module.visit(visits, lower, upper, step)
        expected = np.zeros_like(visits)
        expected[lower:upper:step] = 3
        np.testing.assert_array_equal(visits, expected, err_msg=f"{lower}:{upper}:{step}")


def test_a_slow_thread_hands_its_chunks_to_the_others(two_threads: None) -> None:
    """A thread held up in its first chunk (here a callback that sleeps; on a machine,
    another process on its core) leaves the rest of its share to the other thread."""
    session = Session(parallel=True)
    ran: dict[int, int] = {}
    first = threading.Lock()

    n = 1600
    share = n // (2 * CHUNKS_PER_THREAD)

    @callback(session=session)
    def twice(i: index) -> f64:
        me = threading.get_ident()
        ran[me] = ran.get(me, 0) + 1
        if i == 0 and first.acquire(blocking=False):
            # The thread of chunk 0, the first of its share, held up until the other has
            # done all but that chunk (or 10 s: on a loaded machine 1 s was not enough).
            deadline = time.monotonic() + 10
            while sum(ran.values()) < n - share + 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        return 2.0 * i

    module = session.compile(CALLS_BACK)
    c = np.zeros(n)
    module.fill(c)
    np.testing.assert_array_equal(c, 2.0 * np.arange(n))
    assert len(ran) == 2 and sum(ran.values()) == n
    # Static halves would give each thread 800; the sleeper keeps only what it had started.
    assert min(ran.values()) <= share, ran


def test_gil_is_released_while_workers_run(two_threads: None) -> None:
    module = Session(parallel=True).compile(STENCIL)
    u = np.random.default_rng(0).random((1500, 1500))
    v = np.zeros_like(u)
    module.stencil(u, v)  # warm
    window: list[float] = []

    def run() -> None:
        start = time.perf_counter()
        for _ in range(8):
            module.stencil(u, v)
        window.extend([start, time.perf_counter()])

    worker = threading.Thread(target=run)
    stamps = []
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())
    worker.join()
    start, end = window
    inside = [t for t in stamps if start < t < end]
    # Holding the GIL for the calls would let this thread run only between them.
    assert len(inside) > 1000, (len(inside), end - start)


def test_callback_called_from_a_parallel_loop(two_threads: None) -> None:
    session = Session(parallel=True)
    threads: set[int] = set()

    @callback(session=session)
    def twice(i: index) -> f64:
        threads.add(threading.get_ident())
        return 2.0 * i

    module = session.compile(CALLS_BACK)
    for n in (0, 1, 17, 20000):
        c = np.full(n, np.nan)
        module.fill(c)
        np.testing.assert_array_equal(c, 2.0 * np.arange(n))
    assert len(threads) >= 2  # the caller and at least one worker of the runtime


def test_thread_cap_holds_within_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session(parallel=True)
    threads: set[int] = set()

    @callback(session=session)
    def twice(i: index) -> f64:
        threads.add(threading.get_ident())
        return 2.0 * i

    for cap in (2, 1):
        monkeypatch.setenv(THREADS_VARIABLE, str(cap))
        module = session.compile(CALLS_BACK)
        for _ in range(5):
            threads.clear()
            c = np.zeros(30011)
            module.fill(c)
            np.testing.assert_array_equal(c, 2.0 * np.arange(30011))
            assert 1 <= len(threads) <= cap, (cap, len(threads))


CALLS_BACK = """
func.func private @twice(index) -> f64
func.func @fill(%c: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %c, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %v = func.call @twice(%i) : (index) -> f64
    memref.store %v, %c[%i] : memref<?xf64>
  }
  return
}
"""


FILL_ONES = """
func.func @fill(%c: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f64
  %n = memref.dim %c, %c0 : memref<?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %one, %c[%i] : memref<?xf64>
  }
  return
}
"""


def test_a_parallel_kernel_called_back_into_from_its_own_loop(two_threads: None) -> None:
    """A callback inside a parallel loop calls another parallel kernel (its tasks and
    chunk counters are its own) and clears the session that compiled both, every time
    from whichever thread runs that chunk."""
    session = Session(parallel=True)
    inner = session.compile(FILL_ONES)
    sums: list[float] = []

    @callback(session=session)
    def twice(i: index) -> f64:
        buffer = np.zeros(1000)
        inner.fill(buffer)
        sums.append(float(buffer.sum()))
        if i % 50 == 0:
            session.clear_cache()
        return 2.0 * i

    outer = session.compile(CALLS_BACK)
    for n in (1, 200):
        sums.clear()
        c = np.zeros(n)
        outer.fill(c)
        np.testing.assert_array_equal(c, 2.0 * np.arange(n))
        assert sums == [1000.0] * n


def test_callback_raising_in_a_parallel_loop_fails_the_call(two_threads: None) -> None:
    session = Session(parallel=True)
    raised: list[BaseException] = []
    where: list[int] = []

    @callback(session=session)
    def twice(i: index) -> f64:
        if i == 15000 and not raised:  # a late block: on a worker of the runtime
            where.append(threading.get_ident())
            raised.append(KeyError(i))
            raise raised[0]
        return 2.0 * i

    module = session.compile(CALLS_BACK)
    c = np.zeros(20000)
    with pytest.raises(KeyError) as info:
        module.fill(c)
    assert info.value is raised[0]
    assert "callback 'twice'" in " ".join(getattr(info.value, "__notes__", []))
    module.fill(c)  # the failure does not outlive its call
    np.testing.assert_array_equal(c, 2.0 * np.arange(20000))


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stderr == "", done.stderr
    return done.stdout


FORK = """
import os, sys
import warnings
# Forking once the runtime's threads exist is what this tests: Python 3.12+'s warning
# that fork() in a multi-threaded process may deadlock is the risk under test.
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
import numpy as np
from pymlirjit import Session
from tests.codegen.test_parallel import ADD, STENCIL
session = Session(parallel=True, cache_dir=sys.argv[1] if len(sys.argv) > 1 else None)
add = session.compile(ADD)
a = np.arange(5000.0); c = np.zeros(5000)
add.add(a, a, c); assert (c == 2 * a).all()
pid = os.fork()
if pid == 0:
    c[:] = 0
    add.add(a, a, c)
    ok = (c == 2 * a).all()
    stencil = Session(parallel=True).compile(STENCIL)   # compiled in the child
    u = np.ones((300, 300)); v = np.zeros_like(u)
    stencil.stencil(u, v)
    ok = ok and (v[1:-1, 1:-1] == 1).all()
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
c[:] = 0; add.add(a, a, c); print("parent", (c == 2 * a).all())
"""


@pytest.mark.parametrize("cached", [False, True])
def test_fork_after_a_parallel_call(cached: bool, tmp_path: Path) -> None:
    args = (str(tmp_path),) if cached else ()
    assert _run(FORK, *args, env={THREADS_VARIABLE: "2"}) == "child 0\nparent True\n"


CACHED = """
import sys
import numpy as np
from pymlirjit import Session
from tests.codegen.test_parallel import ADD
session = Session(parallel=True, cache_dir=sys.argv[1])
module = session.compile(ADD)
a = np.arange(10007.0); c = np.zeros_like(a)
module.add(a, a, c)
print(session.disk_cache.hits, (c == 2 * a).all(), "mlirAsyncRuntime" in str(module.lowered_mlir))
"""


def test_disk_cache_serves_a_parallel_module_to_a_fresh_process(tmp_path: Path) -> None:
    env = {THREADS_VARIABLE: "2"}
    assert _run(CACHED, str(tmp_path), env=env) == "0 True True\n"
    assert _run(CACHED, str(tmp_path), env=env) == "1 True True\n"
    # Another thread count is another entry.
    assert _run(CACHED, str(tmp_path), env={THREADS_VARIABLE: "3"}) == "0 True True\n"


FORK_THEN_LOAD = """
import os, sys
import warnings
# Forking once the runtime's threads exist is what this tests: Python 3.12+'s warning
# that fork() in a multi-threaded process may deadlock is the risk under test.
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
import numpy as np
from pymlirjit import Session
from tests.codegen.test_parallel import ADD, STENCIL
first = Session(parallel=True).compile(STENCIL)
u = np.ones((300, 300)); v = np.zeros_like(u)
first.stencil(u, v)                       # the runtime's pool runs in the parent
pid = os.fork()
if pid == 0:
    # A module compiled (and stored, and loaded back) only in the child.
    add = Session(parallel=True, cache_dir=sys.argv[1]).compile(ADD)
    a = np.arange(5000.0); c = np.zeros(5000)
    add.add(a, a, c)
    os._exit(0 if (c == 2 * a).all() else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_module_loaded_in_a_forked_child(tmp_path: Path) -> None:
    assert _run(FORK_THEN_LOAD, str(tmp_path), env={THREADS_VARIABLE: "2"}) == "child 0\n"


BEFORE_FORK_AND_LOADED_IN_CHILD = """
import os, sys
import warnings
# Forking once the runtime's threads exist is what this tests: Python 3.12+'s warning
# that fork() in a multi-threaded process may deadlock is the risk under test.
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
import numpy as np
from pymlirjit import Session
from tests.codegen.test_parallel import ADD, STENCIL, _stencil_numpy
if sys.argv[2] == "store":   # another process puts the stencil in the disk cache
    Session(parallel=True, cache_dir=sys.argv[1]).compile(STENCIL)
    sys.exit(0)
add = Session(parallel=True).compile(ADD)   # compiled (JIT) before the fork
a = np.arange(7001.0); c = np.zeros_like(a)
for _ in range(50):
    add.add(a, a, c)                        # the pool's workers run (and wait for more)
pid = os.fork()
if pid == 0:
    import faulthandler
    faulthandler.dump_traceback_later(60, exit=True)   # a task given to the pool hangs
    ok = True
    for _ in range(20):
        c[:] = 0
        add.add(a, a, c)
        ok = ok and bool((c == 2 * a).all())
    session = Session(parallel=True, cache_dir=sys.argv[1])
    stencil = session.compile(STENCIL)      # loaded from the disk cache, in the child
    ok = ok and session.cache_info().disk_hits == 1
    u = np.random.default_rng(1).random((301, 299))
    for _ in range(20):
        v = np.zeros_like(u)
        stencil.stencil(u, v)
        ok = ok and np.allclose(v, _stencil_numpy(u), rtol=1e-15, atol=0)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
c[:] = 0; add.add(a, a, c)
print("child", os.waitstatus_to_exitcode(status), "parent", bool((c == 2 * a).all()))
"""


def test_compiled_before_a_fork_and_loaded_in_the_child_both_run_there(
        tmp_path: Path) -> None:
    env = {THREADS_VARIABLE: "2"}
    _run(BEFORE_FORK_AND_LOADED_IN_CHILD, str(tmp_path), "store", env=env)
    assert _run(BEFORE_FORK_AND_LOADED_IN_CHILD, str(tmp_path), "fork",
                env=env) == "child 0 parent True\n"


def test_back_to_back_calls_from_several_threads(two_threads: None) -> None:
    # A worker that ran a task waits a moment for the module's next one, which the
    # caller then hands it directly: calls in quick succession, from several Python
    # threads at once and to two modules, each get their own results.
    add = Session(parallel=True).compile(ADD)
    stencil = Session(parallel=True).compile(STENCIL)
    failures: list[str] = []

    def run(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(150):
            n = int(rng.integers(0, 3000))
            a, b, c = rng.random(n), rng.random(n), np.full(n, np.nan)
            add.add(a, b, c)
            if not (c == a + b).all():
                failures.append(f"add, thread {seed}, call {i}, n={n}")
            if i % 10 == 0:
                u = rng.random((int(rng.integers(1, 60)), 40))
                v = np.zeros_like(u)
                stencil.stencil(u, v)
                if not np.allclose(v, _stencil_numpy(u), rtol=1e-15, atol=0):
                    failures.append(f"stencil, thread {seed}, call {i}, {u.shape}")

    run_in_threads(run, range(3))
    assert failures == []


def test_cli_run_parallel(tmp_path: Path) -> None:
    source = tmp_path / "fill.mlir"
    source.write_text("""
func.func @main() -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1001 : index
  %m = memref.alloc(%n) : memref<?xf64>
  %one = arith.constant 1.0 : f64
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %one, %m[%i] : memref<?xf64>
  }
  %z = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%a = %z) -> f64 {
    %v = memref.load %m[%i] : memref<?xf64>
    %t = arith.addf %a, %v : f64
    scf.yield %t : f64
  }
  memref.dealloc %m : memref<?xf64>
  return %s : f64
}
""")
    command = [sys.executable, "-m", "pymlirjit", "run", "--parallel", str(source)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), THREADS_VARIABLE: "2"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "1001.0"), done.stderr
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env={**env, THREADS_VARIABLE: "many"})
    assert done.returncode != 0 and THREADS_VARIABLE in done.stderr
