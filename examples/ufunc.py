"""numpy ufuncs from MLIR: ``mlir_ufunc`` (elementwise) and ``mlir_gufunc`` (over rows).

A scalar MLIR function becomes a real ``numpy.ufunc``: numpy broadcasts, casts, reduces
and writes into ``out=``; the inner loop over the arrays is compiled code (generated in
MLIR beside the function, vectorized by LLVM, run without the GIL). A function over
memrefs becomes a generalized ufunc with a layout such as ``(n),(n)->()``.

Run: ``python examples/ufunc.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import mlir_gufunc, mlir_ufunc

# A generic body (!T is bound per loop): one loop for f32, one for f64.
lerp = mlir_ufunc(types=["f32", "f64"], source="""
func.func @lerp(%a: !T, %b: !T, %t: !T) -> !T {
  %d = arith.subf %b, %a : !T
  %s = arith.mulf %d, %t : !T
  %r = arith.addf %a, %s : !T
  return %r : !T
}""")

# A binary function with an identity reduces like np.add.
logaddexp = mlir_ufunc(identity=float("-inf"), source="""
func.func @logaddexp(%a: f64, %b: f64) -> f64 {
  %m = arith.maximumf %a, %b : f64
  %x = arith.subf %a, %m : f64
  %y = arith.subf %b, %m : f64
  %ex = math.exp %x : f64
  %ey = math.exp %y : f64
  %s = arith.addf %ex, %ey : f64
  %l = math.log %s : f64
  %r = arith.addf %m, %l : f64
  return %r : f64
}""")

# Dot product over the last axis: numpy loops over every other axis.
row_dot = mlir_gufunc(layout="(n),(n)->()", source="""
func.func @row_dot(%a: memref<?xf64, strided<[?], offset: ?>>,
                   %b: memref<?xf64, strided<[?], offset: ?>>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64, strided<[?], offset: ?>>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64, strided<[?], offset: ?>>
    %y = memref.load %b[%i] : memref<?xf64, strided<[?], offset: ?>>
    %p = arith.mulf %x, %y : f64
    %t = arith.addf %acc, %p : f64
    scf.yield %t : f64
  }
  return %s : f64
}""")


def main() -> None:
    print(lerp, lerp.types)
    a = np.linspace(0.0, 1.0, 5, dtype=np.float32)
    halfway = lerp(a, np.float32(2), np.float32(0.5))  # broadcasting, the f32 loop
    print("lerp:", halfway, halfway.dtype)
    assert halfway.dtype == np.float32
    np.testing.assert_allclose(halfway, a + (2 - a) * 0.5)

    x = np.log(np.arange(1.0, 6.0))
    total = logaddexp.reduce(x)
    print("logaddexp.reduce(log(1..5)) =", total, "= log(15) =", np.log(15.0))
    np.testing.assert_allclose(total, np.log(15.0))
    np.testing.assert_allclose(logaddexp.accumulate(x), np.logaddexp.accumulate(x))

    m = np.arange(12.0).reshape(3, 4)
    print("row_dot(m, m[0]):", row_dot(m, m[0]))
    np.testing.assert_array_equal(row_dot(m, m[0]), m @ m[0])
    np.testing.assert_array_equal(row_dot(m.T, m.T), (m.T * m.T).sum(axis=1))  # any strides
    print("OK")


if __name__ == "__main__":
    main()
