"""Checked mode's ``cf.assert`` (:mod:`pymlirjit.codegen.checks`): a failed assert records
an AssertionError with its message, instead of aborting the process."""

from __future__ import annotations

from typing import Any

from ..boundary.failures import ASSERTION, INDEX
from .checks_writer import CheckWriter

__all__ = ["check_assertion"]


def check_assertion(w: CheckWriter, op: Any) -> None:
    """Make ``cf.assert`` ``op`` record an AssertionError (an IndexError for MLIR's runtime
    verification) instead of aborting; ``op`` is erased."""
    from mlir import ir
    from mlir.dialects import arith

    text = ir.StringAttr(op.attributes["msg"]).value
    verification = text.startswith("ERROR: Runtime op verification failed")
    with ir.InsertionPoint(op), op.location:
        failed = arith.XOrIOp(op.operands[0],
                              w.constant(1, ir.IntegerType.get_signless(1))).result
        where = w.where(op)
        if verification:  # MLIR's: "ERROR: ...\n<op>\n^ <reason>\nLocation: ..."
            reason = next((line[2:] for line in text.splitlines()
                           if line.startswith("^ ")), "invalid operation")
            message = f"runtime op verification failed in {where}: {reason}"
        else:
            message = f"{text}, in {where}" if text else f"assertion failed in {where}"
        w.if_failed(failed, lambda: w.fail(
            INDEX if verification else ASSERTION, message))
    op.erase()
