"""The optimizing passes: fast-math flags; linalg.matmul, batch_matmul and 2-D
convolutions tiled and vectorized."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import MLIRError, Session, mlir_kernel
from pymlirjit.optimize import (
    MATMUL_SCHEDULE,
    has_tileable_ops,
    run_schedule,
    set_fastmath,
    tile_and_vectorize,
    with_vector_lowering,
)
from pymlirjit.pipeline import DEFAULT_PIPELINE, new_context, normalize_pipeline, parse_module
from pymlirjit.prepare import CompileOptions

MATMUL = """
func.func @mm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

DOT = """
func.func @dot(%a: memref<?xf64>, %b: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %y = memref.load %b[%i] : memref<?xf64>
    %p = arith.mulf %x, %y : f64
    %t = arith.addf %acc, %p : f64
    scf.yield %t : f64
  }
  return %s : f64
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


@pytest.mark.parametrize("parallel", [False, True])
def test_matmul_microkernel_f64_matches_numpy(session: Session, parallel: bool) -> None:
    mm = mlir_kernel(source=MATMUL.replace("f32", "f64"), name="mm", opt_level=3,
                     parallel=parallel, session=session)(lambda a, b, c: None)
    rng = np.random.default_rng(7)
    for n, m, k in SIZES:
        a, b, c = (rng.standard_normal(shape) for shape in ((n, k), (k, m), (n, m)))
        expected = c + a @ b
        mm(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12 * max(k, 1),
                                   err_msg=f"{n}x{k} @ {k}x{m}")
    assert "vector<16xf64>" in mm.lowered_mlir
    assert "__pymlirjit_matmul" in mm.lowered_mlir


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

    @mlir_kernel(source=MATMUL, name="mm", session=session)
    def plain(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None: ...

    fast.compile()
    plain.compile()
    assert "vector<32xf32>" in fast.lowered_mlir
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


BATCH_MATMUL = """
func.func @bmm(%a: memref<?x?x?xf32>, %b: memref<?x?x?xf32>, %c: memref<?x?x?xf32>) {
  linalg.batch_matmul ins(%a, %b : memref<?x?x?xf32>, memref<?x?x?xf32>)
                      outs(%c : memref<?x?x?xf32>)
  return
}
"""


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_tiled_batch_matmul_matches_numpy(session: Session, dtype: type) -> None:
    # f32, f64: matmuls on views, then microkernels; f16: BATCH_MATMUL_SCHEDULE.
    element = {np.float32: "f32", np.float64: "f64", np.float16: "f16"}[dtype]
    bmm = mlir_kernel(source=BATCH_MATMUL.replace("f32", element), name="bmm", opt_level=3,
                      session=session)(lambda a, b, c: None)
    tolerance = 1e-2 if dtype == np.float16 else 1e-4
    rng = np.random.default_rng(3)
    for q, n, m, k in [(1, 1, 1, 1), (0, 3, 4, 5), (2, 0, 3, 4), (3, 5, 0, 2), (2, 3, 4, 0),
                       (3, 13, 37, 5), (2, 65, 257, 259), (5, 8, 32, 1), (1, 131, 67, 7)]:
        a, b, c = (rng.uniform(-1, 1, shape).astype(dtype)
                   for shape in ((q, n, k), (q, k, m), (q, n, m)))
        expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
        bmm(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=tolerance, atol=tolerance * max(k, 1),
                                   err_msg=f"batch {q}, {n}x{k} @ {k}x{m}")
    assert re.search(r"vector<(32|16)x" + element, bmm.lowered_mlir)
    assert ("__pymlirjit_matmul" in bmm.lowered_mlir) == (dtype != np.float16)


CONV_NHWC = """
func.func @conv(%i: memref<?x?x?x?xf32>, %w: memref<?x?x?x?xf32>, %o: memref<?x?x?x?xf32>) {
  linalg.conv_2d_nhwc_hwcf {dilations = dense<[DH, DW]> : tensor<2xi64>,
                            strides = dense<[SH, SW]> : tensor<2xi64>}
    ins(%i, %w : memref<?x?x?x?xf32>, memref<?x?x?x?xf32>) outs(%o : memref<?x?x?x?xf32>)
  return
}
"""
CONV_NCHW = CONV_NHWC.replace("conv_2d_nhwc_hwcf", "conv_2d_nchw_fchw")

#: (batch, height, width, channels, filter height, filter width, filters)
CONV_SIZES = [(1, 1, 1, 1, 1, 1, 1), (1, 9, 11, 3, 3, 2, 5), (2, 7, 40, 1, 1, 1, 33),
              (1, 5, 5, 0, 2, 2, 3), (0, 4, 4, 2, 3, 3, 2), (1, 13, 67, 17, 3, 5, 1),
              (3, 6, 37, 2, 2, 3, 40)]


def conv_nhwc(image: np.ndarray, kernel: np.ndarray, out_shape: tuple[int, int],
              strides: tuple[int, int], dilations: tuple[int, int]) -> np.ndarray:
    """numpy's 2-D convolution (NHWC image, HWCF filters), in f64, one tap at a time."""
    (oh, ow), (sh, sw), (dh, dw) = out_shape, strides, dilations
    out = np.zeros((image.shape[0], oh, ow, kernel.shape[3]))
    for u in range(kernel.shape[0]):
        for v in range(kernel.shape[1]):
            patch = image[:, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                          v * dw:v * dw + sw * (ow - 1) + 1:sw, :].astype(np.float64)
            out += np.einsum("nhwc,cf->nhwf", patch, kernel[u, v].astype(np.float64))
    return out


