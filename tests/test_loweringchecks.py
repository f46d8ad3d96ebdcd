"""pymlirjit.loweringchecks: what MLIR would abort on is refused before the stage runs,
and what the JIT cannot take is reported with its location once the pipeline has run."""

from __future__ import annotations

import pytest

from pymlirjit import MLIRError
from pymlirjit.loweringchecks import check_lowered
from pymlirjit.pipeline import lower, new_context, parse_module

MATRIX_TRANSPOSE = """
llvm.func @f(%v: vector<6xf64>) -> vector<6xf64> {
  %t = llvm.intr.matrix.transpose %v { rows = 3 : i32, columns = 2 : i32 }
      : vector<6xf64> into vector<6xf64>
  llvm.return %t : vector<6xf64>
}"""


def test_leftover_ops_are_reported() -> None:
    module = parse_module("func.func @f(%a: i32) -> i32 {\n  %b = arith.addi %a, %a : i32\n"
                          "  return %b : i32\n}", new_context())
    with pytest.raises(MLIRError, match="cannot be JIT-compiled") as caught:
        lower(module, ["convert-func-to-llvm"])
    messages = [d.message for d in caught.value.diagnostics]
    assert messages == ["'arith.addi' was not lowered to the LLVM dialect"]
    assert caught.value.diagnostics[0].location == 'loc("<source>":2:8)'


def test_leftover_ops_are_capped_at_five() -> None:
    body = "".join(f"  %v{i + 1} = arith.addi %v{i}, %v{i} : i32\n" for i in range(10))
    module = parse_module(f"func.func @f(%v0: i32) -> i32 {{\n{body}  return %v10 : i32\n}}",
                          new_context())
    with pytest.raises(MLIRError) as caught:
        lower(module, ["convert-func-to-llvm"])
    assert len(caught.value.diagnostics) == 5


def test_sub_byte_loads_after_bufferization_are_vectorized_not_refused() -> None:
    # The default pipeline's memref lowering gets them as one-element vector loads
    # (pymlirjit.subbyte); tests/test_subbyte.py runs such code.
    module = parse_module("""
    func.func @f(%a: tensor<?xi1>) -> i1 {
      %c0 = arith.constant 0 : index
      %v = tensor.extract %a[%c0] : tensor<?xi1>
      return %v : i1
    }""", new_context())
    lowered = str(lower(module))
    assert "memref.load" not in lowered and "llvm.load" in lowered


def test_a_lowered_module_says_whether_it_uses_matrix_intrinsics() -> None:
    with_matrix = parse_module(MATRIX_TRANSPOSE, new_context())
    without = lower(parse_module("func.func @f() { return }", new_context()))
    assert check_lowered(with_matrix, "<source>").uses_matrix_intrinsics
    assert not check_lowered(without, "<source>").uses_matrix_intrinsics
