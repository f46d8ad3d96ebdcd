"""pymlirjit.lowering.declarations: which external declarations a lowered module loses.

Each case parses a module in the LLVM dialect, drops what nothing refers to, prints the
result and reads back each symbol and its visibility: only unreferenced declarations that
``keep`` refuses go, and every survivor keeps the visibility it had.
"""

from __future__ import annotations

import re

from mlir import ir

from pymlirjit import Session
from pymlirjit.lowering.declarations import drop_unused_declarations
from pymlirjit.lowering.pipeline import new_context

MODULE = """
llvm.func @called(f64) -> f64
llvm.func @unused(f64) -> f64
llvm.func @private_called(f64) -> f64 attributes {sym_visibility = "private"}
llvm.func @private_unused(f64) -> f64 attributes {sym_visibility = "private"}
llvm.func @by_address(f64) -> f64
llvm.func @kept_unused(f64) -> f64
llvm.func @mlirAsyncRuntimeAddRef(!llvm.ptr, i64)
llvm.func @private_helper(%x: f64) -> f64 attributes {sym_visibility = "private"} {
  %y = llvm.call @private_called(%x) : (f64) -> f64
  llvm.return %y : f64
}
llvm.func @private_dead_definition() attributes {sym_visibility = "private"} {
  llvm.return
}
llvm.func @entry(%x: f64) -> !llvm.ptr {
  %y = llvm.call @called(%x) : (f64) -> f64
  %z = llvm.call @private_helper(%y) : (f64) -> f64
  %p = llvm.mlir.addressof @by_address : !llvm.ptr
  llvm.return %p : !llvm.ptr
}
"""


def _symbols(module: ir.Module) -> dict[str, str]:
    """Each top-level function's name: its visibility ("" for public)."""
    found = {}
    for line in str(module).splitlines():
        match = re.match(r"\s*llvm\.func @(\w+)", line)
        if match:
            found[match[1]] = "private" if 'sym_visibility = "private"' in line else ""
    return found


def _dropped(keep: object) -> dict[str, str]:
    with new_context() as context:
        module = ir.Module.parse(MODULE, context)
        drop_unused_declarations(module, keep)  # type: ignore[arg-type]
        assert module.operation.verify()
        return _symbols(module)


def test_unreferenced_declarations_go_and_the_rest_keep_their_visibility() -> None:
    assert _dropped(lambda name: name == "kept_unused") == {
        "called": "", "private_called": "private", "by_address": "",
        "kept_unused": "", "private_helper": "private",
        "private_dead_definition": "private", "entry": ""}


def test_without_keep_only_the_async_runtime_declarations_may_go() -> None:
    assert set(_dropped(None)) == set(_symbols(ir.Module.parse(MODULE, ir.Context()))) - {
        "mlirAsyncRuntimeAddRef"}


def test_a_module_nesting_a_symbol_table_is_left_as_it_is() -> None:
    nested = f"module {{\n{MODULE}\nmodule @inner {{\n}}\n}}"
    with new_context() as context:
        module = ir.Module.parse(nested, context)
        before = str(module)
        drop_unused_declarations(module, lambda name: False)
        assert str(module) == before


def test_a_kernel_declaring_an_unknown_function_it_never_calls_compiles() -> None:
    # The declaration has no definition anywhere: linking would fail if it stayed.
    module = Session().compile("""
    func.func private @nowhere_to_be_found(f64) -> f64
    func.func @twice(%x: f64) -> f64 {
      %y = arith.addf %x, %x : f64
      return %y : f64
    }""")
    assert module.twice(2.5) == 5.0
