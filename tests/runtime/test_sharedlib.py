"""Modules cached as shared libraries: linking, loading from memory, binding slots.

Two sessions sharing a cache directory stand for two processes: the first compiles and
stores the module, the second loads it. Every loaded module is checked against the
same module compiled in memory (the other path of the native entries).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pymlirjit import MemRef, Session, callback, complex128, f64, index
from pymlirjit.boundary.relocation import FINISH_CALL, FRAME_KEY, callback_slot, dtype_slot
from pymlirjit.errors import LinkError
from pymlirjit.runtime import sharedlib
from pymlirjit.runtime.module import slot_values
from pymlirjit.runtime.sharedlib import (
    SharedLibrary,
    c_compiler,
    link_shared_library,
    supported,
)

pytestmark = pytest.mark.skipif(not supported(), reason="needs Linux and a C compiler")

KERNELS = """
func.func @fma(%a: f64, %b: f32, %n: i32, %flag: i1) -> f64 {
  %bb = arith.extf %b : f32 to f64
  %nn = arith.sitofp %n : i32 to f64
  %p = arith.mulf %a, %bb : f64
  %s = arith.addf %p, %nn : f64
  %neg = arith.negf %s : f64
  %r = arith.select %flag, %s, %neg : f64
  return %r : f64
}
func.func @scale(%x: memref<?x3xf32>, %k: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %n = memref.dim %x, %c0 : memref<?x3xf32>
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %v = memref.load %x[%i, %j] : memref<?x3xf32>
      %w = arith.mulf %v, %k : f32
      memref.store %w, %x[%i, %j] : memref<?x3xf32>
    }
  }
  return
}
func.func @is_positive(%x: i32) -> i1 {
  %zero = arith.constant 0 : i32
  %r = arith.cmpi sgt, %x, %zero : i32
  return %r : i1
}
"""

CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("fma", (2.0, 1.5, 3, True)),
    ("fma", (2.0, 1.5, 3, False)),
    ("fma", (np.float64(2.0), np.float32(1.5), np.int32(3), np.True_)),  # numpy scalars
    ("fma", (2.0, 1.5, 2**40, True)),  # out of range for i32
    ("fma", ("2", 1.5, 3, True)),
    ("fma", (2.0, 1.5, 3)),
    ("is_positive", (5,)),
    ("is_positive", (-5,)),
    ("scale", (np.ones((2, 3), np.float32), 2.0)),
    ("scale", (np.ones((2, 3), np.float64), 2.0)),  # wrong dtype
    ("scale", (np.ones((2, 4), np.float32), 2.0)),  # wrong static size
    ("scale", (np.ones((3, 2), np.float32).T, 2.0)),  # not contiguous
]


def outcome(function: Any, args: tuple[Any, ...]) -> Any:
    args = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
    try:
        result = function(*args)
    except Exception as error:  # the error is the outcome compared
        return type(error).__name__, str(error)
    arrays = [a.tolist() for a in args if isinstance(a, np.ndarray)]
    return repr(result), arrays


def compiled_and_loaded(source: str, directory: Path, **options: Any) -> tuple[Any, Any]:
    """The module compiled in this process without a disk cache, and as another
    process loads it from ``directory``."""
    in_memory = Session().compile(source, **options)
    Session(cache_dir=directory).compile(source, **options)
    loader = Session(cache_dir=directory)
    loaded = loader.compile(source, **options)
    assert loader.disk_cache is not None and loader.disk_cache.hits == 1
    assert type(loaded.engine) is SharedLibrary
    return in_memory, loaded


def test_loaded_entries_agree_with_in_memory_ones(tmp_path: Path) -> None:
    in_memory, loaded = compiled_and_loaded(KERNELS, tmp_path)
    for name in ("fma", "scale", "is_positive"):
        assert loaded[name].native_entry is not None  # entries come with the library
    for name, args in CALLS:
        assert outcome(loaded[name], args) == outcome(in_memory[name], args), (name, args)


CALLBACKS = """
func.func @run(%x: f64, %n: i32) -> f64 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> f64 : i32 {
    %next = func.call @step(%acc) : (f64) -> f64
    scf.yield %next : f64
  }
  return %r : f64
}
func.func @total(%a: memref<?xf64>) -> f64 {
  %r = func.call @add_up(%a) : (memref<?xf64>) -> f64
  return %r : f64
}
func.func @rotate(%x: f64) -> f64 {
  %z = func.call @to_complex(%x) : (f64) -> complex<f64>
  %re = complex.re %z : complex<f64>
  %im = complex.im %z : complex<f64>
  %r = arith.addf %re, %im : f64
  return %r : f64
}
func.func private @step(f64) -> f64
func.func private @add_up(memref<?xf64>) -> f64
func.func private @to_complex(f64) -> complex<f64>
"""


def callbacks_in(session: Session, factor: float, calls: list[float]) -> None:
    @callback(session=session)
    def step(x: f64) -> f64:
        calls.append(x)
        if x > 1000:
            raise OverflowError(f"{x} is too large")
        return x * factor

    @callback(session=session)
    def add_up(a: MemRef[f64, None]) -> f64:
        return float(a.sum())

    @callback(session=session)
    def to_complex(x: f64) -> complex128:  # no trampoline serves complex: a forwarder
        return complex(x, factor)


def test_callbacks_of_a_loaded_module_are_this_process_s(tmp_path: Path) -> None:
    first = Session(cache_dir=tmp_path)
    callbacks_in(first, 2.0, [])
    first.compile(CALLBACKS)
    second = Session(cache_dir=tmp_path)
    calls: list[float] = []
    callbacks_in(second, 3.0, calls)
    module = second.compile(CALLBACKS)
    assert second.disk_cache is not None and second.disk_cache.hits == 1
    assert module.run(1.0, 3) == 27.0
    assert module.total(np.arange(5.0)) == 10.0
    assert module.rotate(1.0) == 4.0
    assert calls == [1.0, 3.0, 9.0]


def test_a_callback_error_in_a_loaded_module_ends_the_call(tmp_path: Path) -> None:
    Session(cache_dir=tmp_path).compile(CALLBACKS, callbacks=_callbacks(2.0, []))
    calls: list[float] = []
    module = Session(cache_dir=tmp_path).compile(CALLBACKS, callbacks=_callbacks(10.0, calls))
    with pytest.raises(OverflowError, match=r"10000\.0 is too large"):
        module.run(1.0, 1000)
    assert calls == [1.0, 10.0, 100.0, 1000.0, 10000.0]  # unwound at once
    assert module.run(1.0, 2) == 100.0


def _callbacks(factor: float, calls: list[float]) -> list[Any]:
    session = Session()
    callbacks_in(session, factor, calls)
    return list(session.callbacks)


def test_loads_of_one_entry_are_independent(tmp_path: Path) -> None:
    modules = [Session(cache_dir=tmp_path).compile(CALLBACKS, callbacks=_callbacks(k, []))
               for k in (2.0, 3.0, 4.0)]
    assert [m.run(1.0, 2) for m in modules] == [4.0, 9.0, 16.0]
    assert len({id(m.engine) for m in modules[1:]}) == 2


def memfd_mappings() -> int:
    return Path("/proc/self/maps").read_text().count("/memfd:pymlirjit-")


def test_a_collected_module_is_unloaded(tmp_path: Path) -> None:
    Session(cache_dir=tmp_path).compile(KERNELS)
    gc.collect()
    before = memfd_mappings()
    module = Session(cache_dir=tmp_path).compile(KERNELS)
    function = module.fma
    assert memfd_mappings() > before
    del module
    gc.collect()
    assert function(1.0, 1.0, 1, True) == 2.0  # a function keeps its code loaded
    del function
    gc.collect()
    assert memfd_mappings() == before


@pytest.mark.parametrize("compiler", ["false", "gcc -Wl,--no-such-linker-option"])
def test_a_compiler_that_cannot_link_leaves_object_code(tmp_path: Path, compiler: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", compiler)
    first = Session(cache_dir=tmp_path)
    assert first.compile(KERNELS).is_positive(3) is True
    assert type(first.compile(KERNELS).engine).__name__ == "ExecutionEngine"  # not linked
    loaded = Session(cache_dir=tmp_path).compile(KERNELS)
    assert type(loaded.engine).__name__ == "ObjectEngine"
    assert loaded.is_positive(-3) is False


def test_c_compiler_follows_cc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "")
    assert c_compiler() is None
    monkeypatch.setenv("CC", "gcc -m64")
    command = c_compiler()
    assert command is not None and os.path.basename(command[0]) == "gcc"
    assert command[1:] == ["-m64"]
    monkeypatch.setenv("CC", "no-such-compiler")
    assert c_compiler() is None
    with pytest.raises(LinkError, match="no C compiler"):
        link_shared_library([b""])


def test_a_link_failure_names_the_compiler_and_its_message() -> None:
    with pytest.raises(LinkError, match=r"could not link a shared library: .*part0\.o"):
        link_shared_library([b"not an object file"])


def test_unknown_functions_raise_link_error(tmp_path: Path) -> None:
    Session(cache_dir=tmp_path).compile(KERNELS)
    module = Session(cache_dir=tmp_path).compile(KERNELS)
    with pytest.raises(LinkError, match="no_such_function"):
        module.engine.function_address("no_such_function")


def test_slot_values_resolve_names_in_this_process() -> None:
    session = Session()
    callbacks_in(session, 1.0, [])
    by_name = {cb.name: cb for cb in session.callbacks}
    names = ["float", dtype_slot("f32"), FINISH_CALL, FRAME_KEY,
             callback_slot("step", "function"), callback_slot("to_complex", "entry")]
    values, objects = slot_values(names, by_name)
    assert values[0] == id(float) and values[1] == id(np.dtype(np.float32))
    assert values[4] == id(by_name["step"].__wrapped__)
    assert values[5] == by_name["to_complex"].address
    assert by_name["to_complex"] in objects and float in objects
    with pytest.raises(KeyError):
        slot_values(["no such slot"], by_name)
    with pytest.raises(KeyError):
        slot_values([callback_slot("missing", "function")], by_name)


def test_modules_with_a_boolean_and_float_result_round_trip(tmp_path: Path) -> None:
    source = """
    func.func @half(%x: f32) -> f32 {
      %two = arith.constant 2.0 : f32
      %r = arith.divf %x, %two : f32
      return %r : f32
    }
    func.func @ok(%x: i1) -> i1 {
      return %x : i1
    }
    """
    in_memory, loaded = compiled_and_loaded(source, tmp_path)
    for args in [(3.0,), (np.float32(3.0),), (1,)]:
        assert outcome(loaded.half, args) == outcome(in_memory.half, args)
    assert loaded.ok(True) is True and loaded.ok(False) is False


def test_threads_of_a_loaded_module_call_back(tmp_path: Path) -> None:
    import threading

    from pymlirjit import DEFAULT_PIPELINE
    from tests.test_callbacks import ASYNC_PIPELINE, PARALLEL

    pipeline = [*ASYNC_PIPELINE, *DEFAULT_PIPELINE]
    seen: list[int] = []
    threads: set[int] = set()
    failing = [False]

    def visit(i: index) -> None:
        if i == 777 and failing[0]:
            raise ArithmeticError("bad index 777")
        seen.append(i)
        threads.add(threading.get_ident())

    modules = []
    for _ in range(2):  # compiled and stored, then loaded
        session = Session(shared_libs=["mlir_async_runtime"], cache_dir=tmp_path)
        callback(session=session)(visit)
        modules.append(session.compile(PARALLEL, pipeline=pipeline))
    loaded = modules[1]
    assert type(loaded.engine) is SharedLibrary and loaded.par.release_gil
    loaded.par(2000)
    assert sorted(seen) == list(range(2000)) and len(threads) > 1
    failing[0] = True
    with pytest.raises(ArithmeticError, match="777"):
        loaded.par(2000)
    failing[0] = False
    loaded.par(10)  # nothing left over for the next call


def test_loaded_modules_hold_no_file_descriptors(tmp_path: Path) -> None:
    Session(cache_dir=tmp_path).compile(KERNELS)
    before = len(os.listdir("/proc/self/fd"))
    modules = [Session(cache_dir=tmp_path).compile(KERNELS) for _ in range(20)]
    assert all(type(m.engine) is SharedLibrary for m in modules)
    assert len(os.listdir("/proc/self/fd")) <= before
    assert [m.is_positive(1) for m in modules] == [True] * 20


def test_each_load_is_the_library_asked_for(tmp_path: Path) -> None:
    """Libraries are loaded and unloaded again and again: the dynamic loader must never
    hand back an earlier one (it knows libraries by the path they were loaded from)."""
    sources = [f"""
    func.func @which() -> i64 {{
      %c = arith.constant {k} : i64
      return %c : i64
    }}""" for k in range(3)]
    for source in sources:
        Session(cache_dir=tmp_path).compile(source)
    for _ in range(3):
        modules = [Session(cache_dir=tmp_path).compile(source) for source in sources]
        assert all(type(m.engine) is SharedLibrary for m in modules)
        assert [m.which() for m in modules] == [0, 1, 2]
        del modules
        gc.collect()


FORK_SCRIPT = """
import atexit, os, sys
from pymlirjit import Session
source = open(sys.argv[2]).read()
Session(cache_dir=sys.argv[1]).compile(source)
assert Session(cache_dir=sys.argv[1]).compile(source).is_positive(1) is True
pid = os.fork()
if pid == 0:
    code = 1
    try:
        code = 0 if Session(cache_dir=sys.argv[1]).compile(source).is_positive(2) else 1
        atexit._run_exitfuncs()  # as a normal exit of the child would
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
# The parent still loads: the child's exit removed no folder of the parent's.
module = Session(cache_dir=sys.argv[1]).compile(source)
assert type(module.engine).__name__ == "SharedLibrary" and module.is_positive(3) is True
print("ok")
"""


def test_a_forked_child_loads_modules_of_its_own(tmp_path: Path) -> None:
    source = tmp_path / "kernels.mlir"
    source.write_text(KERNELS)
    done = subprocess.run([sys.executable, "-c", FORK_SCRIPT, str(tmp_path / "cache"),
                           str(source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


# -- nothing left behind: mappings of collected modules, folders of links -------------------

RUNTIME = ["mlir_c_runner_utils"]


def map_lines() -> int:
    return len(Path("/proc/self/maps").read_text().splitlines())


def load_and_collect(directory: Path, cycles: int) -> None:
    for i in range(cycles):
        module = Session(cache_dir=directory).compile(KERNELS, shared_libs=RUNTIME)
        assert type(module.engine) is SharedLibrary and module.is_positive(1) is True
        del module
        if i % 20 == 19:
            gc.collect()
    gc.collect()


def assert_flat_maps(directory: Path, cycles: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharedlib, "_GRACE_SECONDS", 0.0)
    Session(cache_dir=directory).compile(KERNELS, shared_libs=RUNTIME)
    load_and_collect(directory, 5)
    before, libraries = map_lines(), memfd_mappings()
    load_and_collect(directory, cycles)
    assert memfd_mappings() == libraries
    assert map_lines() <= before + 4  # a leak is 5 mappings per load


def test_modules_using_shared_libraries_are_unloaded_when_collected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_flat_maps(tmp_path, 200, monkeypatch)


@pytest.mark.slow
def test_modules_using_shared_libraries_are_unloaded_when_collected_long(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
        ) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("slow variant: run with -m slow")
    assert_flat_maps(tmp_path, 1000, monkeypatch)


def test_modules_using_shared_libraries_are_unloaded_after_a_grace_period(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharedlib, "_GRACE_SECONDS", 0.3)
    Session(cache_dir=tmp_path).compile(KERNELS, shared_libs=RUNTIME)
    gc.collect()
    time.sleep(0.3)
    load_and_collect(tmp_path, 1)  # unloads whatever earlier tests retired
    before = memfd_mappings()
    load_and_collect(tmp_path, 3)
    assert memfd_mappings() > before  # collected, not unloaded yet: their threads may run
    time.sleep(0.3)
    load_and_collect(tmp_path, 1)  # the next load unloads them
    assert memfd_mappings() == before


def test_slot_values_refuse_unknown_callback_slots() -> None:
    session = Session()
    callbacks_in(session, 1.0, [])
    by_name = {cb.name: cb for cb in session.callbacks}
    with pytest.raises(KeyError):
        slot_values([callback_slot("step", "__class__")], by_name)


LEFTOVER_SCRIPT = """
import os, signal, sys
from pymlirjit import Session
source = open(sys.argv[2]).read()
module = Session(cache_dir=sys.argv[1]).compile(source)
assert type(module.engine).__name__ == "SharedLibrary" and module.is_positive(1) is True
how = sys.argv[3]
if how == "fork":  # a child that exits as multiprocessing's do: no atexit
    pid = os.fork()
    if pid == 0:
        code = 0 if Session(cache_dir=sys.argv[1]).compile(source).is_positive(2) else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    print("ok", flush=True)
