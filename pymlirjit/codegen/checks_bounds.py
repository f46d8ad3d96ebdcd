"""Checked mode's bounds checks (:mod:`pymlirjit.codegen.checks`): with ``boundscheck``,
a memref or vector load or store outside its memref records an IndexError and is skipped
(a load yields zero), and so is every access after an invalid ``memref.subview`` in the
same function."""

from __future__ import annotations

from typing import Any

from ..boundary.failures import INDEX
from .checks_writer import CheckWriter, all_of, function_containing

__all__ = ["ACCESSES", "IN_BOUNDS", "check_access", "check_subview", "dim", "in_bounds",
           "not_flagged", "view_flag"]

#: Accesses checked with ``boundscheck``: memref operand and first index operand.
ACCESSES = {"memref.load": (0, 1), "memref.store": (1, 2), "vector.load": (0, 1),
            "vector.store": (1, 2)}

#: A unit attribute of the ``func.func`` ops pymlirjit generates whose accesses are in
#: bounds by construction (they check their operands' shapes first): never checked.
IN_BOUNDS = "pymlirjit.in_bounds"


def in_bounds(op: Any) -> bool:
    """Whether ``op`` is in a function marked :data:`IN_BOUNDS`."""
    function = function_containing(op)
    return function is not None and IN_BOUNDS in function.attributes


def dim(w: CheckWriter, memref_value: Any, d: int) -> Any:
    """The size of dimension ``d`` of ``memref_value`` (a constant where static)."""
    from mlir import ir
    from mlir.dialects import memref

    size = ir.MemRefType(memref_value.type).shape[d]
    if size != ir.ShapedType.get_dynamic_size():
        return w.index(size)
    return memref.DimOp(memref_value, w.index(d)).result


def view_flag(w: CheckWriter, function: Any) -> Any:
    """A per-call i8 flag of ``function``, set once a view it made was invalid."""
    from mlir import ir
    from mlir.dialects import memref

    block = function.regions[0].blocks[0]
    i8 = ir.IntegerType.get_signless(8)
    first = block.operations[0]
    with ir.InsertionPoint(first), function.location:
        flag = memref.AllocaOp(ir.MemRefType.get([], i8), [], []).result
        memref.StoreOp(w.constant(0, i8), flag, [])
    return flag


def not_flagged(w: CheckWriter, flag: Any) -> Any:
    """An i1: whether ``flag`` (see :func:`view_flag`) is still clear."""
    from mlir import ir
    from mlir.dialects import arith, memref

    i8 = ir.IntegerType.get_signless(8)
    return arith.CmpIOp(arith.CmpIPredicate.eq, memref.LoadOp(flag, []).result,
                        w.constant(0, i8)).result


def check_subview(w: CheckWriter, op: Any, flag: Any) -> None:
    """Check each dimension of ``op``'s view lies in its source (where not empty)."""
    from mlir import ir
    from mlir.dialects import arith, memref

    source = op.operands[0]
    dynamic = ir.ShapedType.get_dynamic_size()  # MLIR 22: one sentinel for all
    attributes = op.attributes
    operands = iter(op.operands[1:])

    def mixed(name: str) -> list[Any]:
        return [next(operands) if value == dynamic else w.index(value)
                for value in ir.DenseI64ArrayAttr(attributes[name])]

    with ir.InsertionPoint(op), op.location:
        offsets, sizes, strides = (mixed("static_offsets"), mixed("static_sizes"),
                                   mixed("static_strides"))
        checks = []
        for d, (offset, size, stride) in enumerate(zip(offsets, sizes, strides)):
            extent = dim(w, source, d)
            last = arith.AddIOp(offset, arith.MulIOp(
                arith.SubIOp(size, w.index(1)).result, stride).result).result
            inside = arith.AndIOp(
                arith.CmpIOp(arith.CmpIPredicate.ult, offset, extent).result,
                arith.CmpIOp(arith.CmpIPredicate.ult, last, extent).result).result
            empty = arith.CmpIOp(arith.CmpIPredicate.eq, size, w.index(0)).result
            checks.append((d, arith.OrIOp(empty, inside).result, last, extent))
        ok = all_of([check[1] for check in checks])
        if ok is None:
            return
        where = w.where(op)
        bad = arith.XOrIOp(ok, w.constant(1, ir.IntegerType.get_signless(1))).result

        def then() -> None:
            _fail_at(w, checks, f"invalid memref.subview in {where}: {{detail}}")
            if flag is not None:
                memref.StoreOp(w.constant(1, ir.IntegerType.get_signless(8)), flag, [])

        w.if_failed(bad, then)


def _fail_at(w: CheckWriter, checks: list[tuple[int, Any, Any, Any]], text: str) -> None:
    """Record an IndexError naming the first dimension whose check failed."""
    from mlir.dialects import arith

    d, _, index, extent = checks[-1]
    dim = w.index(d)
    for d_, ok, index_, extent_ in reversed(checks[:-1]):
        dim = arith.SelectOp(ok, dim, w.index(d_)).result
        index = arith.SelectOp(ok, index, index_).result
        extent = arith.SelectOp(ok, extent, extent_).result
    w.fail(INDEX, text, dim, index, extent)


def check_access(w: CheckWriter, op: Any, flag: Any) -> None:
    """Run ``op`` (a load or store) only where its indices lie in its memref (and no
    view of its function was invalid); else record an IndexError (a load yields 0)."""
    from mlir import ir
    from mlir.dialects import arith, scf

    memref_at, first = ACCESSES[op.name]
    source = op.operands[memref_at]
    memref_type = ir.MemRefType(source.type)
    indices = list(op.operands[first:first + memref_type.rank])
    # vector.load/store of a memref of scalars: the trailing dims hold whole vectors.
    lanes: list[int] = []
    if op.name.startswith("vector.") and not isinstance(memref_type.element_type,
                                                          ir.VectorType):
        value = op.results[0] if op.name == "vector.load" else op.operands[0]
        lanes = list(ir.VectorType(value.type).shape)
    with ir.InsertionPoint(op), op.location:
        checks = []
        for d, index in enumerate(indices):
            extent = dim(w, source, d)
            inside = arith.CmpIOp(arith.CmpIPredicate.ult, index, extent).result
            lane = d - (len(indices) - len(lanes))
            if lane >= 0 and lanes[lane] > 1:  # index + lanes <= extent
                room = arith.SubIOp(extent, index).result
                inside = arith.AndIOp(inside, arith.CmpIOp(
                    arith.CmpIPredicate.uge, room, w.index(lanes[lane])).result).result
            checks.append((d, inside, index, extent))
        ok = all_of([check[1] for check in checks])
        if flag is not None:
            clear = not_flagged(w, flag)
            ok = clear if ok is None else arith.AndIOp(ok, clear).result
        if ok is None:
            return
        text = f"{op.name} in {w.where(op)}: {{detail}}"
        results = [r.type for r in op.results]
        branch = scf.IfOp(ok, results, has_else=True)
        for old, new in zip(op.results, branch.results):
            old.replace_all_uses_with(new)
        with ir.InsertionPoint(branch.then_block):
            done = scf.YieldOp(list(op.results))
        op.move_before(done)
        with ir.InsertionPoint(branch.else_block):
            if checks:
                _fail_at(w, checks, text)
            scf.YieldOp([w.constant(0, t) for t in results])
