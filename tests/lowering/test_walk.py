"""The one walk over an MLIR module's operations (pymlirjit.lowering.walk): real modules,
parsed by MLIR."""

from __future__ import annotations

from typing import Any

import pytest
from mlir import ir

from pymlirjit.lowering.walk import operations
from tests.threads import run_in_threads

NESTED = """
func.func @f(%n: index, %m: memref<?xf64>) -> f64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f64
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> f64 {
    %x = memref.load %m[%i] : memref<?xf64>
    %t = arith.addf %acc, %x : f64
    scf.yield %t : f64
  }
  %d = arith.mulf %s, %s : f64
  return %d : f64
}
"""


def _module() -> Any:
    return ir.Module.parse(NESTED, ir.Context())


def test_every_op_in_post_order_the_root_last() -> None:
    module = _module()
    names = [op.name for op in operations(module)]
    assert names[-1] == "builtin.module"
    assert names.index("arith.addf") < names.index("scf.for")  # inner ops first
    assert names.index("scf.for") < names.index("func.func")
    assert names.count("arith.constant") == 3


def test_names_and_where_both_filter() -> None:
    module = _module()
    assert [op.name for op in operations(module, names={"arith.addf", "arith.mulf"})] == [
        "arith.addf", "arith.mulf"]
    floats = operations(module, lambda op: op.results and "f64" in str(op.results[0].type),
                        names={"arith.constant", "arith.mulf"})
    assert [op.name for op in floats] == ["arith.constant", "arith.mulf"]
    assert operations(module, names=()) == []


def test_names_as_one_string_is_refused() -> None:
    with pytest.raises(TypeError, match=r"collection of op names, got the string 'scf.for'"):
        operations(_module(), names="scf.for")


def test_limit_stops_the_walk() -> None:
    module = _module()
    seen: list[str] = []

    def count(op: Any) -> bool:
        seen.append(op.name)
        return True

    assert [op.name for op in operations(module, count, names={"arith.constant"}, limit=2)] \
        == ["arith.constant", "arith.constant"]
    assert len(seen) == 2  # the third constant was never asked about
    assert operations(module, count, limit=0) == []
    assert len(seen) == 2


def test_a_walk_from_an_op_covers_only_that_op() -> None:
    module = _module()
    (loop,) = operations(module, names={"scf.for"})
    assert [op.name for op in operations(loop)] == [
        "memref.load", "arith.addf", "scf.yield", "scf.for"]


def test_the_ops_found_can_be_rewritten_after_the_walk() -> None:
    module = _module()
    with module.context:
        fast = ir.Attribute.parse("#arith.fastmath<fast>")
    for op in operations(module, names={"arith.addf", "arith.mulf"}):
        op.attributes["fastmath"] = fast
    assert str(module).count("fastmath<fast>") == 2


def test_an_exception_in_where_propagates_as_itself_and_stops_the_walk() -> None:
    module = _module()
    asked: list[str] = []

    def fails(op: Any) -> bool:
        asked.append(op.name)
        raise KeyError(f"no attribute on {op.name}")

    with pytest.raises(KeyError, match=r"no attribute on arith\.constant"):
        operations(module, fails)
    assert asked == ["arith.constant"]
    # The module is intact and walks again.
    assert len(operations(module, names={"arith.constant"})) == 3


def test_where_may_walk_again() -> None:
    module = _module()
    with_loads = operations(module, lambda op: bool(operations(op, names={"memref.load"})),
                            names={"scf.for", "func.func", "arith.addf"})
    assert [op.name for op in with_loads] == ["scf.for", "func.func"]


def test_threads_walk_their_own_modules() -> None:
    def counts(_: int) -> list[int]:
        return [len(operations(_module(), names={"arith.constant"})) for _ in range(20)]

    assert run_in_threads(counts, range(4)) == [[3] * 20] * 4
