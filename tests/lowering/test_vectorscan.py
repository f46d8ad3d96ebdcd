"""``vector.scan``, which no registered pass of MLIR 22 lowers, compiles: its lowering runs
before any stage that converts vector ops to the LLVM dialect."""

from __future__ import annotations

import numpy as np
import pytest

from pymlirjit import Session
from pymlirjit.lowering import vectorscan
from pymlirjit.lowering.pipeline import lower, new_context, parse_module
from pymlirjit.lowering.vectorscan import lower_vector_scans

PREFIX_SUMS = """
func.func @prefix_sums(%a: memref<3x2xf32>, %rows: memref<3x2xf32>, %last: memref<2xf32>,
                       %cols: memref<3x2xf32>) {
  %c0 = arith.constant 0 : index
  %pad = arith.constant 0.0 : f32
  %x = vector.transfer_read %a[%c0, %c0], %pad : memref<3x2xf32>, vector<3x2xf32>
  %init2 = arith.constant dense<10.0> : vector<2xf32>
  %init3 = arith.constant dense<100.0> : vector<3xf32>
  // Down the columns, the initial value first (exclusive), then along the rows (an
  // inclusive scan ignores its initial value).
  %r:2 = vector.scan <add>, %x, %init2 {inclusive = false, reduction_dim = 0}
    : vector<3x2xf32>, vector<2xf32>
  %c:2 = vector.scan <mul>, %x, %init3 {inclusive = true, reduction_dim = 1}
    : vector<3x2xf32>, vector<3xf32>
  vector.transfer_write %r#0, %rows[%c0, %c0] : vector<3x2xf32>, memref<3x2xf32>
  vector.transfer_write %r#1, %last[%c0] : vector<2xf32>, memref<2xf32>
  vector.transfer_write %c#0, %cols[%c0, %c0] : vector<3x2xf32>, memref<3x2xf32>
  return
}
"""


def test_a_scan_compiles_in_the_default_pipeline_and_computes_prefixes(session: Session) -> None:
    module = session.compile(PREFIX_SUMS)
    a = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
    rows, last, cols = (np.zeros((3, 2), np.float32), np.zeros(2, np.float32),
                        np.zeros((3, 2), np.float32))
    module.prefix_sums(a, rows, last, cols)
    np.testing.assert_array_equal(rows, [[10, 10], [11, 12], [14, 16]])
    np.testing.assert_array_equal(last, [14, 16])  # the last row of the scan, as upstream
    np.testing.assert_array_equal(cols, [[1, 2], [3, 12], [5, 30]])


def test_a_scan_is_lowered_only_before_a_stage_converting_vectors() -> None:
    module = parse_module(PREFIX_SUMS, new_context())
    assert not lower_vector_scans(module, "builtin.module(func.func(convert-vector-to-scf))")
    assert str(module).count("vector.scan") == 2
    assert lower_vector_scans(module, "builtin.module(convert-vector-to-llvm)")
    assert "vector.scan" not in str(module)


def test_a_module_without_scans_is_left_as_it_was() -> None:
    # A rewrite of the function would fold the sum of the two constants.
    module = parse_module("""
func.func @f(%x: f32) -> f32 {
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %three = arith.addf %one, %two : f32
  %r = arith.addf %x, %three : f32
  return %r : f32
}""", new_context())
    before = str(module)
    assert lower_vector_scans(module, "builtin.module(convert-to-llvm)")
    assert str(module) == before


def test_a_user_pipeline_converting_vectors_lowers_scans_too() -> None:
    module = parse_module(PREFIX_SUMS, new_context())
    lower(module, "func.func(convert-vector-to-scf),convert-scf-to-cf,convert-vector-to-llvm,"
                  "finalize-memref-to-llvm,convert-func-to-llvm,convert-arith-to-llvm,"
                  "convert-cf-to-llvm,convert-ub-to-llvm,reconcile-unrealized-casts")
    assert "vector." not in str(module)


def test_a_scan_past_the_searched_ops_is_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    # Modules larger than the Python search are handed to the schedule unsearched.
    monkeypatch.setattr(vectorscan, "_SEARCHED", 3)
    module = parse_module(PREFIX_SUMS, new_context())
    assert lower_vector_scans(module, "builtin.module(convert-vector-to-llvm)")
    assert "vector.scan" not in str(module)


def test_the_schedule_runs_only_on_a_module_with_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its first parse in a compile's context cost ~1.8 ms, a tenth of a small compile.
    applied: list[object] = []
    real = vectorscan.apply_script
    monkeypatch.setattr(vectorscan, "apply_script",
                        lambda module, *rest: (applied.append(module), real(module, *rest)))
    plain = parse_module("""
func.func @f(%v: vector<4xf32>) -> vector<4xf32> {
  %r = arith.addf %v, %v : vector<4xf32>
  return %r : vector<4xf32>
}""", new_context())
    assert plain.context.is_registered_operation("vector.scan")
    assert lower_vector_scans(plain, "builtin.module(convert-to-llvm)")
    assert applied == []
    scans = parse_module(PREFIX_SUMS, new_context())
    assert lower_vector_scans(scans, "builtin.module(convert-to-llvm)")
    assert applied == [scans] and "vector.scan" not in str(scans)
