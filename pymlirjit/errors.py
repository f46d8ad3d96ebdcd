"""Every exception pymlirjit raises on purpose.

Each class also subclasses the builtin a user would reach for first, so that
``except ValueError`` catches a bad MLIR module and ``except TypeError`` a signature
mismatch, as with any other Python library.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


class PyMLIRJitError(Exception):
    """Base class of the exceptions pymlirjit raises itself."""


@dataclass(frozen=True)
class Diagnostic:
    """One MLIR diagnostic: its severity, message, location and attached notes."""

    severity: str
    message: str
    location: str
    notes: tuple[Diagnostic, ...] = ()

    @classmethod
    def from_mlir(cls, info: Any) -> Diagnostic:
        """A diagnostic of MLIR's Python bindings (a ``DiagnosticInfo`` or the
        ``Diagnostic`` a handler receives), with its notes."""
        severity = str(info.severity).rsplit(".", 1)[-1].lower()
        return cls(severity, info.message, str(info.location),
                   tuple(cls.from_mlir(note) for note in info.notes))

    def renamed_source(self, filename: str) -> Diagnostic:
        """The same diagnostic, with MLIR's name for parsed text ("-") replaced."""
        return Diagnostic(self.severity, self.message,
                          self.location.replace('"-"', f'"{filename}"'),
                          tuple(n.renamed_source(filename) for n in self.notes))

    def __str__(self) -> str:
        text = f"{self.location}: {self.severity}: {self.message}"
        for note in self.notes:
            text += "\n  " + str(note).replace("\n", "\n  ")
        return text


@contextmanager
def error_diagnostics(context: Any, filename: str) -> Iterator[list[Diagnostic]]:
    """Collect the error diagnostics MLIR emits in ``context`` (an ``ir.Context``) while
    the block runs, located in ``filename``, into the list it yields; the others are
    dropped. Nothing reaches stderr."""
    errors: list[Diagnostic] = []

    def collect(info: Any) -> bool:
        diagnostic = Diagnostic.from_mlir(info)
        if diagnostic.severity == "error":
            errors.append(diagnostic.renamed_source(filename))
        return True  # handled: MLIR prints nothing

    handler = context.attach_diagnostic_handler(collect)
    try:
        yield errors
    finally:
        handler.detach()


class MLIRError(PyMLIRJitError, ValueError):
    """MLIR rejected a module: it did not parse, verify or lower.

    ``diagnostics`` holds what MLIR said, each with its location, so a tool can point at
    the offending line; ``str()`` of the error shows them all.
    """

    def __init__(self, summary: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        self.summary = summary
        self.diagnostics = tuple(diagnostics)
        super().__init__(self._format())

    def _format(self) -> str:
        if not self.diagnostics:
            return self.summary
        return self.summary + "\n" + "\n".join(str(d) for d in self.diagnostics)


class EngineCreationError(MLIRError, RuntimeError):
    """An ``ExecutionEngine`` was given a module it cannot JIT-compile (one not lowered to
    the LLVM dialect). Both an :class:`MLIRError` naming the ops left over and the
    ``RuntimeError`` upstream MLIR raises ("Failure while creating the ExecutionEngine."),
    so code written for upstream catches it as before."""

    #: Upstream's message, which this error's text starts with.
    UPSTREAM_MESSAGE = "Failure while creating the ExecutionEngine."

    def __init__(self, summary: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(f"{self.UPSTREAM_MESSAGE} {summary}", diagnostics)


class LinkError(PyMLIRJitError, RuntimeError):
    """A symbol the compiled code needs (or that was asked for) cannot be found.

    ``missing`` names every unresolved symbol. Raised before any compiled code runs, so
    the engine stays usable once the symbols are provided. It is a ``RuntimeError``, as
    upstream MLIR's "Unknown function" error is.
    """

    def __init__(self, message: str, missing: Iterable[str] = ()) -> None:
        self.missing = tuple(missing)
        super().__init__(message)


class SignatureError(PyMLIRJitError, TypeError):
    """Two descriptions of one function's signature disagree (e.g. annotations vs MLIR)."""
