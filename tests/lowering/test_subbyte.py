"""Loads and stores of i1 in memrefs, which MLIR 22's memref lowering aborts on, compile
as one-element vector accesses (the sparsifier's own, inside it, are refused instead:
tests/test_passguards.py). Anything that could abort runs in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pymlirjit import MLIRError, Session

ROOT = Path(__file__).resolve().parents[2]


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
