"""``python -m benchmarks.linalg_speed``: linalg.matmul (opt_level=3: tiled and vectorized)
and a dot product (fastmath) against numpy and numba @njit (same algorithm), in one run.

Run it single-threaded against one OpenBLAS thread::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \\
        python -m benchmarks.linalg_speed
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pymlirjit import Session, mlir_kernel

MATMUL = """
func.func @mm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

DOT = """
func.func @dot(%a: memref<?xf64>, %b: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = memref.load %b[%i] : memref<?xf64>
    %p = arith.mulf %x, %y : f64
    %t = arith.addf %acc, %p : f64
    scf.yield %t : f64
  }
  return %s : f64
}
"""


def best(call: Callable[[], Any], repeat: int = 7) -> float:
    """Fastest of ``repeat`` timed calls, in seconds (after one warm-up call)."""
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Print each kernel's time and GFLOP/s beside numpy's and numba's."""
    import numba

    session = Session()
    n = 512
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    rows = []
    for level in (2, 3):
        mm = mlir_kernel(source=MATMUL, name="mm", opt_level=level, session=session)(
            lambda a, b, c: None)
        rows.append((f"linalg.matmul f32 {n}^3, opt_level={level}",
                     best(lambda mm=mm: mm(a, b, c))))

    @numba.njit(fastmath=True)
    def nb_mm(a: Any, b: Any, c: Any) -> None:
        for i in range(a.shape[0]):
            for k in range(a.shape[1]):
                x = a[i, k]
                for j in range(b.shape[1]):
                    c[i, j] += x * b[k, j]

    rows.append(("numba @njit matmul (i,k,j loops, fastmath)", best(lambda: nb_mm(a, b, c))))
    rows.append(("numpy a @ b", best(lambda: a @ b)))
    flops = 2.0 * n ** 3
    for name, t in rows:
        print(f"{name:45s} {t * 1e3:9.3f} ms  {flops / t / 1e9:7.1f} GFLOP/s  "
              f"{t / rows[-1][1]:6.2f}x numpy")
    print()
    size = 10 ** 7
    x, y = rng.standard_normal(size), rng.standard_normal(size)
    rows = []
    for fast in (False, True):
        dot = mlir_kernel(source=DOT, name="dot", fastmath=fast, session=session)(
            lambda a, b: None)
        rows.append((f"dot f64 10^7, fastmath={fast}", best(lambda dot=dot: dot(x, y))))

    @numba.njit(fastmath=True)
    def nb_dot(a: Any, b: Any) -> float:
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        return s

    rows.append(("numba @njit dot (fastmath)", best(lambda: nb_dot(x, y))))
    rows.append(("numpy x @ y", best(lambda: x @ y)))
    for name, t in rows:
        print(f"{name:45s} {t * 1e3:9.3f} ms  {2 * size / t / 1e9:7.1f} GFLOP/s  "
              f"{t / rows[-1][1]:6.2f}x numpy")


if __name__ == "__main__":
    main()
