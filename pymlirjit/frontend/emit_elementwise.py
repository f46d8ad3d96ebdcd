"""Whole-array expressions: ``a + b``, ``a * 2.0``, ``-a``, ``np.sqrt(a)`` as a loop nest
writing a new array (operands of one shape, or an array and a scalar; another shape raises
ValueError as numpy's broadcasting would). An intermediate array (``a * 2.0`` in
``a * 2.0 + b``) is freed once the expression consuming it has run."""

from __future__ import annotations

from collections.abc import Callable

from .emit_base import EmitBase, Value
from .jtypes import BOOL, Array

__all__ = ["ElementwiseMixin"]


class ElementwiseMixin(EmitBase):
    """Element-by-element operations on arrays."""

    def elementwise(self, compute: Callable[[list[Value]], Value], operands: list[Value],
                    result: Array) -> Value:
        arrays = [v for v in operands if isinstance(v.type, Array)]
        first = arrays[0]
        dims = [self.dim(first, d) for d in range(result.ndim)]
        if len(arrays) > 1:
            bad = self.const(False, BOOL).ssa
            for other in arrays[1:]:
                for d in range(result.ndim):
                    differ = self.op(f"arith.cmpi ne, {self.dim(other, d)}, {dims[d]} : index")
                    bad = self.op(f"arith.ori {bad}, {differ} : i1")
            fail, ok = self.label(), self.label()
            self.branch(bad, fail, ok)
            self.start(fail)
            self.raise_python(ValueError, ("operands could not be broadcast together: "
                                           "their shapes differ",))
            self.start(ok)
        out = self.op(f"memref.alloc({', '.join(dims)}) : {result.mlir}")

        def body(idx: list[str]) -> None:
            values = []
            for v in operands:
                if isinstance(v.type, Array):
                    loaded = self.op(f"memref.load {v.ssa}[{', '.join(idx)}] : {v.type.mlir}")
                    values.append(Value(loaded, v.type.dtype))
                else:
                    values.append(v)
            r = self.convert(compute(values), result.dtype)
            self.do(f"memref.store {r.ssa}, {out}[{', '.join(idx)}] : {result.mlir}")

        self.each_element(dims, body)
        for v in arrays:
            self.release(v)
        self.fresh_temps.add(out)
        return Value(out, result)

    def release(self, v: Value) -> None:
        """Free ``v`` if it is an intermediate array nothing else holds."""
        if v.ssa in self.fresh_temps and isinstance(v.type, Array):
            self.fresh_temps.discard(v.ssa)
            self.do(f"memref.dealloc {v.ssa} : {v.type.mlir}")
