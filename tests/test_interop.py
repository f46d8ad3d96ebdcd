"""Kernels in the numeric ecosystem, against the real scipy and numba: kernel.ctypes as
a scipy LowLevelCallable and from numba @njit code, numba cfuncs as externs."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from pymlirjit import Session, callback, extern, f64, i32, i64, mlir_kernel
from tests.runtime.test_externs import run_python

scipy = pytest.importorskip("scipy")
numba = pytest.importorskip("numba")
from scipy import LowLevelCallable, integrate, ndimage  # noqa: E402

DOUBLE_P = ctypes.POINTER(ctypes.c_double)

SQUARE = """
func.func @square(%x: f64) -> f64 {
  %r = arith.mulf %x, %x : f64
  return %r : f64
}"""

# double f(int n, double *xx, void *user_data): the integrand of xx[0] scaled by the
# double user_data points at
GAUSSIAN = """
func.func @gaussian(%n: i32, %xx: !llvm.ptr, %user: !llvm.ptr) -> f64 {
  %x = llvm.load %xx : !llvm.ptr -> f64
  %s = llvm.load %user : !llvm.ptr -> f64
  %x2 = arith.mulf %x, %x : f64
  %m = arith.negf %x2 : f64
  %e = math.exp %m : f64
  %r = arith.mulf %e, %s : f64
  return %r : f64
}"""

# int f(double *buffer, npy_intp size, double *result, void *user_data): the range
RANGE_FILTER = """
func.func @value_range(%buffer: !llvm.ptr, %n: i64, %out: !llvm.ptr, %user: !llvm.ptr) -> i32 {
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %lo0 = arith.constant 0x7FF0000000000000 : f64
  %hi0 = arith.constant 0xFFF0000000000000 : f64
  %lo, %hi = scf.for %i = %c0 to %n step %c1 iter_args(%lo1 = %lo0, %hi1 = %hi0)
      -> (f64, f64) : i64 {
    %p = llvm.getelementptr %buffer[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f64
    %x = llvm.load %p : !llvm.ptr -> f64
    %lo2 = arith.minimumf %lo1, %x : f64
    %hi2 = arith.maximumf %hi1, %x : f64
    scf.yield %lo2, %hi2 : f64, f64
  }
  %r = arith.subf %hi, %lo : f64
  llvm.store %r, %out : f64, !llvm.ptr
  %ok = arith.constant 1 : i32
  return %ok : i32
}"""


def test_quad_integrates_a_scalar_kernel(session: Session) -> None:
    @mlir_kernel(source=SQUARE, session=session)
    def square(x: f64) -> f64: ...

    value, _ = integrate.quad(LowLevelCallable(square.ctypes), 0.0, 3.0)
    assert value == pytest.approx(9.0, rel=1e-12)


def test_quad_passes_an_array_and_user_data(session: Session) -> None:
    @mlir_kernel(source=GAUSSIAN, session=session)
    def gaussian(n: i32, xx: DOUBLE_P, user: ctypes.c_void_p) -> f64: ...  # type: ignore[valid-type]

    scale = ctypes.c_double(2.0)
    user = ctypes.cast(ctypes.pointer(scale), ctypes.c_void_p)
    function = LowLevelCallable(gaussian.ctypes, user)
    assert function.signature == "double (int, double *, void *)"
    value, _ = integrate.quad(function, -np.inf, np.inf)
    assert value == pytest.approx(2.0 * math.sqrt(math.pi), rel=1e-10)


def test_generic_filter_runs_a_kernel(session: Session) -> None:
    @mlir_kernel(source=RANGE_FILTER, session=session)
    def value_range(buffer: DOUBLE_P, n: i64, out: DOUBLE_P,  # type: ignore[valid-type]
                    user: ctypes.c_void_p) -> i32: ...

    image = np.random.default_rng(7).random((9, 11))
    got = ndimage.generic_filter(image, LowLevelCallable(value_range.ctypes), size=3)
    expected = ndimage.maximum_filter(image, size=3) - ndimage.minimum_filter(image, size=3)
    np.testing.assert_array_equal(got, expected)


def test_a_kernel_with_callbacks_serves_quad(session: Session) -> None:
    seen: list[float] = []

    @callback(session=session)
    def note(x: f64) -> f64:
        seen.append(x)
        return x

    @mlir_kernel(source="""
    func.func private @note(f64) -> f64
    func.func @noted(%x: f64) -> f64 {
      %y = call @note(%x) : (f64) -> f64
      %r = arith.mulf %y, %x : f64
      return %r : f64
    }""", session=session)
    def noted(x: f64) -> f64: ...

    value, _ = integrate.quad(LowLevelCallable(noted.ctypes), 0.0, 1.0)
    assert value == pytest.approx(1 / 3, rel=1e-12)
    assert len(seen) >= 21  # quad's 21-point rule ran through the callback


def test_numba_njit_calls_kernel_ctypes(session: Session) -> None:
    @mlir_kernel(source=SQUARE, session=session)
    def square(x: f64) -> f64: ...

    @mlir_kernel(source=RANGE_FILTER, session=session)
    def value_range(buffer: DOUBLE_P, n: i64, out: DOUBLE_P,  # type: ignore[valid-type]
                    user: ctypes.c_void_p) -> i32: ...

    c_square, c_range = square.ctypes, value_range.ctypes

    @numba.njit
    def sum_of_squares(values):  # type: ignore[no-untyped-def]
        total = 0.0
        for v in values:
            total += c_square(v)
        return total

    @numba.njit
    def spread(values):  # type: ignore[no-untyped-def]
        out = np.zeros(1)
        c_range(values.ctypes, values.size, out.ctypes, 0)
        return out[0]

    values = np.array([1.0, -2.0, 3.5])
    assert sum_of_squares(values) == 1.0 + 4.0 + 12.25
    assert spread(values) == 5.5


def test_a_numba_cfunc_as_an_extern(session: Session) -> None:
    @numba.cfunc("float64(float64, float64)")
    def hypot(x, y):  # type: ignore[no-untyped-def]
        return math.sqrt(x * x + y * y)

    module = session.compile("""
    func.func private @hypot(f64, f64) -> f64
    func.func @norm(%x: f64, %y: f64) -> f64 {
      %r = call @hypot(%x, %y) : (f64, f64) -> f64
      return %r : f64
    }""", callbacks=[extern("hypot", hypot)])
    assert module.norm(3.0, 4.0) == 5.0


def test_a_numba_cfunc_with_a_pointer_as_an_extern(session: Session) -> None:
    @numba.cfunc("float64(int64, CPointer(float64))")
    def total(n, values):  # type: ignore[no-untyped-def]
        s = 0.0
        for i in range(n):
            s += values[i]
        return s

    assert extern("total", total).signature.mlir == "(i64, !llvm.ptr) -> f64"
    module = session.compile("""
    func.func private @total(i64, !llvm.ptr) -> f64
    func.func @mean(%n: i64, %p: !llvm.ptr) -> f64 {
      %s = call @total(%n, %p) : (i64, !llvm.ptr) -> f64
      %f = arith.sitofp %n : i64 to f64
      %r = arith.divf %s, %f : f64
      return %r : f64
    }""", callbacks=[extern("total", total)])
    values = np.array([1.0, 2.0, 6.0])
    assert module.mean(3, values.ctypes.data) == 3.0


def test_kernel_ctypes_outlives_its_kernel_and_session() -> None:
    out = run_python("""
    import gc
    from scipy import LowLevelCallable, integrate
    from pymlirjit import Session, mlir_kernel, f64
    session = Session()
    @mlir_kernel(source='''
    func.func @cube(%x: f64) -> f64 {
      %s = arith.mulf %x, %x : f64
      %r = arith.mulf %s, %x : f64
      return %r : f64
    }''', session=session)
    def cube(x: f64) -> f64: ...
    pointer = cube.ctypes
    function = LowLevelCallable(pointer)
    del pointer
    session.clear_cache()
    cube.invalidate()
    del cube, session
    for _ in range(3):
        gc.collect()
        junk = [bytearray(1 << 16) for _ in range(64)]  # reuse freed memory
    print(integrate.quad(function, 0.0, 2.0)[0])
    """)
    assert float(out) == pytest.approx(4.0, rel=1e-12)
