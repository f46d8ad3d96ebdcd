"""Modules built with MLIR's own Python bindings, as the text pymlirjit compiles
(``source=`` of a kernel, a ufunc or :meth:`pymlirjit.Session.compile` may be an
``mlir.ir.Module``, an operation, or a callable returning one)."""

from __future__ import annotations

from typing import Any

from .pipeline import new_context

__all__ = ["built_text"]


def built_text(source: Any) -> str:
    """The MLIR text of a module built in Python: an ``mlir.ir.Module``, an
    ``mlir.ir.Operation`` (or an op view such as a ``func.FuncOp``), or a zero-argument
    callable returning one, called once inside a fresh context of its own (with an
    unknown location) so that it may build without one. The text is what pymlirjit
    compiles and caches: the module itself is never kept."""
    from mlir import ir

    built = source
    if callable(source) and not isinstance(source, (ir.Module, ir.Operation, ir.OpView)):
        with new_context(), ir.Location.unknown():
            built = source()
            return _text_of(built, f"the source callable {_describe(source)} returned")
    return _text_of(built, "source")


def _text_of(built: Any, what: str) -> str:
    from mlir import ir

    if isinstance(built, ir.Module):
        return str(built.operation)
    if isinstance(built, (ir.Operation, ir.OpView)):
        return str(built)
    raise TypeError(f"{what} must be MLIR text, a pathlib.Path, an mlir.ir.Module, an "
                    f"mlir.ir.Operation or a zero-argument callable returning one; got "
                    f"{type(built).__name__}")


def _describe(source: Any) -> str:
    return getattr(source, "__qualname__", None) or type(source).__name__
