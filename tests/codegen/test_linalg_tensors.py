"""linalg on tensors at opt_level=3 (pymlirjit.codegen.linalg_tensors): elementwise chains fused
into one loop with bit-identical results, and matmuls, batch matmuls and convolutions on
tensors bufferized early so that they get the memref microkernels."""

from __future__ import annotations

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.linalg_tensors import bufferize_contractions, fuse_elementwise
from pymlirjit.codegen.microkernelshapes import host_shape
from pymlirjit.lowering.pipeline import new_context, parse_module

CHAIN = """
func.func @chain(%a: tensor<?xT>, %b: tensor<?xT>, %c: tensor<?xT>) -> tensor<?xT> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xT>
  %e = tensor.empty(%n) : tensor<?xT>
  %p = linalg.mul ins(%a, %b : tensor<?xT>, tensor<?xT>) outs(%e : tensor<?xT>) -> tensor<?xT>
  %s = linalg.add ins(%p, %c : tensor<?xT>, tensor<?xT>) outs(%e : tensor<?xT>) -> tensor<?xT>
  %x = linalg.exp ins(%s : tensor<?xT>) outs(%e : tensor<?xT>) -> tensor<?xT>
  return %x : tensor<?xT>
}
"""

#: A value used twice (the sum feeds the exp and the final product) and a generic op.
DAG = """
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @dag(%a: tensor<?x?xf64>, %b: tensor<?x?xf64>) -> tensor<?x?xf64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %a, %c0 : tensor<?x?xf64>
  %m = tensor.dim %a, %c1 : tensor<?x?xf64>
  %e = tensor.empty(%n, %m) : tensor<?x?xf64>
  %s = linalg.add ins(%a, %b : tensor<?x?xf64>, tensor<?x?xf64>)
                  outs(%e : tensor<?x?xf64>) -> tensor<?x?xf64>
  %x = linalg.tanh ins(%s : tensor<?x?xf64>) outs(%e : tensor<?x?xf64>) -> tensor<?x?xf64>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s : tensor<?x?xf64>, tensor<?x?xf64>) outs(%e : tensor<?x?xf64>) {
  ^bb0(%u: f64, %v: f64, %o: f64):
    %q = arith.mulf %u, %v : f64
    linalg.yield %q : f64
  } -> tensor<?x?xf64>
  return %r : tensor<?x?xf64>
}
"""

MATMUL_AND_BIAS = """
func.func @dense(%x: tensor<?x?xf32>, %w: tensor<?x?xf32>, %bias: tensor<?x?xf32>)
    -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x?xf32>
  %m = tensor.dim %w, %c1 : tensor<?x?xf32>
  %e = tensor.empty(%n, %m) : tensor<?x?xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x?xf32>, tensor<?x?xf32>)
                     outs(%z : tensor<?x?xf32>) -> tensor<?x?xf32>
  %s = linalg.add ins(%y, %bias : tensor<?x?xf32>, tensor<?x?xf32>)
                  outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %r = linalg.max ins(%s, %z : tensor<?x?xf32>, tensor<?x?xf32>)
                  outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
"""

BATCH = """
func.func @bmm(%a: tensor<?x?x?xf64>, %b: tensor<?x?x?xf64>, %c: tensor<?x?x?xf64>)
    -> tensor<?x?x?xf64> {
  %r = linalg.batch_matmul ins(%a, %b : tensor<?x?x?xf64>, tensor<?x?x?xf64>)
                           outs(%c : tensor<?x?x?xf64>) -> tensor<?x?x?xf64>
  return %r : tensor<?x?x?xf64>
}
"""


@pytest.mark.parametrize("size", [0, 1, 1009])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_chain_gives_the_unfused_bits(session: Session, size: int,
                                            dtype: type[np.floating]) -> None:
    source = CHAIN.replace("T>", "f32>" if dtype == np.float32 else "f64>")
    fused = mlir_kernel(source=source, name="chain", opt_level=3, session=session)(None)
    plain = mlir_kernel(source=source, name="chain", opt_level=1, session=session)(None)
    rng = np.random.default_rng(size)
    a, b, c = (rng.standard_normal(size).astype(dtype) for _ in range(3))
    result = fused(a, b, c)
    np.testing.assert_array_equal(result, plain(a, b, c))
    np.testing.assert_allclose(result, np.exp(a * b + c), rtol=1e-5)
    assert fused.lowered_mlir.count("llvm.cond_br") < plain.lowered_mlir.count("llvm.cond_br")


