"""Errors on the user's line: MLIR diagnostics of inline kernel sources and callback
signature strings point at this file's lines (pymlirjit.boundary.sourcelines)."""

from __future__ import annotations

import linecache
import re
import textwrap
from pathlib import Path

import pytest

from pymlirjit import MLIRError, Session, SignatureError, callback, f64, mlir_kernel
from pymlirjit.boundary.sourcelines import definition_site, python_place, short_path

HERE = short_path(__file__)

SHARED_SOURCE = """
func.func @shared(%a: f64) -> f64 {
  %r = arith.addf %a, %undeclared_shared : f64
  return %r : f64
}"""


def _position(marker: str) -> tuple[int, int]:
    """The 1-based line and column of ``marker``, which occurs once in this file
    outside this function (its spelling here is split so as not to count)."""
    lines = Path(__file__).read_text().splitlines()
    found = [(n, line.index(marker) + 1) for n, line in enumerate(lines, 1) if marker in line]
    assert len(found) == 1, found
    return found[0]


def _location(error: MLIRError) -> tuple[str, int, int]:
    match = re.match(r'loc\("([^"]*)":(\d+):(\d+)\)', error.diagnostics[0].location)
    assert match, error.diagnostics[0].location
    return match[1], int(match[2]), int(match[3])


def test_a_parse_error_points_at_the_line_and_column_in_the_python_file(
        session: Session) -> None:
    @mlir_kernel(source="""
func.func @axpy(%a: f64, %x: f64) -> f64 {
  %r = arith.mulf %a, %undeclared_y : f64
  return %r : f64
}""", session=session)
    def axpy(a: f64, x: f64) -> f64: ...

    with pytest.raises(MLIRError) as caught:
        axpy(1.0, 2.0)
    line, column = _position("%undeclared" + "_y")
    assert _location(caught.value) == (__file__, line, column)
    assert str(caught.value).startswith(
        f"@mlir_kernel 'axpy' ({HERE}:{line}:{column}): use of undeclared SSA value")
    with pytest.raises(MLIRError, match=re.escape(f"{HERE}:{line}:{column}")):
        axpy.compile()  # raised again, as the first time


def test_a_one_line_source_counts_the_column_after_the_opening_quote(
        session: Session) -> None:
    @mlir_kernel(source="func.func @one(%a: f64) -> f64 { return %undeclared_one : f64 }",
                 session=session)
    def one(a: f64) -> f64: ...

    with pytest.raises(MLIRError) as caught:
        one.compile()
    line, column = _position("%undeclared" + "_one")
    assert _location(caught.value) == (__file__, line, column)
    assert f"'one' ({HERE}:{line}:{column})" in caught.value.summary


def test_a_verifier_error_and_its_notes_point_into_a_dedented_source(session: Session) -> None:
    @mlir_kernel(source=textwrap.dedent("""\
        func.func @dedented(%a: f64) -> f64 {
          %r = arith.addi %a, %a : f64
          return %r : f64
        }"""), session=session)
    def dedented(a: f64) -> f64: ...

    with pytest.raises(MLIRError, match="signless-integer") as caught:
        dedented.compile()
    line, column = _position("arith.addi %a" + ", %a")
    assert _location(caught.value) == (__file__, line, column)
    assert all(f'"{__file__}":{line}:{column}' in note.location
               for note in caught.value.diagnostics[0].notes)


def test_a_source_held_in_a_module_constant_is_found(session: Session) -> None:
    @mlir_kernel(source=SHARED_SOURCE, session=session)
    def shared(a: f64) -> f64: ...

    with pytest.raises(MLIRError) as caught:
        shared.compile()
    assert _location(caught.value)[1:] == _position("%undeclared" + "_shared")


def test_a_computed_source_names_the_decorator_line_and_mlir_line(session: Session) -> None:
    width = 64
    @mlir_kernel(source=f"func.func @computed(%a: f{width}) -> f{width} "
                        f"{{ return %nope : f{width} }}", session=session)
    def computed(a: f64) -> f64: ...

    with pytest.raises(MLIRError) as caught:
        computed.compile()
    line = computed.__wrapped__.__code__.co_firstlineno
    assert caught.value.summary.startswith(f"@mlir_kernel 'computed' ({HERE}:{line}): "
                                           f"MLIR line 1:")
    assert caught.value.diagnostics[0].location.startswith('loc("<source>":1:')


def test_an_error_without_diagnostics_names_the_kernel_and_its_line(session: Session) -> None:
    @mlir_kernel(source="func.func @piped(%a: f64) -> f64 { return %a : f64 }",
                 pipeline="no-such-pass", session=session)
    def piped(a: f64) -> f64: ...

    with pytest.raises(MLIRError, match="invalid pass pipeline") as caught:
        piped.compile()
    line = piped.__wrapped__.__code__.co_firstlineno
    assert caught.value.summary.startswith(f"@mlir_kernel 'piped' ({HERE}:{line}): ")


def test_a_mlir_file_source_keeps_its_own_lines(session: Session, tmp_path: Path) -> None:
    path = tmp_path / "k.mlir"
    path.write_text("func.func @filed(%a: f64) -> f64 {\n  return %zz : f64\n}\n")

    @mlir_kernel(source=path, session=session)
    def filed(a: f64) -> f64: ...

    with pytest.raises(MLIRError) as caught:
        filed.compile()
    assert _location(caught.value) == (str(path), 2, 10)
    assert caught.value.summary.startswith(f"@mlir_kernel 'filed' ({short_path(str(path))}"
                                           f":2:10): use of undeclared SSA value")


