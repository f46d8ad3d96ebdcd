"""Call shapes on the native path: memref and tensor results the kernel allocates become
arrays that own that memory (natively), and every other result memory (an argument's,
another result's, a global's) is read as the Python path reads it; the lifetime and
unwinding rules hold for them as for any native call."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, callback, f64

from .conftest import rss_bytes

SHAPES = """
func.func @fill(%x: f64, %n: index) -> memref<?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    %f = arith.index_cast %i : index to i64
    %g = arith.sitofp %f : i64 to f64
    %v = arith.addf %x, %g : f64
    memref.store %v, %m[%i] : memref<?xf64>
  }
  return %m : memref<?xf64>
}
func.func @same(%a: memref<?xf64>) -> memref<?xf64> {
  return %a : memref<?xf64>
}
func.func @tsame(%a: tensor<3xf64>) -> tensor<3xf64> {
  return %a : tensor<3xf64>
}
func.func @tadd(%a: tensor<5xf64>, %b: tensor<5xf64>) -> tensor<5xf64> {
  %e = tensor.empty() : tensor<5xf64>
  %r = linalg.add ins(%a, %b : tensor<5xf64>, tensor<5xf64>)
                  outs(%e : tensor<5xf64>) -> tensor<5xf64>
  return %r : tensor<5xf64>
}
func.func @twice(%n: index) -> (memref<?xf64>, memref<?xf64>) {
  %m = memref.alloc(%n) : memref<?xf64>
  return %m, %m : memref<?xf64>, memref<?xf64>
}
func.func @mixed(%x: f64, %k: i32) -> (f64, memref<2x3xi32>, i32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %m = memref.alloc() : memref<2x3xi32>
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      memref.store %k, %m[%i, %j] : memref<2x3xi32>
    }
  }
  return %x, %m, %k : f64, memref<2x3xi32>, i32
}
func.func @grid() -> memref<4x3xf64, strided<[20, 2], offset: 12>> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c10 = arith.constant 10 : index
  %m = memref.alloc() : memref<10x10xf64>
  scf.for %i = %c0 to %c10 step %c1 {
    scf.for %j = %c0 to %c10 step %c1 {
      %k = arith.muli %i, %c10 : index
      %l = arith.addi %k, %j : index
      %f = arith.index_cast %l : index to i64
      %g = arith.sitofp %f : i64 to f64
      memref.store %g, %m[%i, %j] : memref<10x10xf64>
    }
  }
  %s = memref.subview %m[1, 2] [4, 3] [2, 2]
      : memref<10x10xf64> to memref<4x3xf64, strided<[20, 2], offset: 12>>
  return %s : memref<4x3xf64, strided<[20, 2], offset: 12>>
}
func.func @scalar(%x: f64) -> memref<f64> {
  %m = memref.alloc() : memref<f64>
  memref.store %x, %m[] : memref<f64>
  return %m : memref<f64>
}
memref.global "private" constant @numbers : memref<3xf64> = dense<[1.0, 2.0, 3.0]>
func.func @table() -> memref<3xf64> {
  %g = memref.get_global @numbers : memref<3xf64>
  return %g : memref<3xf64>
}
"""


def python_path_calls(call: Callable[[], object]) -> tuple[object, int]:
    """``call()``'s result, and how many calls the Python path (function.py's
    ``_PythonCall.__call__``) took during it."""
    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        code = frame.f_code  # type: ignore[attr-defined]
        if (event == "call" and code.co_name == "__call__"
                and code.co_filename.endswith(os.path.join("pymlirjit", "function.py"))):
            calls += 1

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, calls


@pytest.fixture
def shapes(session: Session) -> object:
    module = session.compile(SHAPES)
    for name in ("fill", "same", "tsame", "tadd", "twice", "mixed", "grid", "scalar", "table"):
        assert getattr(module, name).ensure_native(), name
    return module


def test_a_kernel_allocated_memref_is_an_array_owning_it(shapes: object) -> None:
    fill = shapes.fill  # type: ignore[attr-defined]
    for n in (1000, 1, 0, 7):
        result, python_calls = python_path_calls(lambda: fill(0.5, n))  # noqa: B023
        assert python_calls == 0
        assert isinstance(result, np.ndarray) and result.dtype == np.float64
        np.testing.assert_array_equal(result, 0.5 + np.arange(n))
        assert result.flags.writeable and result.flags.c_contiguous
        assert not result.flags.owndata and result.base.flags.owndata  # its owner
        np.testing.assert_array_equal(result, fill.call_python(0.5, n))
    result[3] = -1.0
    assert result[3] == -1.0


def test_results_aliasing_arguments_globals_or_each_other(shapes: object) -> None:
    m = shapes
    a = np.arange(4.0)
    same = m.same(a)  # type: ignore[attr-defined]
    assert np.shares_memory(same, a)
    tensor = np.arange(3.0)
    copied = m.tsame(tensor)  # type: ignore[attr-defined]
    assert not np.shares_memory(copied, tensor)  # a tensor is a value
    np.testing.assert_array_equal(copied, tensor)
    first, second = m.twice(5)  # type: ignore[attr-defined]
    assert first.shape == second.shape == (5,) and np.shares_memory(first, second)
    np.testing.assert_array_equal(m.table(), [1.0, 2.0, 3.0])  # type: ignore[attr-defined]
    x, grid, k = m.mixed(1.5, -3)  # type: ignore[attr-defined]
    assert (x, k) == (1.5, -3) and type(x) is float and type(k) is int
    np.testing.assert_array_equal(grid, np.full((2, 3), -3, np.int32))


def test_strided_rank_0_and_tensor_results(shapes: object) -> None:
    m = shapes
    grid = m.grid()  # type: ignore[attr-defined]
    expected = np.arange(100.0).reshape(10, 10)[1:9:2, 2:8:2]
    np.testing.assert_array_equal(grid, expected)
    assert grid.strides == expected.strides and not grid.flags.c_contiguous
    scalar = m.scalar(2.5)  # type: ignore[attr-defined]
    assert scalar.shape == () and scalar[()] == 2.5
    a, b = np.arange(5.0), np.full(5, 0.25)
    np.testing.assert_array_equal(m.tadd(a, b), a + b)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(a, np.arange(5.0))  # the arguments are untouched


def test_arrays_outlive_their_kernel_and_session() -> None:
    session = Session()
    module = session.compile(SHAPES)
    results = [module.fill(1.0, 100), module.grid(), module.table()]
    del module
    session.clear_cache()
    del session
    gc.collect()
    np.testing.assert_array_equal(results[0], 1.0 + np.arange(100))
    np.testing.assert_array_equal(results[1], np.arange(100.0).reshape(10, 10)[1:9:2, 2:8:2])
    np.testing.assert_array_equal(results[2], [1.0, 2.0, 3.0])


def test_no_leaks_of_memory_or_references(shapes: object) -> None:
    m = shapes
    a, t = np.arange(4.0), np.arange(3.0)
    before = (sys.getrefcount(a), sys.getrefcount(t))
    for _ in range(1000):
        m.same(a)  # type: ignore[attr-defined]
        m.tsame(t)  # type: ignore[attr-defined]
        m.twice(3)  # type: ignore[attr-defined]
        m.mixed(1.0, 2)  # type: ignore[attr-defined]
    assert (sys.getrefcount(a), sys.getrefcount(t)) == before
    fill = m.fill  # type: ignore[attr-defined]
    fill(0.0, 100_000)  # 800 KB each: kept, 2000 of them would be 1.6 GB
    gc.collect()
    start = rss_bytes()
    for _ in range(2000):
        fill(0.0, 100_000)
    assert rss_bytes() - start < 64 << 20


def test_a_failing_callback_ends_a_call_with_an_array_result(session: Session) -> None:
    depth: list[int] = []

    @callback(session=session)
    def hook(x: f64) -> f64:
        if x < 0:
            raise ArithmeticError(f"negative: {x}")
        if x > 100 and not depth:
            depth.append(1)
            inner = module.make(1.0, 3)  # re-entered from inside the call
            assert list(inner) == [2.0, 2.0, 2.0]
        return x + 1

    module = session.compile("""
    func.func @make(%x: f64, %n: index) -> memref<?xf64> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %y = call @hook(%x) : (f64) -> f64
      %m = memref.alloc(%n) : memref<?xf64>
      scf.for %i = %c0 to %n step %c1 {
        memref.store %y, %m[%i] : memref<?xf64>
      }
      return %m : memref<?xf64>
    }
    func.func private @hook(f64) -> f64
    """)
    make = module.make
    assert make.ensure_native()
    for call in (make, make.call_python):
        with pytest.raises(ArithmeticError, match=r"negative: -1\.0"):
            call(-1.0, 4)
    np.testing.assert_array_equal(make(200.0, 2), [201.0, 201.0])
    assert depth == [1] and make.calls_in_flight == 0


RECOMPILE = """
import gc, threading
import numpy as np
from pymlirjit import Session, callback, f64, index, mlir_kernel