elif how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "kill-while-loading":  # killed between the link and the dlopen
    import ctypes
    ctypes.CDLL = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    Session(cache_dir=sys.argv[1]).compile(source)
"""


def run_leftover_script(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "kernels.mlir"
    source.write_text(KERNELS)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", LEFTOVER_SCRIPT, str(tmp_path / "cache"),
                           str(source), how], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})


@pytest.mark.parametrize(("how", "returncode"), [
    ("fork", 0), ("kill", -signal.SIGKILL), ("kill-while-loading", -signal.SIGKILL)])
def test_loading_leaves_nothing_behind(tmp_path: Path, how: str, returncode: int) -> None:
    """Not in a forked child that skips atexit, nor in a process killed after or during
    a load: loading writes nothing to the file system."""
    Session(cache_dir=tmp_path / "cache").compile(KERNELS)  # the entry the script loads
    done = run_leftover_script(tmp_path, how)
    assert done.returncode == returncode, done.stderr
    assert done.stdout == ("ok\n" if how == "fork" else "")
    assert list((tmp_path / "tmp").iterdir()) == []


def test_each_load_spells_its_descriptor_s_path_its_own_way() -> None:
    paths = [sharedlib._descriptor_path(7, number) for number in range(5000)]
    assert len(set(paths)) == len(paths)
    assert {os.path.normpath(p) for p in paths} == {"/proc/self/fd/7"}
    assert paths[:4] == ["/proc/self/fd//7", "/proc/self/fd/./7", "/proc/self/fd/.//7",
                         "/proc/self/fd/././7"]
    descriptor = os.open(__file__, os.O_RDONLY)
    try:  # the kernel resolves every spelling to the descriptor's file
        assert {os.path.samefile(sharedlib._descriptor_path(descriptor, n), __file__)
                for n in (0, 1, 2, 1000, 2**40)} == {True}
    finally:
        os.close(descriptor)