def test_decorating_reads_no_file(monkeypatch: pytest.MonkeyPatch, session: Session) -> None:
    def refuse(*args: object) -> list[str]:
        raise AssertionError("a file was read at decoration time")

    monkeypatch.setattr(linecache, "getlines", refuse)

    @mlir_kernel(source="func.func @lazy(%a: f64) -> f64 { return %a : f64 }",
                 session=session)
    def lazy(a: f64) -> f64: ...

    assert lazy._site == definition_site(lazy.__wrapped__)
    monkeypatch.undo()
    assert lazy(2.0) == 2.0


def test_an_unreadable_definition_file_keeps_mlir_locations(session: Session) -> None:
    namespace: dict[str, object] = {"mlir_kernel": mlir_kernel, "session": session}
    code = compile("@mlir_kernel(source='func.func @gone() { return %x : f64 }', "
                   "session=session)\ndef gone() -> None: ...\n", "/no/such/file.py", "exec")
    exec(code, namespace)
    with pytest.raises(MLIRError) as caught:
        namespace["gone"].compile()  # type: ignore[attr-defined]
    assert caught.value.summary.startswith("@mlir_kernel 'gone' (/no/such/file.py:1): "
                                           "MLIR line 1:")


def test_a_bad_callback_signature_string_points_at_the_string() -> None:
    with pytest.raises(SignatureError) as caught:
        @callback("(f64, i32 -> f64")
        def scaled(x: float, k: int) -> float:
            return x * k
    line, column = _position('"(f64, i32' + ' -> f64"')
    message = str(caught.value)
    assert message.startswith(f"@callback 'scaled' ({HERE}:{line}:{column}): cannot parse "
                              f"MLIR function type")
    assert "expected ')'" in message


def test_a_tensor_in_a_callback_signature_string_points_at_the_string() -> None:
    with pytest.raises(SignatureError, match="tensor") as caught:
        @callback(
            "(tensor<4xf32>) -> ()")
        def takes_tensor(t: object) -> None: ...
    line, column = _position('"(tensor<4xf32>)' + ' -> ()"')
    assert str(caught.value).startswith(f"@callback 'takes_tensor' ({HERE}:{line}:{column})")


def test_python_place_names_the_file_line_of_an_mlir_line(session: Session) -> None:
    @mlir_kernel(source=SHARED_SOURCE, session=session)
    def shared(a: f64) -> f64: ...

    site = definition_site(shared.__wrapped__)
    line = SHARED_SOURCE.splitlines().index(
        next(t for t in SHARED_SOURCE.splitlines() if "%undeclared" in t)) + 1
    assert python_place(site, SHARED_SOURCE, line) == (
        f"{short_path(__file__)}:{_position('%undeclared' + '_shared')[0]}")
    computed = "func.func @" + "elsewhere() { return }"  # in no string constant of the file
    assert python_place(site, computed, 1) is None
    assert python_place(None, SHARED_SOURCE, line) is None


def test_a_source_file_that_is_not_utf8_text_raises_naming_the_file(tmp_path: Path) -> None:
    from pymlirjit import mlir_ufunc

    path = tmp_path / "binary.mlir"
    path.write_bytes(b"\x00\x01\xff\xfe")
    message = f"cannot read MLIR source {path}: it is not UTF-8 text"
    with pytest.raises(ValueError, match=re.escape(message)):
        Session().compile(path)
    with pytest.raises(ValueError, match=re.escape(message)):
        mlir_ufunc(source=path)

    @mlir_kernel(source=path)   # read again, and reported, when it compiles
    def binary(x: f64) -> f64: ...

    with pytest.raises(ValueError, match=re.escape(message)):
        binary(1.0)


def test_a_kernel_failing_on_every_call_finds_its_line_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A checked division by zero in a loop reports its Python line on every call: the
    # file is parsed and searched once (it cost ~0.45 ms a call), and again once
    # linecache reads the file anew (it was edited).
    import pymlirjit.boundary.sourcelines as sourcelines

    module = tmp_path / "failing_kernel.py"
    module.write_text(textwrap.dedent('''
        from pymlirjit import Session, i64, mlir_kernel

        @mlir_kernel(source="""
        func.func @div(%a: i64, %b: i64) -> i64 {
          %q = arith.divsi %a, %b : i64
          return %q : i64
        }""", session=Session(boundscheck=True))
        def div(a: i64, b: i64) -> i64: ...
    '''))
    namespace: dict[str, object] = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    div = namespace["div"]
    searches = []
    search = sourcelines._search
    monkeypatch.setattr(sourcelines, "_search",
                        lambda site, text: searches.append(site) or search(site, text))
    for _ in range(3):
        with pytest.raises(ZeroDivisionError) as caught:
            div(1, 0)  # type: ignore[operator]
        assert "failing_kernel.py:6" in str(caught.value)
    assert len(searches) == 1
    module.write_text("\n\n" + module.read_text())  # the kernel two lines further down
    linecache.checkcache(str(module))
    with pytest.raises(ZeroDivisionError) as caught:
        div(1, 0)  # type: ignore[operator]
    assert len(searches) == 2
    assert "failing_kernel.py:8" in str(caught.value)