session = Session()
done = []

@callback(session=session)
def hook(x: f64) -> f64:
    if x == 2.0:
        session.clear_cache()              # from the callback, during the call
        done.append(kernel(1.0, 2).tolist())  # compiles it again
    if x == 3.0:
        worker = threading.Thread(target=lambda: (session.clear_cache(),
                                                  done.append(kernel(5.0, 1).tolist())))
        worker.start()
        worker.join()                      # from another thread, during the call
    gc.collect()
    return x * 3

@mlir_kernel(source='''
func.func @kernel(%x: f64, %n: index) -> memref<?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %y = func.call @hook(%x) : (f64) -> f64
  %m = memref.alloc(%n) : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %y, %m[%i] : memref<?xf64>
  }
  return %m : memref<?xf64>
}
func.func private @hook(f64) -> f64
''', session=session)
def kernel(x: f64, n: index) -> np.ndarray: ...

first = kernel(4.0, 3)
second = kernel(2.0, 2)
third = kernel(3.0, 2)
session.clear_cache()
gc.collect()
print(first.tolist(), second.tolist(), third.tolist(), done)
"""


def run_python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=180, env=dict(os.environ))
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", done.stderr
    return done.stdout


def test_recompiling_during_a_call_with_an_array_result() -> None:
    assert run_python(RECOMPILE).split("\n")[0] == (
        "[12.0, 12.0, 12.0] [6.0, 6.0] [9.0, 9.0] [[3.0, 3.0], [15.0]]")


FORK = """
import os, sys
import numpy as np
from pymlirjit import Session
session = Session(cache_dir=sys.argv[1])
fill = session.compile('''
func.func @fill(%x: f64, %n: index) -> tensor<?xf64> {
  %c0 = arith.constant 0 : index
  %e = tensor.empty(%n) : tensor<?xf64>
  %r = linalg.fill ins(%x : f64) outs(%e : tensor<?xf64>) -> tensor<?xf64>
  return %r : tensor<?xf64>
}
''').fill
before = fill(1.5, 4)
pid = os.fork()
if pid == 0:
    ok = list(fill(2.5, 3)) == [2.5] * 3 and list(before) == [1.5] * 4
    del before
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert status == 0, status
print(type(fill.engine).__name__, fill.native_entry is not None, fill(0.5, 2).tolist(),
      session.disk_cache.hits, "llvm" if "llvmlite.binding" in sys.modules else "no-llvm")
