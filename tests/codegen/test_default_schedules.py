"""linalg at the default options (issue 28: the microkernels and schedules that only
opt_level=3 applied): results against numpy on edge shapes (0, 1, primes, tall and
skinny), strided and transposed operands, operands sharing memory, several threads and
a fork."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session
from tests.threads import run_in_threads

ROOT = Path(__file__).resolve().parents[2]

MATMUL = """
func.func @mm(%a: memref<?x?xT>, %b: memref<?x?xT>, %c: memref<?x?xT>) {
  linalg.matmul ins(%a, %b : memref<?x?xT>, memref<?x?xT>) outs(%c : memref<?x?xT>)
  return
}
"""

#: Any strides: transposed and sliced arrays as they are (A with any strides, B and C
#: too: the microkernel wants unit-stride rows, the others get the transform schedule).
STRIDED = """
func.func @mm(%a: memref<?x?xT, strided<[?, ?], offset: ?>>,
              %b: memref<?x?xT, strided<[?, ?], offset: ?>>,
              %c: memref<?x?xT, strided<[?, ?], offset: ?>>) {
  linalg.matmul ins(%a, %b : memref<?x?xT, strided<[?, ?], offset: ?>>,
                             memref<?x?xT, strided<[?, ?], offset: ?>>)
                outs(%c : memref<?x?xT, strided<[?, ?], offset: ?>>)
  return
}
"""

BATCH = """
func.func @bmm(%a: memref<?x?x?xT>, %b: memref<?x?x?xT>, %c: memref<?x?x?xT>) {
  linalg.batch_matmul ins(%a, %b : memref<?x?x?xT>, memref<?x?x?xT>)
                      outs(%c : memref<?x?x?xT>)
  return
}
"""

DTYPES = {"f32": np.float32, "f64": np.float64}
#: (rows of C, depth, columns): 0, 1, primes, tall and skinny, short and wide.
EDGES = [(0, 4, 5), (4, 0, 5), (4, 5, 0), (1, 1, 1), (1, 97, 1), (2, 3, 131),
         (101, 103, 107), (2000, 3, 5), (3, 2000, 7), (5, 7, 2000), (1031, 1, 33)]


def _tolerance(dtype: type, depth: int) -> dict[str, float]:
    eps = 1e-5 if dtype is np.float32 else 1e-12
    return {"rtol": eps, "atol": eps * max(depth, 1)}


@pytest.fixture(scope="module")
def session() -> Session:
    return Session()


def _expected(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("element", sorted(DTYPES))
def test_edge_shapes_match_numpy(session: Session, element: str) -> None:
    module = session.compile(MATMUL.replace("T", element))
    assert "__pymlirjit_matmul" in module.lowered_mlir  # the default gives the microkernel
    dtype, rng = DTYPES[element], np.random.default_rng(3)
    for m, k, n in EDGES:
        a, b, c = (rng.uniform(-1, 1, s).astype(dtype) for s in ((m, k), (k, n), (m, n)))
        expected = _expected(a, b, c)
        module.mm(a, b, c)
        np.testing.assert_allclose(c, expected, **_tolerance(dtype, k),
                                   err_msg=f"{m}x{k} @ {k}x{n}")


@pytest.mark.parametrize("element", sorted(DTYPES))
def test_strided_and_transposed_operands(session: Session, element: str) -> None:
    module = session.compile(STRIDED.replace("T", element))
    dtype, rng = DTYPES[element], np.random.default_rng(4)
    for m, k, n in [(37, 41, 43), (64, 64, 64), (3, 200, 5), (130, 7, 70)]:
        a = rng.uniform(-1, 1, (k, m)).astype(dtype).T            # transposed
        b = rng.uniform(-1, 1, (2 * k, n + 3)).astype(dtype)[::2, 3:]  # sliced rows
        base = np.zeros((m, 2 * n), dtype)
        c = base[:, ::2]                                           # every other column
        expected = _expected(a, b, c)
        module.mm(a, b, c)
        np.testing.assert_allclose(c, expected, **_tolerance(dtype, k))
        assert not base[:, 1::2].any()  # the columns between C's untouched
    # Rows of unit stride: the microkernel serves those operands too.
    a = rng.uniform(-1, 1, (50, 60)).astype(dtype)[5:45, ::3]
    b = rng.uniform(-1, 1, (30, 90)).astype(dtype)[10:30, 7:80]
    c = np.zeros((60, 100), dtype)[10:50, 20:93]
    expected = _expected(a, b, c)
    module.mm(a, b, c)
    np.testing.assert_allclose(c, expected, **_tolerance(dtype, 20))


@pytest.mark.parametrize("element", sorted(DTYPES))
def test_operands_sharing_memory(session: Session, element: str) -> None:
    module = session.compile(STRIDED.replace("T", element))
    dtype, rng = DTYPES[element], np.random.default_rng(5)
    a = rng.uniform(-1, 1, (67, 67)).astype(dtype)
    c = rng.uniform(-1, 1, (67, 67)).astype(dtype)
    expected = _expected(a, a, c)
    module.mm(a, a, c)  # A is B
    np.testing.assert_allclose(c, expected, **_tolerance(dtype, 67))
    # C and A disjoint parts of one buffer: the code may not assume they do not alias.
    buffer = rng.uniform(-1, 1, (90, 70)).astype(dtype)
    a, c = buffer[:40], buffer[50:]
    b = rng.uniform(-1, 1, (70, 70)).astype(dtype)
    before = buffer.copy()
    expected = _expected(a, b, c)
    module.mm(a, b, c)
    np.testing.assert_allclose(c, expected, **_tolerance(dtype, 70))
    np.testing.assert_array_equal(buffer[:50], before[:50])


@pytest.mark.parametrize("element", sorted(DTYPES))
def test_batch_matmul_edge_shapes(session: Session, element: str) -> None:
    module = session.compile(BATCH.replace("T", element))
    dtype, rng = DTYPES[element], np.random.default_rng(6)
    for batch, m, k, n in [(0, 3, 4, 5), (1, 1, 1, 1), (3, 0, 2, 2), (2, 97, 13, 33),
                           (5, 2000, 2, 3)]:
        a, b, c = (rng.uniform(-1, 1, s).astype(dtype)
                   for s in ((batch, m, k), (batch, k, n), (batch, m, n)))
        expected = c.astype(np.float64) + np.matmul(a.astype(np.float64), b)
        module.bmm(a, b, c)
        np.testing.assert_allclose(c, expected, **_tolerance(dtype, k))


def test_several_threads_at_once(session: Session) -> None:
    module = session.compile(MATMUL.replace("T", "f32"))

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(20):
            m, k, n = rng.integers(1, 150, 3)
            a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
            c = np.zeros((m, n), np.float32)
            module.mm(a, b, c)
            np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5,
                                       atol=1e-5 * k)

    run_in_threads(work, range(4))


FORKED = """
import os, sys, warnings
import numpy as np
from pymlirjit import Session
from tests.codegen.test_default_schedules import MATMUL
# Python 3.12+ warns on fork() in a process with threads (the parallel runtime's workers):
# what this test checks is that the child still runs the code.
warnings.simplefilter("ignore", DeprecationWarning)
mm = Session(parallel=len(sys.argv) > 1).compile(MATMUL.replace("T", "f64")).mm
a, b = np.arange(12.0).reshape(3, 4), np.arange(800.0).reshape(4, 200)  # 13 panels
c = np.zeros((3, 200))
mm(a, b, c)
pid = os.fork()
if pid == 0:
    d = np.zeros((3, 200))
    mm(a, b, d)
    os._exit(0 if np.array_equal(d, a @ b) else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), np.array_equal(c, a @ b))
"""


@pytest.mark.parametrize("parallel", [False, True])
def test_a_forked_child_calls_the_scheduled_code(parallel: bool) -> None:
    done = subprocess.run([sys.executable, "-c", FORKED, *(["parallel"] if parallel else [])],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "True"]
    assert done.stderr == ""