@pytest.mark.parametrize("layout", ["nhwc_hwcf", "nchw_fchw"])
@pytest.mark.parametrize(("strides", "dilations"), [((1, 1), (1, 1)), ((2, 1), (1, 2))])
def test_convolution_matches_numpy(session: Session, layout: str, strides: tuple[int, int],
                                   dilations: tuple[int, int]) -> None:
    source = (CONV_NHWC if layout == "nhwc_hwcf" else CONV_NCHW).replace(
        "SH", str(strides[0])).replace("SW", str(strides[1])).replace(
        "DH", str(dilations[0])).replace("DW", str(dilations[1]))
    conv = mlir_kernel(source=source, name="conv", opt_level=3, session=session)(
        lambda i, w, o: None)
    rng = np.random.default_rng(4)
    for n, h, w, c, kh, kw, f in CONV_SIZES:
        oh = (h - dilations[0] * (kh - 1) - 1) // strides[0] + 1
        ow = (w - dilations[1] * (kw - 1) - 1) // strides[1] + 1
        if oh < 1 or ow < 1:
            continue
        image = rng.standard_normal((n, h, w, c), dtype=np.float32)
        kernel = rng.standard_normal((kh, kw, c, f), dtype=np.float32)
        expected = conv_nhwc(image, kernel, (oh, ow), strides, dilations)
        out = rng.standard_normal((n, oh, ow, f), dtype=np.float32)
        expected += out
        if layout == "nhwc_hwcf":
            conv(image, kernel, out)
        else:  # the same convolution in NCHW / FCHW
            out = np.ascontiguousarray(out.transpose(0, 3, 1, 2))
            conv(np.ascontiguousarray(image.transpose(0, 3, 1, 2)),
                 np.ascontiguousarray(kernel.transpose(3, 2, 0, 1)), out)
            out = out.transpose(0, 2, 3, 1)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * max(c * kh * kw, 1),
                                   err_msg=f"{layout} {(n, h, w, c, kh, kw, f)}")
    assert "vector<32xf32>" in conv.lowered_mlir
    assert "__pymlirjit_matmul" in conv.lowered_mlir


