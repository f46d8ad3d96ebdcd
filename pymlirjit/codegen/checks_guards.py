"""Shape checks that keep their op from running (:mod:`pymlirjit.codegen.checks`), for a
module still on tensors whose calls cannot unwind at a failure.

:func:`~pymlirjit.codegen.checks.insert_assert_checks` makes MLIR's shape checks of linalg
ops record a ValueError instead of aborting; where the call unwinds at the failure, the op
never runs. Where it does not (a module with shared libraries), the call runs on, and the
op would read past its shorter operand: so each checked op is wrapped in ``scf.if`` on a
flag of its function that a failed check clears, yielding its inits where it is skipped
(a linalg op on memrefs that a schedule outlined is a call without results, wrapped so
too). The sparsifier sparsifies the op inside the ``scf.if`` as it does outside one.
"""

from __future__ import annotations

from typing import Any

from .checks_asserts import check_assertion
from .checks_writer import CheckWriter, function_containing
from .shapechecks import checked_ops

__all__ = ["guard_checked_ops"]


def guard_checked_ops(writer: CheckWriter, module: Any) -> None:
    """Make the shape checks of each checked linalg op of ``module`` record their failure
    and keep the op from running where one fails (see the module's docstring). A check
    whose op cannot be guarded (its results are not its inits' types) is left to abort."""
    from mlir import ir
    from mlir.dialects import memref

    # function -> its flag: no check has failed in this call (an i8: MLIR 22 cannot
    # lower memref accesses of i1)
    flags: dict[Any, Any] = {}
    i8 = ir.IntegerType.get_signless(8)
    for op, checks in checked_ops(module, calls=True):
        inits = list(op.operands)[len(op.operands) - len(op.results):]
        if [v.type for v in inits] != [r.type for r in op.results]:
            continue
        function = function_containing(op)
        if function is None:
            continue
        flag = flags.get(function)
        if flag is None:
            entry = function.regions[0].blocks[0]
            with ir.InsertionPoint.at_block_begin(entry), function.location:
                flag = flags[function] = memref.AllocaOp(
                    ir.MemRefType.get([], i8), [], []).result
                memref.StoreOp(writer.constant(1, i8), flag, [])

        def clear(flag: Any = flag) -> None:
            memref.StoreOp(writer.constant(0, i8), flag, [])

        for check in checks:
            check_assertion(writer, check, clear)
        _guard(op, flag, inits)


def _guard(op: Any, flag: Any, inits: list[Any]) -> None:
    """Wrap ``op`` in ``scf.if`` on the i8 ``flag`` holds, yielding ``inits`` if clear."""
    from mlir import ir
    from mlir.dialects import arith, memref, scf

    with ir.InsertionPoint(op), op.location:
        ok = arith.TruncIOp(ir.IntegerType.get_signless(1), memref.LoadOp(flag, []).result)
        branch = scf.IfOp(ok, [r.type for r in op.results], has_else=bool(op.results))
    for result, replacement in zip(op.results, branch.results):
        result.replace_all_uses_with(replacement)
    with op.location:
        with ir.InsertionPoint(branch.then_block):
            yielded = scf.YieldOp(list(op.results))
        op.move_before(yielded)
        if op.results:
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp(inits)
