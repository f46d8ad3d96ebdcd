"""MLIR input that could crash the parser: bound its nesting, parse and lower on a large stack.

MLIR's parser and passes recurse once per level of nesting. Text nested deeper than
:data:`MAX_NESTING` is refused with its location before MLIR sees it; what is accepted runs
on a thread whose stack holds that depth, whatever the caller's stack.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import Diagnostic, MLIRError

__all__ = ["MAX_NESTING", "STACK_SIZE", "check_nesting", "nesting", "on_large_stack"]

_T = TypeVar("_T")

#: Deepest nesting of brackets (``( [ { <``) accepted in MLIR source or a pipeline. MLIR's
#: parser and passes recurse once per level; at this depth they use a few MB of stack,
#: well inside the stack they run on (:data:`STACK_SIZE`, and MLIR's own 8 MB threads),
#: and no real module comes near it.
MAX_NESTING = 1000

#: Stack of the thread that parses and lowers (reserved address space; pages are only
#: used as deep as the recursion goes).
STACK_SIZE = 512 << 20

_NESTING_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|->|>=|[(){}\[\]<>]')
_MINUS_RUN = re.compile(r"(?:-\s*){" + str(MAX_NESTING) + ",}")


def nesting(text: str, brackets: str = "()[]{}<>") -> tuple[int, int] | None:
    """(line, column) where ``text`` nests more than :data:`MAX_NESTING` deep, or None."""
    opening = brackets[0::2]
    if sum(text.count(b) for b in opening) <= MAX_NESTING and text.count("-") < MAX_NESTING:
        return None  # cannot nest that deep: skip the scan (the common case)
    depth = 0
    for match in _NESTING_TOKENS.finditer(text):
        token = match.group()
        if token in opening:
            depth += 1
            if depth > MAX_NESTING:
                return _line_column(text, match.start())
        elif len(token) == 1 and token in brackets:
            depth = max(depth - 1, 0)
    minus = _MINUS_RUN.search(text)  # "- - - x": unary minus recurses without brackets
    return None if minus is None else _line_column(text, minus.start())


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def check_nesting(text: str, filename: str) -> None:
    """Raise :class:`~pymlirjit.MLIRError` at the place ``text`` nests too deep to parse."""
    where = nesting(text)
    if where is not None:
        line, column = where
        raise MLIRError(f"cannot parse MLIR from {filename}", [Diagnostic(
            "error", f"nested more than {MAX_NESTING} deep; MLIR's parser would overflow "
            f"its stack", f'loc("{filename}":{line}:{column})')])


_stack_lock = threading.Lock()


def on_large_stack(function: Callable[[], _T]) -> _T:
    """``function()``, run on a thread with a :data:`STACK_SIZE` stack: MLIR's parser
    and passes recurse with the input's nesting, and the caller's stack may be small."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, function()))
        except BaseException as exc:  # handed to the caller, which re-raises it
            outcome.append((False, exc))

    with _stack_lock:  # the stack size is process-wide: restore it for other threads
        previous = threading.stack_size(STACK_SIZE)
        try:
            # Not a daemon: the interpreter must not finalize under a running parse.
            worker = threading.Thread(target=run, name="pymlirjit-mlir")
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
