"""One-line hints for newcomers' MLIR mistakes (pymlirjit/lowering/hints.py), on real
parses."""

from __future__ import annotations

import pytest

from pymlirjit import MLIRError
from pymlirjit.lowering.pipeline import new_context, parse_module

MISSING_BANG = """
func.func @f(%a: memref<?xT>) {
  return
}"""

CALL_IN_LOOP = """
func.func @g(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    call @h() : () -> ()
  }
  return
}
func.func private @h()"""

YIELD_WITHOUT_VALUE = """
func.func @k(%n: index) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> f64 {
    %t = arith.addf %acc, %acc : f64
    scf.yield
  }
  return %s : f64
}"""


@pytest.mark.parametrize(("source", "hint", "dropped"), [
    (MISSING_BANG, "(hint: a type alias is written with '!': !T)", None),
    (CALL_IN_LOOP, "(hint: write func.call:", "Available dialects"),
    (YIELD_WITHOUT_VALUE, "(hint: this scf.yield passes 0 values, the scf.for carries 1: "
                          "write scf.yield %v : <type>", "see current operation"),
], ids=["missing-bang", "call-in-loop", "yield-without-value"])
def test_a_newcomers_mistake_gets_a_one_line_hint(source: str, hint: str,
                                                  dropped: str | None) -> None:
    with pytest.raises(MLIRError) as caught:
        parse_module(source, new_context())
    first = caught.value.diagnostics[0]
    assert hint in first.message
    if dropped is not None:
        assert dropped not in str(caught.value)


def test_no_hint_where_the_name_is_a_type() -> None:
    with pytest.raises(MLIRError) as caught:
        parse_module("func.func @f(%a: memref<?xfoo<3>>) { return }", new_context())
    assert "hint" not in str(caught.value)