def test_convolution_takes_strided_views(session: Session) -> None:
    source = CONV_NHWC.replace("SH", "1").replace("SW", "1").replace("DH", "1").replace(
        "DW", "1").replace("memref<?x?x?x?xf32>",
                           "memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>")
    conv = mlir_kernel(source=source, name="conv", opt_level=3, session=session)(
        lambda i, w, o: None)
    rng = np.random.default_rng(5)
    image = rng.standard_normal((2, 12, 30, 6), dtype=np.float32)[:, 1::2, ::3, 1:5]
    kernel = rng.standard_normal((3, 3, 8, 9), dtype=np.float32)[:, :, ::2, 1:]
    out = np.zeros((2, 6, 10, 16), np.float32)[:, 1:5, 1:9, ::2]
    conv(image, kernel, out)
    np.testing.assert_allclose(out, conv_nhwc(image, kernel, (4, 8), (1, 1), (1, 1)),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.skipif("avx512f" not in Path("/proc/cpuinfo").read_text(),
                    reason="the host has no AVX-512")
@pytest.mark.parametrize("source", [MATMUL, BATCH_MATMUL, CONV_NHWC.replace("SH", "1").replace(
    "SW", "1").replace("DH", "1").replace("DW", "1")], ids=["matmul", "batch_matmul", "conv"])
def test_schedules_use_avx512_fmas(session: Session, source: str) -> None:
    name = source.split("@", 1)[1].split("(", 1)[0]
    kernel = mlir_kernel(source=source, name=name, opt_level=3, session=session)(
        lambda a, b, c: None)
    assert re.search(r"vfmadd\w+\s+.*%zmm", kernel.inspect_asm())


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


def test_user_pipeline_is_run_as_written() -> None:
    options = CompileOptions.make([*DEFAULT_PIPELINE, "canonicalize"], opt_level=3)
    assert not options.tiles_linalg
    assert CompileOptions.make(opt_level=3).tiles_linalg
    assert not CompileOptions.make(opt_level=2).tiles_linalg


def test_vector_lowering_is_inserted_once() -> None:
    text = with_vector_lowering(normalize_pipeline(None))
    assert text.count("convert-vector-to-llvm") == 1
    assert text.index("convert-vector-to-scf") < text.index("convert-scf-to-cf")
    assert with_vector_lowering(text) == text


def test_set_fastmath_marks_float_ops_only() -> None:
    module = parse_module("""
    func.func @f(%a: f32, %b: f32, %i: i32) -> (f32, i32, i1) {
      %s = arith.addf %a, %b : f32
      %e = math.exp %s : f32
      %j = arith.addi %i, %i : i32
      %q = arith.cmpf olt, %a, %b : f32
      return %e, %j, %q : f32, i32, i1
    }""", new_context())
    assert set_fastmath(module) == 3
    text = str(module)
    assert text.count("fastmath<fast>") == 3
    assert "arith.addi %arg2, %arg2 : i32\n" in text
    module.operation.verify()


def test_fastmath_dot_matches_numpy(session: Session) -> None:
    @mlir_kernel(source=DOT, fastmath=True, session=session)
    def dot(a: np.ndarray, b: np.ndarray) -> float: ...

    rng = np.random.default_rng(2)
    for n in (0, 1, 7, 1001):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        assert dot(a, b) == pytest.approx(float(a @ b), rel=1e-12, abs=1e-12)
    dot.compile()
    assert "fastmathFlags = #llvm.fastmath<fast>" in dot.lowered_mlir


def test_fastmath_is_part_of_the_cache_key(session: Session) -> None:
    assert session.compile(DOT) is not session.compile(DOT, fastmath=True)
    assert session.compile(DOT) is session.compile(DOT, fastmath=False)
    assert CompileOptions.make(fastmath=True).pipeline_key != CompileOptions.make().pipeline_key


def test_fastmath_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="fastmath"):
        CompileOptions.make(fastmath=1)  # type: ignore[arg-type]


def test_session_fastmath_default() -> None:
    assert Session(fastmath=True).options.fastmath
    assert not Session().options.fastmath
