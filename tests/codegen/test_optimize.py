"""The optimizing passes: fast-math flags; where the linalg rewrites and schedules
(tests/test_linalg_rewrites.py, tests/test_linalg_schedules.py) enter the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from pymlirjit import Session, mlir_kernel
from pymlirjit.codegen.optimize import set_fastmath, with_vector_lowering
from pymlirjit.lowering.pipeline import (
    DEFAULT_PIPELINE,
    new_context,
    normalize_pipeline,
    parse_module,
)
from pymlirjit.runtime.prepare import CompileOptions

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

def test_user_pipeline_is_run_as_written() -> None:
    options = CompileOptions.make([*DEFAULT_PIPELINE, "canonicalize"], opt_level=3)
    assert not options.tiles_linalg
    assert CompileOptions.make(opt_level=3).tiles_linalg
    assert CompileOptions.make(opt_level=2).tiles_linalg
    assert not CompileOptions.make(opt_level=1).tiles_linalg


MATMUL = """
func.func @matmul(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""


def test_default_options_give_linalg_the_microkernel(session: Session) -> None:
    # Issue 28: with the defaults, a linalg.matmul ran as naive loops (50-500x numpy).
    assert session.options.opt_level == 2 and session.options.tiles_linalg
    fast = session.compile(MATMUL)
    naive = session.compile(MATMUL, opt_level=1)
    assert "__pymlirjit_matmul" in fast.lowered_mlir
    assert "__pymlirjit_matmul" not in naive.lowered_mlir
    rng = np.random.default_rng(5)
    a = rng.standard_normal((37, 19), dtype=np.float32)
    b = rng.standard_normal((19, 41), dtype=np.float32)
    for module in (fast, naive):
        c = np.zeros((37, 41), np.float32)
        module.matmul(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_modules_without_linalg_get_the_same_pipeline(session: Session) -> None:
    # The schedules are decided by what the parsed module holds: the lowered code of a
    # module without linalg is what the naive lowering (opt_level=1) makes.
    assert session.compile(DOT).lowered_mlir == session.compile(DOT, opt_level=1).lowered_mlir


def test_has_linalg_ops_finds_nested_generic_ops() -> None:
    from pymlirjit.codegen.optimize import has_linalg_ops

    assert not has_linalg_ops(parse_module(DOT, new_context()))
    assert has_linalg_ops(parse_module(MATMUL, new_context()))
    nested = parse_module("""
    func.func @f(%a: memref<4xf32>, %n: index) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>],
                        iterator_types = ["parallel"]} outs(%a : memref<4xf32>) {
        ^bb0(%x: f32):
          %y = arith.addf %x, %x : f32
          linalg.yield %y : f32
        }
      }
      return
    }""", new_context())
    assert has_linalg_ops(nested)


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


@pytest.mark.parametrize("opt_level", [2, 3])
@pytest.mark.parametrize("shapes", [((4, 50), (3, 40), (4, 40)), ((4, 5), (5, 40), (4, 33)),
                                    ((4, 5), (5, 7), (4, 6))])
def test_boundscheck_checks_every_access_of_a_matmul(
        session: Session, opt_level: int,
        shapes: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]) -> None:
    # The microkernel's masked loads and stores (a last partial panel) escape checked
    # mode: C of 33 or 6 columns was written past its end, silently. Checked mode runs
    # linalg as plain loops.
    module = session.compile(MATMUL, boundscheck=True, opt_level=opt_level)
    assert "__pymlirjit_matmul" not in module.lowered_mlir
    a, b, c = (np.ones(shape, np.float32) for shape in shapes)
    # Shapes that disagree are refused once, before the loops (issue 29 item 1); the
    # accesses past the ends are what boundscheck catches where they agree.
    with pytest.raises((IndexError, ValueError), match=r"out of bounds|shape mismatch"):
        module.matmul(a, b, c)


def test_the_microkernels_loops_are_not_unrolled(session: Session) -> None:
    # scf.for passes its llvm.loop_annotation to the branch as a discardable attribute,
    # which the translation to LLVM IR ignored: LLVM unrolled each depth loop 2-8 times
    # (86 FMAs to compile instead of 22, most of a compile's code generation).
    from pymlirjit.runtime.llvmir import translate

    module = session.compile(MATMUL)
    assert "{llvm.loop_annotation = " not in module.lowered_mlir
    assert "{loop_annotation = #" in module.lowered_mlir
    assert "!llvm.loop" in translate(module.lowered_mlir)
    from pymlirjit.codegen.microkernelshapes import host_shape
    from pymlirjit.runtime.llvmir import assembly

    # 22-30 in a shape's code on AVX-512 hosts, 44 on Zen 4 (its kernel differs), and a
    # narrow shape's code besides (Intel: 45 more); unrolled: 86 and more.
    narrow = host_shape().narrow
    narrow_fmas = 0 if narrow is None else (
        (narrow.vectors + narrow.one_vector_last_panel) * (narrow.rows + 2 + 1))
    code = assembly(module.lowered_mlir)
    assert code.count("vfmadd") <= 48 + narrow_fmas
    # Nor A's packing loop vectorized (AVX-512 made it scattered stores: more code to
    # compile, no faster).
    assert "scatter" not in code
