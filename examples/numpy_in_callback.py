"""Callbacks that run numpy (and scipy, when installed) on memory the kernel owns.

The kernel hands its ``memref<?xf64>`` to three Python callbacks in turn. Each one
receives a zero-copy numpy view and writes its result back in place: squash the values
into (0, 1) with the logistic function (``scipy.special.expit`` if scipy is installed,
plain numpy otherwise), sort them (``ndarray.sort``), and take their running sum
(``np.cumsum(..., out=...)``). Between the calls the compiled code keeps working on the
modified memory: it counts descents to check the data is sorted, reads the median, and
finally reads the total from the last element of the running sum.

Run: ``python examples/numpy_in_callback.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import MemRef, callback, f64, i64, mlir_kernel

try:
    from scipy.special import expit as logistic

    LOGISTIC = "scipy.special.expit"
except ImportError:  # scipy is optional

    def logistic(x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-x))

    LOGISTIC = "numpy 1 / (1 + exp(-x))"

Vector = MemRef[f64, None]


@callback
def squash(a: Vector) -> None:
    a[:] = logistic(a)


@callback
def sort_in_place(a: Vector) -> None:
    a.sort()


@callback
def cumsum_in_place(a: Vector) -> None:
    np.cumsum(a, out=a)


@mlir_kernel(source="""
func.func @process(%a: memref<?xf64>) -> (f64, i64, f64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %n = memref.dim %a, %c0 : memref<?xf64>

  call @squash(%a) : (memref<?xf64>) -> ()
  call @sort_in_place(%a) : (memref<?xf64>) -> ()

  // The compiled code sees what numpy wrote: count a[i] > a[i + 1] (0 once sorted).
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %last = arith.subi %n, %c1 : index
  %descents = scf.for %i = %c0 to %last step %c1 iter_args(%count = %zero) -> i64 {
    %next = arith.addi %i, %c1 : index
    %x = memref.load %a[%i] : memref<?xf64>
    %y = memref.load %a[%next] : memref<?xf64>
    %down = arith.cmpf ogt, %x, %y : f64
    %step = arith.select %down, %one, %zero : i64
    %sum = arith.addi %count, %step : i64
    scf.yield %sum : i64
  }
  %mid = arith.divui %n, %c2 : index
  %median = memref.load %a[%mid] : memref<?xf64>

  call @cumsum_in_place(%a) : (memref<?xf64>) -> ()
  %total = memref.load %a[%last] : memref<?xf64>
  return %median, %descents, %total : f64, i64, f64
}
func.func private @squash(memref<?xf64>)
func.func private @sort_in_place(memref<?xf64>)
func.func private @cumsum_in_place(memref<?xf64>)
""")
def process(a: Vector) -> tuple[f64, i64, f64]: ...


def main() -> None:
    rng = np.random.default_rng(7)
    data = rng.normal(scale=3.0, size=10_001)
    original = data.copy()
    print(f"squashing with {LOGISTIC}, sorting and summing {data.size} values in place")
    median, descents, total = process(data)
    print(f"kernel results: median={median:.6f}, descents after sort={descents}, "
          f"total={total:.6f}")

    squashed = logistic(original)
    assert descents == 0, descents
    assert median == np.median(squashed), (median, np.median(squashed))
    np.testing.assert_allclose(total, squashed.sum())
    # The caller's array was modified in place by the callbacks, through the kernel.
    np.testing.assert_allclose(data, np.cumsum(np.sort(squashed)))
    print(f"data now holds the running sum: {data[:3]} ... {data[-1]:.6f}")
    print("OK")


if __name__ == "__main__":
    main()
