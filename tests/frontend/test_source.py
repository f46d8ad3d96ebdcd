"""The frontend reads a function's source without tokenizing the rest of its file: the
tree, lines and offsets it finds are those :func:`inspect.getsourcelines` gives, whatever
the layout (decorators, headers over several lines, comments out of place, strings that
leave the indentation)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from pymlirjit import jit
from pymlirjit.frontend import source as frontend_source
from pymlirjit.frontend.source import function_source


def plain(x):
    return x + 1


@jit
def decorated(x):
    return x * 2


@jit(
    fastmath=False,
)
def decorated_over_lines(x):
    return x - 1


def header_over_lines(a,
                      b):
    s = 0
    for i in range(a):
        s += i
# a comment at the margin, inside the function
    return s + b
    # a trailing comment


def continued(a, b):
    return (a
+ b)


def dedented_string(a):
    x = """
text at the margin"""
    return a + len(x)


def one_line(a): return a


class Holder:
    def method(self, a):
        return a

    @staticmethod
    def static(a):

        return a  # a blank line before


def outer() -> Callable[..., Any]:
    def inner(a):
        if a:
            return 1
        return 2
    return inner


CASES = [plain, decorated.py_func, decorated_over_lines.py_func, header_over_lines,
         continued, dedented_string, one_line, Holder.method, Holder.static, outer()]


@pytest.mark.parametrize("function", CASES, ids=lambda f: f.__qualname__)
def test_source_matches_inspect(function: Callable[..., Any]) -> None:
    frontend_source._cache.clear()
    found = function_source(function)
    lines, first = inspect.getsourcelines(function)
    module = ast.parse(textwrap.dedent("".join(lines)))
    assert ast.dump(found.tree, include_attributes=True) == \
        ast.dump(module.body[0], include_attributes=True)
    assert found.line_offset == first - 1
    assert found.lines == [line.rstrip("\n") for line in lines][:len(found.lines)]
    assert len(found.lines) >= (found.tree.end_lineno or 0)
    indent = next(len(line) - len(line.lstrip()) for line in lines if line.strip())
    assert found.indent == indent


def test_quick_path_taken_where_the_layout_is_plain() -> None:
    assert frontend_source._quick_source(header_over_lines) is not None
    assert frontend_source._quick_source(decorated_over_lines.py_func) is not None
    assert frontend_source._quick_source(Holder.static) is not None
    assert frontend_source._quick_source(continued) is None  # inspect decides
    assert frontend_source._quick_source(dedented_string) is None
