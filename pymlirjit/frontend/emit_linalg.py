"""Matrix products (``a @ b``, ``np.dot``, ``np.matmul``) as ``linalg`` ops on memrefs:
``linalg.matmul`` for 2-D by 2-D (which the codegen's microkernels and schedules make
as fast as BLAS, see :mod:`pymlirjit.codegen.linalg_schedules`), ``linalg.matvec``,
``linalg.vecmat`` and ``linalg.dot`` for the 1-D cases. Operands of another dtype than
the result's are converted first (into a temporary, freed after)."""

from __future__ import annotations

from .emit_base import EmitBase, Value
from .jtypes import Array, JType, Scalar

__all__ = ["LinalgMixin"]


class LinalgMixin(EmitBase):
    """``@`` and ``np.dot``."""

    def matmul(self, a: Value, b: Value, t: JType) -> Value:
        ta, tb = a.type, b.type
        assert isinstance(ta, Array) and isinstance(tb, Array)
        dtype = t.dtype if isinstance(t, Array) else t
        assert isinstance(dtype, Scalar)
        a2, b2 = self.converted_array(a, dtype), self.converted_array(b, dtype)
        ka = self.dim(a2, ta.ndim - 1)
        kb = self.dim(b2, 0)
        differ = self.op(f"arith.cmpi ne, {ka}, {kb} : index")
        self.raise_python(ValueError, ("matmul: the operands' inner dimensions differ "
                                       "(shapes not aligned)",), when=differ)
        types = f"{a2.type.mlir}, {b2.type.mlir}"  # type: ignore[union-attr]
        operands = f"ins({a2.ssa}, {b2.ssa} : {types})"
        zero = self.const(0, dtype).ssa
        if ta.ndim == 1 and tb.ndim == 1:
            acc = self.slot(dtype)
            self.do(f"memref.store {zero}, {acc}[] : memref<{dtype.mlir}>")
            self.do(f"linalg.dot {operands} outs({acc} : memref<{dtype.mlir}>)")
            result: Value = Value(self.op(f"memref.load {acc}[] : memref<{dtype.mlir}>"), dtype)
        else:
            assert isinstance(t, Array)
            dims = ([self.dim(a2, 0)] if ta.ndim == 2 else []) + \
                ([self.dim(b2, 1)] if tb.ndim == 2 else [])
            out = self.new_array(dims, t).ssa
            self.do(f"linalg.fill ins({zero} : {dtype.mlir}) outs({out} : {t.mlir})")
            name = {(2, 2): "matmul", (2, 1): "matvec", (1, 2): "vecmat"}[(ta.ndim, tb.ndim)]
            self.do(f"linalg.{name} {operands} outs({out} : {t.mlir})")
            result = Value(out, t)
            self.fresh_temps.add(out)
        for given, used in ((a, a2), (b, b2)):
            if used is not given:
                self.release(used)
            else:
                self.release(given)
        return result

    def converted_array(self, a: Value, dtype: Scalar) -> Value:
        """``a`` itself if its elements are ``dtype``, else a converted copy (a temporary
        this expression frees)."""
        t = a.type
        assert isinstance(t, Array)
        if t.dtype == dtype:
            return a
        if dtype.kind == "bool":
            raise self.error(self.at, "matrix products of bools are not supported")
        out = self.elementwise(lambda v: self.convert(v[0], dtype), [a],
                               Array(dtype, t.ndim, True))
        return out
