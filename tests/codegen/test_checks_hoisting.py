"""Bounds checks hoisted out of loops (pymlirjit/codegen/checks_hoisting.py), and a
cf.assert that checks its condition only where calls unwind: every test compiles."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pymlirjit import Session
from pymlirjit.codegen.checks import insert_checks
from pymlirjit.lowering.pipeline import new_context, parse_module

SHIFTED = """
func.func @shifted(%a: memref<?xf64>, %out: memref<?xf64>, %lo: index, %hi: index) {
  %c1 = arith.constant 1 : index
  scf.for %i = %lo to %hi step %c1 {
    %ip = arith.addi %i, %c1 : index
    %x = memref.load %a[%ip] : memref<?xf64>
    memref.store %x, %out[%i] : memref<?xf64>
  }
  return
}"""

TRIANGLE = """
func.func @triangle(%a: memref<?x?xf64>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f64
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %i step %c1 {
      memref.store %z, %a[%i, %j] : memref<?x?xf64>
    }
  }
  return
}"""


def _checked_text(source: str, **options: object) -> str:
    module = parse_module(source, new_context())
    insert_checks(module, **options)  # type: ignore[arg-type]
    return str(module)


def test_a_loops_accesses_are_checked_once_before_it() -> None:
    text = _checked_text(SHIFTED, boundscheck=True)
    # The loop twice: unchecked under the hoisted condition, checked (as before) else.
    assert text.count("scf.for") == 2 and text.count("= memref.load") == 2
    module = Session(boundscheck=True).compile(SHIFTED)
    a, out = np.arange(5.0), np.zeros(5)
    module.shifted(a, out, 0, 4)  # in bounds: the fast copy
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0, 0.0]
    out[:] = 0
    with pytest.raises(IndexError, match=re.escape(
            "memref.load in @shifted (MLIR line 6): index 5 is out of bounds for dimension 0 "
            "of size 5")):
        module.shifted(a, out, 0, 5)  # the last iteration reads a[5]
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0, 0.0]  # the iterations before it ran
    with pytest.raises(IndexError, match="index -1 is out of bounds"):
        module.shifted(a, out, 2**64 - 2, 2**64 - 1)  # (index)-1: wraps, out of bounds


def test_a_nest_whose_inner_range_changes_is_versioned_inside() -> None:
    text = _checked_text(TRIANGLE, boundscheck=True)
    # %j's range depends on %i: the outer loop stays as it is, the inner one (where %i
    # is invariant) is versioned.
    assert text.count("scf.for") == 3
    module = Session(boundscheck=True).compile(TRIANGLE)
    a = np.ones((3, 3))
    module.triangle(a, 3)
    assert a.tolist() == [[1, 1, 1], [0, 1, 1], [0, 0, 1]]
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0"):
        module.triangle(a, 4)


ASSERTED = """
func.func @asserted(%a: memref<?xf64>, %n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %size = memref.dim %a, %c0 : memref<?xf64>
  %ok = arith.cmpi ule, %n, %size : index
  cf.assert %ok, "n fits"
  %z = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  return %s : f64
}"""


def test_an_assert_checks_its_condition_only_where_calls_unwind() -> None:
    module = parse_module(ASSERTED, new_context())
    assert insert_checks(module, boundscheck=False, unwinds=True) == 1  # the assert only
    module = parse_module(ASSERTED, new_context())
    assert insert_checks(module, boundscheck=False, unwinds=False) > 1  # accesses too
    compiled = Session().compile(ASSERTED)
    assert compiled.asserted(np.arange(4.0), 4) == 6.0
    with pytest.raises(AssertionError, match="n fits"):
        compiled.asserted(np.arange(4.0), 5)


PARALLEL_SHIFTED = """
func.func @shifted2d(%a: memref<?x?xf64>, %out: memref<?x?xf64>, %rows: index, %cols: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%rows, %cols) step (%c1, %c1) {
    %jp = arith.addi %j, %c1 : index
    %x = memref.load %a[%i, %jp] : memref<?x?xf64>
    memref.store %x, %out[%i, %j] : memref<?x?xf64>
    scf.reduce
  }
  return
}"""


@pytest.mark.parametrize("parallel", [False, True])
def test_a_parallel_loops_accesses_are_checked_once_before_it(parallel: bool) -> None:
    # The loops of parallel=True modules (and the linalg ops' loops in them, checked
    # there as a failed shape check does not end the call) are scf.parallel.
    text = _checked_text(PARALLEL_SHIFTED, boundscheck=True)
    assert text.count("scf.parallel") == 2 and text.count("= memref.load") == 2
    module = Session(boundscheck=True, parallel=parallel).compile(PARALLEL_SHIFTED)
    a = np.arange(12.0).reshape(3, 4)
    out = np.zeros((3, 4))
    module.shifted2d(a, out, 3, 3)  # in bounds: the unchecked copy
    np.testing.assert_array_equal(out[:, :3], a[:, 1:])
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 1"):
        module.shifted2d(a, out, 3, 4)  # the last column reads a[i, 4]: the checked loop
