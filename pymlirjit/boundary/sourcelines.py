"""Errors on the user's line: where in a Python file an inline MLIR string sits.

A decorator records its definition site cheaply (:func:`definition_site`: the stub's file
and first line, no file read). Only when an error must be reported is the file read (once,
through :mod:`linecache`) and parsed with :mod:`ast` to find the string constant holding
the MLIR text, so that ``loc("<source>":L:C)`` becomes the Python file, line and column
where MLIR line ``L`` sits.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import textwrap
import threading
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import Diagnostic, MLIRError

__all__ = ["Site", "definition_site", "located_mlir_error", "located_type_error",
           "python_place", "read_mlir_file", "short_path"]

#: MLIR's name for inline text (pymlirjit's Session names it so).
INLINE = "<source>"
_INLINE_LOCATION = re.compile(r'"<source>":(\d+):(\d+)')
_FILE_LOCATION = re.compile(r'^loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)')


def read_mlir_file(path: Path) -> str:
    """The text of the MLIR file ``path``: ``FileNotFoundError`` if it cannot be read (a
    missing file, a folder), ``ValueError`` if it is not UTF-8 text; both name the file."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FileNotFoundError(f"cannot read MLIR source {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read MLIR source {path}: it is not UTF-8 text (byte "
                         f"0x{exc.object[exc.start]:02x} at offset {exc.start})") from None


class Site(NamedTuple):
    """Where a decorated function is defined: its file, first line (that of its first
    decorator) and name."""

    filename: str
    line: int
    name: str


def definition_site(function: Any) -> Site | None:
    """``function``'s definition site, from its code object (no file read), or ``None``."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    return Site(code.co_filename, code.co_firstlineno, getattr(function, "__name__", ""))


def short_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith(os.pardir) else relative


def _strings(node: ast.AST) -> list[tuple[ast.Constant, str]]:
    return [(n, n.value) for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _same_text(value: str, text: str) -> bool:
    return value == text or textwrap.dedent(value).strip() == textwrap.dedent(text).strip()


def _tree(filename: str) -> tuple[list[str], ast.Module] | None:
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        return lines, ast.parse("".join(lines), filename)
    except (SyntaxError, ValueError):
        return None


def _decorated(tree: ast.Module, site: Site) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == site.name:
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if first == site.line:
                return node
    return None


_Found = tuple[list[str], ast.Constant | None]

#: What :func:`_literal` found, by site and text, with the file's lines it read: a kernel
#: that fails on every call (a checked division by zero in a loop) reports its line each
#: time, and parsing and walking a large file took a millisecond.
_found: dict[tuple[Site, str | None], _Found] = {}
_found_lock = threading.Lock()
_FOUND_KEPT = 64


def _literal(site: Site, text: str | None) -> _Found | None:
    """The file's lines and the string constant holding ``text`` (in the stub's
    decorators first, then anywhere in the file), or ``None`` for the constant when it
    cannot be found (a computed string). Found again only when :mod:`linecache` has read
    the file again."""
    lines = linecache.getlines(site.filename)
    key = (site, text)
    with _found_lock:
        kept = _found.get(key)
    if kept is not None and kept[0] is lines:
        return kept
    found = _search(site, text)
    if found is not None:
        with _found_lock:
            while len(_found) >= _FOUND_KEPT:
                del _found[next(iter(_found))]  # the oldest
            _found[key] = found
    return found


def _search(site: Site, text: str | None) -> _Found | None:
    found = _tree(site.filename)
    if found is None:
        return None
    lines, tree = found
    if text is None:
        return lines, None
    function = _decorated(tree, site)
    places: list[ast.AST] = [] if function is None else list(function.decorator_list)
    for place in [*places, tree]:
        for constant, value in _strings(place):
            if _same_text(value, text):
                return lines, constant
    return lines, None


class _Mapper:
    """Maps MLIR (line, column) in ``text`` to (line, column or None) in the file."""

    def __init__(self, lines: list[str], constant: ast.Constant, text: str) -> None:
        self.lines = lines
        self.text_lines = text.splitlines()
        self.start = constant.lineno
        self.end = constant.end_lineno or constant.lineno
        # The first line's content starts after the literal's prefix and quotes.
        first = lines[self.start - 1].encode()[constant.col_offset:].decode(errors="replace")
        body = first.lstrip("rRbBuUfF")
        body = body[3:] if body[:3] in ('"""', "'''") else body[1:]
        self.first_column = len(lines[self.start - 1]) - len(body)
        self.shift = self._shift()

    def _shift(self) -> int | None:
        """File line minus MLIR line, from the first non-blank MLIR line found in the
        literal (``textwrap.dedent`` or ``.strip()`` keep lines, not their offsets)."""
        for index, line in enumerate(self.text_lines):
            if line.strip():
                for number in range(self.start, self.end + 1):
                    if line.strip() in self._content(number):
                        return number - (index + 1)
                return None
        return None

    def _content(self, number: int) -> str:
        line = self.lines[number - 1]
        return line[self.first_column:] if number == self.start else line

    def __call__(self, line: int, column: int) -> tuple[int, int | None] | None:
        if self.shift is None or not 1 <= line <= len(self.text_lines):
            return None
        number = line + self.shift
        if not self.start <= number <= self.end:
            return None
        text = self.text_lines[line - 1]
        content = self._content(number)
        at = content.find(text)
        if at < 0 or not text:
            return number, None
        offset = len(self.lines[number - 1]) - len(content) + at
        # MLIR counts bytes from 1; the file's column counts characters from 1.
        chars = len(text.encode()[: max(column - 1, 0)].decode(errors="ignore"))
        return number, offset + chars + 1


