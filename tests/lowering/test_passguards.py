"""Passes MLIR 22 aborts on: refused with an error naming the op, in a subprocess (without
the check the interpreter dies); the same ops still compile where nothing aborts.

The sparse kernels are our own, shaped like upstream's sparse_expand.mlir (a product with
a sparse result: the sparsifier's workspace is a memref of i1)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session

ROOT = Path(__file__).resolve().parents[2]

FMA = """
func.func @fma(%m: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<4xf32>, vector<4xf32>
  %r = math.fma %v, %v, %v : vector<4xf32>
  vector.store %r, %m[%c0] : memref<4xf32>, vector<4xf32>
  return
}
"""


def _compile_in_a_child(source: str, pipeline: str | None) -> str:
    """Compile ``source`` with ``pipeline`` in a child interpreter (an abort fails the
    test, not the run); its stdout, where an MLIRError is printed after "raised:"."""
    code = textwrap.dedent(f"""
        from pymlirjit import MLIRError, Session
        try:
            Session().compile({source!r}, pipeline={pipeline!r})
        except MLIRError as exc:
            print("raised:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_apfloat_lowering_of_a_vector_fma_raises_instead_of_aborting() -> None:
    stdout = _compile_in_a_child(FMA, "builtin.module(convert-math-to-apfloat,"
                                 "convert-vector-to-llvm,finalize-memref-to-llvm,"
                                 "convert-to-llvm,reconcile-unrealized-casts)")
    assert "raised:" in stdout
    assert "'math.fma' on vector<4xf32> cannot go through convert-math-to-apfloat" in stdout
    assert "\"<source>\":5:8" in stdout  # the op's location


def test_the_default_pipeline_still_lowers_a_vector_fma(session: Session) -> None:
    # convert-math-to-llvm takes it before the apfloat pass: no refusal.
    data = np.array([1.0, 2.0, -3.0, 0.5], dtype=np.float32)
    expected = data * data + data
    session.compile(FMA)["fma"](data)
    np.testing.assert_array_equal(data, expected)


#: A product of CSR matrices into a CSR matrix: the sparsifier expands each result row
#: into a dense workspace whose "filled" flags are a memref of i1.
SPARSE_PRODUCT = """
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @product(%a: tensor<4x4xf64, #CSR>, %b: tensor<4x4xf64, #CSR>) -> tensor<4x4xf64, #CSR> {
  %init = tensor.empty() : tensor<4x4xf64, #CSR>
  %c = linalg.matmul ins(%a, %b : tensor<4x4xf64, #CSR>, tensor<4x4xf64, #CSR>)
                     outs(%init : tensor<4x4xf64, #CSR>) -> tensor<4x4xf64, #CSR>
  return %c : tensor<4x4xf64, #CSR>
}
"""

#: The same product into a dense result: no workspace, nothing for MLIR 22 to abort on.
DENSE_RESULT_PRODUCT = """
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @product(%d: tensor<4x4xf64>, %out: tensor<4x4xf64>) -> tensor<4x4xf64> {
  %a = sparse_tensor.convert %d : tensor<4x4xf64> to tensor<4x4xf64, #CSR>
  %c = linalg.matmul ins(%a, %d : tensor<4x4xf64, #CSR>, tensor<4x4xf64>)
                     outs(%out : tensor<4x4xf64>) -> tensor<4x4xf64>
  bufferization.dealloc_tensor %a : tensor<4x4xf64, #CSR>
  return %c : tensor<4x4xf64>
}
"""


def test_the_sparsifier_still_lowers_a_product_with_a_dense_result(session: Session) -> None:
    d = np.arange(16, dtype=np.float64).reshape(4, 4) * (np.arange(16).reshape(4, 4) % 3 == 0)
    out = np.zeros((4, 4))
    result = session.compile(DENSE_RESULT_PRODUCT)["product"](d, out)
    np.testing.assert_array_equal(np.asarray(result), d @ d)


def test_the_printed_sparsifier_is_not_the_sparsifier() -> None:
    # Why passguards probes a copy instead of running the passes MLIR prints for the
    # sparsifier (where its convert-to-llvm could be checked): the print loses options
    # it gives them in code, and the code then frees no temporary buffer.
    from mlir import ir
    from mlir.passmanager import PassManager

    pipeline = "builtin.module(sparsifier{enable-runtime-library=false})"
    lowered = []
    with ir.Context():
        for text in (pipeline, str(PassManager.parse(pipeline))):
            module = ir.Module.parse(DENSE_RESULT_PRODUCT)
            PassManager.parse(text).run(module.operation)
            lowered.append(str(module).count("llvm.call @free"))
    assert lowered[0] > lowered[1]


@pytest.mark.parametrize("pipeline", [
    None, "builtin.module(sparsifier{enable-runtime-library=true})",
    "builtin.module(sparsifier{enable-runtime-library=false})"])
def test_a_sparsifier_making_an_i1_workspace_raises_instead_of_aborting(
        pipeline: str | None) -> None:
    stdout = _compile_in_a_child(SPARSE_PRODUCT, pipeline)
    assert "raised: this sparsifier cannot lower the module" in stdout
    assert "memref.store' of i1" in stdout or "memref.load' of i1" in stdout
