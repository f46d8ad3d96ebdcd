"""asyncruntime: MLIR's async runtime has one owner per process, which gives engines its
symbols and counts its tasks (the engines' behaviour is tested in test_engine.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

from pymlirjit.lowering.pipeline import runtime_library
from pymlirjit.runtime.asyncruntime import AsyncRuntime, has_hooks

ROOT = Path(__file__).resolve().parents[2]


def test_only_the_async_runtime_gets_an_owner() -> None:
    utils = ctypes.CDLL(runtime_library("libmlir_c_runner_utils.so"))
    assert AsyncRuntime.get(runtime_library("libmlir_c_runner_utils.so"), utils) is None
    # (Not the process's namespace: libraries with hooks loaded globally are in it.)
    assert not has_hooks(ctypes.CDLL(ctypes.util.find_library("c")))


def test_one_owner_per_library_gives_its_symbols_and_counts_its_tasks() -> None:
    path = runtime_library("libmlir_async_runtime.so")
    library = ctypes.CDLL(path)
    assert has_hooks(library)
    owner = AsyncRuntime.get(path, library)
    assert owner is not None and AsyncRuntime.get(path, library) is owner
    assert owner.address("mlirAsyncRuntimeCreateToken") != 0
    # The schedulers are the counting shims, not the library's own functions.
    shim = owner.address("mlirAsyncRuntimeExecute")
    assert shim != 0 and shim != ctypes.cast(library.mlirAsyncRuntimeExecute,
                                             ctypes.c_void_p).value
    assert owner.address("printf") == 0  # the process's, not the library's
    assert owner.in_flight() == 0


ASYNC_IN_A_FORKED_CHILD = '''
import os, warnings
warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
from pymlirjit import Session
module = Session().compile("""
func.func @twice(%x: i32) -> i32 {
  %token, %value = async.execute -> !async.value<i32> {
    %y = arith.addi %x, %x : i32
    async.yield %y : i32
  }
  %v = async.await %value : !async.value<i32>
  return %v : i32
}""")
assert all(module.twice(i) == 2 * i for i in range(100))   # the pool's workers run
pid = os.fork()
if pid == 0:
    import faulthandler
    faulthandler.dump_traceback_later(60, exit=True)   # a task given to the pool hangs
    ok = all(module.twice(i) == 2 * i for i in range(100))
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), "parent", module.twice(5))
'''


def test_tasks_of_the_owners_shims_run_in_a_forked_child() -> None:
    # Async code that is not parallel=True schedules through the owner's shims, whose
    # tasks a forked child runs on threads of their own (the workers of the parent's
    # pool are not in the child), as a parallel module's (see test_parallel.py).
    done = subprocess.run([sys.executable, "-c", ASYNC_IN_A_FORKED_CHILD],
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "child 0 parent 10\n", "")