def _where(filename: str, line: int, column: int | None) -> str:
    return f"{short_path(filename)}:{line}" + ("" if column is None else f":{column}")


def python_place(site: Site | None, text: str, line: int) -> str | None:
    """``file:line`` of the Python file where line ``line`` of the inline MLIR ``text``
    (a string constant in the decorator at ``site``) sits, or ``None``."""
    found = None if site is None else _literal(site, text)
    if site is None or found is None or found[1] is None:
        return None
    place = _Mapper(found[0], found[1], text)(line, 1)
    return None if place is None else _where(site.filename, place[0], None)


def located_mlir_error(error: MLIRError, what: str, site: Site | None,
                       text: str | None) -> MLIRError:
    """``error`` (about inline MLIR ``text`` when not ``None``) with its diagnostics moved
    to the Python file where ``text`` sits, and a summary naming ``what`` (such as
    ``@mlir_kernel 'axpy'``) and the place of the first diagnostic."""
    found = None if site is None else _literal(site, text)
    mapper: _Mapper | None = None
    if site is not None and found is not None and found[1] is not None and text is not None:
        mapper = _Mapper(found[0], found[1], text)

    def move(diagnostic: Diagnostic) -> Diagnostic:
        location = diagnostic.location
        if site is not None:
            def replace(match: re.Match[str]) -> str:
                place = None if mapper is None else mapper(int(match[1]), int(match[2]))
                if place is None:
                    return match[0]
                line, column = place
                return f'"{site.filename}":{line}:{column or 0}'
            location = _INLINE_LOCATION.sub(replace, location)
        return Diagnostic(diagnostic.severity, diagnostic.message, location,
                          tuple(move(n) for n in diagnostic.notes))

    diagnostics = [move(d) for d in error.diagnostics]
    where = _where(site.filename, site.line, None) if site is not None else ""
    message = error.summary
    if diagnostics:
        first = diagnostics[0]
        match = _FILE_LOCATION.match(first.location)
        if match and match["file"] != INLINE:
            column = int(match["col"])
            where = _where(match["file"], int(match["line"]), column or None)
        elif match:  # inline MLIR whose string was not found: MLIR's line, at the site
            message = f"MLIR line {match['line']}:{match['col']}: {first.message}"
        if not match or match["file"] != INLINE:
            message = first.message
    summary = f"{what} ({where}): {message}" if where else f"{what}: {message}"
    return MLIRError(summary, diagnostics)


def located_type_error(error: TypeError, what: str, function: Any, text: str) -> TypeError:
    """``error`` (of the same class) naming ``what`` and the Python file, line and column
    of the string constant ``text`` (a signature string) in ``function``'s decorator.
    The file is read now, not when the function was defined."""
    site = definition_site(function)
    if site is None:
        return type(error)(f"{what}: {error}")
    found = _literal(site, text)
    line, column = site.line, None
    if found is not None and found[1] is not None:
        constant = found[1]
        line = constant.lineno
        prefix = found[0][line - 1].encode()[: constant.col_offset].decode(errors="replace")
        column = len(prefix) + 1
    return type(error)(f"{what} ({_where(site.filename, line, column)}): {error}")
