"""Compile-time errors name file:line:col, show the source line with a caret, and say what
to write instead; runtime failures carry the Python line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from pymlirjit import jit
from pymlirjit.frontend import JitSyntaxError, JitTypeError

FILE = __file__


def line_of(function: object, text: str) -> int:
    """The file line of the first source line of ``function`` containing ``text``."""
    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise AssertionError(text)


def caret_of(message: str, snippet: str) -> tuple[int, str]:
    """The column (0-based) of the caret under ``snippet``'s line, and the caret text."""
    lines = message.splitlines()
    for i, line in enumerate(lines):
        if snippet in line and i + 1 < len(lines) and "^" in lines[i + 1]:
            caret = lines[i + 1]
            return caret.index("^") - 4, caret.strip()
    raise AssertionError(message)


def comprehension(x):
    s = [v * 2 for v in x]
    return s


def test_list_comprehension() -> None:
    with pytest.raises(JitSyntaxError) as info:
        jit(comprehension)(np.ones(3))
    message = str(info.value)
    line = line_of(comprehension, "[v * 2")
    assert f"{FILE}:{line}:9: list comprehensions are not supported" in message
    col, caret = caret_of(message, "s = [v * 2")
    assert col == 8 and caret == "^" + "~" * (len("[v * 2 for v in x]") - 1)
    assert "hint:" in message and "for loop" in message
    assert isinstance(info.value, SyntaxError)


def uses_try(x):
    try:
        return x + 1
    except ValueError:
        return 0


def uses_dict(x):
    d = {1: x}
    return d


def uses_lambda(x):
    f = lambda v: v  # noqa: E731
    return f


def keyword_only(x, *, y):
    return x


def test_unsupported_constructs() -> None:
    for fn, what in ((uses_try, "try/except"), (uses_dict, "dicts"),
                     (uses_lambda, "lambdas"), (keyword_only, "keyword-only")):
        with pytest.raises(JitSyntaxError, match=what) as info:
            jit(fn)(1) if fn is not keyword_only else jit(fn)(1, y=2)
        assert f"{FILE}:" in str(info.value)


def type_change(arr):
    x = 0
    for i in range(3):
        x += i
    x = arr
    return x


def test_type_error_shows_both_lines() -> None:
    with pytest.raises(JitTypeError) as info:
        jit(type_change)(np.ones(2))
    message = str(info.value)
    assert f"{FILE}:{line_of(type_change, 'x = arr')}:" in message
    assert f"{FILE}:{line_of(type_change, 'x = 0')}:" in message
    assert "variable 'x'" in message and isinstance(info.value, TypeError)


def maybe_undefined(n):
    if n > 0:
        y = 1
    return y


def test_possibly_undefined() -> None:
    with pytest.raises(JitSyntaxError, match="'y' may be undefined") as info:
        jit(maybe_undefined)(1)
    line = line_of(maybe_undefined, "return y")
    assert f"{FILE}:{line}:12:" in str(info.value)


def raises(n):
    if n < 0:
        raise ValueError("bad n")
    assert n != 3, "three is not allowed"
    return n


def test_raise_and_assert_at_run_time() -> None:
    f = jit(raises)
    assert f(2) == 2
    with pytest.raises(ValueError) as info:
        f(-1)
    assert str(info.value) == "bad n"  # as Python's; the notes say where
    notes = info.value.__notes__  # on Python 3.10 too, as the list PEP 678 names
    assert f"{FILE}:{line_of(raises, 'raise ValueError')}:9" in notes[0]
    with pytest.raises(AssertionError, match=f"three is not allowed.*{line_of(raises, 'assert')}"):
        f(3)
    assert f(4) == 4  # the kernel works on after failures


def unannotated(i):
    return {i: 1.0}[i]


def calls_unannotated(n):
    return unannotated(n)


def test_unannotated_callee_asks_for_annotation() -> None:
    with pytest.raises(JitTypeError, match="annotate its return type") as info:
        jit(calls_unannotated)(1)
    assert f"{FILE}:{line_of(calls_unannotated, 'return unannotated(n)')}:12" in str(info.value)


def recursive(n):
    return 1 if n <= 1 else n * recursive(n - 1)


def test_recursion_is_an_error() -> None:
    with pytest.raises(JitTypeError, match="recursion"):
        jit(recursive)(3)


def ands_floats(a, b):
    return a & b


def test_operator_without_a_numpy_loop_is_an_error() -> None:
    with pytest.raises(JitTypeError, match="numpy has no such loop") as info:
        jit(ands_floats)(np.ones(2), np.ones((2, 2)))
    col, caret = caret_of(str(info.value), "return a & b")
    assert col == 11 and caret == "^~~~~"
