"""A Python function's source as the frontend reads it: its AST, its file, and where each
node sits in that file (for ``loc(...)`` on every op and for error messages)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .diagnostics import JitSyntaxError, Where

__all__ = ["FunctionSource", "function_source"]


@dataclass
class FunctionSource:
    """The parsed function: ``tree`` (its ``FunctionDef``), ``filename``, and the shift from
    the parsed text to the file (``line_offset`` lines, ``indent`` columns)."""

    function: Callable[..., Any]
    tree: ast.FunctionDef
    filename: str
    line_offset: int
    indent: int
    lines: list[str]
    _locs: dict[int, str] = field(default_factory=dict)
    _node_locs: dict[ast.AST, str] = field(default_factory=dict)  # the same, per node
    # What :mod:`.syntax` works out once per function: how many places assign each
    # variable, and the names each list of statements assigns (by the list's id).
    counts: dict[str, int] | None = field(default=None, init=False, repr=False)
    assigned: dict[int, tuple[list[ast.stmt], frozenset[str]]] = field(
        default_factory=dict, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.tree.name

    def where(self, node: ast.AST | None) -> Where | None:
        """The file, line and column of ``node``, with its source line."""
        if node is None or not hasattr(node, "lineno"):
            return None
        line: int = getattr(node, "lineno", 1)
        col: int = getattr(node, "col_offset", 0)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        end = getattr(node, "end_col_offset", None)
        if getattr(node, "end_lineno", line) != line or end is None:
            end = None
        else:
            end += self.indent
        return Where(self.filename, line + self.line_offset, col + self.indent,
                     end, text, self.name)

    def loc(self, node: ast.AST | None) -> str:
        """``loc("file":L:C)`` of ``node`` (MLIR's columns are 1-based)."""
        if node is None:
            return ""
        found = self._node_locs.get(node)
        if found is not None:
            return found
        if not hasattr(node, "lineno"):
            return ""
        line: int = getattr(node, "lineno", 1)
        col: int = getattr(node, "col_offset", 0)
        key = line * 100000 + col
        text = self._locs.get(key)
        if text is None:
            name = self.filename.replace("\\", "\\\\").replace('"', '\\"')
            text = self._locs[key] = (f' loc("{name}":{line + self.line_offset}:'
                                      f'{col + self.indent + 1})')
        self._node_locs[node] = text
        return text

    def unsupported(self, node: ast.AST, what: str, hint: str = "") -> JitSyntaxError:
        return JitSyntaxError(what, self.where(node), hint)


_cache: dict[Any, FunctionSource] = {}


def function_source(function: Callable[..., Any]) -> FunctionSource:
    """Parse ``function``'s source (cached per code object)."""
    code = getattr(function, "__code__", None)
    found = _cache.get(code)
    if found is not None and found.function is function:
        return found
    try:
        quick = _quick_source(function)
        if quick is not None:
            lines, first, dedented, module = quick
        else:
            lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError) as exc:
        raise JitSyntaxError(f"@jit cannot read the source of {function!r}: {exc}", None,
                             "define the function in a file (or a notebook cell)") from None
    filename = str(inspect.getsourcefile(function) or getattr(code, "co_filename", "<unknown>"))
    if quick is None:
        dedented = textwrap.dedent("".join(lines))
    indent = 0
    for raw, flat in zip(lines, dedented.splitlines(True)):
        if flat.strip():
            indent = len(raw) - len(flat)
            break
    if quick is None:
        module = ast.parse(dedented, filename)
    tree = module.body[0]
    if not isinstance(tree, ast.FunctionDef):
        raise JitSyntaxError("@jit compiles functions defined with def", None,
                             "async functions, lambdas and classes are not compiled")
    source = FunctionSource(function, tree, filename, max(first, 1) - 1, indent,
                            [line.rstrip("\n") for line in lines])
    if code is not None:
        _cache[code] = source
    return source


def _quick_source(function: Callable[..., Any]) -> tuple[list[str], int, str, ast.Module] | None:
    """``function``'s lines, first line, dedented text and parsed module, found without
    :func:`inspect.getsourcelines`' tokenizing of the rest of the file (the frontend's
    costliest step for a small function); None where that is needed after all.

    The function's text ends at its last line of code before the first line of code
    indented no deeper than its ``def``: a statement continuing past that line (in
    brackets, a string, after a backslash) leaves the text unparsable, and then
    :func:`inspect.getsourcelines` decides. Trailing comments are left out: no node
    sits on them."""
    function = inspect.unwrap(function)
    if not inspect.isfunction(function):
        return None
    all_lines, start = inspect.findsource(function)
    head = all_lines[start]
    margin = len(head) - len(head.lstrip())
    seen_def, last, k = False, start, start
    for k in range(start, len(all_lines)):
        text = all_lines[k]
        stripped = text.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(text) - len(stripped) <= margin:
            if seen_def:
                break
            seen_def = stripped.startswith(("def ", "async def "))  # after its decorators
        last = k
    if not seen_def:
        return None
    lines = all_lines[start:last + 1]
    dedented = textwrap.dedent("".join(lines))
    try:
        module = ast.parse(dedented, function.__code__.co_filename)
    except (SyntaxError, ValueError):
        return None
    if len(module.body) != 1 or not isinstance(module.body[0], ast.FunctionDef):
        return None
    return lines, start + 1, dedented, module
