"""Matmul microkernels (pymlirjit.codegen.microkernels): every shape, whatever the host's,
against numpy on odd sizes (primes, 1, 0), serial and parallel, f32 and f64; the
structure of the generated MLIR; the host's choice."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.microkernels import (
    SHAPES,
    MicrokernelShape,
    _tail_blocks,
    host_family,
    host_shape,
    microkernel,
)

MATMUL = """
func.func @mm(%a: memref<?x?xT>, %b: memref<?x?xT>, %c: memref<?x?xT>) {
  linalg.matmul ins(%a, %b : memref<?x?xT>, memref<?x?xT>) outs(%c : memref<?x?xT>)
  return
}
"""

#: (rows of C, columns, depth): around every shape's blocks and panels (32 or 64 f32
#: columns, 16 or 32 f64), depths around the 256- and 512-deep blocks, primes, 1 and 0.
SIZES = [(1, 1, 1), (0, 5, 3), (7, 0, 2), (3, 5, 0), (8, 32, 1), (131, 67, 257),
         (2, 97, 13), (13, 64, 256), (25, 65, 259), (15, 127, 3), (29, 16, 7),
         (9, 33, 512), (11, 35, 1031), (263, 40, 70), (517, 17, 9)]


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("family", sorted(SHAPES))
def test_every_shape_matches_numpy(monkeypatch: pytest.MonkeyPatch, family: str,
                                   dtype: type, parallel: bool) -> None:
    # Whatever the host: its family's entry is made the shape under test.
    monkeypatch.setitem(SHAPES, host_family(), SHAPES[family])
    element = "f32" if dtype is np.float32 else "f64"
    mm = mlir_kernel(source=MATMUL.replace("T", element), name="mm", opt_level=3,
                     parallel=parallel, session=Session())(lambda a, b, c: None)
    rng = np.random.default_rng(7)
    tolerance = 1e-5 if dtype is np.float32 else 1e-12
    for n, m, k in SIZES:
        a, b, c = (rng.uniform(-1, 1, shape).astype(dtype)
                   for shape in ((n, k), (k, m), (n, m)))
        expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
        mm(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=tolerance,
                                   atol=tolerance * max(k, 1),
                                   err_msg=f"{family}: {n}x{k} @ {k}x{m}")
    assert "__pymlirjit_matmul" in mm.lowered_mlir
    lanes = 16 if dtype is np.float32 else 8
    assert f"vector<{lanes}x{element}>" in mm.lowered_mlir


@pytest.mark.parametrize("family", sorted(SHAPES))
def test_parallel_microkernel_runs_every_panel_in_its_parallel_loop(family: str) -> None:
    # The masked last panel is an iteration of the scf.parallel like the others (run
    # after it by the caller, it left the threads unequal shares).
    from mlir import ir

    shape = SHAPES[family]
    strided = "memref<?x?xf32, strided<[?, ?], offset: ?>>"
    unit = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    with ir.Context():
        module = ir.Module.parse(microkernel("mm", "f32", (strided, unit, unit), True, shape))
        stores: list[bool] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            into_c = any(str(v.type).startswith("memref<?x?") for v in op.operands)
            if op.name in ("vector.store", "vector.maskedstore") and into_c:
                parent = op.parent
                while parent.name not in ("scf.parallel", "func.func"):
                    parent = parent.parent
                stores.append(parent.name == "scf.parallel")
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    # One panel body, masked (a full mask but in the last panel): two bodies, one of them
    # masked, were twice the code to compile.
    blocks = shape.rows + sum(_tail_blocks(shape.rows))
    assert len(stores) == blocks * shape.vectors and all(stores)
    assert str(module).count("scf.parallel") == 1


def test_tail_blocks_cover_every_remainder() -> None:
    for rows in (1, 2, 6, 8, 12, 14):
        sizes = _tail_blocks(rows)
        assert all(size < rows for size in sizes)
        for left in range(rows):  # blocks of two as long as they fit, then one
            if 2 in sizes:
                left %= 2
            if 1 in sizes:
                left -= min(left, 1)
            assert left == 0


def test_the_host_gets_its_family_shape() -> None:
    import llvmlite.binding as llvm

    name = llvm.get_host_cpu_name()
    assert host_family() == ("zen" if name.startswith("znver") or name == "generic"
                             else "intel")
    assert host_shape() == SHAPES[host_family()]
    assert SHAPES["zen"] == MicrokernelShape(8, 2, 512)  # tuned on Zen 4
    assert SHAPES["intel"].columns("f32") == SHAPES["intel"].vectors * 16


_SMALL_STACK_CHILD = """if True:
    import sys, threading
    import numpy as np
    from pymlirjit import Session, mlir_kernel
    source = sys.argv[1]
    kernels = [mlir_kernel(source=source, name="mm", opt_level=3, parallel=parallel,
                           session=Session())(lambda a, b, c: None)
               for parallel in (False, True)]
    a = np.ones((300, 600), np.float32)
    b = np.ones((600, 40), np.float32)
    for mm in kernels:
        mm(a[:1, :1], b[:1, :1], np.zeros((1, 1), np.float32))  # compiled on this thread
    threading.stack_size(64 * 1024)
    results = []

    def run():
        for mm in kernels:
            c = np.zeros((300, 40), np.float32)
            mm(a, b, c)
            results.append(float(c.min()) == float(c.max()) == 600.0)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    print(results)
"""


def test_the_microkernel_runs_on_a_thread_with_a_small_stack() -> None:
    # B's packing buffer (64 KB, 512 deep) is on the heap: on the stack, the kernel ran
    # past the end of a 64 KB thread stack (SIGSEGV), hence the child process.
    done = subprocess.run([sys.executable, "-c", _SMALL_STACK_CHILD,
                           MATMUL.replace("T", "f32")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""
    assert done.stdout.strip() == "[True, True]"
