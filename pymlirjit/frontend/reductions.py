"""Reductions the plain in-order loop of :meth:`.emit_calls.CallsMixin.reduce` does not
cover: ``axis=`` (``a.sum(axis=0)``, ``np.max(a, 1)``...: a new array of one rank less),
``argmin``/``argmax`` (the first extreme; a NaN counts as the extreme, as numpy's) and
``any``/``all``; ``np.cumsum``. Each adds in element order (numpy adds floats pairwise:
the last bits may differ)."""

from __future__ import annotations

from .emit_base import EmitBase, Value
from .jtypes import BOOL, I64, Array, JType, Scalar

__all__ = ["ReductionsMixin"]


def _extreme(op: str, t: Scalar) -> float | int | bool:
    """The identity of ``op`` on ``t``."""
    if op in ("sum", "mean"):
        return 0
    if op == "prod":
        return 1
    if op in ("any", "all"):
        return op == "all"
    if t.kind == "float":
        return float("inf") if op == "min" else float("-inf")
    bits = t.bits - (0 if t.kind == "uint" else 1)
    high, low = (1 << bits) - 1, 0 if t.kind == "uint" else -(1 << bits)
    return high if op == "min" else low


class ReductionsMixin(EmitBase):
    """Reductions over an axis, arg-reductions, any/all, cumsum."""

    def combine(self, op: str, acc: Value, v: Value, t: Scalar) -> Value:
        """``acc op v`` for a reduction ``op`` (both ``t``)."""
        m = t.mlir
        if op in ("any", "all"):
            name = "ori" if op == "any" else "andi"
            return Value(self.op(f"arith.{name} {acc.ssa}, {v.ssa} : i1"), BOOL)
        if t.kind == "float":
            name = {"sum": "addf", "mean": "addf", "prod": "mulf", "min": "minimumf",
                    "max": "maximumf"}[op]
        else:
            letter = "u" if t.kind in ("uint", "bool") else "s"
            name = {"sum": "addi", "mean": "addi", "prod": "muli", "min": f"min{letter}i",
                    "max": f"max{letter}i"}[op]
        return Value(self.op(f"arith.{name} {acc.ssa}, {v.ssa} : {m}"), t)

    def _empty_check(self, n: str, op: str) -> None:
        is_empty = self.op(f"arith.cmpi eq, {n}, {self.index_const(0)} : index")
        self.raise_python(ValueError, (f"attempt to get {op} of an empty sequence" if
                                       op.startswith("arg") else
                                       f"zero-size array to reduction operation {op}imum "
                                       f"which has no identity",), when=is_empty)

    def _better(self, op: str, v: Value, best: Value) -> str:
        """Whether ``v`` replaces ``best`` in an arg-reduction (strictly better, or the
        first NaN)."""
        from ast import Gt, Lt
        better = self.compare(Lt() if op == "argmin" else Gt(), v, best)
        t = v.type
        assert isinstance(t, Scalar)
        if t.kind != "float":
            return better
        v_nan = self.op(f"arith.cmpf uno, {v.ssa}, {v.ssa} : {t.mlir}")
        best_ok = self.op(f"arith.cmpf ord, {best.ssa}, {best.ssa} : {t.mlir}")
        first_nan = self.op(f"arith.andi {v_nan}, {best_ok} : i1")
        return self.op(f"arith.ori {better}, {first_nan} : i1")

    def reduce_numpy(self, a: Value, op: str, axis: int | None, t: JType) -> Value:
        arr = a.type
        assert isinstance(arr, Array)
        dims = [self.dim(a, d) for d in range(arr.ndim)]
        if axis is None or arr.ndim == 1:
            result = self._reduce_all(a, op, dims, t)
        else:
            result = self._reduce_axis(a, op, axis, dims, t)
        self.release(a)
        return result

    def _reduce_all(self, a: Value, op: str, dims: list[str], t: JType) -> Value:
        assert isinstance(t, Scalar) and isinstance(a.type, Array)
        if op in ("argmin", "argmax"):
            total = self.index_const(1)
            for d in dims:
                total = self.op(f"arith.muli {total}, {d} : index")
            self._empty_check(total, op)
            dtype = a.type.dtype
            best, where, count = self.slot(dtype), self.slot(I64), self.slot(I64)
            first = self.load_at(a, [self.index_const(0)] * len(dims))
            self.store_slot(best, first)
            zero = self.const(0, I64)
            self.store_slot(where, zero)
            self.store_slot(count, zero)

            def visit(idx: list[str]) -> None:
                v = self.load_at(a, idx)
                b = self.load_slot(best, dtype)
                k = self.load_slot(count, I64)
                better = self._better(op, v, b)
                self.store_slot(best, Value(self.op(
                    f"arith.select {better}, {v.ssa}, {b.ssa} : {dtype.mlir}"), dtype))
                w = self.load_slot(where, I64)
                self.store_slot(where, Value(self.op(
                    f"arith.select {better}, {k.ssa}, {w.ssa} : i64"), I64))
                self.store_slot(count, Value(self.op(
                    f"arith.addi {k.ssa}, {self.const(1, I64).ssa} : i64"), I64))

            self.each_element(dims, visit)
            return self.load_slot(where, I64)
        acc = self.slot(t)
        self.store_slot(acc, self.const(_extreme(op, t), t))

        def step(idx: list[str]) -> None:
            v = self.convert(self.load_at(a, idx), t)
            self.store_slot(acc, self.combine(op, self.load_slot(acc, t), v, t))

        if op in ("min", "max"):
            total = self.index_const(1)
            for d in dims:
                total = self.op(f"arith.muli {total}, {d} : index")
            self._empty_check(total, op)
        self.each_element(dims, step)
        total_v = self.load_slot(acc, t)
        if op == "mean":
            return self._divide(total_v, dims, t)
        return total_v

    def _divide(self, total: Value, dims: list[str], t: Scalar) -> Value:
        count = self.index_const(1)
        for d in dims:
            count = self.op(f"arith.muli {count}, {d} : index")
        n = self.op(f"arith.index_cast {count} : index to i64")
        nf = self.op(f"arith.sitofp {n} : i64 to {t.mlir}")
        return Value(self.op(f"arith.divf {total.ssa}, {nf} : {t.mlir}"), t)

    def _reduce_axis(self, a: Value, op: str, axis: int, dims: list[str], t: JType) -> Value:
        assert isinstance(t, Array) and isinstance(a.type, Array)
        kept = [d for i, d in enumerate(dims) if i != axis]
        out = Value(self.op(f"memref.alloc({', '.join(kept)}) : {t.mlir}"), t)
        dtype = t.dtype

        def drop(idx: list[str]) -> list[str]:
            return [i for k, i in enumerate(idx) if k != axis]

        if op in ("argmin", "argmax"):
            self._empty_check(dims[axis], op)
            src = a.type.dtype
            best = Value(self.op(f"memref.alloc({', '.join(kept)}) : "
                                 f"{Array(src, len(kept)).mlir}"), Array(src, len(kept)))

            def first(idx: list[str]) -> None:
                at = [*idx[:axis], self.index_const(0), *idx[axis:]]
                self.store_at(self.load_at(a, at), best, idx)
                self.store_at(self.const(0, I64), out, idx)

            self.each_element(kept, first)

            def visit(idx: list[str]) -> None:
                v = self.load_at(a, idx)
                j = drop(idx)
                b = self.load_at(best, j)
                better = self._better(op, v, b)
                self.store_at(Value(self.op(
                    f"arith.select {better}, {v.ssa}, {b.ssa} : {src.mlir}"), src), best, j)
                k = Value(self.op(f"arith.index_cast {idx[axis]} : index to i64"), I64)
                w = self.load_at(out, j)
                self.store_at(Value(self.op(
                    f"arith.select {better}, {k.ssa}, {w.ssa} : i64"), I64), out, j)

            self.each_element(dims, visit)
            self.do(f"memref.dealloc {best.ssa} : {best.type.mlir}")  # type: ignore[union-attr]
            self.fresh_temps.add(out.ssa)
            return out
        if op in ("min", "max"):
            self._empty_check(dims[axis], op)
        init = self.const(_extreme(op, dtype), dtype)
        self.each_element(kept, lambda idx: self.store_at(init, out, idx))

        def step(idx: list[str]) -> None:
            j = drop(idx)
            v = self.convert(self.load_at(a, idx), dtype)
            self.store_at(self.combine(op, self.load_at(out, j), v, dtype), out, j)

        self.each_element(dims, step)
        if op == "mean":
            self.each_element(kept, lambda idx: self.store_at(
                self._divide(self.load_at(out, idx), [dims[axis]], dtype), out, idx))
        self.fresh_temps.add(out.ssa)
        return out

    def cumsum(self, a: Value, axis: int | None, t: JType) -> Value:
        arr = a.type
        assert isinstance(arr, Array) and isinstance(t, Array)
        dims = [self.dim(a, d) for d in range(arr.ndim)]
        dtype = t.dtype
        if axis is None or arr.ndim == 1:
            total = self.index_const(1)
            for d in dims:
                total = self.op(f"arith.muli {total}, {d} : index")
            out = Value(self.op(f"memref.alloc({total}) : {t.mlir}"), t)
            acc, count = self.slot(dtype), self.slot(I64)
            self.store_slot(acc, self.const(0, dtype))
            self.store_slot(count, self.const(0, I64))

            def step(idx: list[str]) -> None:
                s = self.combine("sum", self.load_slot(acc, dtype),
                                 self.convert(self.load_at(a, idx), dtype), dtype)
                self.store_slot(acc, s)
                k = self.load_slot(count, I64)
                self.store_at(s, out, [self.op(f"arith.index_cast {k.ssa} : i64 to index")])
                self.store_slot(count, Value(self.op(
                    f"arith.addi {k.ssa}, {self.const(1, I64).ssa} : i64"), I64))

            self.each_element(dims, step)
        else:
            out = Value(self.op(f"memref.alloc({', '.join(dims)}) : {t.mlir}"), t)

            def running(idx: list[str]) -> None:
                v = self.convert(self.load_at(a, idx), dtype)
                is_first = self.op(f"arith.cmpi eq, {idx[axis]}, {self.index_const(0)} : index")
                prev_idx = list(idx)
                back = self.op(f"arith.subi {idx[axis]}, {self.index_const(1)} : index")
                prev_idx[axis] = self.op(f"arith.maxsi {back}, {self.index_const(0)} : index")
                prev = self.load_at(out, prev_idx)
                zero = self.const(0, dtype).ssa
                base = Value(self.op(f"arith.select {is_first}, {zero}, {prev.ssa} : "
                                     f"{dtype.mlir}"), dtype)
                self.store_at(self.combine("sum", base, v, dtype), out, idx)

            self.each_element(dims, running)
        self.release(a)
        self.fresh_temps.add(out.ssa)
        return out

    def store_slot(self, slot: str, v: Value) -> None:
        assert isinstance(v.type, Scalar)
        x = v.ssa
        if v.type.kind == "bool":
            x = self.op(f"arith.extui {x} : i1 to i8")
        stored = "i8" if v.type.kind == "bool" else v.type.mlir
        self.do(f"memref.store {x}, {slot}[] : memref<{stored}>")

    def load_slot(self, slot: str, t: Scalar) -> Value:
        if t.kind == "bool":
            x = self.op(f"memref.load {slot}[] : memref<i8>")
            return Value(self.op(f"arith.trunci {x} : i8 to i1"), t)
        return Value(self.op(f"memref.load {slot}[] : memref<{t.mlir}>"), t)
