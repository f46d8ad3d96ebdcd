"""pymlirjit.lowering.checks: what MLIR would abort on is refused before the stage runs,
and what the JIT cannot take is reported with its location once the pipeline has run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pymlirjit import MLIRError
from pymlirjit.lowering.checks import check_lowered
from pymlirjit.lowering.pipeline import lower, new_context, parse_module

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
    # (pymlirjit.lowering.subbyte); tests/test_subbyte.py runs such code.
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



def test_returning_a_memref_alloca_is_an_error_not_a_freed_stack_frame() -> None:
    # The array made of the result freed the function's stack memory: the process
    # ended ("double free or corruption"). A view of the alloca is the same memory.
    script = textwrap.dedent('''
        import numpy as np
        from pymlirjit import MLIRError, Session
        direct = """
        func.func @scratch() -> memref<3xf64> {
          %m = memref.alloca() : memref<3xf64>
          return %m : memref<3xf64>
        }"""
        view = """
        func.func @scratch() -> memref<2xf64, strided<[1], offset: 1>> {
          %m = memref.alloca() : memref<3xf64>
          %v = memref.subview %m[1][2][1]
              : memref<3xf64> to memref<2xf64, strided<[1], offset: 1>>
          return %v : memref<2xf64, strided<[1], offset: 1>>
        }"""
        for source in (direct, view):
            try:
                Session().compile(source).scratch()  # the array, dropped, frees it
            except MLIRError as error:
                print(error.diagnostics[0].message)
        print(Session().compile("""
        func.func @same(%a: memref<?xf64>) -> memref<?xf64> {
          return %a : memref<?xf64>
        }""").same(np.ones(2)).tolist())
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    message = ("a function returns the stack memory of this 'memref.alloca', which is gone "
               "once it returns; use memref.alloc")
    assert done.stdout.splitlines() == [message, message, "[1.0, 1.0]"]
