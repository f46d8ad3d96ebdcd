"""Checked mode's ``cf.assert`` (:mod:`pymlirjit.codegen.checks`): a failed assert records
an AssertionError with its message, instead of aborting the process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..boundary.failures import ASSERTION, INDEX, SHAPE
from .checks_writer import CheckWriter
from .shapechecks import SHAPE_REASON, VERIFICATION

__all__ = ["check_assertion"]


def check_assertion(w: CheckWriter, op: Any,
                    also: Callable[[], None] | None = None) -> None:
    """Make ``cf.assert`` ``op`` record an AssertionError (an IndexError for MLIR's runtime
    verification) instead of aborting, and then run ``also`` (writing more ops where it
    failed); ``op`` is erased."""
    from mlir import ir
    from mlir.dialects import arith

    text = ir.StringAttr(op.attributes["msg"]).value
    verification = text.startswith(VERIFICATION)
    with ir.InsertionPoint(op), op.location:
        failed = arith.XOrIOp(op.operands[0],
                              w.constant(1, ir.IntegerType.get_signless(1))).result
        where = w.where(op)
        kind = ASSERTION
        if verification:  # MLIR's: "ERROR: ...\n<op>\n^ <reason>\nLocation: ..."
            reason = next((line[2:] for line in text.splitlines()
                           if line.startswith("^ ")), "invalid operation")
            kind = SHAPE if SHAPE_REASON in reason else INDEX
            message = (f"shape mismatch in {where}: {reason}" if kind == SHAPE
                       else f"runtime op verification failed in {where}: {reason}")
        else:
            message = f"{text}, in {where}" if text else f"assertion failed in {where}"
        def record() -> None:
            w.fail(kind, message)
            if also is not None:
                also()

        w.if_failed(failed, record)
    op.erase()
