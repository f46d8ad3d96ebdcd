"""What a failed check of checked mode (:mod:`pymlirjit.codegen.checks`) becomes in Python.

Checked code records a failure by calling the built-in callback :data:`FAIL_SYMBOL` with
a kind and the address of a message (a constant of the module, so that a module loaded
from the disk cache raises the same message); :func:`raise_failure` raises the matching
exception, naming the Python line of an inline kernel source where it is known
(:func:`register_source`).
"""

from __future__ import annotations

import ctypes
import hashlib
import re
from typing import Any

__all__ = ["ALLOCATION_TRACKERS", "ASSERTION", "FAIL_SIGNATURE", "FAIL_SYMBOL", "INDEX",
           "SEPARATOR", "SHAPE", "ZERO_DIVISION", "raise_failure", "register_parameters",
           "register_source", "source_id"]

#: The runtime symbol checked code calls to record a failure (a reserved name).
FAIL_SYMBOL = "__pymlirjit_fail"
#: Its MLIR signature: kind, message address, then the failing dimension, index and size
#: (bounds checks only).
FAIL_SIGNATURE = "(i32, i64, i64, i64, i64) -> ()"

#: In a module without shared libraries, compiled code allocates through these reserved
#: symbols instead of the C library's (C function -> tracker, see
#: :mod:`pymlirjit.boundary.native.allocations`): a call that a failure unwinds (``longjmp``)
#: frees what it allocated, and what kernels it called allocated for it.
ALLOCATION_TRACKERS = {"malloc": "__pymlirjit_malloc",
                       "aligned_alloc": "__pymlirjit_aligned_alloc",
                       "free": "__pymlirjit_free"}

#: The kinds of failure (SHAPE: operands of a linalg or elementwise op that disagree).
ZERO_DIVISION, INDEX, ASSERTION, SHAPE = 1, 2, 3, 4
_EXCEPTIONS: dict[int, type[Exception]] = {
    ZERO_DIVISION: ZeroDivisionError, INDEX: IndexError, ASSERTION: AssertionError,
    SHAPE: ValueError}


def source_id(text: str) -> str:
    """A short name of the MLIR source ``text`` (messages carry it)."""
    return hashlib.sha1(text.encode()).hexdigest()[:16]


# source id -> (definition site, text) of inline sources, registered by kernels, so
# that a message names the Python line rather than the MLIR line.
_sources: dict[str, tuple[Any, str]] = {}
#: Between the source id and the text of a message.
SEPARATOR = "\x1f"
_MLIR_LINE = re.compile(r"\(MLIR line (\d+)\)")
# (source id, "@function") -> the Python names of the function's parameters (a stub's).
_parameters: dict[tuple[str, str], tuple[str, ...]] = {}
_ARGUMENT = re.compile(r"(\(operand #\d+ is argument )(\d+) of (@[^\s)]+)\)")


def register_source(text: str, site: Any, located: str | None = None) -> None:
    """Let failures in code compiled from the inline MLIR ``text`` name the Python file
    and line where it sits (``site``: a :class:`~pymlirjit.boundary.sourcelines.Site`);
    ``located``: the text as it sits there, if ``text`` was made from it line for line
    (a generic kernel's binding)."""
    _sources[source_id(text)] = (site, text if located is None else located)


def register_parameters(text: str, function: str, names: list[str]) -> None:
    """Let failures in the function ``@function`` of code compiled from the MLIR ``text``
    name its parameters as ``names`` (its Python stub's): ``(operand #1 is argument 2
    ('x') of @spmv)`` where the compiled message says ``(operand #1 is argument 2 of
    @spmv)`` (:mod:`pymlirjit.codegen.shapechecks`). As with :func:`register_source`,
    the names go with the text: the same text compiled again in this process (by a
    session, without the stub) names them so too."""
    _parameters[(source_id(text), f"@{function}")] = tuple(names)


def _with_parameter_names(source: str, text: str) -> str:
    def named(match: re.Match[str]) -> str:
        names = _parameters.get((source, match[3]), ())
        index = int(match[2]) - 1
        if not 0 <= index < len(names):
            return match[0]
        return f"{match[1]}{index + 1} ({names[index]!r}) of {match[3]})"

    return _ARGUMENT.sub(named, text) if _parameters else text


def _on_python_line(text: str) -> str:
    source, _, text = text.rpartition(SEPARATOR)
    text = _with_parameter_names(source, text)
    found = _sources.get(source)
    match = _MLIR_LINE.search(text)
    if found is None or match is None:
        return text
    from .sourcelines import python_place

    try:
        place = python_place(found[0], found[1], int(match[1]))
    except Exception:  # a file that changed or vanished: the MLIR line says enough
        place = None
    return text if place is None else f"{text[:match.start()]}({place}){text[match.end():]}"


def raise_failure(kind: int, message: int, dim: int, index: int, size: int) -> None:
    """Raise the exception a check of compiled code recorded: ``message`` is the address
    of its NUL-terminated text (a constant of the module)."""
    text = ctypes.string_at(message).decode(errors="replace") if message else "check failed"
    text = _on_python_line(text)
    if kind == INDEX:
        text = text.replace("{detail}", f"index {index} is out of bounds for dimension "
                                        f"{dim} of size {size}")
    raise _EXCEPTIONS.get(kind, RuntimeError)(text)
