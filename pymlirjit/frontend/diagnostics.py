"""Compile-time errors of ``@jit``: the offending expression's ``file:line:col``, its source
line with a caret under it, and what is supported instead (Triton's format).

>>> err = JitTypeError("cannot add an array and an int", None)
>>> isinstance(err, TypeError)
True
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PyMLIRJitError

__all__ = ["JitError", "JitSyntaxError", "JitTypeError", "Where", "excerpt"]


@dataclass(frozen=True)
class Where:
    """A place in the user's file: 1-based line, 0-based column, and the source lines."""

    filename: str
    line: int
    col: int
    end_col: int | None
    text: str  # the source line itself ("" when unknown)
    function: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col + 1}"


def excerpt(where: Where) -> str:
    """The source line and a caret (``^~~~``) under the span ``where`` names."""
    if not where.text:
        return ""
    line = where.text.rstrip("\n")
    end = where.end_col if where.end_col is not None and where.end_col > where.col \
        else where.col + 1
    end = min(end, len(line)) if len(line) > where.col else where.col + 1
    return f"    {line}\n    {' ' * where.col}^{'~' * (end - where.col - 1)}"


class JitError(PyMLIRJitError):
    """A function ``@jit`` cannot compile: ``where`` (file, line, column) and ``reason``;
    ``str()`` shows the place, the source line with a caret, and a hint."""

    def __init__(self, reason: str, where: Where | None, hint: str = "",
                 also: Where | None = None) -> None:
        self.reason, self.where, self.hint, self.also = reason, where, hint, also
        super().__init__(self._format())

    def _format(self) -> str:
        if self.where is None:
            return self.reason
        head = f"{self.where}: {self.reason}"
        if self.where.function:
            head += f" (in @jit function {self.where.function!r})"
        parts = [head, excerpt(self.where)]
        if self.also is not None:
            parts += [f"{self.also}: the other definition", excerpt(self.also)]
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(p for p in parts if p)

    def __str__(self) -> str:
        return self._format()

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.reason, self.where, self.hint, self.also)


class JitSyntaxError(JitError, SyntaxError):
    """A construct outside the subset ``@jit`` compiles (a list, ``try``, a lambda...)."""

    def __init__(self, reason: str, where: Where | None, hint: str = "",
                 also: Where | None = None) -> None:
        JitError.__init__(self, reason, where, hint, also)
        self.msg = self._format()  # what SyntaxError's printing shows


class JitTypeError(JitError, TypeError):
    """A typing error: operands that do not fit, a variable whose types do not unify, a
    call whose result type cannot be known."""
