"""``python -m benchmarks.linalg_speed``: linalg.matmul, linalg.batch_matmul and
linalg.conv_2d_nchw_fchw (opt_level=2: plain loops; opt_level=3: tiled and vectorized), a
dot product (fastmath), and linalg on tensors (a matmul, a chain of elementwise ops that
opt_level=3 fuses, a row reduction) against numpy and numba @njit (same algorithm), in
one run.

Run it single-threaded against one OpenBLAS thread::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \\
        python -m benchmarks.linalg_speed
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from pymlirjit import Session, mlir_kernel

from ._kernel_sources import MLIR, NUMBA, NUMPY, symbol

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
    rng = np.random.default_rng(0)

    def uniform(*shape: int) -> np.ndarray:
        return rng.uniform(0.0, 1.0, shape).astype(np.float32)

    n, q, m, h = 512, 32, 128, 130
    cases = [("matmul", f"linalg.matmul f32 {n}^3",
              (uniform(n, n), uniform(n, n), np.zeros((n, n), np.float32)), 2.0 * n ** 3),
             ("batch_matmul", f"linalg.batch_matmul f32 {q}x{m}^3",
              (uniform(q, m, m), uniform(q, m, m), np.zeros((q, m, m), np.float32)),
              2.0 * q * m ** 3),
             ("conv2d", f"linalg.conv_2d_nchw_fchw 16->16ch 3x3 {h}^2",
              (uniform(1, 16, h, h), uniform(16, 16, 3, 3),
               np.zeros((1, 16, h - 2, h - 2), np.float32)), 2.0 * 16 * 16 * 9 * (h - 2) ** 2)]
    for kernel, title, args, flops in cases:
        expected = args[2].copy()
        NUMPY[kernel](*args[:2], expected)
        rows = []
        for level in (2, 3):
            function = getattr(session.compile(MLIR[kernel, "linalg"], opt_level=level),
                               symbol(kernel))
            function(*args)
            np.testing.assert_allclose(args[2], expected, rtol=1e-4, atol=1e-3)
            rows.append((f"{title}, opt_level={level}",
                         best(partial(function, *args))))
        numba_kernel = numba.njit(fastmath=True)(NUMBA[kernel])
        rows.append((f"numba @njit {kernel} (same loops, fastmath)",
                     best(partial(numba_kernel, *args))))
        rows.append((f"numpy {kernel}", best(partial(NUMPY[kernel], *args))))
        for name, t in rows:
            print(f"{name:50s} {t * 1e3:9.3f} ms  {flops / t / 1e9:7.1f} GFLOP/s  "
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
        print(f"{name:50s} {t * 1e3:9.3f} ms  {2 * size / t / 1e9:7.1f} GFLOP/s  "
              f"{t / rows[-1][1]:6.2f}x numpy")

    tensors_and_elementwise(session, rng)


TENSOR_MATMUL = """
func.func @mm(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
                     outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
"""

#: exp(a * b + c): three named ops, one loop once fused.
CHAIN = """
func.func @chain(%a: tensor<?xf64>, %b: tensor<?xf64>, %c: tensor<?xf64>) -> tensor<?xf64> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf64>
  %e = tensor.empty(%n) : tensor<?xf64>
  %p = linalg.mul ins(%a, %b : tensor<?xf64>, tensor<?xf64>) outs(%e : tensor<?xf64>)
       -> tensor<?xf64>
  %s = linalg.add ins(%p, %c : tensor<?xf64>, tensor<?xf64>) outs(%e : tensor<?xf64>)
       -> tensor<?xf64>
  %x = linalg.exp ins(%s : tensor<?xf64>) outs(%e : tensor<?xf64>) -> tensor<?xf64>
  return %x : tensor<?xf64>
}
"""

ROW_SUM = """
#all = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
func.func @rowsum(%a: memref<?x?xf64>, %out: memref<?xf64>) {
  linalg.generic {indexing_maps = [#all, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : memref<?x?xf64>) outs(%out : memref<?xf64>) {
  ^bb0(%x: f64, %acc: f64):
    %s = arith.addf %x, %acc : f64
    linalg.yield %s : f64
  }
  return
}
"""


def _print(rows: list[tuple[str, float]]) -> None:
    for name, t in rows:
        print(f"{name:50s} {t * 1e3:9.3f} ms  {t / rows[-1][1]:6.2f}x numpy")
    print()


def tensors_and_elementwise(session: Session, rng: np.random.Generator) -> None:
    """linalg on tensors: a matmul (bufferized early at opt_level=3, so it gets the
    microkernel), an elementwise chain (fused at opt_level=3) and a row reduction."""
    import numba

    print()
    n = 512
    a, b = (rng.uniform(0.0, 1.0, (n, n)).astype(np.float32) for _ in range(2))
    c = np.zeros((n, n), np.float32)
    rows = []
    for level in (2, 3):
        mm = mlir_kernel(source=TENSOR_MATMUL, name="mm", opt_level=level,
                         session=session)(lambda a, b, c: None)
        np.testing.assert_allclose(mm(a, b, c), a @ b, rtol=1e-4, atol=1e-3)
        rows.append((f"linalg.matmul on tensors f32 {n}^3, opt_level={level}",
                     best(lambda mm=mm: mm(a, b, c), repeat=3 if level == 2 else 7)))
    rows.append(("numpy a @ b", best(lambda: a @ b)))
    _print(rows)

    size = 10 ** 6
    x, y, z = (rng.standard_normal(size) for _ in range(3))
    rows = []
    for level, fast in ((2, False), (3, False), (3, True)):
        chain = mlir_kernel(source=CHAIN, name="chain", opt_level=level, fastmath=fast,
                            session=session)(lambda a, b, c: None)
        np.testing.assert_allclose(chain(x, y, z), np.exp(x * y + z), rtol=1e-12)
        rows.append((f"exp(a*b+c) tensors 10^6, opt_level={level}, fastmath={fast}",
                     best(lambda chain=chain: chain(x, y, z))))

    @numba.njit(fastmath=True)
    def nb_chain(a: Any, b: Any, c: Any) -> Any:
        out = np.empty_like(a)
        for i in range(a.shape[0]):
            out[i] = np.exp(a[i] * b[i] + c[i])
        return out

    rows.append(("numba @njit exp(a*b+c) loop (fastmath)", best(lambda: nb_chain(x, y, z))))
    rows.append(("numpy np.exp(a * b + c)", best(lambda: np.exp(x * y + z))))
    _print(rows)

    m = rng.standard_normal((1000, 1000))
    out = np.zeros(1000)
    rows = []
    for fast in (False, True):
        rowsum = mlir_kernel(source=ROW_SUM, name="rowsum", opt_level=3, fastmath=fast,
                             session=session)(lambda a, o: None)

        def run(rowsum: Any = rowsum) -> None:
            out[:] = 0.0
            rowsum(m, out)

        run()
        np.testing.assert_allclose(out, m.sum(axis=1), rtol=1e-10)
        rows.append((f"row sums 1000^2 (linalg.generic), O3, fastmath={fast}", best(run)))

    @numba.njit(fastmath=True)
    def nb_rowsum(a: Any, o: Any) -> None:
        for i in range(a.shape[0]):
            s = 0.0
            for j in range(a.shape[1]):
                s += a[i, j]
            o[i] = s

    rows.append(("numba @njit row sums (fastmath)", best(lambda: nb_rowsum(m, out))))
    rows.append(("numpy a.sum(axis=1, out=o)", best(lambda: m.sum(axis=1, out=out))))
    _print(rows)


if __name__ == "__main__":
    main()
