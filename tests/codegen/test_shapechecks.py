"""Shape checks of linalg and elementwise tensor ops (pymlirjit/codegen/shapechecks.py):
a mismatch raises ValueError naming the op's line; every test compiles."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.shapechecks import insert_shape_checks
from pymlirjit.lowering.pipeline import new_context, parse_module

SOURCE = """
func.func @add(%a: tensor<?xf64>, %b: tensor<?xf64>) -> tensor<?xf64> {
  %r = arith.addf %a, %b : tensor<?xf64>
  return %r : tensor<?xf64>
}
func.func @dot(%a: tensor<?xf64>, %b: tensor<?xf64>) -> f64 {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<f64>
  %i = linalg.fill ins(%z : f64) outs(%e : tensor<f64>) -> tensor<f64>
  %r = linalg.dot ins(%a, %b : tensor<?xf64>, tensor<?xf64>) outs(%i : tensor<f64>) -> tensor<f64>
  %x = tensor.extract %r[] : tensor<f64>
  return %x : f64
}
func.func @matmul(%a: memref<?x?xf64>, %b: memref<?x?xf64>, %c: memref<?x?xf64>) {
  linalg.matmul ins(%a, %b : memref<?x?xf64>, memref<?x?xf64>) outs(%c : memref<?x?xf64>)
  return
}
"""


def test_mismatched_shapes_raise_value_error_naming_the_ops_line() -> None:
    module = Session().compile(SOURCE)
    assert module.add(np.ones(4), np.ones(4)).tolist() == [2.0] * 4
    assert module.dot(np.arange(4.0), np.ones(4)) == 6.0
    with pytest.raises(ValueError, match=r"shape mismatch in @add \(MLIR line 3\): dimension "
                                         r"#0 of input/output operand #1 is incompatible"):
        module.add(np.ones(4), np.ones(2))
    with pytest.raises(ValueError, match=r"shape mismatch in @dot \(MLIR line 10\)"):
        module.dot(np.ones(4), np.ones(2))
    with pytest.raises(ValueError, match=r"shape mismatch in @matmul \(MLIR line 15\)"):
        module.matmul(np.ones((2, 3)), np.ones((4, 2)), np.zeros((2, 2)))
    c = np.zeros((2, 2))
    module.matmul(np.ones((2, 3)), np.ones((3, 2)), c)
    assert c.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert module.add(np.ones(0), np.ones(0)).tolist() == []


def test_a_kernel_in_a_python_file_names_the_python_line() -> None:
    @mlir_kernel(source="""
    func.func @add(%a: tensor<?xf64>, %b: tensor<?xf64>) -> tensor<?xf64> {
      %r = arith.addf %a, %b : tensor<?xf64>
      return %r : tensor<?xf64>
    }""", session=Session())
    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray: ...

    line = add.__wrapped__.__code__.co_firstlineno + 2
    with pytest.raises(ValueError, match=rf"@add \(\S*test_shapechecks\.py:{line}\)"):
        add(np.ones(4), np.ones(2))


def test_an_operand_that_is_a_parameter_is_named() -> None:
    # By its position in a module, by its stub's name in a kernel; an operand an op made
    # (here the negation's result) is not a parameter, and is not named one.
    module = Session().compile(SOURCE + """