def test_fusion_makes_one_loop_and_keeps_a_value_used_twice(session: Session) -> None:
    module = parse_module(DAG, new_context())
    assert fuse_elementwise(module)
    text = str(module)
    assert "linalg.add" not in text and "linalg.tanh" not in text
    kernel = mlir_kernel(source=DAG, name="dag", opt_level=3, session=session)(None)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((13, 7)), rng.standard_normal((13, 7))
    s = a + b
    np.testing.assert_allclose(kernel(a, b), np.tanh(s) * s, rtol=1e-12)


def test_one_elementwise_op_is_left_alone() -> None:
    module = parse_module(BATCH.replace("linalg.batch_matmul", "linalg.add"), new_context())
    before = str(module)
    assert not fuse_elementwise(module)
    assert str(module) == before


def test_a_matmul_stays_named_for_its_microkernel() -> None:
    module = parse_module(MATMUL_AND_BIAS, new_context())
    assert fuse_elementwise(module)
    text = str(module)
    assert "linalg.matmul" in text and "linalg.add" not in text and "linalg.max" not in text
    assert bufferize_contractions(module)
    assert "tensor<" not in str(module)


@pytest.mark.parametrize(("n", "k", "m"), [(1, 1, 1), (0, 3, 2), (5, 0, 3), (67, 131, 33)])
def test_tensor_matmul_gets_the_microkernel(session: Session, n: int, k: int,
                                            m: int) -> None:
    kernel = mlir_kernel(source=MATMUL_AND_BIAS, name="dense", opt_level=3,
                         session=session)(None)
    rng = np.random.default_rng(n + k + m)
    x = rng.standard_normal((n, k), dtype=np.float32)
    w = rng.standard_normal((k, m), dtype=np.float32)
    bias = rng.standard_normal((n, m), dtype=np.float32)
    expected = np.maximum(x @ w + bias, 0)
    inputs = [x.copy(), w.copy(), bias.copy()]
    np.testing.assert_allclose(kernel(x, w, bias), expected, rtol=1e-4,
                               atol=1e-4 * max(k, 1))
    for given, kept in zip([x, w, bias], inputs, strict=True):
        np.testing.assert_array_equal(given, kept)  # tensors are values: inputs unchanged
    assert f"vector<{host_shape().lanes('f32')}xf32>" in kernel.lowered_mlir


def test_tensor_batch_matmul_matches_numpy(session: Session) -> None:
    kernel = mlir_kernel(source=BATCH, name="bmm", opt_level=3, session=session)(None)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 17, 9)), rng.standard_normal((3, 9, 23))
    c = rng.standard_normal((3, 17, 23))
    expected = c + a @ b
    np.testing.assert_allclose(kernel(a, b, c), expected, rtol=1e-12, atol=1e-12)
    assert "vector<" in kernel.lowered_mlir


SPARSE_AND_DENSE = """
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
func.func @spmm(%a: tensor<4x3xf64, #CSR>, %b: tensor<3x2xf64>, %c: tensor<4x2xf64>,
                %d: tensor<4x2xf64>) -> tensor<4x2xf64> {
  %p = linalg.matmul ins(%a, %b : tensor<4x3xf64, #CSR>, tensor<3x2xf64>)
                     outs(%c : tensor<4x2xf64>) -> tensor<4x2xf64>
  %s = linalg.add ins(%p, %d : tensor<4x2xf64>, tensor<4x2xf64>)
                  outs(%c : tensor<4x2xf64>) -> tensor<4x2xf64>
  %x = linalg.exp ins(%s : tensor<4x2xf64>) outs(%c : tensor<4x2xf64>) -> tensor<4x2xf64>
  return %x : tensor<4x2xf64>
}
func.func @main(%b: tensor<3x2xf64>, %c: tensor<4x2xf64>, %d: tensor<4x2xf64>) -> tensor<4x2xf64> {
  %dense = arith.constant dense<[[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0],
                                 [4.0, 0.0, 0.5]]> : tensor<4x3xf64>
  %a = sparse_tensor.convert %dense : tensor<4x3xf64> to tensor<4x3xf64, #CSR>
  %r = call @spmm(%a, %b, %c, %d)
      : (tensor<4x3xf64, #CSR>, tensor<3x2xf64>, tensor<4x2xf64>, tensor<4x2xf64>)
      -> tensor<4x2xf64>
  bufferization.dealloc_tensor %a : tensor<4x3xf64, #CSR>
  return %r : tensor<4x2xf64>
}
"""


def test_sparse_modules_are_left_to_the_sparsifier(session: Session) -> None:
    function = session.compile(SPARSE_AND_DENSE, opt_level=3).main
    rng = np.random.default_rng(5)
    b, c, d = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    dense = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0], [4.0, 0.0, 0.5]])
    np.testing.assert_allclose(function(b, c, d), np.exp(c + dense @ b + d), rtol=1e-12)