"""


def test_forked_children_and_cache_loaded_modules_use_native_entries(tmp_path: Path) -> None:
    first = run_python(FORK, str(tmp_path)).split()
    assert first[:5] == ["SharedLibrary", "True", "[0.5,", "0.5]", "0"]
    # A new process loads the cached shared library: same fast entries, still no LLVM.
    assert run_python(FORK, str(tmp_path)).split() == [
        "SharedLibrary", "True", "[0.5,", "0.5]", "1", "no-llvm"]


def test_the_native_entry_and_the_python_path_agree_on_odd_shapes(session: Session) -> None:
    module = session.compile("""
    func.func @pad(%a: memref<?x?xi16>, %k: i16) -> memref<?x?xi16> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %a, %c0 : memref<?x?xi16>
      %m = memref.dim %a, %c1 : memref<?x?xi16>
      %r = memref.alloc(%m, %n) : memref<?x?xi16>
      scf.for %i = %c0 to %n step %c1 {
        scf.for %j = %c0 to %m step %c1 {
          %v = memref.load %a[%i, %j] : memref<?x?xi16>
          %w = arith.addi %v, %k : i16
          memref.store %w, %r[%j, %i] : memref<?x?xi16>
        }
      }
      return %r : memref<?x?xi16>
    }
    """)
    pad = module.pad
    assert pad.ensure_native()
    for shape in ((0, 0), (1, 1), (3, 0), (0, 5), (7, 13), (1, 257)):
        a = np.arange(np.prod(shape), dtype=np.int16).reshape(shape)
        native, calls = python_path_calls(lambda: pad(a, np.int16(2)))  # noqa: B023
        assert calls == 0
        expected = pad.call_python(a, 2)
        assert native.shape == expected.shape == shape[::-1]
        np.testing.assert_array_equal(native, (a + 2).T)
        np.testing.assert_array_equal(native, expected)


def test_array_results_from_several_threads(shapes: object) -> None:
    fill = shapes.fill  # type: ignore[attr-defined]
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for n in range(50):
                np.testing.assert_array_equal(fill(float(seed), n), seed + np.arange(n))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
