"""deepinput: nesting MLIR's recursive parser cannot take is refused with its location;
what is accepted parses on a stack of its own, whatever the caller's stack."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from pymlirjit import MLIRError
from pymlirjit.lowering.deepinput import (
    MAX_NESTING,
    SHALLOW,
    check_nesting,
    nesting,
    on_large_stack,
    shallow,
)
from pymlirjit.lowering.pipeline import lower, new_context, normalize_pipeline, parse_module
from tests.lowering.test_pipeline import run_child

T = TypeVar("T")


def test_nesting_is_found_at_its_line_and_column() -> None:
    text = "a\n  " + "(" * (MAX_NESTING + 1) + ")" * (MAX_NESTING + 1)
    assert nesting(text) == (2, 3 + MAX_NESTING)
    assert nesting("(" * MAX_NESTING + ")" * MAX_NESTING) is None


def test_unbalanced_closing_brackets_do_not_hide_deep_nesting() -> None:
    text = ")" * 5000 + "{" * (MAX_NESTING + 1)
    assert nesting(text) == (1, 5001 + MAX_NESTING)


def test_check_nesting_names_the_file_and_place() -> None:
    with pytest.raises(MLIRError) as caught:
        check_nesting("\n" + "[" * 5000, "deep.mlir")
    diagnostic = caught.value.diagnostics[0]
    assert diagnostic.location == 'loc("deep.mlir":2:1001)'
    assert f"nested more than {MAX_NESTING} deep" in diagnostic.message


def test_on_large_stack_returns_raises_and_restores_the_stack_size() -> None:
    before = threading.stack_size()
    assert on_large_stack(lambda: 42) == 42
    with pytest.raises(KeyError, match="inside"):
        on_large_stack(lambda: {}["inside"])
    assert threading.stack_size() == before


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_on_large_stack_leaves_no_thread_behind() -> None:
    # A fork right after a compile must not find the worker still counted by the OS:
    # Python 3.12+ would warn that the process "is multi-threaded". Without the wait for
    # the OS thread, ~2% of returns left it counted here.
    def tasks() -> set[str]:
        return {entry.name for entry in Path("/proc/self/task").iterdir()}

    for _ in range(500):
        before = tasks()
        on_large_stack(lambda: None)
        assert tasks() - before == set()


DEEP_INPUTS = {
    "array attribute": "func.func @f() attributes {x = " + "[" * 20000 + "1" + "]" * 20000
                       + "} { return }",
    "regions": "func.func @f() {\n" + "scf.execute_region {\n" * 5000
               + "scf.yield\n}\n" * 5000 + "return\n}",
    "unary minus": "#m = affine_map<(d0) -> (" + "-" * 100000 + "d0)>\n"
                   "func.func @f() attributes {m = #m} { return }",
}


@pytest.mark.parametrize("case", DEEP_INPUTS)
def test_absurd_nesting_is_refused_with_its_location(case: str, tmp_path: Path) -> None:
    (tmp_path / "deep.mlir").write_text(DEEP_INPUTS[case])
    done = run_child(textwrap.dedent(f"""
        from pathlib import Path
        from pymlirjit import MLIRError, mlir_kernel
        @mlir_kernel(source=Path({str(tmp_path / "deep.mlir")!r}))
        def f() -> None: ...
        try:
            f()
        except MLIRError as exc:
            print(exc.diagnostics[0].location, exc.diagnostics[0].message)
        """))
    assert done.returncode == 0, done.stderr
    assert "deep.mlir" in done.stdout and "nested more than 1000 deep" in done.stdout


@pytest.mark.parametrize("depth", [900, 2000])
def test_nesting_under_the_bound_compiles_on_a_small_caller_stack(depth: int) -> None:
    """Parsing and lowering run on their own large stack: a thread with a 1 MB stack
    compiles regions nested 900 deep, which would overflow it; deeper is refused."""
    source = ("func.func @f() {\n" + "scf.execute_region {\n" * depth
              + "scf.yield\n}\n" * depth + "return\n}")
    done = run_child(textwrap.dedent(f"""
        import threading
        from pymlirjit import MLIRError, Session
        def work():
            try:
                Session().compile({source!r}).f()
                print("ran")
            except MLIRError as exc:
                print(exc.diagnostics[0].message)
        threading.stack_size(1 << 20)
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("ran" if depth < 1000 else
                                   "nested more than 1000 deep; MLIR's parser would overflow "
                                   "its stack")


def test_a_deep_pipeline_is_refused() -> None:
    with pytest.raises(MLIRError, match="nested more than 1000 deep"):
        normalize_pipeline("builtin.module(" * 100000 + ")" * 100000)


def test_nesting_scan_ignores_strings_comments_and_arrows() -> None:
    functions = "".join(f"func.func @g{i}(%a: i32) -> i32 {{ return %a : i32 }}\n"
                        for i in range(1100))
    text = ("// " + "(" * 2000 + "\n" + 'func.func @f() attributes {s = "' + "[" * 2000
            + '"} { return }\n' + functions)
    assert "llvm.func @g1099" in str(lower(parse_module(text, new_context())))


def _on_thread_with_stack(size: int, function: Callable[[], T]) -> T:
    """``function()`` on a new thread with a ``size``-byte stack; its result."""
    outcome: list[T] = []
    previous = threading.stack_size(size)
    try:
        worker = threading.Thread(target=lambda: outcome.append(function()))
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    return outcome[0]


SMALL_MODULE = "func.func @f(%a: f64) -> f64 {\n  return %a : f64\n}"


def test_shallow_text_on_a_large_enough_stack_stays_on_the_callers_thread() -> None:
    def where_it_ran() -> tuple[bool, int, int]:
        seen: list[int] = []

        def before(module: object, pipeline: str) -> str:
            seen.append(threading.get_ident())
            return pipeline

        module = parse_module(SMALL_MODULE, new_context())
        lower(module, before=before, shallow_source=shallow(SMALL_MODULE))
        return shallow(SMALL_MODULE), seen[0], threading.get_ident()

    inline, lowered_on, caller = _on_thread_with_stack(16 << 20, where_it_ran)
    assert inline and lowered_on == caller
    inline, lowered_on, caller = _on_thread_with_stack(1 << 20, where_it_ran)
    assert not inline and lowered_on != caller  # a 1 MB stack: the large one is used


def test_shallow_counts_brackets_and_minus_signs() -> None:
    def check() -> tuple[bool, ...]:
        return (shallow("(" * SHALLOW), shallow("(" * (SHALLOW + 1)),
                shallow("-" * (SHALLOW + 1)), shallow("-" * (SHALLOW + 1), minus=False))

    assert _on_thread_with_stack(16 << 20, check) == (True, False, False, True)


def test_shallow_text_compiles_on_a_tiny_caller_stack() -> None:
    done = run_child(textwrap.dedent(f"""
        import threading
        from pymlirjit import Session
        def work():
            print(Session().compile({SMALL_MODULE!r}).f(2.5))
        threading.stack_size(256 << 10)
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.5"
