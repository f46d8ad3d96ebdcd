"""Bounds checks hoisted out of loops (:mod:`pymlirjit.codegen.checks`), which LLVM cannot
do: a checked access in a loop no longer vectorizes, and ``boundscheck=True`` cost a
stencil 10x.

An access in a nest of ``scf.for`` and ``scf.parallel`` loops whose indices are
``iv + c`` (an induction variable of the nest, or a value defined before the loop, plus
a constant) into a memref defined before the loop stays in bounds for every iteration
if it does at both ends of each range: a few comparisons before the loop say so.
:func:`version_loops` puts each outermost loop whose accesses are all of that kind in
an ``scf.if`` on those comparisons: its ``then`` branch holds an unchecked copy of the
loop, its ``else`` branch the loop itself, which gets the usual per-access checks (so a
call that goes out of bounds fails as before, at the same access, with the same
message, after the same earlier iterations). Loops that make views
(``memref.subview``) are left alone.
"""

from __future__ import annotations

from typing import Any

from .checks_bounds import ACCESSES, dim, not_flagged
from .checks_writer import CheckWriter, all_of, constant_value

__all__ = ["version_loops"]

#: How deep an index is followed through ``arith.addi``/``subi`` by constants.
_MAX_DEPTH = 8


def version_loops(w: CheckWriter, accesses: list[Any], flags: dict[str, Any]) -> int:
    """Version the outermost ``scf.for`` or ``scf.parallel`` loops whose ``accesses``
    (memref and vector loads and stores, still unchecked) can all be checked once before
    the loop (see the module's docstring); ``flags``: the invalid-view flag of each
    function that has one. Returns how many loops were versioned; their copies' accesses
    are not in ``accesses`` and stay unchecked."""
    from mlir import ir

    by_loop: dict[Any, list[Any]] = {}
    for op in accesses:
        for loop in _loops_around(op):
            by_loop.setdefault(loop, []).append(op)
    loops = sorted(by_loop, key=lambda loop: len(_loops_around(loop)))
    versioned: list[Any] = []
    for loop in loops:
        if any(_inside(loop, done) for done in versioned) or _makes_views(loop):
            continue
        with ir.InsertionPoint(loop), loop.location:
            conditions = []
            for op in by_loop[loop]:
                condition = _in_bounds_throughout(w, op, loop)
                if condition is None:
                    break
                conditions.append(condition)
            else:
                flag = flags.get(w.function_of(loop))
                if flag is not None:
                    conditions.append(not_flagged(w, flag))
                _version(loop, all_of(conditions))
                versioned.append(loop)
    return len(versioned)


#: The loops whose accesses are checked once before them where they can be: serial
#: loops, and the parallel loops of a ``parallel=True`` module (whose accesses are all
#: checked where it has shape checks: its calls run on after a failed one).
_LOOPS = frozenset({"scf.for", "scf.parallel"})


def _loops_around(op: Any) -> list[Any]:
    """The ``scf.for`` and ``scf.parallel`` loops around ``op`` in its function,
    innermost first."""
    loops = []
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name in _LOOPS:
            loops.append(parent)
        parent = parent.parent
    return loops


def _inside(op: Any, ancestor: Any) -> bool:
    """Whether ``op`` is nested (at any depth) in ``ancestor``."""
    ancestor = ancestor.operation
    parent = op.parent
    while parent is not None:
        if parent.operation == ancestor:
            return True
        parent = parent.parent
    return False


def _same(op: Any, other: Any) -> bool:
    return bool(op.operation == other.operation)


def _makes_views(loop: Any) -> bool:
    from mlir import ir

    found = []

    def visit(op: Any) -> Any:
        if op.name == "memref.subview":
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    loop.operation.walk(visit)
    return bool(found)


def _inside_block(block: Any, loop: Any) -> bool:
    op = block.owner
    return _same(op, loop) or _inside(op, loop)


def _range_of(value: Any, op: Any) -> tuple[Any, Any, Any] | None:
    """(lower bound, upper bound, step) of the range of ``value``, a block argument of
    the loop ``op``; None if it is not one of its induction variables (an iter_arg)."""
    arguments = list(op.regions[0].blocks[0].arguments)
    if op.name == "scf.for":
        return (op.operands[0], op.operands[1], op.operands[2]) \
            if value == arguments[0] else None
    rank = len(arguments)  # scf.parallel: its bounds, then its steps, then its inits
    for k, argument in enumerate(arguments):
        if value == argument:
            return op.operands[k], op.operands[rank + k], op.operands[2 * rank + k]
    return None


