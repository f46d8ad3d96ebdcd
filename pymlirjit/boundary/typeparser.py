"""MLIR's type parser, made safe to call from anywhere in pymlirjit.

Every type string pymlirjit reads (annotations, signatures, a generic kernel's bindings)
goes through :func:`parsed_type`: one shared MLIR context, under a lock (a context is not
safe to use from two threads at once), the text stripped of surrounding whitespace (MLIR's
parser misreads a type after a leading space: ``" i32"`` fails with "found trailing
characters"), and the empty string refused before it reaches MLIR, whose parser aborts the
process on one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["parsed_type"]

_lock = threading.Lock()
_context: Any = None


def _shared_context() -> Any:
    global _context
    from mlir import ir

    if _context is None:
        _context = ir.Context()
        _context.enable_multithreading(False)  # no thread pool to lose in a fork
    return _context


@contextmanager
def parsed_type(text: str, error: Callable[[str], Exception]) -> Iterator[Any]:
    """``text`` parsed by MLIR as an ``ir.Type``, usable while the block runs (it holds
    the shared context's lock and has that context entered). Raises ``error(reason)`` if
    ``text`` is blank or not one MLIR type; ``reason`` is MLIR's message with its location
    (``'"f32, f64":1:4: found trailing characters: ...'``)."""
    from mlir import ir

    stripped = text.strip()
    if not stripped:
        raise error("the string is empty")
    with _lock, _shared_context():
        try:
            parsed = ir.Type.parse(stripped)
        except Exception as exc:  # the bindings' MLIRError: its last line says where and why
            reason = str(exc).strip().splitlines()[-1].rpartition("error: ")[2]
            raise error(reason) from None
        yield parsed
