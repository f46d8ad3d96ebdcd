"""Transform-dialect schedules (pymlirjit.codegen.linalg_schedules): matmuls the microkernels do
not take (strided rows, other types) tiled and vectorized at opt_level=3, correct on odd
sizes; a schedule MLIR refuses falls back to the plain lowering."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from pymlirjit import MLIRError, Session, mlir_kernel
from pymlirjit.codegen.linalg_schedules import (
    MATMUL_SCHEDULE,
    has_tileable_ops,
    run_schedule,
    tile_and_vectorize,
)
from pymlirjit.codegen.microkernelshapes import host_shape
from pymlirjit.lowering.pipeline import new_context, parse_module

MATMUL = """
func.func @mm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

SIZES = [(1, 1, 1), (0, 5, 3), (7, 0, 2), (3, 5, 0), (8, 32, 1), (131, 67, 257),
         (2, 97, 13), (64, 256, 256), (65, 257, 259)]


@pytest.mark.parametrize(("n", "m", "k"), SIZES)
def test_tiled_matmul_matches_numpy(session: Session, n: int, m: int, k: int) -> None:
    @mlir_kernel(source=MATMUL, opt_level=3, session=session)
    def mm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    rng = np.random.default_rng(n * 1000 + m * 10 + k)
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((k, m), dtype=np.float32)
    c = rng.standard_normal((n, m), dtype=np.float32)
    expected = c + a @ b
    mm(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * max(k, 1))


STRIDED = MATMUL.replace("memref<?x?xf32>", "memref<?x?xf32, strided<[?, ?], offset: ?>>")


def test_tiled_matmul_takes_strided_views(session: Session) -> None:
    @mlir_kernel(source=STRIDED, opt_level=3, session=session)
    def mm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    rng = np.random.default_rng(1)
    big = rng.standard_normal((40, 80), dtype=np.float32)
    a, b = big[1:30:2, 3:40], big[:37, 41:80]
    c = np.zeros((40, 60), np.float32)[5:20, 2:41]
    mm(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)


def test_opt_level_3_vectorizes_the_matmul(session: Session) -> None:
    @mlir_kernel(source=MATMUL, name="mm", opt_level=3, session=session)
    def fast(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    @mlir_kernel(source=MATMUL, name="mm", opt_level=1, session=session)
    def plain(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    fast.compile()
    plain.compile()
    assert f"vector<{host_shape().lanes('f32')}xf32>" in fast.lowered_mlir  # host vectors
    assert "vector<" not in plain.lowered_mlir


def test_register_tiles_do_not_grow_the_stack() -> None:
    # Each register tile's accumulator is an alloca: inside the loops, each iteration
    # took new stack until the call returned (a 768^3 matmul needs ~7 MB of it).
    code = f"""
import numpy as np
from pymlirjit import Session
mm = Session(opt_level=3).compile({MATMUL!r}).mm
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((768, 768), dtype=np.float32) for _ in range(2))
c = np.zeros((768, 768), np.float32)
mm(a, b, c)
print(float(np.abs(c - a @ b).max()))
"""
    def small_stack() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (2 << 20, resource.getrlimit(
            resource.RLIMIT_STACK)[1]))

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, preexec_fn=small_stack, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) < 1e-2


COMPLEX_MATMUL = MATMUL.replace("f32", "complex<f32>")


def test_a_schedule_that_fails_leaves_the_module_as_it_was(session: Session) -> None:
    # The vectorizer refuses complex numbers: the matmul gets the plain lowering.
    module = parse_module(COMPLEX_MATMUL, new_context())
    before = str(module)
    assert has_tileable_ops(module)
    with pytest.raises(MLIRError, match="tiling and vectorizing linalg failed"):
        run_schedule(parse_module(COMPLEX_MATMUL, new_context()), MATMUL_SCHEDULE)
    assert not tile_and_vectorize(module)
    assert str(module) == before
    module.operation.verify()

    @mlir_kernel(source=COMPLEX_MATMUL, name="mm", opt_level=3, session=session)
    def mm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    rng = np.random.default_rng(6)
    a = (rng.standard_normal((5, 7)) + 1j * rng.standard_normal((5, 7))).astype(np.complex64)
    b = (rng.standard_normal((7, 3)) + 1j * rng.standard_normal((7, 3))).astype(np.complex64)
    c = np.zeros((5, 3), np.complex64)
    mm(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
