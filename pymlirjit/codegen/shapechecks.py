"""Shape checks of linalg ops and elementwise tensor ops: a mismatch raises ValueError
naming the op's line, instead of computing garbage.

``arith.addf`` on two ``tensor<?xf64>`` of lengths 4 and 2, or ``linalg.dot`` of
lengths 4 and 2, read past the shorter operand. :func:`insert_shape_checks` turns
elementwise ops on tensors into ``linalg.generic`` (as the default pipeline does first)
and runs MLIR's ``generate-runtime-verification``, keeping the checks it makes for linalg
ops (the dimensions each operand must have, checked once per op before it runs) and
dropping the others (per-access bounds checks are ``boundscheck``'s business). Checked
mode (:mod:`pymlirjit.codegen.checks`) then turns each failing check into a ValueError.
"""

from __future__ import annotations

import re
from typing import Any

from ..lowering.pipeline import run_pipeline
from ..lowering.walk import operations

__all__ = ["SHAPE_REASON", "VERIFICATION", "checked_ops", "insert_shape_checks"]

#: How the messages of MLIR's runtime verification start.
VERIFICATION = "ERROR: Runtime op verification failed"
#: What only the verification of a linalg op says (its operands' dimensions).
SHAPE_REASON = "input/output operand"
#: Its checks that an operand's last index is not negative, implied by the others for
#: every op but convolutions (whose inputs are checked to be large enough anyway).
_NEGATIVE = "unexpected negative result"

_PIPELINE = ("builtin.module(func.func(convert-elementwise-to-linalg),"
             "generate-runtime-verification{verbose-level=0},"
             "func.func(resolve-shaped-type-result-dims))")
#: Ops without side effects the dropped checks computed their conditions with.
_PURE_PREFIXES = ("arith.", "index.", "affine.apply", "affine.min", "affine.max")
_PURE = frozenset({"memref.dim", "tensor.dim", "memref.rank", "tensor.rank",
                   "memref.extract_strided_metadata", "memref.extract_aligned_pointer_as_index"})


def insert_shape_checks(module: Any, filename: str = "<source>") -> int:
    """Add the shape checks to ``module`` (still on tensors or memrefs, before any linalg
    op is tiled or lowered); returns how many it kept."""
    if not operations(module, lambda op: _checked(op), limit=1):
        return 0  # nothing to check: skip the passes
    run_pipeline(module, _PIPELINE, filename)
    kept = 0
    for op in operations(module, names={"cf.assert"}):
        from mlir import ir

        text = ir.StringAttr(op.attributes["msg"]).value
        if not text.startswith(VERIFICATION):
            continue  # the user's own
        if SHAPE_REASON in text and _NEGATIVE not in text:
            kept += 1
            continue
        _erase_with_its_condition(op)
    for checked, checks in checked_ops(module):
        for check in checks:
            _name_the_parameter(check, checked)
    return kept


def checked_ops(module: Any, calls: bool = False) -> list[tuple[Any, list[Any]]]:
    """Each linalg op of ``module`` with MLIR's shape checks (``cf.assert`` ops, which
    runtime verification puts right before the op they check), and those checks.
    ``calls``: also a ``func.call`` without results where the op was (a schedule's
    microkernel, :mod:`pymlirjit.codegen.optimize`, outlines a linalg op on memrefs)."""
    from mlir import ir

    found: list[tuple[Any, list[Any]]] = []
    pending: list[Any] = []

    def visit(op: Any) -> Any:
        name = op.name
        if name == "cf.assert":
            text = ir.StringAttr(op.attributes["msg"]).value
            if text.startswith(VERIFICATION) and SHAPE_REASON in text:
                pending.append(op)
        elif pending and ((name.startswith("linalg.")
                           and name not in ("linalg.yield", "linalg.index"))
                          or (calls and name == "func.call" and not op.results)):
            location = str(op.location)
            if all(str(check.location) == location for check in pending):
                found.append((op, list(pending)))
            pending.clear()  # checks of another op (none expected): left as they are
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


_OPERAND = re.compile(re.escape(SHAPE_REASON) + r" #(\d+)")


def _name_the_parameter(check: Any, op: Any) -> None:
    """Where the operand of ``op`` that ``check`` is about is a parameter of the function
    holding it (its entry block's argument, no op between), say so at the end of its
    message: ``(operand #1 is argument 2 of @spmv)``, which
    :func:`~pymlirjit.boundary.failures.raise_failure` completes with the Python name."""
    from mlir import ir

    from ..boundary.abi import defined_function_symbol

    text = ir.StringAttr(check.attributes["msg"]).value
    match = _OPERAND.search(text)
    if match is None or int(match[1]) >= len(op.operands):
        return
    value = op.operands[int(match[1])]
    if not isinstance(value, ir.BlockArgument):
        return
    function = value.owner.owner.operation  # (a FuncOp's own name is its symbol's)
    if function.name != "func.func" or value.owner != function.regions[0].blocks[0]:
        return
    name = ir.StringAttr(function.attributes["sym_name"]).value
    name = name.removeprefix(defined_function_symbol(""))
    # At the end of the reason's line: messages keep the words they started with.
    end = text.find("\n", match.end())
    end = len(text) if end < 0 else end
    named = f" (operand #{match[1]} is argument {value.arg_number + 1} of @{name})"
    check.attributes["msg"] = ir.StringAttr.get(text[:end] + named + text[end:], check.context)


def _checked(op: Any) -> bool:
    """Whether ``op`` is a linalg op or an elementwise op on tensors (what the checks
    cover)."""
    name = op.name
    if name.startswith("linalg.") and name != "linalg.yield" and name != "linalg.index":
        return True
    if not (name.startswith("arith.") or name.startswith("math.")):
        return False
    from mlir import ir

    return any(isinstance(result.type, ir.RankedTensorType) for result in op.results)


def _erase_with_its_condition(assertion: Any) -> None:
    """Erase ``assertion`` and the side-effect-free ops that computed only its condition
    (each op once all its users are gone: users first)."""
    from mlir import ir

    candidates: list[Any] = []
    work = [assertion.operands[0]]
    while work:
        owner = work.pop().owner
        if isinstance(owner, ir.Block) or len(owner.regions) > 0 or owner in candidates:
            continue
        if owner.name in _PURE or owner.name.startswith(_PURE_PREFIXES):
            candidates.append(owner)
            work.extend(owner.operands)
    dead: list[Any] = [assertion]
    grew = True
    while grew:
        grew = False
        for op in candidates:
            if op not in dead and all(use.owner in dead for result in op.results
                                      for use in result.uses):
                dead.append(op)
                grew = True
    for op in dead:  # each after its users
        op.erase()
