"""The numpy functions and array methods of :mod:`.npfunctions`: new arrays
(``np.arange``, ``np.linspace``, ``np.full``, ``np.copy``/``.copy()``, ``.astype()``,
``np.outer``), views (``.T``/``np.transpose`` with permuted strides, ``.reshape`` of a
contiguous array), and the dispatch to :mod:`.reductions` and :mod:`.emit_linalg`."""

from __future__ import annotations

import ast
from typing import Any

from .emit_base import EmitBase, Value
from .infer_arrays import resolve_ufunc
from .jtypes import F64, I64, Array, JType, Scalar, Tuple

__all__ = ["NumpyMixin"]


class NumpyMixin(EmitBase):
    """numpy functions that are not element by element."""

    def matmul(self, a: Value, b: Value, t: JType) -> Value:
        raise NotImplementedError

    def reduce_numpy(self, a: Value, op: str, axis: int | None, t: JType) -> Value:
        raise NotImplementedError

    def cumsum(self, a: Value, axis: int | None, t: JType) -> Value:
        raise NotImplementedError

    def numpy_call(self, node: ast.Call, op: str, axis: Any, t: JType) -> Value:
        args = list(node.args)
        if isinstance(node.func, ast.Attribute) and isinstance(
                self.info.types.get(node.func.value), Array):
            args = [node.func.value, *args]  # a method: a.sum(axis=0)
        if op in ("sum", "prod", "min", "max", "mean", "argmin", "argmax", "any", "all"):
            return self.reduce_numpy(self.expr(args[0]), op, axis, t)
        if op == "cumsum":
            return self.cumsum(self.expr(args[0]), axis, t)
        if op in ("dot", "matmul"):
            return self.matmul(self.expr(args[0]), self.expr(args[1]), t)
        if op == "transpose":
            return self.transposed(self.expr(args[0]), axis)
        assert isinstance(t, Array)
        if op in ("copy", "astype"):
            a = self.expr(args[0])
            return self.elementwise(lambda v: self.convert(v[0], t.dtype), [a], t)
        if op == "outer":
            return self.outer(self.expr(args[0]), self.expr(args[1]), t)
        if op == "reshape":
            return self.reshaped(self.expr(args[0]), args[1:], t)
        if op == "arange":
            return self.arange([self.expr(a) for a in args], t)
        if op == "linspace":
            return self.linspace(node, t)
        assert op == "full"
        return self.full(self.expr(args[0]), self.expr(args[1]), t)

    def _new(self, dims: list[str], t: Array) -> Value:
        zero = self.index_const(0)
        dims = [self.op(f"arith.maxsi {d}, {zero} : index") for d in dims]
        out = self.new_array(dims, t)
        self.fresh_temps.add(out.ssa)
        return out

    def full(self, shape: Value, value: Value, t: Array) -> Value:
        items = list(shape.items) if isinstance(shape.type, Tuple) else [shape]
        out = self._new([self.to_index(i) for i in items], t)
        v = self.convert(value, t.dtype)
        if t.dtype.kind == "bool":
            dims = [self.dim(out, d) for d in range(t.ndim)]
            self.each_element(dims, lambda idx: self.store_at(v, out, idx))
        else:
            self.do(f"linalg.fill ins({v.ssa} : {t.dtype.mlir}) outs({out.ssa} : {t.mlir})")
        return out

    def arange(self, args: list[Value], t: Array) -> Value:
        """``np.arange``: ``ceil((stop - start) / step)`` values ``start + i * step``."""
        work = t.dtype if t.dtype.kind == "float" else (
            F64 if any(isinstance(a.type, Scalar) and a.type.is_float for a in args) else I64)
        if len(args) == 1:
            start, stop, step = self.const(0, work), args[0], self.const(1, work)
        else:
            start, stop = args[0], args[1]
            step = args[2] if len(args) == 3 else self.const(1, work)
        start, stop, step = (self.convert(v, work) for v in (start, stop, step))
        zero = self.const(0, work)
        is_zero = self.compare(ast.Eq(), step, zero)
        self.raise_python(ZeroDivisionError, ("arange: the step is zero",), when=is_zero)
        m = work.mlir
        span = self.op(f"arith.sub{'f' if work.kind == 'float' else 'i'} {stop.ssa}, "
                       f"{start.ssa} : {m}")
        if work.kind == "float":
            q = self.op(f"math.ceil {self.op(f'arith.divf {span}, {step.ssa} : {m}')} : {m}")
            n = self.op(f"arith.fptosi {q} : {m} to i64")
        else:
            n = self.op(f"arith.ceildivsi {span}, {step.ssa} : i64")
        n = self.op(f"arith.index_cast {n} : i64 to index")
        out = self._new([n], t)

        def value(idx: list[str]) -> None:
            k = self.convert(Value(self.op(f"arith.index_cast {idx[0]} : index to i64"), I64),
                             work)
            mul = "mulf" if work.kind == "float" else "muli"
            add = "addf" if work.kind == "float" else "addi"
            v = self.op(f"arith.{add} {start.ssa}, "
                        f"{self.op(f'arith.{mul} {k.ssa}, {step.ssa} : {m}')} : {m}")
            self.store_at(Value(v, work), out, idx)

        self.each_element([self.dim(out, 0)], value)
        return out

    def linspace(self, node: ast.Call, t: Array) -> Value:
        """``np.linspace(start, stop, num=50, endpoint=True)``: ``start + i * step``,
        the last value ``stop`` exactly when it is an endpoint."""
        start = self.convert(self.expr(node.args[0]), F64)
        stop = self.convert(self.expr(node.args[1]), F64)
        given = {k.arg: k.value for k in node.keywords}
        num_node = node.args[2] if len(node.args) > 2 else given.get("num")
        num = self.convert(self.expr(num_node), I64) if num_node is not None else \
            self.const(50, I64)
        endpoint = self.truth(self.expr(given["endpoint"])) if "endpoint" in given else \
            self.const(True, Scalar("bool", 1)).ssa
        negative = self.op(f"arith.cmpi slt, {num.ssa}, {self.const(0, I64).ssa} : i64")
        self.raise_python(ValueError, ("Number of samples must be non-negative.",), when=negative)
        one = self.const(1, I64).ssa
        less = self.op(f"arith.subi {num.ssa}, {one} : i64")
        div = self.op(f"arith.select {endpoint}, {less}, {num.ssa} : i64")
        div = self.op(f"arith.maxsi {div}, {one} : i64")
        span = self.op(f"arith.subf {stop.ssa}, {start.ssa} : f64")
        step = self.op(f"arith.divf {span}, {self.op(f'arith.sitofp {div} : i64 to f64')} : f64")
        out = self._new([self.op(f"arith.index_cast {num.ssa} : i64 to index")], t)

        def value(idx: list[str]) -> None:
            k = self.op(f"arith.index_cast {idx[0]} : index to i64")
            kf = self.op(f"arith.sitofp {k} : i64 to f64")
            v = self.op(f"arith.addf {start.ssa}, {self.op(f'arith.mulf {kf}, {step} : f64')}"
                        f" : f64")
            last = self.op(f"arith.cmpi eq, {k}, {less} : i64")
            at_end = self.op(f"arith.andi {last}, {endpoint} : i1")
            more = self.op(f"arith.cmpi sgt, {num.ssa}, {one} : i64")
            at_end = self.op(f"arith.andi {at_end}, {more} : i1")
            v = self.op(f"arith.select {at_end}, {stop.ssa}, {v} : f64")
            self.store_at(Value(v, F64), out, idx)

        self.each_element([self.dim(out, 0)], value)
        return out

    def outer(self, a: Value, b: Value, t: Array) -> Value:
        """``np.outer(a, b)``: ``a[i] * b[j]`` (1-D operands; others are flattened)."""
        a, b = (self._flat_1d(v) for v in (a, b))
        out = self._new([self.dim(a, 0), self.dim(b, 0)], t)
        assert isinstance(a.type, Array) and isinstance(b.type, Array)
        found = resolve_ufunc(__import__("numpy").multiply, [a.type.dtype, b.type.dtype])
        assert found is not None
        ins, res = found

        def value(idx: list[str]) -> None:
            x = self.convert(self.load_at(a, [idx[0]]), ins[0])
            y = self.convert(self.load_at(b, [idx[1]]), ins[1])
            self.store_at(self.ufunc_binop(ast.Mult(), x, y, res), out, idx)

        self.each_element([self.dim(out, 0), self.dim(out, 1)], value)
        return out

    def _flat_1d(self, a: Value) -> Value:
        t = a.type
        assert isinstance(t, Array)
        if t.ndim == 1:
            return a
        if not t.contiguous:
            a = self.elementwise(lambda v: v[0], [a], Array(t.dtype, t.ndim, True))
        return self.flat(a)

    def transposed(self, a: Value, axes: tuple[int, ...] | None) -> Value:
        """A view of ``a`` with its axes permuted (reversed by default): no copy."""
        t = a.type
        assert isinstance(t, Array)
        if t.ndim < 2:
            return a
        axes = axes or tuple(reversed(range(t.ndim)))
        k = t.ndim
        meta = self.fresh()
        base_t = f"memref<{t.element_mlir}>"
        types = ", ".join([base_t] + ["index"] * (1 + 2 * k))
        self.lines.append(f"    {meta}:{2 + 2 * k} = memref.extract_strided_metadata {a.ssa} : "
                          f"{t.mlir} -> {types}{self.source.loc(self.at)}")
        sizes = [f"{meta}#{2 + d}" for d in axes]
        strides = [f"{meta}#{2 + k + d}" for d in axes]
        view = Array(t.dtype, k, False)
        return Value(self.op(
            f"memref.reinterpret_cast {meta}#0 to offset: [{meta}#1], sizes: "
            f"[{', '.join(sizes)}], strides: [{', '.join(strides)}] : {base_t} to "
            f"{view.mlir}"), view)

    def reshaped(self, a: Value, shape: list[ast.expr], t: Array) -> Value:
        """A view of the contiguous ``a`` with another shape (one dim may be -1)."""
        if len(shape) == 1 and isinstance(shape[0], ast.Tuple):
            shape = list(shape[0].elts)
        src = a.type
        assert isinstance(src, Array)
        total = self.index_const(1)
        for axis in range(src.ndim):
            total = self.op(f"arith.muli {total}, {self.dim(a, axis)} : index")
        dims = [self.to_index(self.expr(s)) for s in shape]
        minus = self.index_const(-1)
        known = self.index_const(1)
        for d in dims:
            unknown = self.op(f"arith.cmpi eq, {d}, {minus} : index")
            known = self.op(f"arith.select {unknown}, {known}, "
                            f"{self.op(f'arith.muli {known}, {d} : index')} : index")
        safe = self.op(f"arith.maxsi {known}, {self.index_const(1)} : index")
        inferred = self.op(f"arith.divsi {total}, {safe} : index")
        dims = [self.op(f"arith.select {self.op(f'arith.cmpi eq, {d}, {minus} : index')}, "
                        f"{inferred}, {d} : index") for d in dims]
        product = self.index_const(1)
        bad = self.const(False, Scalar("bool", 1)).ssa
        for d in dims:
            product = self.op(f"arith.muli {product}, {d} : index")
            negative = self.op(f"arith.cmpi slt, {d}, {self.index_const(0)} : index")
            bad = self.op(f"arith.ori {bad}, {negative} : i1")
        differ = self.op(f"arith.cmpi ne, {product}, {total} : index")
        bad = self.op(f"arith.ori {bad}, {differ} : i1")
        self.raise_python(ValueError, ("cannot reshape the array into the shape given "
                                       "(the sizes differ)",), when=bad)
        shape_buf = self.fresh()  # in the entry block: not a new one per iteration
        self.entry.append(f"    {shape_buf} = memref.alloca() : memref<{len(dims)}xindex>")
        for i, d in enumerate(dims):
            self.do(f"memref.store {d}, {shape_buf}[{self.index_const(i)}] : "
                    f"memref<{len(dims)}xindex>")
        return Value(self.op(f"memref.reshape {a.ssa}({shape_buf}) : ({src.mlir}, "
                             f"memref<{len(dims)}xindex>) -> {t.mlir}"), t)