func.func @dot_negated(%a: tensor<?xf64>, %b: tensor<?xf64>, %o: tensor<f64>) -> tensor<f64> {
  %n = arith.negf %b : tensor<?xf64>
  %r = linalg.dot ins(%a, %n : tensor<?xf64>, tensor<?xf64>) outs(%o : tensor<f64>)
      -> tensor<f64>
  return %r : tensor<f64>
}
""")
    with pytest.raises(ValueError, match=r"^shape mismatch in @add \(MLIR line 3\): dimension "
                                         r"#0 of input/output operand #1 is incompatible "
                                         r"with inferred dimension size \(operand #1 is "
                                         r"argument 2 of @add\)$"):
        module.add(np.ones(4), np.ones(2))
    with pytest.raises(ValueError, match=r"operand #2 is argument 3 of @matmul\)$"):
        module.matmul(np.ones((2, 3)), np.ones((3, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"operand #1 is incompatible with inferred "
                                         r"dimension size$"):
        module.dot_negated(np.ones(4), np.ones(2), np.zeros(()))

    @mlir_kernel(source=SOURCE, session=Session())
    def matmul(left: np.ndarray, right: np.ndarray, into: np.ndarray) -> None: ...

    with pytest.raises(ValueError, match=r"operand #1 is argument 2 \('right'\) of @matmul\)$"):
        matmul(np.ones((2, 3)), np.ones((4, 2)), np.zeros((2, 2)))


def test_the_numpy_error_model_turns_them_off_and_they_stay_per_op() -> None:
    checked = Session().compile(SOURCE)
    unchecked = Session(error_model="numpy").compile(SOURCE)
    assert "shape mismatch" in checked.lowered_mlir
    assert "shape mismatch" not in unchecked.lowered_mlir
    # Only linalg ops' checks are kept: a tensor.extract or a memref.load gets none.
    module = parse_module(SOURCE, new_context())
    assert insert_shape_checks(module) > 0
    assert "out-of-bounds" not in str(module)


STRIDED_MATMUL = """
func.func @matmul(%a: VIEW, %b: VIEW, %c: VIEW) {
  linalg.matmul ins(%a, %b : VIEW, VIEW) outs(%c : VIEW)
  return
}
"""


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_matmul_microkernel_leaves_memory_alone_after_a_failed_shape_check(
        parallel: bool, dtype: type) -> None:
    # A parallel call cannot unwind: it runs on after a failed shape check, into the
    # microkernel, which checks the shapes itself (its accesses carry no bounds checks:
    # they made the parallel matmul 1.2x slower than the serial one).
    view = f"memref<?x?x{'f32' if dtype is np.float32 else 'f64'}, strided<[?, 1], offset: ?>>"
    mm = mlir_kernel(source=STRIDED_MATMUL.replace("VIEW", view), name="matmul", opt_level=3,
                     parallel=parallel, session=Session())(lambda a, b, c: None)
    assert not re.search(r"(load|store) in @__pymlirjit_matmul", mm.lowered_mlir)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (200, 300)).astype(dtype)
    b = rng.uniform(-1, 1, (300, 40)).astype(dtype)
    cases = [(a, b[:-7], (200, 40)), (a, b, (200, 33)), (a, b, (150, 40)),
             (a[:, :250], b, (200, 40))]
    for left, right, shape in cases:
        # C is a view inside a larger array: a write outside it would show in the frame.
        frame = np.full((shape[0] + 16, shape[1] + 16), 7.0, dtype)
        c = frame[8:-8, 8:-8]
        with pytest.raises(ValueError, match=r"shape mismatch in @matmul"):
            mm(left, right, c)
        assert (frame == 7.0).all()
    c = np.zeros((200, 40), dtype)
    mm(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


ELEMENTWISE = """
#id = affine_map<(i, j) -> (i, j)>
func.func @ew(%a: VIEW, %b: VIEW, %c: VIEW) {
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
    ins(%a, %b : VIEW, VIEW) outs(%c : VIEW) {
  ^bb0(%x: f64, %y: f64, %o: f64):
    %m = arith.mulf %x, %y : f64
    linalg.yield %m : f64
  }
  return
}
"""


@pytest.mark.parametrize("parallel", [False, True])
def test_an_elementwise_generic_leaves_memory_alone_after_a_failed_shape_check(
        parallel: bool) -> None:
    # A parallel call runs on after a failed shape check: the op's loop is checked once
    # before it (an unchecked copy runs where the shapes agree; checks_hoisting).
    source = ELEMENTWISE.replace("VIEW", "memref<?x?xf64, strided<[?, 1], offset: ?>>")
    ew = mlir_kernel(source=source, name="ew", opt_level=3, parallel=parallel,
                     session=Session())(lambda a, b, c: None)
    a = np.arange(1.0, 13.0).reshape(3, 4)
    for left, right, shape in [(a, a[:2], (3, 4)), (a, a[:, :3], (3, 4)), (a, a, (3, 3)),
                               (a, a, (2, 4)), (a[:, :2], a[:, :2], (3, 4))]:
        frame = np.full((shape[0] + 4, shape[1] + 4), 7.0)
        with pytest.raises(ValueError, match=r"shape mismatch in @ew"):
            ew(left, right, frame[2:-2, 2:-2])
        assert (frame[:2] == 7.0).all() and (frame[-2:] == 7.0).all()
        assert (frame[:, :2] == 7.0).all() and (frame[:, -2:] == 7.0).all()
    c = np.zeros((3, 4))
    ew(a, a, c)
    np.testing.assert_array_equal(c, a * a)
