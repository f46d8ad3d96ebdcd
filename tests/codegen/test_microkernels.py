"""Matmul microkernels (pymlirjit.codegen.microkernels): every shape, whatever the host's,
against numpy on odd sizes (primes, 1, 0), serial and parallel, f32 and f64; the
structure of the generated MLIR; the host's choice."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.checks_bounds import IN_BOUNDS
from pymlirjit.codegen.microkernels import _tail_blocks, microkernel
from pymlirjit.codegen.microkernelshapes import (
    SHAPES,
    MicrokernelShape,
    host_family,
    host_shape,
    shape_for,
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
         (9, 33, 512), (11, 35, 1031), (263, 40, 70), (517, 17, 9), (7, 1100, 600),
         (200, 1031, 5)]

#: Every shape of SHAPES, the orders of the AVX2 shapes no host takes serially, Intel's
#: with every B rows first (none narrow) and with parallel calls panel by panel, and
#: Zen 3's with A packed for every B.
VARIANTS = {**SHAPES, "zen3 panels first": dataclasses.replace(SHAPES["zen3"], rows_first=False,
                                                               a_in_place_below=0),
            "zen3, A always packed": dataclasses.replace(SHAPES["zen3"], a_in_place_below=0),
            "avx2 rows first, all columns": dataclasses.replace(SHAPES["avx2"], column_block=0),
            "intel, no narrow Bs": dataclasses.replace(SHAPES["intel"], narrow=None),
            "intel, parallel panels": dataclasses.replace(SHAPES["intel"],
                                                          parallel_rows_first=False)}


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("family", sorted(VARIANTS))
def test_every_shape_matches_numpy(monkeypatch: pytest.MonkeyPatch, family: str,
                                   dtype: type, parallel: bool) -> None:
    # Whatever the host: its family's entry is made the shape under test.
    monkeypatch.setitem(SHAPES, host_family(), VARIANTS[family])
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
    lanes = VARIANTS[family].lanes(element)
    assert lanes == VARIANTS[family].bits // (32 if dtype is np.float32 else 64)
    assert f"vector<{lanes}x{element}>" in mm.lowered_mlir


#: (rows of C, columns, depth) for the host's own shape: square sizes of issue 28 (1000,
#: 1023), tall-skinny, wide-short, primes around the row blocks and panels.
HOST_SIZES = [(1000, 1000, 1000), (1023, 1023, 1023), (2000, 3, 5), (3, 2000, 7),
              (5, 7, 2000), (389, 193, 97), (0, 0, 0), (1, 1, 1), (1, 1023, 1)]


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_host_shape_matches_numpy_on_edge_shapes(dtype: type, parallel: bool) -> None:
    element = "f32" if dtype is np.float32 else "f64"
    mm = mlir_kernel(source=MATMUL.replace("T", element), name="mm", opt_level=3,
                     parallel=parallel, session=Session())(lambda a, b, c: None)
    rng = np.random.default_rng(11)
    tolerance = 1e-5 if dtype is np.float32 else 1e-12
    for n, m, k in HOST_SIZES:
        a, b = rng.uniform(-1, 1, (n, k)).astype(dtype), rng.uniform(-1, 1, (k, m)).astype(dtype)
        c = np.zeros((n, m), dtype)
        mm(a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64),
                                   rtol=tolerance, atol=tolerance * max(k, 1),
                                   err_msg=f"{host_family()}: {n}x{k} @ {k}x{m}")
    shape = host_shape()
    assert f"vector<{shape.lanes(element)}x{element}>" in mm.lowered_mlir


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
    # masked, were twice the code to compile. Only the stores of C may come twice.
    blocks = shape.rows + (0 if shape.clamped_rows else
                           shape.tail_rows or sum(_tail_blocks(shape.rows)))
    copies = 2 if shape.unmasked_stores else 1
    assert len(stores) == blocks * shape.vectors * copies and all(stores)
    assert str(module).count("scf.parallel") == 1


def test_a_last_panel_of_one_vector_goes_through_blocks_of_one_vector() -> None:
    # The blocks once more, one vector wide (12 + 2 + 1 rows: 15 FMAs), behind a check
    # of the panel's columns; the results: test_every_shape_matches_numpy (Intel's).
    unit = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    plain = MicrokernelShape(12, 2, 256)
    one = dataclasses.replace(plain, one_vector_last_panel=True)
    for shape, fmas in ((plain, 30), (one, 45)):
        text = microkernel("mm", "f32", (unit, unit, unit), False, shape)
        assert text.count("vector.fma") == fmas
        assert ("%one_vector = arith.cmpi ule, %nr, %o1" in text) == shape.one_vector_last_panel
    assert SHAPES["intel"].narrow is not None and SHAPES["intel"].narrow.one_vector_last_panel


def test_tail_rows_go_through_clamped_blocks() -> None:
    # One block of 4 rows (12 + 4 rows by 2 vectors: 32 FMAs), its rows past C's last
    # one repeating it; the results on every remainder: test_every_shape_matches_numpy.
    unit = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    shape = MicrokernelShape(12, 2, 256, tail_rows=4)
    text = microkernel("mm", "f32", (unit, unit, unit), False, shape)
    assert text.count("vector.fma") == 32
    assert "%tlast = arith.subi %m, %c1 : index" in text
    assert text.count("arith.minui %u") == 3  # rows 1-3 of the block, clamped
    for rows in (1, 12, 13):
        with pytest.raises(ValueError, match="tail_rows"):
            microkernel("mm", "f32", (unit, unit, unit), False,
                        MicrokernelShape(12, 2, 256, tail_rows=rows))
    assert SHAPES["intel"].narrow is not None and SHAPES["intel"].narrow.tail_rows == 4


def test_shapes_no_microkernel_fits_are_refused_when_made() -> None:
    with pytest.raises(ValueError, match="rows_first needs clamped_rows"):
        MicrokernelShape(6, 2, 256, block_rows=192, pack_a=True, rows_first=True)
    with pytest.raises(ValueError, match="a narrow shape has the rows, vectors and bits"):
        MicrokernelShape(12, 2, 256, narrow=MicrokernelShape(8, 2, 256), narrow_below=16)
    with pytest.raises(ValueError, match="a_in_place_below needs rows_first"):
        MicrokernelShape(6, 2, 256, bits=256, block_rows=192, pack_a=True, a_in_place_below=16)


def test_few_panels_read_a_in_place_in_serial_calls_only() -> None:
    # The AVX2 shapes: B of fewer than 16 panels (f32: 256 columns) reads A in place,
    # its blocks loading A's rows (clamped: the block's last rows repeat the row
    # block's last one); the others pack A, as parallel calls always do.
    unit = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    for family in ("zen3", "avx2"):
        shape = SHAPES[family]
        assert shape.a_in_place_below == 16, family
        serial = microkernel("mm", "f32", (unit, unit, unit), False, shape)
        assert "%fewer_panels = arith.cmpi ult, %nc, %in_place_below : index" in serial
        # ... and A's rows contiguous (a transposed A is packed)
        assert "%a_rows = arith.cmpi eq, %a_strides#1, %c1 : index" in serial
        assert "%few_panels = arith.andi %fewer_panels, %a_rows : i1" in serial
        # A's packing buffer: none where A is read in place
        assert "%arows = arith.select %few_panels, %c0, %apacked : index" in serial
        in_place, packed = serial.split("scf.if %few_panels {")[1].split("} else {", 1)
        assert "memref.load %A[%i, %q]" in in_place and "%abuf" not in in_place, family
        assert "memref.load %A[%i5, %q]" in in_place and "%i5 = arith.minui" in in_place
        assert "memref.store %pa0, %abuf" in packed and "memref.load %abuf" in packed
        assert serial.count("vector.fma") == 2 * shape.rows * shape.vectors
        parallel = microkernel("mm", "f32", (unit, unit, unit), True, shape)
        assert "%few_panels" not in parallel and "memref.load %A[%i" not in parallel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("family", ["zen3", "avx2"])
def test_a_read_in_place_or_packed_either_side_of_the_panels_bound(
        monkeypatch: pytest.MonkeyPatch, family: str, dtype: type) -> None:
    # 15 and 16 panels (A in place, then packed), rows that leave a clamped block, and
    # more rows than a row block (192); A a window of a larger array (rows apart), and
    # transposed (packed whatever B).
    monkeypatch.setitem(SHAPES, host_family(), SHAPES[family])
    element = "f32" if dtype is np.float32 else "f64"
    strided = "memref<?x?xT, strided<[?, ?], offset: ?>>".replace("T", element)
    source = MATMUL.replace("T", element).replace(f"%a: memref<?x?x{element}>", f"%a: {strided}")
    source = source.replace(f"ins(%a, %b : memref<?x?x{element}>", f"ins(%a, %b : {strided}")
    mm = mlir_kernel(source=source, name="mm", opt_level=3,
                     session=Session())(lambda a, b, c: None)
    width = SHAPES[family].columns(element)
    rng = np.random.default_rng(17)
    for m, k, n in [(7, 33, 15 * width), (7, 33, 15 * width + 1), (200, 530, 15 * width - 3),
                    (200, 530, 16 * width), (389, 9, 3)]:
        b = rng.uniform(-1, 1, (k, n)).astype(dtype)
        window = rng.uniform(-1, 1, (m, k + 5)).astype(dtype)[:, 2:2 + k]
        transposed = rng.uniform(-1, 1, (k, m)).astype(dtype).T
        for a in (window, transposed):
            c = np.zeros((m, n), dtype)
            mm(a, b, c)
            tolerance = 1e-5 if dtype is np.float32 else 1e-12
            np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64),
                                       rtol=tolerance, atol=tolerance * k,
                                       err_msg=f"{family}: {m}x{k}x{n}, A {a.strides}")


@pytest.mark.parametrize("threads", [1, 3, 16])
def test_parallel_rows_first_gives_every_thread_an_equal_share(
        monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    # As many row blocks as give the threads equal shares, at least 4 (each block packs
    # all of B for itself): 4, 6, 16; the results on the threads asked for.
    monkeypatch.setenv("PYMLIRJIT_NUM_THREADS", str(threads))
    monkeypatch.setitem(SHAPES, host_family(), SHAPES["intel"])
    unit = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    shares = {1: 4, 3: 6, 16: 16}[threads]
    text = microkernel("mm", "f32", (unit, unit, unit), True, SHAPES["intel"], threads)
    assert f"%shares = arith.constant {shares} : index" in text
    mm = mlir_kernel(source=MATMUL.replace("T", "f64"), name="mm", opt_level=3,
                     parallel=True, session=Session())(lambda a, b, c: None)
    rng = np.random.default_rng(17)
    for n, m, k in [(1023, 517, 301), (97, 1100, 64), (5, 3, 2), (0, 4, 4)]:
        a, b = rng.uniform(-1, 1, (n, k)), rng.uniform(-1, 1, (k, m))
        c = np.zeros((n, m))
        mm(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12 * k)


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

    name, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    avx512 = "+avx512f" in features.split(",")
    assert host_family() == (("zen3" if name == "znver3" else "avx2") if not avx512 else
                             "zen" if name.startswith("znver") or name == "generic"
                             else "intel")
    assert host_shape() == SHAPES[host_family()]
    assert host_shape().bits == (512 if avx512 else 256)


def test_the_cache_key_tells_avx2_hosts_from_avx512_ones() -> None:
    # The disk cache's key holds the host CPU's model and flags (pymlirjit._version):
    # with or without avx512f, as the microkernel's shape is.
    from pymlirjit._version import build_environment

    cpu = next(part for part in build_environment() if part.startswith("cpu="))
    flags = cpu.rsplit("|", 1)[-1].replace(",", " ").split()
    avx512 = any(flag in ("avx512f", "+avx512f") for flag in flags)
    assert avx512 == (host_shape().bits == 512)


#: LLVM's feature strings (abridged) of a Zen 2 (AVX2, no AVX-512), a Zen 4 and a
#: Sapphire Rapids.
AVX2_ONLY = "+64bit,+avx,+avx2,-avx512bw,-avx512f,-avx512vl,+fma,+sse4.2"
AVX512 = "+64bit,+avx,+avx2,+avx512bw,+avx512f,+avx512vl,+fma,+sse4.2"


def test_an_avx2_only_cpu_gets_a_shape_of_16_ymm_registers() -> None:
    for name in ("znver1", "znver2", "znver3", "haswell", "skylake", "generic", "alderlake"):
        shape = SHAPES[shape_for(name, AVX2_ONLY)]
        assert shape_for(name, AVX2_ONLY) == ("zen3" if name == "znver3" else "avx2")
        assert shape.bits == 256 and shape.lanes("f32") == 8 and shape.lanes("f64") == 4
        assert shape.registers() <= 16
    assert shape_for("znver1", "") == "avx2"  # no features known: no AVX-512 assumed


def _without_shape_guard(text: str) -> str:
    """A microkernel's text without its mark and its check of the operands' shapes."""
    lines = text.split("\n")
    lines[0] = lines[0].replace(f" attributes {{{IN_BOUNDS}}}", "")
    start = next(i for i, line in enumerate(lines) if "%kb = memref.dim" in line)
    assert lines[start + 8] == "  scf.if %agree {" and lines[-3] == "  }"
    del lines[-3]
    del lines[start:start + 9]
    return "\n".join(lines)


def test_avx512_cpus_keep_their_shapes_and_code() -> None:
    assert shape_for("znver4", AVX512) == shape_for("generic", AVX512) == "zen"
    assert shape_for("sapphirerapids", AVX512) == shape_for("skylake-avx512", AVX512) == "intel"
    assert SHAPES["zen"] == MicrokernelShape(8, 2, 512)  # tuned on Zen 4
    # Intel's: its narrow Bs keep the shape they had (but for a last panel of one
    # vector, and the last rows in clamped blocks of 4); the others go rows first.
    assert SHAPES["intel"].narrow == MicrokernelShape(12, 2, 256, one_vector_last_panel=True,
                                                      tail_rows=4)
    assert SHAPES["intel"].rows_first and SHAPES["intel"].parallel_rows_first
    for shape in (SHAPES["zen"], SHAPES["intel"]):
        assert shape.bits == 512
        assert shape.columns("f32") == shape.vectors * 16
        assert shape.columns("f64") == shape.vectors * 8
    # The code of Zen 4's shape, as generated (and benchmarked) before AVX2 hosts got
    # their own, and before the shape guard around it (and since: %depth defined after
    # the panels' count, the same code; B's packing loop not unrolled, measured on
    # Intel only).
    strided = "memref<?x?xT, strided<[?, ?], offset: ?>>"
    unit = "memref<?x?xT, strided<[?, 1], offset: ?>>"
    digests = {}
    for family in ("zen",):
        for element in ("f32", "f64"):
            for parallel in (False, True):
                types = tuple(t.replace("T", element) for t in (strided, unit, unit))
                text = _without_shape_guard(
                    microkernel("mm", element, types, parallel, SHAPES[family]))
                digests[family, element, parallel] = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert digests == {
        ("zen", "f32", False): "3bb1270cb463c745", ("zen", "f32", True): "24dcbb9b05c04f3d",
        ("zen", "f64", False): "cf2c98154dc199bd", ("zen", "f64", True): "ffe92fe5766ff426"}


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


def test_the_schedules_fit_the_host_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    # The matmuls the microkernel does not take: an 8x32 register tile on AVX-512
    # hosts (the schedules as they were), 8x16 on AVX2-only ones (32 ymm accumulators
    # of f32 spilled).
    from pymlirjit.codegen import linalg_schedules

    for family, tile in (("zen", "[8, 32, 0]"), ("intel", "[8, 32, 0]"), ("avx2", "[8, 16, 0]"),
                         ("zen3", "[8, 16, 0]")):
        linalg_schedules.host_schedules.cache_clear()
        monkeypatch.setattr(linalg_schedules, "host_shape", lambda family=family: SHAPES[family])
        serial, parallel, batch = linalg_schedules.host_schedules()
        assert tile in serial and tile in parallel and "tile_using_forall" in parallel
        assert tile.replace("[", "[0, ") in batch
        if family in ("zen", "intel"):
            assert (serial, parallel, batch) == (
                linalg_schedules.MATMUL_SCHEDULE, linalg_schedules.PARALLEL_MATMUL_SCHEDULE,
                linalg_schedules.BATCH_MATMUL_SCHEDULE)
    linalg_schedules.host_schedules.cache_clear()


def _prefetches(shape: MicrokernelShape | None) -> int:
    """The prefetches of C a serial microkernel of ``shape`` has: one per 64-byte line
    of a whole block's rows, in its blocks of all its vectors and of one vector (and
    with ``a_in_place_below``, in its blocks reading A packed and in place)."""
    if shape is None or not shape.prefetch_c:
        return 0
    widths = [shape.vectors] + ([1] if shape.one_vector_last_panel and shape.vectors > 1
                                else [])
    lines = sum(sum(1 for v in range(used) if v * shape.bits % 512 == 0) for used in widths)
    return (2 if shape.a_in_place_below else 1) * shape.rows * lines


def test_only_shapes_that_prefetch_c_do_and_within_c() -> None:
    strided = "memref<?x?xf64, strided<[?, ?], offset: ?>>"
    unit = "memref<?x?xf64, strided<[?, 1], offset: ?>>"
    # A 512-bit shape prefetching: each row's two lines (Intel's narrow shape, which
    # does not: 0.85-1.0x the time of batches of 32 matmuls of 64^3 to 200^3, for 1.07x
    # the first compile of a process; benchmarks/results/2026-12-07-microkernel-recipes.md).
    wide = dataclasses.replace(MicrokernelShape(12, 2, 256, one_vector_last_panel=True,
                                                tail_rows=4), prefetch_c=True)
    for family, shape in [*SHAPES.items(), ("512-bit", wide)]:
        text = microkernel("mm", "f64", (strided, unit, unit), False, shape)
        prefetches = [line.strip() for line in text.split("\n") if "memref.prefetch" in line]
        assert len(prefetches) == _prefetches(shape) + _prefetches(shape.narrow), family
        # The next block's rows, clamped to C's last row (%m - 1), and the columns of
        # a 512-bit block's second line to its last one (%n - 1).
        assert all(re.match(r"memref\.prefetch %C\[%pc\d+, %(j|pj1)\]", line)
                   for line in prefetches), family
    assert SHAPES["zen3"].prefetch_c
    assert _prefetches(SHAPES["zen3"]) == 12  # both 256-bit vectors in one line, twice
    assert _prefetches(wide) == 36  # 12 rows by 2 lines, and by 1 in one-vector blocks


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("family", sorted(SHAPES))
def test_stores_stay_within_c_whichever_panels_and_rows_are_last(
        monkeypatch: pytest.MonkeyPatch, family: str, parallel: bool) -> None:
    # C a window of a larger array, NaN all around: whole panels (stored unmasked
    # where the shape says so) and the last, partial one (masked) must write C's
    # columns and nothing next to them; the last rows (a clamped block, or blocks of 2
    # and 1) C's rows and nothing below them.
    monkeypatch.setitem(SHAPES, host_family(), SHAPES[family])
    rows = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    mm = mlir_kernel(source=MATMUL.replace("memref<?x?xT>", rows), name="mm", opt_level=3,
                     parallel=parallel, session=Session())(lambda a, b, c: None)
    width = SHAPES[family].columns("f32")
    rng = np.random.default_rng(13)
    for m, k, n in [(13, 9, width), (13, 9, 2 * width), (13, 9, width + 1),
                    (13, 9, 2 * width - 1), (7, 600, 3 * width + 5), (1, 1, width - 1),
                    (389, 17, width + 3), (200, 5, 2 * width)]:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        wide = np.full((m + 14, n + 2 * width), np.nan, np.float32)
        c = wide[7:7 + m, width:width + n]
        c[...] = 0
        mm(a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64),
                                   rtol=1e-5, atol=1e-5 * k, err_msg=f"{family}: {m}x{k}x{n}")
        outside = np.ones(wide.shape, bool)
        outside[7:7 + m, width:width + n] = False
        assert np.isnan(wide[outside]).all(), f"{family}: {m}x{k}x{n}"


def test_only_shapes_that_store_unmasked_do_and_only_whole_panels() -> None:
    unit = "memref<?x?xf32, strided<[?, 1], offset: ?>>"
    for family, shape in SHAPES.items():
        text = microkernel("mm", "f32", (unit, unit, unit), False, shape)
        assert ("scf.if %whole" in text) == shape.unmasked_stores, family
        stores = text.count("vector.store %res#")
        assert stores == (text.count("vector.maskedstore %C") if shape.unmasked_stores else 0)
    assert SHAPES["zen3"].unmasked_stores and SHAPES["avx2"].unmasked_stores


def test_clamped_shapes_have_no_tail_blocks_and_repeat_the_last_row() -> None:
    unit = "memref<?x?xf64, strided<[?, 1], offset: ?>>"
    for family, shape in SHAPES.items():
        for parallel in (False, True):
            text = microkernel("mm", "f64", (unit, unit, unit), parallel, shape)
            narrow = shape.narrow if not parallel else None  # its code too (serial calls)
            tails = not shape.clamped_rows or (narrow is not None and not narrow.clamped_rows)
            assert ("scf.for %t" in text) == tails, family  # the 2-row blocks
            assert ("%ilast" in text) == shape.clamped_rows, family
    assert SHAPES["zen3"].clamped_rows and SHAPES["avx2"].clamped_rows
