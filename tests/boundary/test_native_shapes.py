"""Call shapes on the native path: memref and tensor results the kernel allocates become
arrays that own that memory (natively), and every other result memory (an argument's,
another result's, a global's) is read as the Python path reads it; the lifetime and
unwinding rules hold for them as for any native call."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, callback, f64
from tests.conftest import rss_bytes
from tests.threads import run_in_threads

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
func.func @aligned(%x: f64) -> memref<5xf64> {
  %m = memref.alloc() {alignment = 64} : memref<5xf64>
  linalg.fill ins(%x : f64) outs(%m : memref<5xf64>)
  return %m : memref<5xf64>
}
memref.global "private" constant @numbers : memref<3xf64> = dense<[1.0, 2.0, 3.0]>
func.func @table() -> memref<3xf64> {
  %g = memref.get_global @numbers : memref<3xf64>
  return %g : memref<3xf64>
}
"""

#: where the Python path of a call runs (runtime/pythoncall.py)
FUNCTION_PY = os.path.join("pymlirjit", "runtime", "pythoncall.py")


def python_path_calls(call: Callable[[], object]) -> tuple[object, int]:
    """``call()``'s result, and how many calls the Python path (pythoncall.py's
    ``PythonCall.__call__``) took during it."""
    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        code = frame.f_code  # type: ignore[attr-defined]
        if (event == "call" and code.co_name == "__call__"
                and code.co_filename.endswith(FUNCTION_PY)):
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
    for name in ("fill", "same", "tsame", "tadd", "twice", "mixed", "grid", "scalar", "table",
                 "aligned"):
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
        assert not result.flags.owndata and type(result.base).__name__ == "PyCapsule"
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
    # memref.alloc with an alignment: `aligned` is not `allocated`, which is freed.
    for _ in range(1000):
        aligned = m.aligned(0.5)  # type: ignore[attr-defined]
        assert aligned.ctypes.data % 64 == 0 and aligned.tolist() == [0.5] * 5
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
from pymlirjit import MemRef, Session, UnrankedMemRef, callback, f16, f64, index
session = Session(cache_dir=sys.argv[1])

@callback(session=session)
def give(n: index) -> MemRef[f64, None]:
    return np.arange(float(n))

@callback(session=session)
def total(a: UnrankedMemRef[f64]) -> f16:
    return a.sum() / 3

module = session.compile('''
func.func @fill(%x: f64, %n: index) -> tensor<?xf64> {
  %c0 = arith.constant 0 : index
  %e = tensor.empty(%n) : tensor<?xf64>
  %r = linalg.fill ins(%x : f64) outs(%e : tensor<?xf64>) -> tensor<?xf64>
  return %r : tensor<?xf64>
}
func.func @both(%n: index) -> (memref<?xf64>, f16) {
  %m = func.call @give(%n) : (index) -> memref<?xf64>
  %u = memref.cast %m : memref<?xf64> to memref<*xf64>
  %t = func.call @total(%u) : (memref<*xf64>) -> f16
  return %m, %t : memref<?xf64>, f16
}
func.func private @give(index) -> memref<?xf64>
func.func private @total(memref<*xf64>) -> f16
''')
fill = module.fill
array, third = module.both(5)
assert array.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and third == float(np.float16(10 / 3))
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

    def work(seed: int) -> None:
        for n in range(50):
            np.testing.assert_array_equal(fill(float(seed), n), seed + np.arange(n))

    run_in_threads(work, range(4))


# Callback shapes: trampolines serve memref results, unranked memref parameters and
# f16/bf16 results (no ctypes entry, no Python code of pymlirjit's on the way).

def callbacks_py_calls(call: Callable[[], object]) -> tuple[object, int]:
    """``call()``'s result, and how many Python frames of boundary/callback.py and
    boundary/convert.py (a ctypes entry's and the converters' code) ran during it."""
    calls = 0
    files = tuple(os.path.join("pymlirjit", "boundary", f)
                  for f in ("callback.py", "convert.py"))

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.endswith(files):  # type: ignore[attr-defined]
            calls += 1

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, calls


GIVE = """
func.func @take(%n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %m = func.call @give(%n) : (index) -> memref<?x3xf64>
  %v = memref.load %m[%c0, %c0] : memref<?x3xf64>
  memref.dealloc %m : memref<?x3xf64>
  return %v : f64
}
func.func @keep(%n: index) -> memref<?x3xf64> {
  %m = func.call @give(%n) : (index) -> memref<?x3xf64>
  return %m : memref<?x3xf64>
}
func.func private @give(index) -> memref<?x3xf64>
"""


