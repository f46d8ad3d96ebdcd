"""A callback annotated int, float or complex takes the widths its declaration gives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pymlirjit import Session, SignatureError, callback, i32, mlir_kernel

REPO = Path(__file__).resolve().parent.parent


def _caller(t: str, u: str) -> str:
    return f"""
func.func @run(%a: {t}, %b: {u}) -> {t} {{
  %r = call @op(%a, %b) : ({t}, {u}) -> {t}
  return %r : {t}
}}
func.func private @op({t}, {u}) -> {t}
"""


@pytest.mark.parametrize(("t", "u"), [("i32", "index"), ("i64", "i64"), ("i8", "i16")])
def test_an_int_callback_takes_the_declared_widths(session: Session, t: str, u: str) -> None:
    @callback(session=session)
    def op(x: int, n: int) -> int:
        assert type(x) is int and type(n) is int
        return x * 2 + n

    @mlir_kernel(source=_caller(t, u), session=session)
    def run(a: int, b: int) -> int: ...

    assert run(5, 3) == 13
    assert run(-20, 7) == -33


def test_a_result_out_of_the_declared_range_raises_naming_the_callback(
        session: Session) -> None:
    @callback(session=session)
    def op(x: int, n: int) -> int:
        return x * 2 + n

    @mlir_kernel(source=_caller("i8", "i16"), session=session)
    def run(a: int, b: int) -> int: ...

    with pytest.raises(ValueError, match=r"callback 'op': result #0: 554 is out of range "
                                         r"for i8") as caught:
        run(127, 300)
    assert "raised in callback 'op'" in caught.value.__notes__[0]


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_a_float_callback_takes_f32_and_f64(session: Session, t: str) -> None:
    @callback(session=session)
    def half(x: float) -> float:
        return x / 2

    @mlir_kernel(source=f"""
func.func @h(%a: {t}) -> {t} {{
  %r = call @half(%a) : ({t}) -> {t}
  return %r : {t}
}}
func.func private @half({t}) -> {t}
""", session=session)
    def h(a: float) -> float: ...

    assert h(3.0) == 1.5
    if t == "f32":  # range-checked for f32, as an explicitly f32 callback is
        @callback(session=session)
        def half(x: float) -> float:  # replaces the callback
            return 1e300

        with pytest.raises(ValueError, match=r"callback 'half': result #0: 1e\+300 is out "
                                             r"of range for f32"):
            h(3.0)


def test_one_callback_serves_two_modules_declaring_other_widths(session: Session) -> None:
    @callback(session=session)
    def op(x: int, n: int) -> int:
        return x + n

    @mlir_kernel(source=_caller("i32", "index"), session=session)
    def run(a: int, b: int) -> int: ...

    narrow = mlir_kernel(source=_caller("i8", "i8"), name="run", session=session)(
        lambda a, b: None)
    assert run(2**30, 2**30 - 1) == 2**31 - 1
    assert narrow(100, 27) == 127
    assert run(1, 2) == 3 and narrow(-1, -2) == -3
    assert op.signature.mlir == "(i64, i64) -> i64"  # the callback itself is unchanged


def test_explicit_widths_still_refuse_another_declaration(session: Session) -> None:
    @callback(session=session)
    def op(x: i32, n: int) -> i32:
        return x + n

    @mlir_kernel(source=_caller("i64", "i64"), session=session)
    def run(a: int, b: int) -> int: ...

    with pytest.raises(SignatureError, match=r"callback @op: its Python annotations and its "
                                             r"MLIR declaration disagree: argument 1 \('x'\): "
                                             r"i32 versus i64 \(annotate it as pymlirjit.i64, "
                                             r"or as int for any width of its kind\)"):
        run(1, 2)


def test_a_signature_string_keeps_its_widths(session: Session) -> None:
    @callback("(i32, i32) -> i32", session=session)
    def op(x: int, n: int) -> int:
        return x + n

    @mlir_kernel(source=_caller("i64", "i64"), session=session)
    def run(a: int, b: int) -> int: ...

    with pytest.raises(SignatureError, match=r"argument 1: i32 versus i64"):
        run(1, 2)


def test_a_module_from_the_disk_cache_links_the_same_widths(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from pymlirjit import Session, callback, mlir_kernel
        session = Session(cache_dir=sys.argv[1])

        @callback(session=session)
        def op(x: int, n: int) -> int:
            return x * 2 + n

        run = mlir_kernel(source={_caller("i8", "index")!r}, name="run", session=session,
                          cache=True)(lambda a, b: None)
        assert run(5, 3) == 13
        try:
            run(127, 300)
        except ValueError as exc:
            assert "554 is out of range for i8" in str(exc), exc
        else:
            raise AssertionError("no range check")
        print(session.cache_info().disk_hits)
    """)
    runs = [subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO,
                           capture_output=True, text=True, check=False) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert [run.stdout.strip() for run in runs] == ["0", "1"]
