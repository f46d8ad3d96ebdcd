"""scheduling: the tasks compiled code hands MLIR's async runtime go through one set of
functions (fork-safe, no per-call wake-ups); test_parallel.py and test_asyncruntime.py
run them (forks, threads, the runtime's owner)."""

from __future__ import annotations

from pymlirjit.codegen.scheduling import SPIN_TICKS, task_scheduling
from pymlirjit.lowering.pipeline import new_context, parse_module

SCHEDULES = """
llvm.func @mlirAsyncRuntimeExecute(!llvm.ptr, !llvm.ptr)
llvm.func @mlirAsyncRuntimeAwaitAllInGroup(!llvm.ptr)
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @go(%handle: !llvm.ptr, %resume: !llvm.ptr, %group: !llvm.ptr) {
  llvm.call @mlirAsyncRuntimeExecute(%handle, %resume) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.call @mlirAsyncRuntimeAwaitAllInGroup(%group) : (!llvm.ptr) -> ()
  llvm.return
}
"""


def test_calls_go_through_the_scheduling_functions() -> None:
    module = parse_module(SCHEDULES, new_context())
    assert task_scheduling(module)
    text = str(module)
    go = text[text.index("llvm.func @go"):].split("llvm.return", 1)[0]
    assert "@__pymlirjit_par_execute(" in go and "@__pymlirjit_par_await(" in go
    assert "@mlirAsyncRuntimeExecute(" not in go
    # The module's own declarations are kept, not declared twice; the claim is public.
    assert text.count("llvm.func @malloc(") == 1
    assert "llvm.func @__pymlirjit_par_claim()" in text
    assert f"{SPIN_TICKS} : i64" in text
    module.operation.verify()


def test_no_waiting_is_an_option() -> None:
    module = parse_module(SCHEDULES, new_context())
    assert task_scheduling(module, spin_ticks=0)
    assert f"{SPIN_TICKS} : i64" not in str(module)
    module.operation.verify()


def test_code_scheduling_nothing_is_left_alone() -> None:
    source = SCHEDULES.replace(
        "  llvm.call @mlirAsyncRuntimeExecute(%handle, %resume) : (!llvm.ptr, !llvm.ptr) -> ()\n",
        "")
    module = parse_module(source, new_context())
    before = str(module)
    assert not task_scheduling(module)
    assert str(module) == before
