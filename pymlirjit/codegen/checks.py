"""Checked mode: runtime failures in compiled code become Python exceptions, never crashes.

:func:`insert_checks` rewrites a module in the middle of lowering (after bufferization,
before ``convert-scf-to-cf``, where memref accesses and ``scf.if`` both exist):

- integer division and remainder (``arith.divsi``, ``remui``, ``ceildivsi``, ...; scalars
  and vectors) get a divisor that cannot trap (``1`` where it is ``0``, and for signed ops
  where the dividend is the minimum and the divisor ``-1``, whose quotient then wraps as
  in C compilers' ``-fwrapv``) and, where it was ``0``, record a ``ZeroDivisionError``
  (with ``error_model="numpy"``, numba's other model and numpy's own: the result is ``0``
  where the divisor is, and the CPU's divide-by-zero or overflow flag is raised, which
  numpy reports after a ufunc loop as ``np.errstate`` says; no Python is called);
- ``cf.assert`` records an ``AssertionError`` with its message instead of aborting;
- with ``boundscheck``, ``memref.load``/``store`` and ``vector.load``/``store`` outside
  their view record an ``IndexError`` and are skipped (a load yields zero), as are the
  accesses after an invalid ``memref.subview`` in the same function; where a loop's
  accesses can be checked once before it, they are (``checks_hoisting``). A module with
  a ``cf.assert`` (MLIR's runtime verification makes them too) gets these checks as well
  when its calls cannot unwind (see :func:`pymlirjit.runtime.module.call_policy`): such a
  call runs on after a failed assert, and must not then touch memory outside its arrays.

The checks live in ``checks_divisions``, ``checks_asserts``, ``checks_bounds`` and
``checks_hoisting`` (``checks_guards``: a sparse module's shape checks where calls cannot
unwind); what they all write (constants, messages, the failure call) in
``checks_writer``.

Recording a failure is a call to the built-in callback :data:`FAIL_SYMBOL`, which raises
the exception (:func:`pymlirjit.boundary.failures.raise_failure`): the call machinery of callbacks
then ends the kernel call (at once where it unwinds, else at its end with later failures
ignored) and raises it. Messages are constants in the compiled code (name, source location), so a
module loaded from the disk cache in another process raises the same ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .checks_asserts import check_assertion
from .checks_bounds import ACCESSES, check_access, check_subview, in_bounds, view_flag
from .checks_divisions import DIVISIONS, check_division
from .checks_guards import guard_checked_ops
from .checks_hoisting import version_loops
from .checks_writer import CheckWriter, declare_fail, function_containing

__all__ = ["ERROR_MODELS", "insert_assert_checks", "insert_checks"]

#: The error models (numba's names): raise ZeroDivisionError, or behave as numpy does.
ERROR_MODELS = ("python", "numpy")


def insert_checks(module: Any, *, boundscheck: bool, filename: str = "<source>",
                  source: str = "", error_model: str = "python",
                  unwinds: bool | Callable[[], bool] = True) -> int:
    """Add the checks of checked mode to ``module`` (see the module's docstring), which
    must still hold ``scf`` and ``memref`` ops; returns how many failure calls it added
    (0: the module needs no failure callback, and none is declared). ``source`` is the
    :func:`~pymlirjit.boundary.failures.source_id` of the module's text (for
    :func:`~pymlirjit.boundary.failures.register_source`); ``error_model`` one of
    :data:`ERROR_MODELS`. ``unwinds``: whether a call of the module ends at its first
    failure (see :func:`pymlirjit.runtime.module.call_policy`; a function saying it, asked
    only when it matters); if not, a ``cf.assert`` turns the access checks on, since the
    call runs on after a failed assert."""
    from mlir import ir

    writer = CheckWriter(module, filename, source, numpy_errors=error_model == "numpy")
    divisions: list[tuple[Any, bool]] = []
    assertions: list[Any] = []
    accesses: list[Any] = []
    views: list[Any] = []

    def visit(op: Any) -> Any:
        name = op.name
        if name in DIVISIONS:
            divisions.append((op, DIVISIONS[name]))
        elif name == "cf.assert":
            assertions.append(op)
        elif name in ACCESSES and not in_bounds(op):
            accesses.append(op)
        elif name == "memref.subview":
            views.append(op)
        return ir.WalkResult.ADVANCE

    with module.context, ir.Location.unknown():
        module.operation.walk(visit)
        for op, signed in divisions:
            check_division(writer, op, signed)
        for op in assertions:
            check_assertion(writer, op)
        if not boundscheck and not (assertions and not (
                unwinds() if callable(unwinds) else unwinds)):
            accesses, views = [], []
        flags: dict[str, Any] = {}  # function -> its flag, where it makes views
        for op in views:
            function = function_containing(op)
            name = writer.function_of(op)
            if function is not None and name not in flags:
                flags[name] = view_flag(writer, function)
            check_subview(writer, op, flags.get(name))
        version_loops(writer, accesses, flags)  # checked once before the loop instead
        for op in accesses:
            check_access(writer, op, flags.get(writer.function_of(op)))
        if writer.inserted:
            declare_fail(module)
        if writer.raises_fp_flags and "feraiseexcept" not in ir.SymbolTable(module.operation):
            module.body.append(ir.Operation.parse(
                "func.func private @feraiseexcept(i32) -> i32"))
    return writer.inserted


def insert_assert_checks(module: Any, *, filename: str = "<source>", source: str = "",
                         unwinds: bool = True) -> int:
    """Make each ``cf.assert`` of ``module`` outside a linalg op's body record its failure
    (as :func:`insert_checks` does) on a module still on tensors: a module the sparsifier
    lowers in one pass, where no point between bufferization and ``convert-scf-to-cf``
    exists for :func:`insert_checks` (MLIR's shape checks of linalg ops would otherwise
    abort the process). Returns how many failure calls it added. ``unwinds``: whether a
    call of the module ends at its first failure; if not, only the shape checks of linalg
    ops record theirs, each keeping its op from running
    (:func:`~pymlirjit.codegen.checks_guards.guard_checked_ops`), and other asserts still
    abort: the code after them, which they guard, would run."""
    from mlir import ir

    writer = CheckWriter(module, filename, source)
    if not unwinds:
        with module.context, ir.Location.unknown():
            guard_checked_ops(writer, module)
            if writer.inserted:
                declare_fail(module)
        return writer.inserted
    assertions: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "cf.assert" and not _in_linalg_body(op):
            assertions.append(op)
        return ir.WalkResult.ADVANCE

    with module.context, ir.Location.unknown():
        module.operation.walk(visit)
        for op in assertions:
            check_assertion(writer, op)
        if writer.inserted:
            declare_fail(module)
    return writer.inserted


def _in_linalg_body(op: Any) -> bool:
    parent = op.parent
    while parent is not None and parent.name != "builtin.module":
        if parent.name.startswith("linalg."):
            return True
        parent = parent.parent
    return False
