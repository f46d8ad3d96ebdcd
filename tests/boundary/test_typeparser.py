"""MLIR's type parser behind pymlirjit.boundary.typeparser: whitespace, blank text, errors with
MLIR's location, and the shared context's lock under threads."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from pymlirjit.boundary.typeparser import parsed_type


def _type_error(reason: str) -> Exception:
    return TypeError(f"bad: {reason}")


@pytest.mark.parametrize("text", ["i32", " i32", "i32 ", "\tmemref<?x4xf32>\n"])
def test_surrounding_whitespace_is_not_part_of_the_type(text: str) -> None:
    # MLIR's own parser reads " i32" as "i3" followed by a stray "2".
    with parsed_type(text, _type_error) as parsed:
        assert str(parsed) == text.strip()


@pytest.mark.parametrize(("text", "reason"), [
    ("notatype", '"notatype":1:1: expected non-function type'),
    ("f32, f64", "found trailing characters"),
    ("", "the string is empty"),
    (" \n ", "the string is empty"),
])
def test_what_is_not_one_type_raises_the_callers_error_with_mlirs_reason(
        text: str, reason: str) -> None:
    with pytest.raises(TypeError, match=r"^bad: ") as caught, parsed_type(text, _type_error):
        pytest.fail("the block ran")
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)  # the reason only, not the bindings' whole text


def test_the_lock_is_released_after_an_error_and_after_the_block_raises() -> None:
    with pytest.raises(TypeError), parsed_type("notatype", _type_error):
        pass
    with pytest.raises(KeyError), parsed_type("f32", _type_error):
        raise KeyError("from the block")
    with parsed_type("f64", _type_error) as parsed:
        assert str(parsed) == "f64"


def test_threads_parse_at_once_without_mixing_results() -> None:
    spellings = [f"memref<{n}xf32>" for n in range(1, 65)] + ["notatype"] * 8

    def parse(text: str) -> str:
        try:
            with parsed_type(text, _type_error) as parsed:
                return str(parsed)
        except TypeError:
            return "error"

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(parse, spellings * 4))
    assert results == [t if t != "notatype" else "error" for t in spellings] * 4


def test_an_empty_string_never_reaches_mlir() -> None:
    # In a child: MLIR's parser aborts the process on an empty string.
    child = ("from pymlirjit.boundary.typeparser import parsed_type\n"
             "try:\n"
             "    with parsed_type('', ValueError): pass\n"
             "except ValueError as exc:\n"
             "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the string is empty\n"
    assert done.stderr == ""
