"""Checked mode's integer divisions (:mod:`pymlirjit.codegen.checks`): a divisor that
cannot trap, and a ZeroDivisionError (or the CPU's flag, with numpy's error model) where
it was ``0``."""

from __future__ import annotations

import platform
from typing import Any

from ..boundary.failures import ZERO_DIVISION
from .checks_writer import CheckWriter, constant_value

__all__ = ["DIVISIONS", "ZERO_MESSAGE", "check_division"]

#: The attribute of an integer division naming its ZeroDivisionError's message.
ZERO_MESSAGE = "pymlirjit.zero_message"

#: ``<fenv.h>``'s FE_DIVBYZERO and FE_OVERFLOW, by machine (glibc's values).
_FP_FLAGS = {"x86_64": (0x04, 0x08), "AMD64": (0x04, 0x08), "aarch64": (0x02, 0x04),
             "arm64": (0x02, 0x04)}
#: Integer divisions and remainders, and whether they are signed.
DIVISIONS = {"arith.divsi": True, "arith.remsi": True, "arith.ceildivsi": True,
             "arith.floordivsi": True, "arith.divui": False, "arith.remui": False,
             "arith.ceildivui": False}


def check_division(w: CheckWriter, op: Any, signed: bool) -> None:
    """Give ``op`` (an integer division or remainder) a divisor that cannot trap, and
    record a ZeroDivisionError (or, with numpy's error model, raise the CPU's flag)."""
    from mlir import ir
    from mlir.dialects import arith

    dividend, divisor = op.operands[0], op.operands[1]
    type_ = divisor.type
    element = type_.element_type if isinstance(type_, ir.VectorType) else type_
    if (isinstance(type_, ir.VectorType) and type_.scalable) or not isinstance(
            element, (ir.IntegerType, ir.IndexType)):
        return  # a scalable vector or a tensor (a pipeline without bufferization)
    width = 64 if isinstance(element, ir.IndexType) else ir.IntegerType(element).width
    known = constant_value(divisor)
    if known is not None and known != 0 and not (signed and known in (-1, (1 << width) - 1)):
        return  # cannot trap (x / 2, the common case): nothing to check
    block = op.operation.block
    # A quotient and a remainder of the same operands (x / y, x % y) share their
    # safe divisor, so that LLVM still computes both with one division; only the
    # first division by a value in a block records the failure (the first one wins).
    key = (block, dividend, divisor, signed)
    known_safe = w.safe_divisors.get(key)
    if known_safe is not None:
        op.operands[1], zero = known_safe
        _zero_where_zero(w, op, zero)
        return
    with ir.InsertionPoint(op), op.location:
        zero = arith.CmpIOp(arith.CmpIPredicate.eq, divisor, w.constant(0, type_)).result
        bad, overflow = zero, None
        if signed and width > 1:
            minimum = w.constant(-(1 << (width - 1)), type_)
            overflow = arith.AndIOp(
                arith.CmpIOp(arith.CmpIPredicate.eq, dividend, minimum).result,
                arith.CmpIOp(arith.CmpIPredicate.eq, divisor,
                             w.constant(-1, type_)).result).result
            bad = arith.OrIOp(zero, overflow).result
        safe = arith.SelectOp(bad, w.constant(1, type_), divisor).result
        op.operands[1] = safe
        w.safe_divisors[key] = (safe, zero)
        _zero_where_zero(w, op, zero)
        if (block, divisor) in w.checked_divisors:
            return
        w.checked_divisors.add((block, divisor))
        if w.numpy_errors:
            divide_by_zero, overflowed = _FP_FLAGS.get(platform.machine(), (0, 0))
            w.if_failed(w.any(zero), lambda: _raise_fp_flag(w, divide_by_zero))
            if overflow is not None:
                w.if_failed(w.any(overflow), lambda: _raise_fp_flag(w, overflowed))
            return
        w.if_failed(w.any(zero), lambda: w.fail(
            ZERO_DIVISION, f"{_zero_message(op)} in {w.where(op)}"))


def _zero_message(op: Any) -> str:
    """The message of ``op``'s ZeroDivisionError: its ``pymlirjit.zero_message``
    attribute (a float division written as an integer one, by ``@jit``), or Python's
    message for an integer division."""
    from mlir import ir

    attributes = op.operation.attributes
    if ZERO_MESSAGE in attributes:
        return str(ir.StringAttr(attributes[ZERO_MESSAGE]).value)
    return "integer division or modulo by zero"


def _zero_where_zero(w: CheckWriter, op: Any, zero: Any) -> None:
    """With numpy's error model: ``op``'s result is 0 where the divisor was 0."""
    from mlir import ir
    from mlir.dialects import arith

    if not w.numpy_errors:
        return
    result = op.result
    with ir.InsertionPoint.after(op), op.location:
        fixed = arith.SelectOp(zero, w.constant(0, result.type), result)
    result.replace_all_uses_except(fixed.result, fixed.operation)


def _raise_fp_flag(w: CheckWriter, flag: int) -> None:
    """Raise the CPU's floating-point exception ``flag`` (``feraiseexcept``), which
    numpy reads after a ufunc loop; nothing where the machine's flags are unknown."""
    from mlir import ir
    from mlir.dialects import func

    if flag:
        i32 = ir.IntegerType.get_signless(32)
        func.CallOp([i32], ir.FlatSymbolRefAttr.get("feraiseexcept"),
                    [w.constant(flag, i32)])
        w.raises_fp_flags = True
