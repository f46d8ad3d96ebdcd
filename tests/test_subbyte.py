"""Loads and stores of i1 in memrefs, which MLIR 22's memref lowering aborts on, compile
as one-element vector accesses; sparse products with a sparse result (whose sparsifier
output keeps an i1 buffer) run. Anything that could abort runs in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pymlirjit import MLIRError, Session

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


BOOL_MARKS = """
func.func @marked(%n: index) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %true = arith.constant true
  %false = arith.constant false
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %marks = memref.alloc(%n) : memref<?xi1>
  scf.for %i = %c0 to %n step %c1 {
    %r = arith.remui %i, %c3 : index
    %every_third = arith.cmpi eq, %r, %c0 : index
    %mark = arith.select %every_third, %true, %false : i1
    memref.store %mark, %marks[%i] : memref<?xi1>
  }
  %count = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (i64) {
    %mark = memref.load %marks[%i] : memref<?xi1>
    %add = arith.select %mark, %one, %zero : i64
    %next = arith.addi %acc, %add : i64
    scf.yield %next : i64
  }
  memref.dealloc %marks : memref<?xi1>
  return %count : i64
}
"""


def test_bool_buffer_loads_and_stores_compile_and_run() -> None:
    out = _run(f"""
        from pymlirjit import Session
        module = Session().compile({BOOL_MARKS!r})
        print(module.marked(10), module.marked(1))
    """)
    assert out.split() == ["4", "1"]


SPARSE_PRODUCT = """
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @product(%a: tensor<3x3xf64, #CSR>, %b: tensor<3x3xf64, #CSR>)
    -> tensor<3x3xf64, #CSR> {
  %init = tensor.empty() : tensor<3x3xf64, #CSR>
  %c = linalg.matmul ins(%a, %b : tensor<3x3xf64, #CSR>, tensor<3x3xf64, #CSR>)
                     outs(%init : tensor<3x3xf64, #CSR>) -> tensor<3x3xf64, #CSR>
  return %c : tensor<3x3xf64, #CSR>
}
func.func @trace_of_square() -> f64 {
  %d = arith.constant dense<[[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [4.0, 0.0, 0.0]]>
    : tensor<3x3xf64>
  %s = sparse_tensor.convert %d : tensor<3x3xf64> to tensor<3x3xf64, #CSR>
  %p = call @product(%s, %s) : (tensor<3x3xf64, #CSR>, tensor<3x3xf64, #CSR>)
    -> tensor<3x3xf64, #CSR>
  %dense = sparse_tensor.convert %p : tensor<3x3xf64, #CSR> to tensor<3x3xf64>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %x = tensor.extract %dense[%c0, %c0] : tensor<3x3xf64>
  %y = tensor.extract %dense[%c1, %c1] : tensor<3x3xf64>
  %z = tensor.extract %dense[%c2, %c2] : tensor<3x3xf64>
  %xy = arith.addf %x, %y : f64
  %t = arith.addf %xy, %z : f64
  bufferization.dealloc_tensor %s : tensor<3x3xf64, #CSR>
  bufferization.dealloc_tensor %p : tensor<3x3xf64, #CSR>
  return %t : f64
}
"""


def test_sparse_product_with_a_sparse_result_runs() -> None:
    # A @ A for A = [[1,0,2],[0,3,0],[4,0,0]]: diagonal 1+8, 9, 8 -> trace 26.
    out = _run(f"""
        from pymlirjit import Session
        print(Session().compile({SPARSE_PRODUCT!r}).trace_of_square())
    """)
    assert out.split() == ["26.0"]


def test_a_strided_innermost_dimension_is_still_refused(session: Session) -> None:
    # vector.load needs a contiguous innermost dimension: this store stays, and is refused
    # before the memref lowering could abort on it.
    source = """
func.func @mark(%m: memref<?xi1, strided<[2]>>, %i: index) {
  %true = arith.constant true
  memref.store %true, %m[%i] : memref<?xi1, strided<[2]>>
  return
}
"""
    with pytest.raises(MLIRError, match=r"'memref\.store' of i1 cannot be lowered"):
        session.compile(source)
