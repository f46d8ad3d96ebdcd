"""The emitter: one Python function (specialized for its parameter types) as one
``func.func`` whose body is a control-flow graph of ``cf`` blocks, every op located at its
Python line and column. Its parts: :mod:`.emit_base`, :mod:`.emit_ops`,
:mod:`.emit_arrays`, :mod:`.emit_loops`, :mod:`.emit_calls`, :mod:`.emit_parallel`,
:mod:`.emit_memory`."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .calls import Callee, ForeignCall, mlir_of
from .emit_arrays import ArraysMixin
from .emit_base import Value
from .emit_calls import CallsMixin, flat_types, flatten_values, rebuild
from .emit_complex import ComplexMixin
from .emit_elementwise import ElementwiseMixin
from .emit_linalg import LinalgMixin
from .emit_loops import LoopsMixin
from .emit_memory import MemoryMixin
from .emit_numpy import NumpyMixin
from .emit_ops import OpsMixin
from .emit_overlap import unsafe_overlap
from .emit_parallel import ParallelMixin
from .emit_random import RandomMixin
from .jtypes import BOOL, Array, JType, NoneT, Optional, Scalar
from .npfunctions import NumpyCall
from .ownership import aliases, freeable, has_array, managed, name_bindings
from .reductions import ReductionsMixin
from .syntax import assignment_counts

if TYPE_CHECKING:
    from .host import Host
    from .infer import Inference
from .source import FunctionSource

__all__ = ["Emitter"]


class Emitter(LinalgMixin, ReductionsMixin, NumpyMixin, ArraysMixin, CallsMixin, ComplexMixin,
              ElementwiseMixin, OpsMixin, ParallelMixin, LoopsMixin, RandomMixin, MemoryMixin):
    """Emit one function: :meth:`function` returns its text."""

    def __init__(self, program: Host, source: FunctionSource, info: Inference,
                 symbol: str, params: tuple[JType, ...], private: bool) -> None:
        super().__init__(program, source, info)
        self.symbol, self.params, self.private = symbol, params, private
        self.loops = []
        self.nonneg_vars = set()
        self.assignment_counts = assignment_counts(source)
        allocating: set[ast.AST] = {
            c for c, t in info.targets.items()
            if getattr(t, "kind", "") in ("alloc", "alloc_like")
            or (getattr(t, "kind", "") in ("np1", "abs") and isinstance(info.types.get(c), Array))
            or (getattr(t, "kind", "") == "numpy" and isinstance(info.types.get(c), Array)
                and getattr(t, "op", "") not in ("transpose", "reshape"))}
        allocating |= {n for n, t in info.types.items()
                       if isinstance(n, (ast.BinOp, ast.UnaryOp)) and isinstance(t, Array)}
        calls = {c for c, t in info.targets.items()
                 if isinstance(t, (Callee, ForeignCall)) and has_array(t.result)}
        self.freeable = freeable(source.tree, info.types, info.variables,
                                 self.assignment_counts, allocating, allocating | calls)
        self.managed = managed(source.tree, info.types, info.variables,
                               self.assignment_counts, allocating, allocating | calls)
        self.allocating = allocating

    def function(self) -> str:
        tree = self.source.tree
        signature = []
        for arg, t in zip(tree.args.args, self.params):
            flat: list[Value] = []
            for item in flat_types(t):
                plain = arg.arg.isascii() and len(flat_types(t)) == 1  # MLIR names are ASCII
                name = f"%{arg.arg}" if plain else self.fresh()
                flat.append(Value(name, item))
                signature.append(f"{name}: {mlir_of(item)}")
            value, _ = rebuild(t, flat)
            self.at = arg
            if arg.arg in self.info.variables:
                self.store_var(arg.arg, value)
        for name in sorted(self.managed):
            self.own_slots[name] = self.slot(BOOL)
            self.entry.append(f"    memref.store {self.const(0, Scalar('int', 8)).ssa}, "
                              f"{self.own_slots[name]}[] : memref<i8>")
        self.block(tree.body)
        if not self.terminated:
            self.at = tree
            self.free_managed(set())
            if isinstance(self.info.result, Optional):  # falls off the end: None
                none = self.convert(Value("", NoneT()), self.info.result)
                self.do(f"func.return {none.items[0].ssa}, {none.items[1].ssa} : i1, "
                        f"{self.info.result.item.mlir}")
            else:
                self.do("func.return")
        results = ", ".join(mlir_of(t) for t in flat_types(self.info.result))
        visibility = "private " if self.private else ""
        head = f"  func.func {visibility}@{self.symbol}({', '.join(signature)})"
        if results:
            head += f" -> ({results})"
        body = "\n".join(filter(None, [*self.entry, *self.lines]))
        return f"{head} {{\n{body}\n  }}{self.source.loc(tree)}"

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt]) -> None:
        self.scopes.append([])
        for stmt in stmts:
            if self.terminated:
                break  # after return, raise, break or continue: never runs
            self.at = stmt
            self.stmt(stmt)
        if not self.terminated:
            self.free(len(self.scopes) - 1)  # falls off its end: its arrays go
        self.scopes.pop()

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            if self.fused_into_view(stmt):
                return
            value = self.expr(stmt.value)
            bindings = name_bindings(stmt)
            self.at = stmt
            for b in bindings:
                if b.name in self.managed:
                    self.replace_owned(b.name, value if b.position is None
                                       else value.items[b.position])
            for target in stmt.targets:
                self.at = stmt
                self.assign(target, value)
            for b in bindings:
                if b.name in self.freeable:
                    self.scopes[-1].append(self.arrays[b.name])
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, self.expr(stmt.value))
        elif isinstance(stmt, ast.AugAssign):
            self.augmented(stmt)
        elif isinstance(stmt, ast.If):
            self.if_(stmt)
        elif isinstance(stmt, ast.For):
            self.for_(stmt)
        elif isinstance(stmt, ast.While):
            self.while_(stmt)
        elif isinstance(stmt, ast.Break):
            self.free(self.loops[-1].depth)
            self.jump(self.loops[-1].exit)
        elif isinstance(stmt, ast.Continue):
            self.free(self.loops[-1].depth)
            self.jump(self.loops[-1].next)
        elif isinstance(stmt, ast.Return):
            self.return_(stmt)
        elif isinstance(stmt, ast.Raise):
            self.raise_(stmt)
        elif isinstance(stmt, ast.Assert):
            self.assertion(stmt)
        elif isinstance(stmt, ast.Expr) and not (isinstance(stmt.value, ast.Constant)
                                                 and isinstance(stmt.value.value, str)):
            for v in flatten_values(self.expr(stmt.value)):  # helper(t): its result unused
                self.release(v)

    def assign(self, target: ast.expr, value: Value) -> None:
        if isinstance(target, ast.Name):
            self.store_var(target.id, value)
        elif isinstance(target, ast.Tuple):
            for item, v in zip(target.elts, value.items):
                self.assign(item, v)
        elif isinstance(target, ast.Subscript):
            self.store_element(target, value)

    def fused_into_view(self, stmt: ast.Assign) -> bool:
        """``view[...] = <whole-array expression>``: computed straight into the view, in
        one loop, unless an array of the expression may overlap it (then into a new
        array first, as numpy's). False, with nothing emitted, for other statements."""
        target, node = stmt.targets[0], stmt.value
        if len(stmt.targets) != 1 or not isinstance(target, ast.Subscript):
            return False
        result, view_type = self.info.types.get(node), self.info.types.get(target)
        if not (isinstance(result, Array) and isinstance(view_type, Array)
                and result.ndim <= view_type.ndim and self.fusable(node)):
            return False
        base_type = self.info.types.get(target.value)
        indices = self.indices(target)
        if not (isinstance(base_type, Array) and (
                any(isinstance(i, ast.Slice) for i in indices) or len(indices) < base_type.ndim)):
            return False
        leaves: dict[ast.AST, Value] = {}
        self._leaves(node, leaves, root=True)  # the operands, evaluated as expr() would
        operands = list(leaves.values())
        dims = self.broadcast_dims(operands, result.ndim)
        view = self.view(self.expr(target.value), indices, target)
        assert isinstance(view.type, Array)
        view_dims = [self.dim(view, d) for d in range(view.type.ndim)]
        self.at = target
        self.check_assignable(dims, view_dims)
        unsafe = self.const(False, BOOL).ssa
        for v in operands:
            if isinstance(v.type, Array):
                unsafe = self.op(f"arith.ori {unsafe}, {unsafe_overlap(self, view, v)} : i1")
        direct, through, done = self.label(), self.label(), self.label()
        self.branch(unsafe, through, direct)
        self.start(direct)
        self.broadcast_loop(view, view_dims, leaves, lambda env: self._element(node, env))
        self.goto(done)
        self.start(through)
        out = self.new_array(dims, result)
        self.broadcast_loop(out, dims, leaves, lambda env: self._element(node, env))
        self.fresh_temps.add(out.ssa)
        self.store_view(view, out)  # frees out
        self.goto(done)
        self.start(done)
        for v in operands:
            self.release(v)
        return True

    def augmented(self, stmt: ast.AugAssign) -> None:
        target = stmt.target
        result = self.info.types[stmt]
        value = self.expr(stmt.value)
        if isinstance(target, ast.Name) and isinstance(self.info.variables[target.id], Array):
            self.at = stmt  # a += b on an array: in place, as numpy's
            self.store_view(self.load_var(target.id), value, stmt.op, result)
        elif isinstance(target, ast.Name):
            current = self.load_var(target.id)
            self.at = stmt
            self.store_var(target.id, self.binop(stmt.op, current, value, result, stmt.value))
        else:
            assert isinstance(target, ast.Subscript)
            current = self.load_element(target)
            self.at = stmt
            if isinstance(current.type, Array):  # a view: a[1:] += v, element by element
                self.store_view(current, value, stmt.op, result)
                return
            self.store_element(target, self.binop(stmt.op, current, value, result, stmt.value))

    def if_(self, stmt: ast.If) -> None:
        from .emit_base import Join
        cond = self.truth(self.expr(stmt.test))
        then, other = self.label(), self.label()
        merge = Join(self.label())
        self.branch(cond, then, other)
        before = dict(self.arrays)
        self.start(then)
        self.block(stmt.body)
        self.jump(merge)
        self.arrays = dict(before)
        self.start(other)
        self.block(stmt.orelse)
        self.jump(merge)
        self.enter(merge)

    def is_none(self, node: ast.Compare) -> Value:
        """``x is None`` / ``x is not None``: an optional's flag (known for the others)."""
        left, right = self.expr(node.left), self.expr(node.comparators[0])
        other = right if isinstance(left.type, NoneT) else left
        if isinstance(other.type, Optional):
            none = self.op(f"arith.xori {other.items[0].ssa}, "
                           f"{self.const(True, BOOL).ssa} : i1")
        else:
            none = self.const(isinstance(other.type, NoneT), BOOL).ssa
        if isinstance(node.ops[0], ast.IsNot):
            none = self.op(f"arith.xori {none}, {self.const(True, BOOL).ssa} : i1")
        return Value(none, BOOL)

    def return_(self, stmt: ast.Return) -> None:
        result = self.info.result
        if isinstance(result, NoneT):
            if stmt.value is not None:
                self.expr(stmt.value)
            self.at = stmt
            self.free_managed(set())
            self.free(0)
            self.do("func.return")
        else:
            given = self.expr(stmt.value) if stmt.value is not None else Value("", NoneT())
            value = self.convert(given, result)
            flat = flatten_values(value)
            for v in flat:
                self.fresh_temps.discard(v.ssa)  # returned: Python owns it
            self.at = stmt
            self.free_managed(aliases(stmt.value, self.info.types, self.allocating))
            self.free(0)
            self.do(f"func.return {', '.join(v.ssa for v in flat)} : "
                    f"{', '.join(mlir_of(v.type) for v in flat)}")
        self.terminated = True

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Value:
        saved = self.at
        self.at = node
        try:
            value = self._expr(node)
            if isinstance(value.type, Optional) and not isinstance(
                    self.info.types.get(node), Optional):
                value = self.unwrap(value)  # an optional used as a number
            return value
        finally:
            self.at = saved

    def _expr(self, node: ast.expr) -> Value:
        t = self.info.types.get(node)
        if node in self.info.constants:
            value = self.info.constants[node]
            assert isinstance(t, Scalar)
            return self.const(value.item() if hasattr(value, "item") else value, t)
        if isinstance(node, ast.Name):  # the commonest
            return self.load_var(node.id)
        if isinstance(node, ast.Constant) and node.value is None:
            return Value("", NoneT())
        if isinstance(node, ast.Constant):
            assert isinstance(t, Scalar) and isinstance(node.value, (bool, int, float, complex))
            return self.const(node.value, t)
        assert t is not None
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value)
            if isinstance(base.type, Scalar):  # x.real, z.imag
                return self.number_attribute(base, node.attr, t)
            assert isinstance(base.type, Array)
            if node.attr == "shape":
                return self.shape(base)
            if node.attr == "ndim":
                return self.const(base.type.ndim, t)  # type: ignore[arg-type]
            if node.attr == "size":
                return self.size(base)
            if node.attr == "T":
                return self.transposed(base, None)
            return self.flat(base)
        if isinstance(node, ast.Subscript):
            return self.load_element(node)
        if self.fusable(node):  # element by element, one loop for the whole expression
            return self.fused(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return self.matmul(self.expr(node.left), self.expr(node.right), t)
        target = self.info.targets.get(node) if isinstance(node, ast.Call) else None
        if isinstance(target, NumpyCall):  # np.dot, a.sum(axis=0), np.arange...
            return self.numpy_call(node, target.op, target.axis, t)  # type: ignore[arg-type]
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            return self.binop(node.op, left, right, t, node.right)
        if isinstance(node, ast.UnaryOp):
            return self.unary(node, self.expr(node.operand), t)
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            return self.is_none(node)
        if isinstance(node, ast.Compare):
            return self.chained(node)
        if isinstance(node, ast.BoolOp):
            return self.short_circuit(node, t)
        if isinstance(node, ast.IfExp):
            return self.conditional(node, t)
        if isinstance(node, ast.Tuple):
            return Value("", t, tuple(self.expr(e) for e in node.elts))
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.error(node, f"{type(node).__name__} is not supported")