def _affine(value: Any, loop: Any, depth: int = 0) -> tuple[Any, int, Any] | None:
    """``value`` as ``base + constant``: (base, constant, the (lower bound, upper
    bound, step) of the loop variable ``base`` is, or None for a value defined before
    ``loop``); None if it is neither."""
    from mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block):
        op = owner.owner
        if op.name in _LOOPS and (_same(op, loop) or _inside(op, loop)):
            bounds = _range_of(value, op)
            return None if bounds is None else (value, 0, bounds)
        return (value, 0, None) if not _inside_block(owner, loop) else None
    if not (_same(owner, loop) or _inside(owner, loop)):
        return value, 0, None
    if depth >= _MAX_DEPTH or owner.name not in ("arith.addi", "arith.subi"):
        return None
    left, right = owner.operands[0], owner.operands[1]
    shift = constant_value(right)
    if shift is not None:
        inner = _affine(left, loop, depth + 1)
        sign = 1 if owner.name == "arith.addi" else -1
        return None if inner is None else (inner[0], inner[1] + sign * shift, inner[2])
    shift = constant_value(left)
    if shift is not None and owner.name == "arith.addi":
        inner = _affine(right, loop, depth + 1)
        return None if inner is None else (inner[0], inner[1] + shift, inner[2])
    return None


def _in_bounds_throughout(w: CheckWriter, op: Any, loop: Any) -> Any:
    """An i1 computed before ``loop``: ``op``'s indices lie in its memref at the first
    and the last value of each range they take in ``loop`` (None: not of that kind)."""
    from mlir import ir
    from mlir.dialects import arith

    memref_at, first = ACCESSES[op.name]
    source = op.operands[memref_at]
    if not _outside(source, loop):
        return None
    memref_type = ir.MemRefType(source.type)
    indices = list(op.operands[first:first + memref_type.rank])
    lanes: list[int] = []
    if op.name.startswith("vector.") and not isinstance(memref_type.element_type,
                                                          ir.VectorType):
        value = op.results[0] if op.name == "vector.load" else op.operands[0]
        lanes = list(ir.VectorType(value.type).shape)
    forms = [_affine(index, loop) for index in indices]
    if any(form is None for form in forms):
        return None
    for form in forms:
        assert form is not None
        if form[2] is not None and not all(_outside(bound, loop) for bound in form[2]):
            return None  # a range that changes in the loop (a triangular nest)
    checks = []
    for d, form in enumerate(forms):
        assert form is not None
        base, shift, bounds = form
        extent = dim(w, source, d)
        low, high = (base, base) if bounds is None else (
            bounds[0], arith.SubIOp(bounds[1], w.index(1)).result)
        lane = d - (len(indices) - len(lanes))
        width = lanes[lane] if lane >= 0 else 1
        low = arith.AddIOp(low, w.index(shift)).result if shift else low
        high = arith.AddIOp(high, w.index(shift + width - 1)).result \
            if shift + width - 1 else high
        checks.append(arith.AndIOp(
            arith.CmpIOp(arith.CmpIPredicate.ult, low, extent).result,
            arith.CmpIOp(arith.CmpIPredicate.ult, high, extent).result).result)
    return all_of(checks) if checks else w.constant(1, ir.IntegerType.get_signless(1))


def _outside(value: Any, loop: Any) -> bool:
    from mlir import ir

    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner
    return not (_same(op, loop) or _inside(op, loop))


def _version(loop: Any, ok: Any) -> None:
    """``scf.if ok { unchecked copy of loop } else { loop }`` where ``loop`` was."""
    from mlir import ir
    from mlir.dialects import scf

    results = [r.type for r in loop.results]
    branch = scf.IfOp(ok, results, has_else=True)
    for old, new in zip(loop.results, branch.results):
        old.replace_all_uses_with(new)
    with ir.InsertionPoint(branch.then_block):
        copy = loop.clone()
        scf.YieldOp(list(copy.results))
    with ir.InsertionPoint(branch.else_block):
        kept = scf.YieldOp(list(loop.results))
    loop.move_before(kept)
