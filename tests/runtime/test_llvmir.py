"""Seeing the code: LLVM IR and host assembly of kernels (pymlirjit.runtime.llvmir,
Kernel.inspect_llvm, Kernel.inspect_asm)."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import numpy as np
import pytest

import pymlirjit.runtime.llvmir as llvmir_module
from pymlirjit import MLIRError, Session, callback, f64, mlir_kernel
from pymlirjit.kernel import Kernel
from pymlirjit.runtime.llvmir import assembly, llvm_ir, translate

TOTAL = """
func.func @total(%a: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf64>
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %a[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  return %s : f64
}
"""

TWICE = """llvm.func @twice(%x: f64) -> f64 {
  %r = llvm.fadd %x, %x : f64
  llvm.return %r : f64
}"""


def _total(session: Session) -> Kernel:
    @mlir_kernel(source=TOTAL, session=session)
    def total(a: np.ndarray) -> float: ...
    return total


def _defined(ir_text: str) -> set[str]:
    return set(re.findall(r"^define [^@]*@([\w.]+)\(", ir_text, re.MULTILINE))


def test_the_module_docstring_examples_run() -> None:
    result = doctest.testmod(llvmir_module)
    assert result.attempted > 0 and result.failed == 0


def test_inspect_llvm_shows_the_optimized_ir_of_every_function(session: Session) -> None:
    total = _total(session)
    text = total.inspect_llvm()
    assert {"total", "_mlir_ciface_total"} <= _defined(text)
    assert "target triple" in text
    # Optimized: the descriptor MLIR builds with insertvalue is gone, and the kernel
    # still computes what it did.
    assert "insertvalue" in translate(total.lowered_mlir)
    assert "insertvalue" not in text
    assert total(np.arange(5.0)) == 10.0


def test_inspect_asm_shows_host_assembly(session: Session) -> None:
    total = _total(session)
    text = total.inspect_asm()
    labels = set(re.findall(r"^([\w.]+):", text, re.MULTILINE))
    assert {"total", "_mlir_ciface_total"} <= labels
    assert re.search(r"^\s+ret", text, re.MULTILINE)


def test_the_kernel_opt_level_is_the_one_shown() -> None:
    unoptimized = _total(Session(opt_level=0)).inspect_llvm()
    optimized = _total(Session(opt_level=3)).inspect_llvm()
    assert "insertvalue" in unoptimized and "insertvalue" not in optimized
    assert unoptimized != optimized


def test_callbacks_appear_as_calls(session: Session) -> None:
    @callback(session=session)
    def inspected_model(x: f64) -> f64:
        return 2 * x

    @mlir_kernel(source="""
    func.func @apply(%x: f64) -> f64 {
      %r = call @inspected_model(%x) : (f64) -> f64
      return %r : f64
    }
    func.func private @inspected_model(f64) -> f64
    """, session=session)
    def apply(x: float) -> float: ...

    assert apply(1.5) == 3.0
    assert re.search(r"call .*@_mlir_ciface_inspected_model", apply.inspect_llvm())
    assert "_mlir_ciface_inspected_model" in apply.inspect_asm()


def test_a_kernel_loaded_from_the_disk_cache_shows_its_code(tmp_path: Path) -> None:
    first = _total(Session(cache_dir=tmp_path))
    assert first(np.arange(3.0)) == 3.0
    loaded_session = Session(cache_dir=tmp_path)
    loaded = _total(loaded_session)
    assert loaded(np.arange(3.0)) == 3.0
    assert loaded_session.cache_info().disk_hits == 1
    assert loaded.inspect_llvm() == first.inspect_llvm()


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_opt_level_makes_valid_code(level: int) -> None:
    assert "define double @twice" in llvm_ir(TWICE, level)
    assert "twice:" in assembly(TWICE, level)


@pytest.mark.parametrize("level, error", [(4, ValueError), (-1, ValueError),
                                          ("2", TypeError), (True, TypeError)])
def test_a_bad_opt_level_is_refused(level: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="opt_level"):
        llvm_ir(TWICE, level)  # type: ignore[arg-type]
    with pytest.raises(error, match="opt_level"):
        assembly(TWICE, level)  # type: ignore[arg-type]


def test_text_that_is_not_lowered_raises_instead_of_crashing() -> None:
    # MLIR's translation segfaults on ops outside the LLVM dialect: they are refused first.
    with pytest.raises(MLIRError, match=r"'func\.func' was not lowered"):
        llvm_ir("func.func @f() { return }")
    with pytest.raises(MLIRError, match="cannot parse"):
        assembly("not mlir")


MATMUL = """
func.func @mm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.matmul ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""


def _body(ir_text: str, symbol: str) -> list[str]:
    """The instructions of function ``symbol`` defined in ``ir_text``."""
    start = re.search(rf"^define [^@]*@{symbol}\(.*\{{$", ir_text, re.MULTILINE)
    assert start is not None, symbol
    body = ir_text[start.end():ir_text.index("\n}", start.end())]
    return [line.strip() for line in body.splitlines() if line.strip()]


@pytest.mark.parametrize("opt_level", [2, 3])
def test_a_microkernel_compiled_apart_is_shown_as_it_was_compiled(opt_level: int) -> None:
    # Through PASSES, in a module of its own, as objectcode compiles it: not through the
    # default pipeline with its module (which unrolls and vectorizes it again); the
    # module's own functions through the default pipeline, as before.
    from pymlirjit.runtime import llvmir, objectcode
    from pymlirjit.runtime.microkernelcache import LinkedModule, compiled_apart

    mm = mlir_kernel(source=MATMUL, name="mm", session=Session(opt_level=opt_level))(
        lambda a, b, c: None)
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    c = np.zeros((3, 3), np.float32)
    mm(a, a.T.copy(), c)
    np.testing.assert_allclose(c, a @ a.T)
    assert mm._module is not None
    linked = mm._module._lowered  # the text lowered_mlir prints
    assert isinstance(linked, LinkedModule) and len(linked.microkernels) == 1
    ((symbol, compiled),) = linked.microkernels.items()
    assert compiled_apart(symbol)
    definition, declarations = compiled.lowered_text()
    machine = objectcode.host_machine(opt_level, jit=False)
    alone = llvmir.llvm_binding().parse_assembly(llvmir.translate(
        "module {\n" + "\n".join([definition, *declarations.values()]) + "\n}"))
    alone.triple, alone.data_layout = machine.triple, str(machine.target_data)
    objectcode.clean_up(alone, machine, opt_level)
    shown = mm.inspect_llvm()
    assert _body(shown, symbol) == _body(str(alone), symbol)
    whole = llvm_ir(str(linked.module), opt_level)  # the module, its microkernel declared
    assert _body(shown, "mm") == _body(whole, "mm")
    assert re.search(rf"^{symbol}:", mm.inspect_asm(), re.MULTILINE)


def test_only_microkernels_named_as_compiled_apart_are_taken_apart() -> None:
    from pymlirjit.runtime.microkernelcache import compiled_apart

    assert compiled_apart("__pymlirjit_matmul_" + "0123456789abcdef01234567")
    for name in ("__pymlirjit_matmul_0", "__pymlirjit_matmul_" + "0" * 23,
                 "__pymlirjit_matmul_" + "0" * 25, "__pymlirjit_matmul_" + "G" * 24, "mm"):
        assert not compiled_apart(name), name
