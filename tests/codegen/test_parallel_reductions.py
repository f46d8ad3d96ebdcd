"""parallel=True for loops with reductions (scf.parallel init/scf.reduce, a prange sum):
split per thread into per-chunk partial results, combined in chunk order (issue 29.7)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pymlirjit import Session, callback, f64, index
from pymlirjit.codegen.parallel import THREADS_VARIABLE, clamp_upper_bounds
from pymlirjit.codegen.parallel_reductions import split_reductions
from pymlirjit.lowering.pipeline import new_context, parse_module

# A sum from %k and a count, from %lo to %n by %step: two reductions of two types.
SUM_AND_COUNT = """
func.func @total(%a: memref<?xf64>, %k: f64, %lo: index, %step: index) -> (f64, i64) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0 : i64
  %n = memref.dim %a, %c0 : memref<?xf64>
  %r:2 = scf.parallel (%i) = (%lo) to (%n) step (%step) init (%k, %z) -> (f64, i64) {
    %x = memref.load %a[%i] : memref<?xf64>
    %one = arith.constant 1 : i64
    scf.reduce(%x, %one : f64, i64) {
    ^bb0(%l: f64, %r: f64):
      %s = arith.addf %l, %r : f64
      scf.reduce.return %s : f64
    }, {
    ^bb0(%l: i64, %r: i64):
      %s = arith.addi %l, %r : i64
      scf.reduce.return %s : i64
    }
  }
  return %r#0, %r#1 : f64, i64
}
"""

CALLING = """
func.func @called(%n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f64
  %r = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%z) -> f64 {
    %y = func.call @value(%i) : (index) -> f64
    scf.reduce(%y : f64) {
    ^bb0(%l: f64, %r: f64):
      %s = arith.addf %l, %r : f64
      scf.reduce.return %s : f64
    }
  }
  return %r : f64
}
func.func private @value(index) -> f64
"""

# Row sums: a reduction nested in a parallel loop (it runs serially in each task), and
# the maximum over a 2-D loop (several dimensions: serial).
ROWS_AND_MAX = """
func.func @rows(%m: memref<?x?xf64>, %out: memref<?xf64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f64
  %n = memref.dim %m, %c0 : memref<?x?xf64>
  %k = memref.dim %m, %c1 : memref<?x?xf64>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %s = scf.parallel (%j) = (%c0) to (%k) step (%c1) init (%z) -> f64 {
      %x = memref.load %m[%i, %j] : memref<?x?xf64>
      scf.reduce(%x : f64) {
      ^bb0(%l: f64, %r: f64):
        %t = arith.addf %l, %r : f64
        scf.reduce.return %t : f64
      }
    }
    memref.store %s, %out[%i] : memref<?xf64>
  }
  return
}
func.func @biggest(%m: memref<?x?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %low = arith.constant -1.0e300 : f64
  %n = memref.dim %m, %c0 : memref<?x?xf64>
  %k = memref.dim %m, %c1 : memref<?x?xf64>
  %r = scf.parallel (%i, %j) = (%c0, %c0) to (%n, %k) step (%c1, %c1) init (%low) -> f64 {
    %x = memref.load %m[%i, %j] : memref<?x?xf64>
    scf.reduce(%x : f64) {
    ^bb0(%l: f64, %r: f64):
      %t = arith.maximumf %l, %r : f64
      scf.reduce.return %t : f64
    }
  }
  return %r : f64
}
"""


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_reductions_match_numpy_for_any_range_and_thread_count(
        threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, str(threads))
    total = Session(parallel=True).compile(SUM_AND_COUNT).total
    for n in (0, 1, 2, 7, 17, 100, 1001, 10007):
        a = np.arange(float(n))
        for lo, step in ((0, 1), (3, 4), (5, 1), (n + 2, 3)):
            picked = a[lo::step]
            s, count = total(a, 10.0, lo, step)
            assert count == len(picked), (n, lo, step)
            assert s == pytest.approx(10.0 + picked.sum(), rel=1e-12), (n, lo, step)


def test_a_reduction_runs_on_several_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    session = Session(parallel=True)
    caller = threading.get_ident()
    seen: set[int] = set()

    @callback(session=session)
    def value(i: index) -> f64:
        seen.add(threading.get_ident())
        deadline = time.monotonic() + 10
        while len(seen) < 2 and threading.get_ident() == caller \
                and time.monotonic() < deadline:
            time.sleep(0.001)  # the caller waits (once) for a worker to call back
        return float(i)

    called = session.compile(CALLING).called
    assert called(20000) == sum(range(20000))
    assert len(seen) >= 2  # it ran on one thread before


def test_results_do_not_depend_on_which_thread_ran_which_chunk() -> None:
    total = Session(parallel=True).compile(SUM_AND_COUNT).total
    a = np.random.default_rng(5).random(100_003) * 1e6
    sums = {total(a, 0.0, 0, 1)[0] for _ in range(20)}
    assert len(sums) == 1  # combined in chunk order: the same bits every call


def test_nested_and_several_dimensions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    module = Session(parallel=True).compile(ROWS_AND_MAX)
    m = np.random.default_rng(1).random((37, 53))
    out = np.zeros(37)
    module.rows(m, out)
    np.testing.assert_allclose(out, m.sum(axis=1), rtol=1e-12)
    assert module.biggest(m) == m.max()


def test_only_outermost_one_dimensional_reductions_are_split() -> None:
    module = parse_module(ROWS_AND_MAX, new_context())
    clamp_upper_bounds(module)
    assert split_reductions(module, 2) == 0  # nested in a parallel loop; 2-D
    module = parse_module(SUM_AND_COUNT, new_context())
    clamp_upper_bounds(module)
    assert split_reductions(module, 3) == 1
    module.operation.verify()
    text = str(module)
    assert "memref<24xf64>" in text and "memref<24xi64>" in text  # 3 threads x 8 chunks


def test_a_callback_failing_in_a_reduction_fails_the_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    session = Session(parallel=True)

    @callback(session=session)
    def value(i: index) -> f64:
        if i == 15000:
            raise KeyError(i)
        return float(i)

    called = session.compile(CALLING).called
    with pytest.raises(KeyError):
        called(20000)
    assert called(100) == sum(range(100))
