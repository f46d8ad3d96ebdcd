"""Stream the rows of a matrix from compiled MLIR to a Python callback.

The kernel loops over the rows with ``scf.for``, takes each row as a strided
``memref.subview`` (no copy) and calls the Python callback ``@row_stats`` with the row
index and the row. The callback sees each row as a zero-copy numpy view, logs its
mean/min/max and returns the mean; the kernel sums the means and returns the total.

Note: inside an ``scf.for`` body the call must be spelled ``func.call`` (the short
``call`` form is only understood directly inside a ``func.func`` body).

Run: ``python examples/row_statistics.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import MemRef, callback, f64, index, mlir_kernel

log: list[tuple[int, float, float, float]] = []
addresses: list[int] = []


@callback
def row_stats(i: index, row: MemRef[f64, None]) -> f64:
    """Log the statistics of row ``i``; ``row`` is a numpy view into the matrix."""
    mean, low, high = float(row.mean()), float(row.min()), float(row.max())
    log.append((i, mean, low, high))
    addresses.append(row.ctypes.data)
    print(f"  row {i}: mean={mean:8.3f}  min={low:8.3f}  max={high:8.3f}")
    return mean


MATRIX = "memref<?x?xf64, strided<[?, ?], offset: ?>>"  # any strides: views work too
ROW_LAYOUT = "memref<?xf64, strided<[?], offset: ?>>"

SOURCE = f"""
func.func @stream_rows(%m: {MATRIX}) -> f64 {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f64
  %rows = memref.dim %m, %c0 : {MATRIX}
  %cols = memref.dim %m, %c1 : {MATRIX}
  %total = scf.for %i = %c0 to %rows step %c1 iter_args(%acc = %zero) -> f64 {{
    %row = memref.subview %m[%i, 0] [1, %cols] [1, 1]
        : {MATRIX} to {ROW_LAYOUT}
    %mean = func.call @row_stats(%i, %row) : (index, {ROW_LAYOUT}) -> f64
    %next = arith.addf %acc, %mean : f64
    scf.yield %next : f64
  }}
  return %total : f64
}}
func.func private @row_stats(index, {ROW_LAYOUT}) -> f64
"""


@mlir_kernel(source=SOURCE)
def stream_rows(m: MemRef[f64, None, None]) -> f64: ...


def main() -> None:
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(6, 1000))
    print(f"streaming the {matrix.shape[0]} rows of a {matrix.shape} matrix to Python:")
    total = stream_rows(matrix)
    print(f"sum of the row means returned by the kernel: {total:.6f}")

    assert [entry[0] for entry in log] == list(range(matrix.shape[0]))
    np.testing.assert_allclose([entry[1] for entry in log], matrix.mean(axis=1))
    np.testing.assert_array_equal([entry[2] for entry in log], matrix.min(axis=1))
    np.testing.assert_array_equal([entry[3] for entry in log], matrix.max(axis=1))
    np.testing.assert_allclose(total, matrix.mean(axis=1).sum())
    # Zero-copy: each row the callback saw lives inside `matrix` itself.
    assert addresses == [matrix[i].ctypes.data for i in range(matrix.shape[0])]

    # A strided view (every other column of a Fortran-ordered matrix) works too, zero-copy.
    log.clear()
    view = np.asfortranarray(matrix)[:, ::2]
    print("the same on a non-contiguous view (every other column):")
    total = stream_rows(view)
    np.testing.assert_allclose([entry[1] for entry in log], view.mean(axis=1))
    np.testing.assert_allclose(total, view.mean(axis=1).sum())
    print("OK")


if __name__ == "__main__":
    main()
