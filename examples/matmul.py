"""A tensor/linalg matmul kernel called on numpy arrays, checked against numpy's ``@``.

The kernel is written on tensors: ``tensor.empty`` + ``linalg.fill`` make a zeroed
result and ``linalg.matmul`` accumulates into it. pymlirjit's default pipeline
bufferizes it (the tensor arguments become memrefs aliasing the numpy inputs), lowers
``linalg`` to loops and JIT-compiles it. The result tensor is allocated by the compiled
code and comes back as a numpy array that owns that memory.

Run: ``python examples/matmul.py``
"""

from __future__ import annotations

import time

import numpy as np

from pymlirjit import Tensor, f32, mlir_kernel


@mlir_kernel(source="""
func.func @matmul(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = tensor.dim %a, %c0 : tensor<?x?xf32>
  %n = tensor.dim %b, %c1 : tensor<?x?xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%m, %n) : tensor<?x?xf32>
  %c = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
                     outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
""")
def matmul(a: Tensor[f32, None, None], b: Tensor[f32, None, None]) -> Tensor[f32, None, None]:
    ...


def main() -> None:
    rng = np.random.default_rng(42)
    for call, (m, k, n) in enumerate([(1, 1, 1), (3, 5, 2), (64, 48, 80)]):
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        start = time.perf_counter()
        c = matmul(a, b)
        elapsed = (time.perf_counter() - start) * 1e3
        expected = a @ b
        error = float(np.abs(c - expected).max())
        note = ", includes compiling" if call == 0 else ""
        print(f"matmul {a.shape} x {b.shape} -> {c.shape} {c.dtype}: "
              f"max |c - a @ b| = {error:.2e} ({elapsed:.1f} ms{note})")
        assert isinstance(c, np.ndarray)
        assert c.shape == (m, n) and c.dtype == np.float32
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)

    # The inputs are read in place (zero-copy) and left untouched; the result is a new
    # array that owns the buffer the compiled code allocated. linalg.matmul does not
    # check that the inner dimensions agree: pass compatible shapes.
    a = np.eye(4, dtype=np.float32)
    b = np.arange(16, dtype=np.float32).reshape(4, 4)
    b_before = b.copy()
    c = matmul(a, b)
    np.testing.assert_array_equal(c, b)
    np.testing.assert_array_equal(b, b_before)
    assert not np.shares_memory(c, b)
    print(f"identity @ b == b; compile cache: {matmul.session.cache_info()}")
    print("OK")


if __name__ == "__main__":
    main()
