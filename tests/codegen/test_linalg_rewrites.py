"""Rewrites into generated MLIR (pymlirjit.codegen.linalg_rewrites): matmul microkernels, batch
matmuls and 2-D convolutions as matmuls on views, at opt_level=3, against numpy on odd
sizes, and AVX-512 FMAs in the machine code."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.microkernelshapes import host_shape

MATMUL = """
func.func @mm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""

SIZES = [(1, 1, 1), (0, 5, 3), (7, 0, 2), (3, 5, 0), (8, 32, 1), (131, 67, 257),
         (2, 97, 13), (64, 256, 256), (65, 257, 259)]


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
    assert f"vector<{host_shape().lanes('f64')}xf64>" in mm.lowered_mlir  # host vectors
    assert "__pymlirjit_matmul" in mm.lowered_mlir


@pytest.mark.parametrize("threads", ["2", "3"])
def test_parallel_matmul_microkernel_f32_matches_numpy(monkeypatch: pytest.MonkeyPatch,
                                                       threads: str) -> None:
    # Column counts around the panel width (32 f32): fewer panels than threads, a
    # masked panel alone, with whole ones, and one more panel than a split in equal parts.
    monkeypatch.setenv("PYMLIRJIT_NUM_THREADS", threads)
    mm = mlir_kernel(source=MATMUL, name="mm", opt_level=3, parallel=True,
                     session=Session())(lambda a, b, c: None)
    rng = np.random.default_rng(11)
    for n, m, k in [(3, 1, 5), (9, 31, 2), (17, 32, 33), (8, 33, 7), (13, 97, 64),
                    (5, 509, 19), (0, 40, 3), (4, 0, 3), (6, 45, 0)]:
        a, b, c = (rng.uniform(-1, 1, shape).astype(np.float32)
                   for shape in ((n, k), (k, m), (n, m)))
        expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
        mm(a, b, c)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * max(k, 1),
                                   err_msg=f"{n}x{k} @ {k}x{m}, {threads} threads")
    assert "__pymlirjit_matmul" in mm.lowered_mlir
    assert "mlirAsyncRuntimeExecute" in mm.lowered_mlir


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
    assert re.search(r"vector<(32|16|8|4)x" + element, bmm.lowered_mlir)  # 4: AVX2 f64
    assert ("__pymlirjit_matmul" in bmm.lowered_mlir) == (dtype != np.float16)
    assert not allocas_outside_entry_blocks(bmm.inspect_llvm())


def allocas_outside_entry_blocks(llvm_ir: str) -> list[str]:
    """The ``alloca`` instructions of ``llvm_ir`` that are not in their function's entry
    block: each run of such an instruction takes new stack until the function returns
    (in a loop, the stack overflows on large inputs, whatever the CPU)."""
    found, in_entry = [], False
    for line in llvm_ir.splitlines():
        if line.startswith("define "):
            in_entry = True
        elif re.match(r"^[\w.$-]+:", line):  # a block label ends the entry block
            in_entry = False
        elif " alloca " in line and not in_entry:
            found.append(line.strip())
    return found


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
    assert f"vector<{host_shape().lanes('f32')}xf32>" in conv.lowered_mlir
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


@pytest.mark.parametrize("parallel", [False, True])
def test_a_deferred_microkernel_defined_is_the_one_generated_in_place(parallel: bool) -> None:
    # matmuls_to_microkernels(deferred=True) declares each microkernel, naming its
    # recipe; define_all then gives the module the rewrite would have made at once.
    from mlir import ir

    from pymlirjit.codegen.linalg_rewrites import matmuls_to_microkernels
    from pymlirjit.codegen.microkernelrecipes import RECIPE, define_all

    twice = MATMUL.replace("  return", "  linalg.matmul ins(%a, %b : memref<?x?xf32>, "
                           "memref<?x?xf32>) outs(%c : memref<?x?xf32>)\n  return")
    with ir.Context():
        eager, deferred = ir.Module.parse(twice), ir.Module.parse(twice)
        assert matmuls_to_microkernels(eager, parallel) == 2
        assert matmuls_to_microkernels(deferred, parallel, deferred=True) == 2
        assert str(deferred).count(RECIPE) == 2 and "vector.fma" not in str(deferred)
        assert define_all(deferred) == 2
        assert RECIPE not in str(deferred)
        assert str(deferred) == str(eager)
        assert define_all(deferred) == 0
