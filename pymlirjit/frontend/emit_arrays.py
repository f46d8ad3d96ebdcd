"""Arrays: ``.shape``/``.ndim``/``.size``/``len``, indexing with Python's negative indices,
basic slices as ``memref.subview`` views, element stores, and ``np.empty``/``zeros``/
``ones`` (and ``*_like``) as ``memref.alloc`` (a returned array owns its memory)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from .emit_base import EmitBase, Value
from .emit_overlap import unsafe_overlap
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
        found = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [i for i in found if not (isinstance(i, ast.Constant) and i.value is ...)]

    def load_element(self, node: ast.Subscript) -> Value:
        base = self.expr(node.value)
        if isinstance(base.type, Tuple):
            n = literal_int(node.slice)  # checked by the inference
            assert n is not None
            return base.items[n]
        assert isinstance(base.type, Array)
        indices = self.indices(node)
        if any(isinstance(i, ast.Slice) for i in indices) or len(indices) < base.type.ndim:
            view = self.view(base, indices, node)
            if base.ssa in self.fresh_temps:  # make(n)[1:]: the view holds its memory now
                self.fresh_temps.discard(base.ssa)
                self.fresh_temps.add(view.ssa)
                if base.ssa in self.owned_if:
                    self.owned_if[view.ssa] = self.owned_if[base.ssa]
            return view
        idx = [self.index_into(base, d, i) for d, i in enumerate(indices)]
        element = self.load_at(base, idx)
        self.release(base)  # make(n)[0]: the array is not needed any more
        return element

    def store_element(self, target: ast.Subscript, value: Value) -> None:
        base = self.expr(target.value)
        assert isinstance(base.type, Array)
        indices = self.indices(target)
        if any(isinstance(i, ast.Slice) for i in indices) or len(indices) < base.type.ndim:
            self.store_view(self.view(base, indices, target), value)
            return
        idx = [self.index_into(base, d, i) for d, i in enumerate(indices)]
        self.store_at(value, base, idx)

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
        """``view[...] = value`` (or ``op=``): a scalar to every element, or an array
        broadcast to the view's shape (copied first, as numpy does, if the two share
        memory in a way the loop could read an element it already wrote)."""
        t = view.type
        assert isinstance(t, Array)
        dims = [self.dim(view, d) for d in range(t.ndim)]
        source, copy = value, None  # copy: (whether made, the array to free)
        fresh = value.ssa in self.fresh_temps  # made by this expression: cannot overlap
        if isinstance(value.type, Array):
            self.check_assignable([self.dim(value, k) for k in range(value.type.ndim)], dims)
            if not fresh:
                copied = unsafe_overlap(self, view, value)
                source = self._copy_if(copied, value)
                copy = (copied, source)
        target, given = ast.Pass(), ast.Pass()
        leaves: dict[ast.AST, Value] = {given: source}
        if op is not None:
            leaves[target] = view

        def compute(env: dict[ast.AST, Value]) -> Value:
            rhs = env[given]
            if op is None:
                return rhs
            assert isinstance(result, Scalar)
            a, b = self.convert(env[target], result), self.convert(rhs, result)
            return self.ufunc_binop(op, a, b, result)

        self.broadcast_loop(view, dims, leaves, compute)
        self.release(value)
        if copy is not None:
            (made, array), free, done = copy, self.label(), self.label()
            assert isinstance(array.type, Array)
            self.branch(made, free, done)
            self.start(free)
            self.do(f"memref.dealloc {array.ssa} : {array.type.mlir}")
            self.goto(done)
            self.start(done)

    def check_assignable(self, shape: list[str], view_shape: list[str]) -> None:
        """Raise ValueError unless an array of ``shape`` broadcasts to ``view_shape``."""
        bad = self.const(False, Scalar("bool", 1)).ssa
        one = self.index_const(1)
        for k, other in enumerate(shape):
            d = view_shape[len(view_shape) - len(shape) + k]
            differ = self.op(f"arith.cmpi ne, {other}, {d} : index")
            not_one = self.op(f"arith.cmpi ne, {other}, {one} : index")
            bad = self.op(f"arith.ori {bad}, {self.op(f'arith.andi {differ}, {not_one} : i1')}"
                          f" : i1")
        self.raise_python(ValueError, ("could not broadcast the assigned array to the "
                                       "view's shape",), when=bad)

    def _copy_if(self, condition: str, value: Value) -> Value:
        """``value``, or a new copy of it (of the same type) when the i1 ``condition``
        holds."""
        vt = value.type
        assert isinstance(vt, Array)
        copied, kept, joined = self.label(), self.label(), self.label()
        self.branch(condition, copied, kept)
        self.start(copied)
        own = [self.dim(value, k) for k in range(vt.ndim)]
        plain = Array(vt.dtype, vt.ndim)
        copy = Value(self.op(f"memref.alloc({', '.join(own)}) : {plain.mlir}"), plain)
        self.each_element(own, lambda idx: self.store_at(self.load_at(value, idx), copy, idx))
        if plain.mlir != vt.mlir:
            copy = Value(self.op(f"memref.cast {copy.ssa} : {plain.mlir} to {vt.mlir}"), vt)
        self.do(f"cf.br ^{joined}({copy.ssa} : {vt.mlir})")
        self.start(kept)
        self.do(f"cf.br ^{joined}({value.ssa} : {vt.mlir})")
        source = Value(self.fresh(), vt)
        self.lines.append(f"  ^{joined}({source.ssa}: {vt.mlir}):")
        self.terminated = False
        return source

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
        self.fresh_temps.add(m)  # new memory: freed once used, unless a variable takes it
        return Value(m, t)

    def scalar_of(self, v: Value) -> Scalar:
        assert isinstance(v.type, Scalar)
        return v.type
