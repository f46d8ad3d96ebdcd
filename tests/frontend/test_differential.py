"""Differential testing of the frontend: random programs over ints and floats, with
``if``/``for``/``while``/``break``/``continue`` and early returns, run as plain Python and
compiled, must agree on every result and on the exception raised (hypothesis).

Ints are kept small (every int assignment is reduced ``% 1009``) so that no intermediate
leaves int64, where compiled ints wrap and Python's do not (a documented difference).
The default run tries a few dozen programs; ``-m slow`` tries many more.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pymlirjit import jit

from .helpers import check

INT_VARS = ("a", "b", "i0", "i1")
FLOAT_VARS = ("x", "f0", "f1")
ARGS_INT = st.integers(-(10**6), 10**6)
ARGS_FLOAT = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)

_files = itertools.count()
_folder = Path(tempfile.mkdtemp(prefix="pymlirjit-differential-"))


def int_expr(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(INT_VARS), st.integers(-9, 9).map(str))
    if depth == 0:
        return leaf
    sub = int_expr(depth - 1)
    binary = st.tuples(sub, st.sampled_from(["+", "-", "*", "//", "%"]), sub).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    unary = sub.map(lambda e: f"(-{e})")
    choice = st.tuples(float_cond(depth - 1), sub, sub).map(
        lambda t: f"({t[1]} if {t[0]} else {t[2]})")
    builtins = st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(
        lambda t: f"{t[0]}({t[1]}, {t[2]})")
    return st.one_of(leaf, binary, unary, choice, builtins, sub.map(lambda e: f"abs({e})"))


def float_expr(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(st.sampled_from(FLOAT_VARS),
                     st.sampled_from(["0.5", "-1.25", "3.0", "1e-3", "0.0"]))
    if depth == 0:
        return leaf
    sub = st.one_of(float_expr(depth - 1), int_expr(depth - 1))
    binary = st.tuples(float_expr(depth - 1), st.sampled_from(["+", "-", "*", "/", "//", "%"]),
                       sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    truediv = st.tuples(int_expr(depth - 1), int_expr(depth - 1)).map(
        lambda t: f"({t[0]} / {t[1]})")
    calls = st.one_of(sub.map(lambda e: f"float({e})"),
                      sub.map(lambda e: f"math.sqrt(abs({e}))"),
                      sub.map(lambda e: f"math.fabs({e})"),
                      float_expr(depth - 1).map(lambda e: f"abs({e})"))
    return st.one_of(leaf, binary, truediv, calls)


def float_cond(depth: int) -> st.SearchStrategy[str]:
    compare = st.tuples(st.one_of(int_expr(depth), float_expr(min(depth, 1))),
                        st.sampled_from(["<", "<=", "==", "!=", ">", ">="]),
                        st.one_of(int_expr(depth), float_expr(min(depth, 1)))).map(
        lambda t: f"{t[0]} {t[1]} {t[2]}")
    if depth == 0:
        return compare
    joined = st.tuples(compare, st.sampled_from(["and", "or"]), compare).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    return st.one_of(compare, joined, compare.map(lambda c: f"not ({c})"))


def assignment(var_kinds: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    int_assign = st.tuples(st.sampled_from(INT_VARS[2:]), st.sampled_from(["=", "+="]),
                           int_expr(2)).map(
        lambda t: [f"{t[0]} {t[1]} {t[2]}", f"{t[0]} = {t[0]} % 1009"])
    float_assign = st.tuples(st.sampled_from(FLOAT_VARS[1:]), st.sampled_from(["=", "+="]),
                             float_expr(2)).map(lambda t: [f"{t[0]} {t[1]} {t[2]}"])
    return st.one_of(int_assign, float_assign)


def indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


@st.composite
def block(draw: Any, depth: int, in_loop: bool) -> list[str]:
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kinds = ["assign", "assign"]
        if depth > 0:
            kinds += ["if", "for", "while"]
        if in_loop:
            kinds += ["break", "continue"]
        kind = draw(st.sampled_from(kinds))
        if kind == "assign":
            lines += draw(assignment(st.just("")))
        elif kind == "if":
            lines.append(f"if {draw(float_cond(1))}:")
            lines += indent(draw(block(depth - 1, in_loop)))
            if draw(st.booleans()):
                lines.append("else:")
                lines += indent(draw(block(depth - 1, in_loop)))
        elif kind == "for":
            start, stop = draw(st.integers(-3, 3)), draw(st.integers(-3, 6))
            step = draw(st.sampled_from([1, 2, -1, -2, 3]))
            counter = draw(st.sampled_from(["k", "m"]))
            lines.append(f"for {counter} in range({start}, {stop}, {step}):")
            body = [f"i1 = (i1 + {counter}) % 1009", *draw(block(depth - 1, True))]
            lines += indent(body)
        elif kind == "while":  # one counter per depth: an inner loop cannot reset it
            lines.append(f"n{depth} = 0")
            lines.append(f"while n{depth} < {draw(st.integers(0, 5))}:")
            lines += indent([f"n{depth} += 1", *draw(block(depth - 1, True))])
        elif kind == "break":
            lines += [f"if {draw(float_cond(0))}:", "    break"]
        else:
            lines += [f"if {draw(float_cond(0))}:", "    continue"]
        if depth > 0 and draw(st.integers(0, 9)) == 0:
            lines += [f"if {draw(float_cond(0))}:", "    return i0, i1, f0, f1"]
    return lines


@st.composite
def program(draw: Any) -> str:
    body = ["i0 = a % 1009", "i1 = b % 1009", "f0 = x * 0.5", "f1 = 1.0",
            *draw(block(2, False)), "return i0, i1, f0, f1"]
    return "\n".join(["import math", "", "", "def program(a, b, x):",
                      *indent(body), ""])


def load(source: str) -> Any:
    """The function ``program`` of ``source``, from a file (the frontend reads sources)."""
    path = _folder / f"program_{os.getpid()}_{next(_files)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.program


def compare(source: str, a: int, b: int, x: float) -> None:
    function = jit(load(source))
    try:
        check(function, a, b, x)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nprogram:\n{source}") from None


FEW = settings(max_examples=15, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MANY = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FEW
@given(program(), ARGS_INT, ARGS_INT, ARGS_FLOAT)
def test_random_programs_agree_with_python(source: str, a: int, b: int, x: float) -> None:
    compare(source, a, b, x)


@pytest.fixture(scope="module")
def slow_opt_in(request: pytest.FixtureRequest) -> None:
    """Skip the ``slow`` variant unless asked for (pyproject's addopts does not deselect
    it; 400 compiles took 15 minutes of the default suite on a loaded machine).
    Module-scoped, so the hypothesis test may use it."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("slow variant: run with -m slow")


@pytest.mark.slow
@pytest.mark.usefixtures("slow_opt_in")
@MANY
@given(program(), ARGS_INT, ARGS_INT, ARGS_FLOAT)
def test_many_random_programs_agree_with_python(source: str, a: int, b: int,
                                                x: float) -> None:
    compare(source, a, b, x)
