"""Passes MLIR 22 aborts on: refused with an error naming the op, in a subprocess (without
the check the interpreter dies); the same ops still compile where nothing aborts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from pymlirjit import Session

ROOT = Path(__file__).resolve().parent.parent

FMA = """
func.func @fma(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<4xf32>, vector<4xf32>
  %r = math.fma %v, %v, %v : vector<4xf32>
  vector.store %r, %m[%c0] : memref<4xf32>, vector<4xf32>
  return
}
"""


def test_apfloat_lowering_of_a_vector_fma_raises_instead_of_aborting() -> None:
    code = textwrap.dedent(f"""
        from pymlirjit import MLIRError, Session
        pipeline = ("builtin.module(convert-math-to-apfloat,convert-vector-to-llvm,"
                    "finalize-memref-to-llvm,convert-to-llvm,reconcile-unrealized-casts)")
        try:
            Session().compile({FMA!r}, pipeline=pipeline)
        except MLIRError as exc:
            print("raised:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raised:" in done.stdout
    assert "'math.fma' on vector<4xf32> cannot go through convert-math-to-apfloat" in done.stdout
    assert "\"<source>\":5:8" in done.stdout  # the op's location


def test_the_default_pipeline_still_lowers_a_vector_fma(session: Session) -> None:
    # convert-math-to-llvm takes it before the apfloat pass: no refusal.
    data = np.array([1.0, 2.0, -3.0, 0.5], dtype=np.float32)
    expected = data * data + data
    session.compile(FMA)["fma"](data)
    np.testing.assert_array_equal(data, expected)
