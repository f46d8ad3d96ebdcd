"""Complex numbers in the emitter: constants, casts, operators and functions on
``complex<f32>``/``complex<f64>`` values (MLIR's ``complex`` dialect, which the default
pipeline lowers with ``convert-complex-to-standard`` and ``convert-complex-to-llvm``).

``*`` and ``/`` are CPython's own formulas on the parts (the naive product; Smith's
quotient, as ``_Py_c_quot``), not ``complex.mul``/``complex.div`` (whose lowering adds
C99 Annex G's recovery of infinities): the plain Python function gives the same bits,
and so do numba and numpy for finite values. ``z ** n`` with an integer literal ``n``
is CPython's repeated squaring; other powers are ``complex.pow``. A division by zero
raises ZeroDivisionError as a float division does (``error_model="numpy"``: numpy's
inf/nan instead)."""

from __future__ import annotations

import ast

from .complexes import part_type
from .emit_base import EmitBase, Value, float_literal
from .intrinsics import Intrinsic
from .jtypes import I64, WEAK_COMPLEX, JType, Scalar, literal_int
from .zero_messages import COMPLEX_DIVISION

__all__ = ["ComplexMixin"]


class ComplexMixin(EmitBase):
    """What the emitter does with complex values."""

    # -- parts --------------------------------------------------------------------------

    def parts(self, v: Value) -> tuple[str, str]:
        """The SSA names of ``v``'s real and imaginary parts (``v`` is complex)."""
        t = v.type
        assert isinstance(t, Scalar) and t.kind == "complex"
        return (self.op(f"complex.re {v.ssa} : {t.mlir}"),
                self.op(f"complex.im {v.ssa} : {t.mlir}"))

    def make(self, re: str, im: str, t: Scalar) -> Value:
        return Value(self.op(f"complex.create {re}, {im} : {t.mlir}"), t)

    def complex_literal(self, value: complex, t: Scalar) -> str:
        """The text of a ``complex.constant`` of ``value``."""
        bits = t.bits // 2
        return (f"complex.constant [{float_literal(value.real, bits)} : f{bits}, "
                f"{float_literal(value.imag, bits)} : f{bits}] : {t.mlir}")

    def complex_cast(self, x: str, t: Scalar, to: Scalar) -> str:
        """``x`` of type ``t`` as ``to`` where either is complex (a complex to a real
        keeps the real part, as numpy's casts; to bool: either part nonzero)."""
        if t.kind == "complex":
            v = Value(x, t)
            re, im = self.parts(v)
            pt = part_type(t).strong
            if to.kind == "complex":
                pto = part_type(to).strong
                return self.make(self._scalar_cast(re, pt, pto),
                                 self._scalar_cast(im, pt, pto), to).ssa
            if to.kind == "bool":
                zero = self.const(0.0, pt).ssa
                a = self.op(f"arith.cmpf une, {re}, {zero} : {pt.mlir}")
                b = self.op(f"arith.cmpf une, {im}, {zero} : {pt.mlir}")
                return self.op(f"arith.ori {a}, {b} : i1")
            return self._scalar_cast(re, pt, to)
        pto = part_type(to).strong
        re = self._scalar_cast(x, t, pto)
        return self.make(re, self.const(0.0, pto).ssa, to).ssa

    # -- operators ----------------------------------------------------------------------

    def complex_binop(self, op: ast.operator, a: Value, b: Value, t: Scalar,
                      right: ast.expr | None) -> Value:
        if isinstance(op, ast.Pow):
            n = literal_int(right) if right is not None else None
            if n is not None and abs(n) <= 100:
                return self.complex_powi(self.convert(a, t), n)
        a, b = self.convert(a, t), self.convert(b, t)
        if isinstance(op, (ast.Add, ast.Sub)):
            name = "add" if isinstance(op, ast.Add) else "sub"
            return Value(self.op(f"complex.{name} {a.ssa}, {b.ssa} : {t.mlir}"), t)
        if isinstance(op, ast.Mult):
            return self.complex_mul(a, b)
        if isinstance(op, ast.Div):
            return self.complex_div(a, b, check=not _nonzero(right))
        assert isinstance(op, ast.Pow)
        return Value(self.op(f"complex.pow {a.ssa}, {b.ssa} : {t.mlir}"), t)

    def complex_mul(self, a: Value, b: Value) -> Value:
        """CPython's ``_Py_c_prod``: (ar*br - ai*bi) + (ar*bi + ai*br)j."""
        t = a.type
        assert isinstance(t, Scalar)
        m = part_type(t).strong.mlir
        (ar, ai), (br, bi) = self.parts(a), self.parts(b)
        rr = self.op(f"arith.mulf {ar}, {br} : {m}")
        ii = self.op(f"arith.mulf {ai}, {bi} : {m}")
        ri = self.op(f"arith.mulf {ar}, {bi} : {m}")
        ir = self.op(f"arith.mulf {ai}, {br} : {m}")
        return self.make(self.op(f"arith.subf {rr}, {ii} : {m}"),
                         self.op(f"arith.addf {ri}, {ir} : {m}"), t)

    def complex_div(self, a: Value, b: Value, check: bool = True) -> Value:
        """CPython's ``_Py_c_quot`` (Smith's algorithm); ZeroDivisionError for 0j."""
        t = a.type
        assert isinstance(t, Scalar)
        pt = part_type(t).strong
        m = pt.mlir
        (ar, ai), (br, bi) = self.parts(a), self.parts(b)

        def f(name: str, x: str, y: str) -> str:
            return self.op(f"arith.{name} {x}, {y} : {m}")

        zero = self.const(0.0, pt).ssa
        abr, abi = self.op(f"math.absf {br} : {m}"), self.op(f"math.absf {bi} : {m}")
        is_zero = self.op(f"arith.andi {f('cmpf oeq,', br, zero)}, "
                          f"{f('cmpf oeq,', bi, zero)} : i1")
        if check:
            self.zero_check_if(is_zero, br, pt)
        by_re = f("cmpf oge,", abr, abi)
        by_im = f("cmpf oge,", abi, abr)
        ratio = f("divf", bi, br)  # divide top and bottom by b.real
        denom = f("addf", br, f("mulf", bi, ratio))
        r1 = f("divf", f("addf", ar, f("mulf", ai, ratio)), denom)
        i1 = f("divf", f("subf", ai, f("mulf", ar, ratio)), denom)
        ratio2 = f("divf", br, bi)  # by b.imag
        denom2 = f("addf", f("mulf", br, ratio2), bi)
        r2 = f("divf", f("addf", f("mulf", ar, ratio2), ai), denom2)
        i2 = f("divf", f("subf", f("mulf", ai, ratio2), ar), denom2)
        nan = self.const(float("nan"), pt).ssa
        re = f(f"select {by_im},", r2, nan)
        im = f(f"select {by_im},", i2, nan)
        re = f(f"select {by_re},", r1, re)
        im = f(f"select {by_re},", i1, im)
        # Dividing by 0j without raising (error_model="numpy"): numpy's a.real/0, a.imag/0.
        re = f(f"select {is_zero},", f("divf", ar, abr), re)
        im = f(f"select {is_zero},", f("divf", ai, abr), im)
        return self.make(re, im, t)

    def zero_check_if(self, is_zero: str, part: str, pt: Scalar) -> None:
        """ZeroDivisionError when ``is_zero`` (as :meth:`.OpsMixin.zero_check` does for
        floats: ``part``, zero on that path, feeds checked mode's division check)."""
        fail, ok = self.label(), self.label()
        self.branch(is_zero, fail, ok)
        self.start(fail)
        as_int = self.op(f"arith.fptosi {part} : {pt.mlir} to i64")
        quotient = self.op(f"arith.divsi {self.const(1, I64).ssa}, {as_int} "
                           f'{{pymlirjit.zero_message = "{COMPLEX_DIVISION}"}} : i64')
        self.do(f"memref.store {quotient}, {self.slot(I64)}[] : memref<i64>")
        self.goto(ok)
        self.start(ok)

    def complex_powi(self, x: Value, n: int) -> Value:
        """CPython's ``c_powi``: repeated squaring from 1 (the same products, so the
        same bits), and 1 / that for a negative ``n``."""
        t = x.type
        assert isinstance(t, Scalar)
        one = Value(self.op(self.complex_literal(1 + 0j, t)), t)
        r, p, mask, k = one, x, 1, abs(n)
        while mask > 0 and k >= mask:
            if k & mask:
                r = self.complex_mul(r, p)
            mask <<= 1
            if k >= mask:
                p = self.complex_mul(p, p)
        return r if n > 0 else self.complex_div(one, r)

    def complex_compare(self, op: ast.cmpop, x: str, y: str, t: Scalar) -> str:
        """``==`` (both parts equal) or ``!=`` (either differs, or a NaN)."""
        (xr, xi), (yr, yi) = self.parts(Value(x, t)), self.parts(Value(y, t))
        m = part_type(t).strong.mlir
        pred, join = ("oeq", "andi") if isinstance(op, ast.Eq) else ("une", "ori")
        a = self.op(f"arith.cmpf {pred}, {xr}, {yr} : {m}")
        b = self.op(f"arith.cmpf {pred}, {xi}, {yi} : {m}")
        return self.op(f"arith.{join} {a}, {b} : i1")

    def complex_neg(self, v: Value) -> Value:
        assert isinstance(v.type, Scalar)
        return Value(self.op(f"complex.neg {v.ssa} : {v.type.mlir}"), v.type)

    # -- attributes and functions -------------------------------------------------------

    def number_attribute(self, v: Value, attr: str, t: JType) -> Value:
        """``x.real``/``x.imag`` of any number (a real's imag is 0)."""
        assert isinstance(v.type, Scalar) and isinstance(t, Scalar)
        if v.type.kind == "complex":
            re, im = self.parts(v)
            return Value(re if attr == "real" else im, t)
        return self.convert(v, t) if attr == "real" else self.const(0, t)

    def complex_intrinsic(self, f: Intrinsic, args: list[Value], t: JType) -> Value | None:
        """An intrinsic with a complex argument or result (None: not one)."""
        kind, op = f.kind, f.op
        if kind == "npcomplex":
            if op in ("real", "imag"):
                return self.number_attribute(args[0], op, t)
            v = args[0]
            assert isinstance(v.type, Scalar)
            if v.type.kind != "complex":
                return self.convert(v, t)
            return Value(self.op(f"complex.conj {v.ssa} : {v.type.mlir}"), v.type)
        if kind == "cast" and op == "complex":
            z = self.convert(args[0], WEAK_COMPLEX)
            if len(args) == 1:
                return z
            re, im = self.parts(z)
            pt = part_type(WEAK_COMPLEX)
            extra = self.convert(args[1], pt).ssa
            return self.make(re, self.op(f"arith.addf {im}, {extra} : f64"), WEAK_COMPLEX)
        on_complex = any(isinstance(a.type, Scalar) and a.type.kind == "complex" for a in args)
        if not isinstance(t, Scalar) or not (on_complex or kind == "cmath1"):
            return None
        if kind == "abs":
            z = args[0]
            assert isinstance(z.type, Scalar)
            return Value(self.op(f"complex.abs {z.ssa} : {z.type.mlir}"), t)
        if kind in ("cmath1", "np1"):
            z = self.convert(args[0], t)
            return Value(self.op(f"complex.{op} {z.ssa} : {t.mlir}"), t)
        if kind == "pow":
            x, y = self.convert(args[0], t), self.convert(args[1], t)
            return Value(self.op(f"complex.pow {x.ssa}, {y.ssa} : {t.mlir}"), t)
        return None


def _nonzero(node: ast.expr | None) -> bool:
    """A literal nonzero divisor (no zero check needed)."""
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
        and not isinstance(node.value, bool) and node.value != 0

