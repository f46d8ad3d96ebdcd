"""One-line hints for the MLIR mistakes a newcomer makes, added to MLIR's own diagnostics.

:func:`with_hints` recognizes, in the diagnostics of a parse:

- a bare name where a type belongs (``memref<?xT>``: "expected non-function type"): a
  type alias is written with ``!`` (``!T``);
- ``call`` inside a region other than a function's body (``scf.for``):
  MLIR looks for an op of the empty dialect and lists every dialect; write ``func.call``;
- an ``scf.yield`` passing fewer or more values than its loop or ``scf.if`` carries:
  MLIR dumps the op in its generic form; write ``scf.yield %v : T``.

The hint ends the message; the note it makes redundant (the list of dialects, the
generic form) is dropped.

>>> from pymlirjit.errors import Diagnostic
>>> found = with_hints([Diagnostic("error", "expected non-function type",
...                                'loc("<source>":1:27)')],
...                    "func.func @f(%a: memref<?xT>)")
>>> print(found[0].message)
expected non-function type (hint: a type alias is written with '!': !T)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import Diagnostic

__all__ = ["with_hints"]

_LOCATION = re.compile(r'^loc\("[^"]*":(?P<line>\d+):(?P<col>\d+)\)')
_NAME = re.compile(r"[A-Za-z_][\w$]*(?![\w$.<])")  # not a dialect's type (foo.bar, foo<>)
#: Names MLIR reads as builtin types: a bare one of these is no alias left without `!`.
_BUILTIN = re.compile(r"^(?:[isu]?i\d+|f\d+|bf16|tf32|index|none|f8E\w+|f[46]E\w+|"
                      r"memref|tensor|vector|complex|tuple)$")
_UNKNOWN_OP = re.compile(r"Dialect `' not found for custom op '(?P<op>\w+)'")
_YIELD = re.compile(r"'(?P<op>[\w.]+)' op along control flow edge from Operation scf\.yield "
                    r"to .*: region branch point has (?P<given>\d+) operands, but region "
                    r"successor needs (?P<needed>\d+) inputs")
_FUNC_OPS = {"call": "func.call"}


def with_hints(diagnostics: Sequence[Diagnostic], source: str) -> list[Diagnostic]:
    """``diagnostics`` (of parsing ``source``), each with its hint where one applies."""
    return [_hinted(d, source) for d in diagnostics]


def _hinted(diagnostic: Diagnostic, source: str) -> Diagnostic:
    message, notes = diagnostic.message, diagnostic.notes
    hint = None
    if message == "expected non-function type":
        name = _word_at(diagnostic.location, source)
        if name is not None and not _BUILTIN.match(name):
            hint = f"a type alias is written with '!': !{name}"
    elif (match := _UNKNOWN_OP.search(message)) is not None:
        op = match["op"]
        if op in _FUNC_OPS:
            hint = (f"write {_FUNC_OPS[op]}: the dialect prefix may be left out only "
                    f"directly in a func.func body, not inside scf.for, scf.if or other regions")
            notes = tuple(n for n in notes if not n.message.startswith("Available dialects"))
    elif (match := _YIELD.search(message)) is not None:
        needed = int(match["needed"])
        values = ", ".join(["%v"] if needed == 1 else [f"%v{i}" for i in range(needed)])
        hint = (f"this scf.yield passes {match['given']} values, the {match['op']} carries "
                f"{needed}: write scf.yield {values} : <type>, one value per "
                f"{'iter_arg' if match['op'] != 'scf.if' else 'result'}")
        notes = tuple(n for n in notes if not n.message.startswith("see current operation"))
    if hint is None:
        return diagnostic
    return Diagnostic(diagnostic.severity, f"{message} (hint: {hint})", diagnostic.location,
                      notes)


def _word_at(location: str, source: str) -> str | None:
    """The name starting at ``location``'s line and column of ``source``, if any."""
    match = _LOCATION.match(location)
    if match is None:
        return None
    lines = source.splitlines()
    line, column = int(match["line"]), int(match["col"])
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].encode()[column - 1:].decode(errors="ignore").lstrip()
    word = _NAME.match(text)
    return None if word is None else word[0]