def test_a_callback_returns_an_array_the_compiled_code_owns(session: Session) -> None:
    returned: list[object] = []

    @callback("(index) -> memref<?x3xf64>", name="give", session=session)
    def give(n: int) -> object:
        return returned[0]

    module = session.compile(GIVE)
    take, keep = module.take, module.keep
    grid = np.arange(12.0).reshape(4, 3)
    returned[:] = [grid]
    assert callbacks_py_calls(lambda: take(4))[1] == 0  # the trampoline copies it
    assert take(4) == 0.0
    kept = keep(4)  # the copy, owned by the array the kernel returns
    np.testing.assert_array_equal(kept, grid)
    assert not np.shares_memory(kept, grid)
    # Anything else goes through the converter: a non-contiguous view, a list...
    returned[:] = [np.arange(24.0).reshape(4, 6)[:, ::2]]
    np.testing.assert_array_equal(keep(4), np.arange(24.0).reshape(4, 6)[:, ::2])
    returned[:] = [np.zeros((0, 3))]
    assert keep(0).shape == (0, 3)
    for bad, error, message in (
            (np.zeros((2, 4)), ValueError, "dim 1 must be 3"),
            (np.zeros((2, 3), np.float32), TypeError, "expected dtype float64"),
            ([[1.0, 2.0, 3.0]], TypeError, "expected a numpy array"),
            (np.zeros(3), ValueError, "rank-2")):
        returned[:] = [bad]
        for call in (take, take.call_python):
            with pytest.raises(error, match=message) as caught:
                call(2)
            assert any("'give'" in note for note in caught.value.__notes__)
    returned[:] = [grid]
    fill = keep  # no leak: 2000 copies of 800 KB, each freed by the compiled code
    returned[:] = [np.ones((100_000 // 3, 3))]
    take(1)
    gc.collect()
    start = rss_bytes()
    for _ in range(2000):
        take(1)
    assert rss_bytes() - start < 64 << 20
    assert fill(1).shape == (33_333, 3)


def test_unranked_memref_parameters_are_native_views(session: Session) -> None:
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    @callback("(memref<*xf32>) -> f64", name="look", session=session)
    def look(a: np.ndarray) -> float:
        seen.append((a.shape, a.strides))
        a[...] += 1
        return float(a.sum())

    module = session.compile("""
    func.func @rank0(%a: memref<f32>) -> f64 {
      %u = memref.cast %a : memref<f32> to memref<*xf32>
      %r = func.call @look(%u) : (memref<*xf32>) -> f64
      return %r : f64
    }
    func.func @rank3(%a: memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>) -> f64 {
      %u = memref.cast %a : memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>> to memref<*xf32>
      %r = func.call @look(%u) : (memref<*xf32>) -> f64
      return %r : f64
    }
    func.func private @look(memref<*xf32>) -> f64
    """)
    scalar = np.array(2.0, np.float32)
    assert callbacks_py_calls(lambda: module.rank0(scalar)) == (3.0, 0)
    assert scalar == 3.0  # the callback wrote through the view
    base = np.arange(2 * 5 * 7, dtype=np.float32).reshape(2, 5, 7)
    view = base[:, 1::2, 1::3]
    expected = float((view + 1).sum())
    assert module.rank3(view) == expected
    assert seen[-1] == (view.shape, view.strides)
    np.testing.assert_array_equal(base[:, 1::2, 1::3],
                                  np.arange(70, dtype=np.float32).reshape(2, 5, 7)[:, 1::2, 1::3]
                                  + 1)
    empty = np.zeros((0, 4, 1), np.float32)
    assert module.rank3(empty) == 0.0 and seen[-1][0] == (0, 4, 1)


@pytest.mark.parametrize("mlir_type", ["f16", "bf16"])
def test_f16_and_bf16_results_round_as_numpy_does(session: Session, mlir_type: str) -> None:
    from pymlirjit.boundary.types import SCALARS

    dtype = next(t.dtype for t in SCALARS if t.mlir == mlir_type)
    callback(f"(f64) -> {mlir_type}", name="same", session=session)(lambda x: x)
    run = session.compile(f"""
    func.func @run(%a: memref<?xf64>, %o: memref<?xi16>) {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %a, %c0 : memref<?xf64>
      scf.for %i = %c0 to %n step %c1 {{
        %x = memref.load %a[%i] : memref<?xf64>
        %h = func.call @same(%x) : (f64) -> {mlir_type}
        %b = arith.bitcast %h : {mlir_type} to i16
        memref.store %b, %o[%i] : memref<?xi16>
      }}
      return
    }}
    func.func private @same(f64) -> {mlir_type}
    """).run
    with np.errstate(over="ignore", invalid="ignore"):
        every = np.arange(1 << 16, dtype=np.uint16).view(dtype).astype(np.float64)
        finite = np.unique(every[np.isfinite(every)])
        halfway = (finite[1:] + finite[:-1]) / 2  # ties, and their neighbours
        rng = np.random.default_rng(13)
        x = np.concatenate([
            every, halfway, np.nextafter(halfway, np.inf), np.nextafter(halfway, -np.inf),
            rng.standard_normal(20_000) * 10.0 ** rng.integers(-50, 50, 20_000),
            [np.inf, -np.inf, np.nan, -0.0, 1e300, -1e300, 5e-324, 2.0**-25, 2.0**-133]])
        # From halfway past the largest finite value on, a value rounds to inf.
        boundary = finite[-1] + (finite[-1] - finite[-2]) / 2
        below = np.nextafter(boundary, 0.0)
        x = np.concatenate([x, [boundary, -boundary, below, -below]])
        # A finite value that rounds to inf raises instead (tests/test_native.py); the
        # values just below the boundary stay, rounded to the largest natively.
        overflows = np.isfinite(x) & ~np.isfinite(x.astype(dtype).astype(np.float64))
        x = x[~overflows]
        expected = x.astype(dtype).view(np.int16)
    finite_or_nan = ~np.isinf(x)  # an inf goes through the Python converter (it may raise)
    out = np.zeros(len(x), np.int16)
    natively = np.zeros(int(finite_or_nan.sum()), np.int16)
    assert callbacks_py_calls(lambda: run(x[finite_or_nan], natively))[1] == 0
    out[finite_or_nan] = natively
    infinite = np.zeros(int((~finite_or_nan).sum()), np.int16)
    run(x[~finite_or_nan], infinite)
    out[~finite_or_nan] = infinite
    mismatches = np.nonzero(out != expected)[0]
    assert len(mismatches) == 0, [(x[i], out[i], expected[i]) for i in mismatches[:5]]


LAST_OWNER = """
import gc, sys, weakref
import numpy as np
from pymlirjit import Session
session = Session(cache_dir=sys.argv[1]) if len(sys.argv) > 1 else Session()
module = session.compile('''
func.func @fill(%x: f64, %n: index) -> memref<?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xf64>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %x, %m[%i] : memref<?xf64>
  }
  return %m : memref<?xf64>
}
''')
assert module.fill.ensure_native()
code = module.fill._python_call.native_code
code = code[0] if isinstance(code, tuple) else code  # the JIT's engine, or the library
alive = weakref.ref(code)
arrays = [module.fill(1.0, n) for n in range(1, 50)]
del module, code
session.clear_cache()
del session
gc.collect()
kept = alive() is not None  # by the arrays: their memory's destructor is in that code
total = sum(float(a.sum()) for a in arrays)
del arrays  # the last destructor releases the code, jumping out of it
gc.collect()
print(kept, alive() is None, total, float(np.arange(1000.0).sum()))
"""


@pytest.mark.parametrize("cached", [False, True], ids=["jit", "cache"])
def test_arrays_keep_the_code_that_frees_them(tmp_path: Path, cached: bool) -> None:
    args = [str(tmp_path)] if cached else []
    for _ in range(2 if cached else 1):  # links the library, then loads it
        assert run_python(LAST_OWNER, *args).split() == ["True", "True", "1225.0", "499500.0"]


SCALAR_RESULTS = """
func.func @many(%x: f64, %k: i64) -> (f64, f32, i64, i32, i8, i1, index, f64) {
  %f = arith.truncf %x : f64 to f32
  %i = arith.trunci %k : i64 to i32
  %b = arith.trunci %k : i64 to i8
  %c0 = arith.constant 0 : i64
  %neg = arith.cmpi slt, %k, %c0 : i64
  %n = arith.index_cast %k : i64 to index
  %y = arith.mulf %x, %x : f64
  return %x, %f, %k, %i, %b, %neg, %n, %y : f64, f32, i64, i32, i8, i1, index, f64
}
func.func @two(%a: f64, %b: f64) -> (f64, f64) {
  %s = arith.addf %a, %b : f64
  %p = arith.mulf %a, %b : f64
  return %s, %p : f64, f64
}
"""


def test_tuples_of_scalar_results_are_filled_natively(session: Session) -> None:
    import tracemalloc

    module = session.compile(SCALAR_RESULTS)
    many, two = module.many, module.two  # type: ignore[attr-defined]
    assert many.ensure_native() and two.ensure_native()
    for x, k in ((1.5, -7), (-0.0, 300), (float("inf"), 2**40)):
        native, calls = python_path_calls(lambda x=x, k=k: many(x, k))  # type: ignore[misc]
        assert calls == 0
        # np.longlong is not among the types entries unbox: the Python path boxes these
        python, calls = python_path_calls(
            lambda x=x, k=k: many(x, np.longlong(k)))  # type: ignore[misc]
        assert calls == 1
        assert type(native) is tuple and len(native) == 8
        assert [type(v) for v in native] == [type(v) for v in python]
        assert native == python
        assert native == (x, float(np.float32(x)), k, int(np.int64(k).astype(np.int32)),
                          int(np.int64(k).astype(np.int8)), k < 0, k, x * x)
        assert sys.getrefcount(native) == 2  # this name's reference and the argument's
    assert two(3.0, 4.0) == (7.0, 12.0)
    tracemalloc.start()
    try:
        for _ in range(1000):  # warm the free lists
            two(1.0, 2.0)
            many(1.0, 2)
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            two(1.0, 2.0)
            many(1.0, 2)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 << 10, grown  # a tuple or an item leaked per call would be MBs
