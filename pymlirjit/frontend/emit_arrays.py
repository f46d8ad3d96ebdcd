"""Arrays: ``.shape``/``.ndim``/``.size``/``len``, indexing with Python's negative indices,
basic slices as ``memref.subview`` views, element stores, and ``np.empty``/``zeros``/
``ones`` (and ``*_like``) as ``memref.alloc`` (a returned array owns its memory)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from .emit_base import EmitBase, Value
from .jtypes import WEAK_INT, Array, JType, Scalar, Tuple, literal_int

__all__ = ["ArraysMixin"]


class ArraysMixin(EmitBase):
    """What the emitter does with arrays."""

    nonneg_vars: set[str]

    def dim(self, a: Value, d: int) -> str:
        assert isinstance(a.type, Array)
        return self.op(f"memref.dim {a.ssa}, {self.index_const(d)} : {a.type.mlir}")

    def dim_value(self, a: Value, d: int) -> Value:
        return Value(self.op(f"arith.index_cast {self.dim(a, d)} : index to i64"), WEAK_INT)

    def shape(self, a: Value) -> Value:
        assert isinstance(a.type, Array)
        items = tuple(self.dim_value(a, d) for d in range(a.type.ndim))
        return Value("", Tuple((WEAK_INT,) * a.type.ndim), items)

    def size(self, a: Value) -> Value:
        assert isinstance(a.type, Array)
        total = self.const(1, WEAK_INT).ssa
        for d in range(a.type.ndim):
            total = self.op(f"arith.muli {total}, {self.dim_value(a, d).ssa} : i64")
        return Value(total, WEAK_INT)

    def nonneg(self, node: ast.expr) -> bool:
        """Whether ``node`` is surely >= 0 (its index then needs no wrap)."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int) and node.value >= 0
        if isinstance(node, ast.Name):
            return node.id in self.nonneg_vars
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult,
                                                                ast.FloorDiv, ast.Mod)):
            if isinstance(node.op, ast.Mod):
                return self.nonneg(node.right)
            return self.nonneg(node.left) and self.nonneg(node.right)
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "len"

    def index_into(self, a: Value, d: int, node: ast.expr) -> str:
        """The ``index`` of ``node`` on dimension ``d`` of ``a``, negative ones wrapped."""
        i = self.to_index(self.expr(node))
        if self.nonneg(node):
            return i
        zero = self.index_const(0)
        neg = self.op(f"arith.cmpi slt, {i}, {zero} : index")
        wrapped = self.op(f"arith.addi {i}, {self.dim(a, d)} : index")
        return self.op(f"arith.select {neg}, {wrapped}, {i} : index")

    def indices(self, node: ast.Subscript) -> list[ast.expr]:
        return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]

    def load_element(self, node: ast.Subscript) -> Value:
        base = self.expr(node.value)
        if isinstance(base.type, Tuple):
            n = literal_int(node.slice)  # checked by the inference
            assert n is not None
            return base.items[n]
        assert isinstance(base.type, Array)
        indices = self.indices(node)
        if any(isinstance(i, ast.Slice) for i in indices) or len(indices) < base.type.ndim:
            return self.view(base, indices, node)
        idx = [self.index_into(base, d, i) for d, i in enumerate(indices)]
        t = base.type
        return Value(self.op(f"memref.load {base.ssa}[{', '.join(idx)}] : {t.mlir}"), t.dtype)

    def store_element(self, target: ast.Subscript, value: Value) -> None:
        base = self.expr(target.value)
        assert isinstance(base.type, Array)
        indices = self.indices(target)
        if any(isinstance(i, ast.Slice) for i in indices) or len(indices) < base.type.ndim:
            self.store_view(self.view(base, indices, target), value)
            return
        idx = [self.index_into(base, d, i) for d, i in enumerate(indices)]
        v = self.convert(value, base.type.dtype)
        self.do(f"memref.store {v.ssa}, {base.ssa}[{', '.join(idx)}] : {base.type.mlir}")

    def view(self, base: Value, indices: list[ast.expr], node: ast.AST) -> Value:
        """``base[...]`` with slices or fewer indices than dims: a strided view."""
        t = base.type
        assert isinstance(t, Array)
        offsets, sizes, strides = [], [], []
        kept = 0
        for d in range(t.ndim):
            index = indices[d] if d < len(indices) else ast.Slice(None, None, None)
            one = self.index_const(1)
            if isinstance(index, ast.Slice):
                start, length, step = self.slice_bounds(base, d, index)
                offsets.append(start)
                sizes.append(length)
                strides.append(step)
                kept += 1
            else:
                offsets.append(self.index_into(base, d, index))
                sizes.append("1")
                strides.append(one)
        result = Array(t.dtype, kept, False)
        text = (f"memref.subview {base.ssa}[{', '.join(offsets)}] [{', '.join(sizes)}] "
                f"[{', '.join(strides)}] : {t.mlir} to {result.mlir}")
        return Value(self.op(text), result)

    def store_view(self, view: Value, value: Value, op: ast.operator | None = None,
                   result: JType | None = None) -> None:
        """``view[...] = value`` (or ``op=``): a scalar to every element, or an array of
        the same shape (copied first, as numpy does, in case the two overlap)."""
        t = view.type
        assert isinstance(t, Array)
        dims = [self.dim(view, d) for d in range(t.ndim)]
        source, copy = value, None
        fresh = value.ssa in self.fresh_temps  # made by this expression: cannot overlap
        if isinstance(value.type, Array):
            bad = self.const(False, Scalar("bool", 1)).ssa
            for d in range(t.ndim):
                other = self.dim(value, d)
                differ = self.op(f"arith.cmpi ne, {other}, {dims[d]} : index")
                bad = self.op(f"arith.ori {bad}, {differ} : i1")
            fail, ok = self.label(), self.label()
            self.branch(bad, fail, ok)
            self.start(fail)
            self.raise_python(ValueError, ("could not broadcast: the assigned array's shape "
                                           "differs from the view's",))
            self.start(ok)
        if isinstance(value.type, Array) and not fresh:
            copy = Value(self.op(f"memref.alloc({', '.join(dims)}) : "
                                 f"{Array(value.type.dtype, t.ndim).mlir}"),
                         Array(value.type.dtype, t.ndim))
            self.each_element(dims, lambda idx: self._move(value, copy, idx))
            source = copy

        def assign(idx: list[str]) -> None:
            rhs = self._at(source, idx) if isinstance(source.type, Array) else source
            if op is not None:
                assert result is not None
                rhs = self.binop(op, self._at(view, idx), rhs, result)
            rhs = self.convert(rhs, t.dtype)
            self.do(f"memref.store {rhs.ssa}, {view.ssa}[{', '.join(idx)}] : {t.mlir}")

        self.each_element(dims, assign)
        self.release(value)
        if copy is not None:
            assert isinstance(copy.type, Array)
            self.do(f"memref.dealloc {copy.ssa} : {copy.type.mlir}")

    def _at(self, a: Value, idx: list[str]) -> Value:
        assert isinstance(a.type, Array)
        return Value(self.op(f"memref.load {a.ssa}[{', '.join(idx)}] : {a.type.mlir}"),
                     a.type.dtype)

    def _move(self, src: Value, dst: Value, idx: list[str]) -> None:
        assert isinstance(dst.type, Array)
        v = self._at(src, idx)
        self.do(f"memref.store {v.ssa}, {dst.ssa}[{', '.join(idx)}] : {dst.type.mlir}")

    def each_element(self, dims: list[str], body: Callable[[list[str]], None]) -> None:
        """Run ``body(indices)`` for every index of a ``dims``-shaped nest (a CFG)."""
        def level(d: int, idx: list[str]) -> None:
            if d == len(dims):
                body(idx)
                return
            counter = self.slot(Scalar("int", 64))
            self.do(f"memref.store {self.const(0, Scalar('int', 64)).ssa}, {counter}[] : "
                    f"memref<i64>")
            head, inner, done = self.label(), self.label(), self.label()
            self.goto(head)
            self.start(head)
            k = self.op(f"memref.load {counter}[] : memref<i64>")
            ki = self.op(f"arith.index_cast {k} : i64 to index")
            self.branch(self.op(f"arith.cmpi slt, {ki}, {dims[d]} : index"), inner, done)
            self.start(inner)
            level(d + 1, [*idx, ki])
            k = self.op(f"memref.load {counter}[] : memref<i64>")
            following = self.op(f"arith.addi {k}, {self.const(1, Scalar('int', 64)).ssa} : i64")
            self.do(f"memref.store {following}, {counter}[] : memref<i64>")
            self.goto(head)
            self.start(done)

        level(0, [])

    def slice_bounds(self, a: Value, d: int, s: ast.Slice) -> tuple[str, str, str]:
        """Python's ``slice.indices`` for a positive step: (start, length, step) as index."""
        step_node = s.step
        if step_node is not None and not (isinstance(step_node, ast.Constant)
                                          and isinstance(step_node.value, int)
                                          and step_node.value > 0):
            raise self.error(step_node, "slice steps must be positive integer literals",
                             "negative or computed steps are not supported yet")
        step = literal_int(step_node) if step_node is not None else 1
        assert step is not None
        n = self.dim(a, d)
        zero = self.index_const(0)

        def bound(node: ast.expr | None, default: str) -> str:
            if node is None:
                return default
            i = self.to_index(self.expr(node))
            neg = self.op(f"arith.cmpi slt, {i}, {zero} : index")
            wrapped = self.op(f"arith.addi {i}, {n} : index")
            i = self.op(f"arith.select {neg}, {wrapped}, {i} : index")
            i = self.op(f"arith.maxsi {i}, {zero} : index")
            return self.op(f"arith.minsi {i}, {n} : index")

        start = bound(s.lower, zero)
        stop = bound(s.upper, n)
        span = self.op(f"arith.subi {stop}, {start} : index")
        span = self.op(f"arith.maxsi {span}, {zero} : index")
        if step != 1:
            span = self.op(f"arith.ceildivsi {span}, {self.index_const(step)} : index")
        return start, span, self.index_const(step)

    def flat(self, a: Value) -> Value:
        t = a.type
        assert isinstance(t, Array) and t.contiguous
        if t.ndim == 1:
            return a
        result = Array(t.dtype, 1, True)
        dims = ", ".join(str(d) for d in range(t.ndim))
        return Value(self.op(f"memref.collapse_shape {a.ssa} [[{dims}]] : {t.mlir} into "
                             f"{result.mlir}"), result)

    def allocate(self, node: ast.Call, like: bool, fill: str, t: JType) -> Value:
        assert isinstance(t, Array)
        first = self.expr(node.args[0])
        if like:
            dims = [self.dim(first, d) for d in range(t.ndim)]
        elif isinstance(first.type, Tuple):
            dims = [self.to_index(item) for item in first.items]
        else:
            dims = [self.to_index(first)]
        zero = self.index_const(0)
        dims = [self.op(f"arith.maxsi {d}, {zero} : index") for d in dims]
        m = self.op(f"memref.alloc({', '.join(dims)}) : {t.mlir}")
        if fill:
            c = self.const(int(fill), t.dtype)
            self.do(f"linalg.fill ins({c.ssa} : {t.dtype.mlir}) outs({m} : {t.mlir})")
        return Value(m, t)

    def scalar_of(self, v: Value) -> Scalar:
        assert isinstance(v.type, Scalar)
        return v.type
