"""Loops as control-flow graphs: ``for`` over ``range`` (any step sign; step 0 raises
ValueError), over arrays, ``enumerate``, ``zip`` and ``a.flat``; ``while``; ``break`` and
``continue`` anywhere. Arrays a loop reassigns are block arguments of its header."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from .emit_base import EmitBase, Join, Value
from .jtypes import I64, WEAK_INT, Array, JType, Tuple
from .syntax import assigned_names

__all__ = ["LoopsMixin"]


@dataclass
class Loop:
    """Where ``break`` and ``continue`` go."""

    exit: Join
    next: Join
    depth: int = 0  # len(scopes) outside the loop: a jump out frees the scopes above


class LoopsMixin(EmitBase):
    """``for`` and ``while``."""

    loops: list[Loop]
    nonneg_vars: set[str]
    assignment_counts: dict[str, int]

    def while_(self, stmt: ast.While) -> None:
        header = self.loop_header(sorted(assigned_names(self.source, stmt.body)))
        self.jump(header)
        self.enter(header)
        exit_ = Join(self.label())
        self.at = stmt.test
        cond = self.truth(self.expr(stmt.test))
        body, out = self.label(), self.label()
        self.branch(cond, body, out)
        self.start(out)
        self.jump(exit_)
        self.start(body)
        self.loops.append(Loop(exit_, header, len(self.scopes)))
        self.block(stmt.body)
        self.loops.pop()
        self.jump(header)
        self.enter(exit_)

    def for_(self, stmt: ast.For) -> None:
        it = stmt.iter
        kind = None
        if isinstance(it, ast.Call) and it in self.info.targets:
            target = self.info.targets[it]
            kind = getattr(target, "op", None) if getattr(target, "kind", "") == "iter" \
                else None
        if kind is None and isinstance(it, ast.Call):
            from .intrinsics import find
            from .resolve import resolve
            try:
                found = find(resolve(self.source, it.func))
            except Exception:
                found = None
            kind = found.op if found is not None and found.kind == "iter" else None
        if kind == "prange" and self.program.parallel and self.parallel_for(stmt):
            return
        if kind in ("range", "prange"):
            self.range_loop(stmt, it)  # type: ignore[arg-type]
            return
        if kind == "enumerate":
            assert isinstance(it, ast.Call)
            arr = self.expr(it.args[0])
            self.counted(stmt, self.dim_i64(arr), lambda k: Value(
                "", Tuple((WEAK_INT, self.element_type(arr))),
                (Value(k, WEAK_INT), self.element(arr, k))), index_var=True)
            return
        if kind == "zip":
            assert isinstance(it, ast.Call)
            arrays = [self.expr(a) for a in it.args]
            n = self.dim_i64(arrays[0])
            for other in arrays[1:]:
                n = self.op(f"arith.minsi {n}, {self.dim_i64(other)} : i64")
            self.counted(stmt, n, lambda k: Value(
                "", Tuple(tuple(self.element_type(a) for a in arrays)),
                tuple(self.element(a, k) for a in arrays)))
            return
        arr = self.expr(it)
        if isinstance(it, ast.Attribute) and it.attr == "flat":
            arr = self.flat(arr)
        self.counted(stmt, self.dim_i64(arr), lambda k: self.element(arr, k))

    def dim_i64(self, a: Value) -> str:
        if not isinstance(a.type, Array):
            raise self.error(self.at, f"cannot iterate over {a.type}")
        return self.op(f"arith.index_cast {self.dim(a, 0)} : index to i64")

    def element_type(self, a: Value) -> JType:
        assert isinstance(a.type, Array)
        return a.type.dtype if a.type.ndim == 1 else Array(a.type.dtype, a.type.ndim - 1, False)

    def element(self, a: Value, k: str) -> Value:
        t = a.type
        assert isinstance(t, Array)
        i = self.op(f"arith.index_cast {k} : i64 to index")
        if t.ndim == 1:
            return self.load_at(a, [i])
        one, zero = self.index_const(1), self.index_const(0)
        result = Array(t.dtype, t.ndim - 1, False)
        dims = [self.dim(a, d) for d in range(1, t.ndim)]
        offsets = ", ".join([i] + [zero] * (t.ndim - 1))
        sizes = ", ".join(["1", *dims])
        strides = ", ".join([one] * t.ndim)
        return Value(self.op(f"memref.subview {a.ssa}[{offsets}] [{sizes}] [{strides}] : "
                             f"{t.mlir} to {result.mlir}"), result)

    def range_loop(self, stmt: ast.For, call: ast.Call) -> None:
        args = call.args
        zero, one = self.const(0, I64), self.const(1, I64)
        start = self.convert(self.expr(args[0]), I64) if len(args) > 1 else zero
        stop = self.convert(self.expr(args[1] if len(args) > 1 else args[0]), I64)
        step_node = args[2] if len(args) == 3 else None
        constant = _literal_int(step_node) if step_node is not None else 1
        if constant == 0:
            self.raise_python(ValueError, ("range() arg 3 must not be zero",))
            return
        if constant is not None:
            start_nonneg = len(args) == 1 or self.nonneg(args[0])
            target = stmt.target
            if constant > 0 and start_nonneg and isinstance(target, ast.Name) and \
                    self.assignment_counts.get(target.id, 0) == 1:
                self.nonneg_vars.add(target.id)
            pred = "slt" if constant > 0 else "sgt"
            step = self.const(constant, I64).ssa
            self.loop(stmt, start.ssa, lambda c: self.op(
                f"arith.cmpi {pred}, {c}, {stop.ssa} : i64"), lambda c: Value(c, WEAK_INT),
                step)
            return
        assert step_node is not None
        step = self.convert(self.expr(step_node), I64).ssa
        is_zero = self.op(f"arith.cmpi eq, {step}, {zero.ssa} : i64")
        self.raise_python(ValueError, ("range() arg 3 must not be zero",), when=is_zero)
        # Trip count: ceil((stop - start) / step), at least 0, for either sign of step.
        span = self.op(f"arith.subi {stop.ssa}, {start.ssa} : i64")
        n = self.op(f"arith.ceildivsi {span}, {step} : i64")
        n = self.op(f"arith.maxsi {n}, {zero.ssa} : i64")
        del one
        self.counted(stmt, n, lambda k: Value(self.op(f"arith.addi {start.ssa}, " + self.op(
            f"arith.muli {k}, {step} : i64") + " : i64"), WEAK_INT))

    def counted(self, stmt: ast.For, n: str, produce: Callable[[str], Value],
                index_var: bool = False) -> None:
        """``for target in ...`` as a counter k over [0, n), target = produce(k)."""
        if index_var and isinstance(stmt.target, ast.Tuple) and stmt.target.elts and \
                isinstance(stmt.target.elts[0], ast.Name) and \
                self.assignment_counts.get(stmt.target.elts[0].id, 0) == 1:
            self.nonneg_vars.add(stmt.target.elts[0].id)
        self.loop(stmt, self.const(0, I64).ssa, lambda c: self.op(
            f"arith.cmpi slt, {c}, {n} : i64"), produce, self.const(1, I64).ssa)

    def loop(self, stmt: ast.For, init: str, test: Callable[[str], str],
             produce: Callable[[str], Value], step: str) -> None:
        counter = self.slot(I64)
        self.do(f"memref.store {init}, {counter}[] : memref<i64>")
        header = self.loop_header(sorted(assigned_names(self.source, stmt.body)))
        self.jump(header)
        self.enter(header)
        c = self.op(f"memref.load {counter}[] : memref<i64>")
        body, out = self.label(), self.label()
        self.branch(test(c), body, out)
        exit_, latch = Join(self.label()), Join(self.label())
        self.start(out)
        self.jump(exit_)
        self.start(body)
        self.at = stmt.target
        self.assign(stmt.target, produce(c))
        self.loops.append(Loop(exit_, latch, len(self.scopes)))
        self.block(stmt.body)
        self.loops.pop()
        self.jump(latch)
        if self.enter(latch):
            self.at = stmt
            c = self.op(f"memref.load {counter}[] : memref<i64>")
            following = self.op(f"arith.addi {c}, {step} : i64")
            self.do(f"memref.store {following}, {counter}[] : memref<i64>")
            self.jump(header)
        self.enter(exit_)


def _literal_int(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_int(node.operand)
        return None if inner is None else -inner
    return None
