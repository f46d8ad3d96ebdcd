"""A first kernel (a loop over a numpy array), the callback round trip (JIT-compiled
MLIR calling back into Python, twice over), then a kernel written in Python.

The round trip first with the upstream-compatible low level (ctypes callback,
``register_runtime``, ``invoke``), then with the typed API (``@callback``, ``Session``);
last ``@jit``, numba-style.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Annotated

import numpy as np

from .. import typing as annotated
from ..boundary.types import MemRef, f32
from ..callbacks import callback
from ..jit import jit
from ..lowering.pipeline import lower, new_context, parse_module
from ..runtime.engine import ExecutionEngine
from ..session import Session

SEED_MLIR = """
func.func @add(%arg0: f32, %arg1: i32) -> f32 attributes { llvm.emit_c_interface } {
  %0 = call @some_callback_into_python(%arg0, %arg1) : (f32, i32) -> f32
  return %0 : f32
}
func.func private @some_callback_into_python(f32, i32) -> f32 attributes { llvm.emit_c_interface }
"""

ROWS_MLIR = """
func.func @stream_rows(%m: memref<?x?xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %rows = memref.dim %m, %c0 : memref<?x?xf32>
  %cols = memref.dim %m, %c1 : memref<?x?xf32>
  %zero = arith.constant 0.0 : f32
  %total = scf.for %i = %c0 to %rows step %c1 iter_args(%acc = %zero) -> f32 {
    %row = memref.subview %m[%i, 0] [1, %cols] [1, 1]
        : memref<?x?xf32> to memref<?xf32, strided<[1], offset: ?>>
    %s = func.call @row_sum(%row) : (memref<?xf32, strided<[1], offset: ?>>) -> f32
    %next = arith.addf %acc, %s : f32
    scf.yield %next : f32
  }
  return %total : f32
}
func.func private @row_sum(memref<?xf32, strided<[1], offset: ?>>) -> f32
"""


_rows_seen: list[int] = []


def _row_done(row: int) -> None:
    """A plain Python function: called from a @jit kernel, it becomes a callback."""
    _rows_seen.append(row)


@jit
def _positive_mean_per_row(m: np.ndarray, out: np.ndarray) -> int:
    """The mean of each row's positive values (0.0 if none); how many rows had one."""
    found = 0
    for i in range(m.shape[0]):
        total = 0.0
        n = 0
        for v in m[i]:
            if v > 0:
                total += v
                n += 1
        out[i] = total / n if n else 0.0
        if n:
            found += 1
        _row_done(i)
    return found


#: A loop over an array, summing its squares: what a first kernel looks like.
SQUARES_MLIR = """
func.func @sum_of_squares(%a: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %x2 = arith.mulf %x, %x : f64
    %next = arith.addf %acc, %x2 : f64
    scf.yield %next : f64
  }
  return %s : f64
}
"""


def run_demo(say: Callable[[str], None] = print) -> None:
    """Run a loop over an array, both round trips and a Python kernel, describing each
    step with ``say``."""
    say("0. A kernel: an scf.for loop over a numpy array (passed without a copy)")
    data = np.arange(5.0)
    squares = Session().compile(SQUARES_MLIR).sum_of_squares(data)
    say(f"   sum_of_squares({data.tolist()}) -> {squares} (numpy says {(data * data).sum()})")
    say("1. Upstream-compatible low level: ExecutionEngine.register_runtime + invoke")
    module = lower(parse_module(SEED_MLIR, new_context()))
    engine = ExecutionEngine(module)

    def halve_and_add(a: float, b: int) -> float:
        return a / 2 + b / 2

    prototype = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_int)
    engine.register_runtime("some_callback_into_python", prototype(halve_and_add))
    a, b, result = ctypes.c_float(42.0), ctypes.c_int(2), ctypes.c_float()
    engine.invoke("add", ctypes.pointer(a), ctypes.pointer(b), ctypes.pointer(result))
    say(f"   add(42.0, 2) -> MLIR -> Python a/2 + b/2 -> {result.value}")

    say("2. Typed API: @callback + Session (no ctypes, no pointers)")
    session = Session()

    # pymlirjit.typing's aliases keep static type checkers happy: they see float and int.
    @callback(name="some_callback_into_python", session=session)
    def halves(a: annotated.f32, b: annotated.i32) -> annotated.f32:
        return a / 2 + b / 2

    typed = session.compile(SEED_MLIR)
    say(f"   add(42.0, 2) -> {typed.add(42.0, 2)}")

    seen: list[str] = []

    @callback(session=session)
    def row_sum(row: Annotated[np.ndarray, MemRef[f32, None]]) -> annotated.f32:
        seen.append(np.array2string(row, precision=1))
        return float(row.sum())

    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    total = session.compile(ROWS_MLIR).stream_rows(matrix)
    say(f"   stream_rows: the kernel passed each row to Python as a numpy view: {seen}")
    say(f"   stream_rows(matrix) -> {total} (numpy says {matrix.sum()})")

    say("3. A kernel in Python: @jit compiles the function itself (numba-style)")
    signed = np.array([[1.0, -2.0, 3.0], [-1.0, -1.0, -4.0], [0.5, 0.0, 2.5]])
    means = np.empty(3)
    _rows_seen.clear()
    rows = _positive_mean_per_row(signed, means)
    expected = [float(r[r > 0].mean()) if (r > 0).any() else 0.0 for r in signed]
    say(f"   positive mean per row -> {means.tolist()}, {rows} rows with one "
        f"(numpy says {expected})")
    say(f"   the kernel called Python's _row_done for rows {_rows_seen}")
