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
