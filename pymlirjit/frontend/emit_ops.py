"""Scalar operators with Python's semantics (frontend.md §5): ``//`` and ``%`` floor toward
minus infinity for ints and floats, ``/`` of ints is a float, ``!=`` is unordered, ``and``
and ``or`` short-circuit, and a float division by zero raises ZeroDivisionError."""

from __future__ import annotations

import ast

from .emit_base import EmitBase, Value
from .jtypes import BOOL, I64, JType, Optional, Scalar
from .zero_messages import FLOAT_BY_OPERATOR, INT_DIVISION, INT_MODULO

__all__ = ["OpsMixin"]

_INT = {ast.Add: "addi", ast.Sub: "subi", ast.Mult: "muli", ast.BitAnd: "andi",
        ast.BitOr: "ori", ast.BitXor: "xori", ast.LShift: "shli"}
_FLOAT = {ast.Add: "addf", ast.Sub: "subf", ast.Mult: "mulf", ast.Div: "divf"}
_CMP_INT = {ast.Lt: "slt", ast.LtE: "sle", ast.Gt: "sgt", ast.GtE: "sge", ast.Eq: "eq",
            ast.NotEq: "ne"}
_CMP_FLOAT = {ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt", ast.GtE: "oge", ast.Eq: "oeq",
              ast.NotEq: "une"}


class OpsMixin(EmitBase):
    """Arithmetic, comparisons, boolean operators and conditional expressions."""

    def binop(self, op: ast.operator, a: Value, b: Value, result: JType,
              divisor: ast.expr | None = None) -> Value:
        assert isinstance(result, Scalar)
        t = result
        if t.kind == "complex":
            return self.complex_binop(op, a, b, t, divisor)
        if isinstance(op, ast.Pow) and t.is_int:
            b = self.convert(b, t)
            a = self.convert(a, t)
            return Value(self.op(f"math.ipowi {a.ssa}, {b.ssa} : {t.mlir}"), t)
        of_ints = all(isinstance(v.type, Scalar) and v.type.kind in ("int", "uint", "bool")
                      for v in (a, b))
        a, b = self.convert(a, t), self.convert(b, t)
        x, y, m = a.ssa, b.ssa, t.mlir
        if t.kind == "float":
            if isinstance(op, ast.Pow):
                return Value(self.op(f"math.powf {x}, {y} : {m}"), t)
            if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and not _nonzero(divisor):
                self.zero_check(b, INT_DIVISION if of_ints and isinstance(op, ast.Div)
                                else FLOAT_BY_OPERATOR[type(op)])
            if type(op) in _FLOAT:
                return Value(self.op(f"arith.{_FLOAT[type(op)]} {x}, {y} : {m}"), t)
            return self.float_divmod(op, a, b)
        if t.kind == "bool":  # & | ^ of two bools
            return Value(self.op(f"arith.{_INT[type(op)]} {x}, {y} : i1"), t)
        unsigned = t.kind == "uint"
        if isinstance(op, ast.RShift):
            return Value(self.op(f"arith.{'shrui' if unsigned else 'shrsi'} {x}, {y} : {m}"), t)
        if type(op) in _INT:
            return Value(self.op(f"arith.{_INT[type(op)]} {x}, {y} : {m}"), t)
        if isinstance(op, ast.FloorDiv):
            name = "divui" if unsigned else "floordivsi"
            return Value(self.op(f"arith.{name} {x}, {y} : {m}"), t)
        if isinstance(op, ast.Mod):
            said = f'{{pymlirjit.zero_message = "{INT_MODULO}"}}'
            if unsigned:
                return Value(self.op(f"arith.remui {x}, {y} {said} : {m}"), t)
            r = self.op(f"arith.remsi {x}, {y} {said} : {m}")
            zero = self.const(0, t).ssa
            nonzero = self.op(f"arith.cmpi ne, {r}, {zero} : {m}")
            r_neg = self.op(f"arith.cmpi slt, {r}, {zero} : {m}")
            y_neg = self.op(f"arith.cmpi slt, {y}, {zero} : {m}")
            differ = self.op(f"arith.xori {r_neg}, {y_neg} : i1")
            fix = self.op(f"arith.andi {nonzero}, {differ} : i1")
            fixed = self.op(f"arith.addi {r}, {y} : {m}")
            return Value(self.op(f"arith.select {fix}, {fixed}, {r} : {m}"), t)
        raise self.error(self.at, f"operator {type(op).__name__} is not supported on {t}")

    def zero_check(self, b: Value, message: str = FLOAT_BY_OPERATOR[ast.Div]) -> None:
        """ZeroDivisionError(``message``) when the float ``b`` is zero (through checked
        mode's integer division check, which reads ``message`` from the division's
        ``pymlirjit.zero_message`` attribute; ``error_model="numpy"`` lets the division
        give inf or nan)."""
        assert isinstance(b.type, Scalar)
        zero = self.const(0.0, b.type).ssa
        is_zero = self.op(f"arith.cmpf oeq, {b.ssa}, {zero} : {b.type.mlir}")
        fail, ok = self.label(), self.label()
        self.branch(is_zero, fail, ok)
        self.start(fail)
        as_int = self.op(f"arith.fptosi {b.ssa} : {b.type.mlir} to i64")
        quotient = self.op(f"arith.divsi {self.const(1, I64).ssa}, {as_int} "
                           f"{{pymlirjit.zero_message = \"{message}\"}} : i64")
        # Stored, so that no pattern erases the division as dead before checked mode
        # sees it (LLVM drops the store into the unused slot afterwards).
        self.do(f"memref.store {quotient}, {self.slot(I64)}[] : memref<i64>")
        self.goto(ok)
        self.start(ok)

    def float_divmod(self, op: ast.operator, a: Value, b: Value) -> Value:
        """CPython's float_divmod: the floor quotient or the modulo with b's sign."""
        t = a.type
        assert isinstance(t, Scalar)
        m, x, y = t.mlir, a.ssa, b.ssa
        zero = self.const(0.0, t).ssa
        mod = self.op(f"arith.remf {x}, {y} : {m}")
        mod_nonzero = self.op(f"arith.cmpf une, {mod}, {zero} : {m}")
        y_neg = self.op(f"arith.cmpf olt, {y}, {zero} : {m}")
        mod_neg = self.op(f"arith.cmpf olt, {mod}, {zero} : {m}")
        differ = self.op(f"arith.xori {y_neg}, {mod_neg} : i1")
        fix = self.op(f"arith.andi {mod_nonzero}, {differ} : i1")
        if isinstance(op, ast.Mod):
            moved = self.op(f"arith.addf {mod}, {y} : {m}")
            fixed = self.op(f"arith.select {fix}, {moved}, {mod} : {m}")
            signed_zero = self.op(f"math.copysign {zero}, {y} : {m}")
            return Value(self.op(f"arith.select {mod_nonzero}, {fixed}, {signed_zero} : {m}"), t)
        diff = self.op(f"arith.subf {x}, {mod} : {m}")
        div = self.op(f"arith.divf {diff}, {y} : {m}")
        one = self.const(1.0, t).ssa
        less = self.op(f"arith.subf {div}, {one} : {m}")
        div = self.op(f"arith.select {fix}, {less}, {div} : {m}")
        floor = self.op(f"math.floor {div} : {m}")
        rest = self.op(f"arith.subf {div}, {floor} : {m}")
        half = self.const(0.5, t).ssa
        up = self.op(f"arith.cmpf ogt, {rest}, {half} : {m}")
        plus = self.op(f"arith.addf {floor}, {one} : {m}")
        floor = self.op(f"arith.select {up}, {plus}, {floor} : {m}")
        div_zero = self.op(f"arith.cmpf oeq, {div}, {zero} : {m}")
        quotient = self.op(f"arith.divf {x}, {y} : {m}")
        signed_zero = self.op(f"math.copysign {zero}, {quotient} : {m}")
        return Value(self.op(f"arith.select {div_zero}, {signed_zero}, {floor} : {m}"), t)

    def compare(self, op: ast.cmpop, a: Value, b: Value) -> str:
        """An i1: ``a op b`` (the operands promoted to one type first)."""
        from .jtypes import promote
        assert isinstance(a.type, Scalar) and isinstance(b.type, Scalar)
        t = promote(a.type, b.type) if a.type.kind != "bool" or b.type.kind != "bool" else BOOL
        x, y = self.convert(a, t).ssa, self.convert(b, t).ssa
        if t.kind == "complex":
            return self.complex_compare(op, x, y, t)
        if t.kind == "float":
            return self.op(f"arith.cmpf {_CMP_FLOAT[type(op)]}, {x}, {y} : {t.mlir}")
        pred = _CMP_INT[type(op)]
        if t.kind in ("uint", "bool") and pred[0] == "s":
            pred = "u" + pred[1:]
        return self.op(f"arith.cmpi {pred}, {x}, {y} : {t.mlir}")

    def unary(self, node: ast.UnaryOp, v: Value, result: JType) -> Value:
        if isinstance(node.op, ast.Not):
            truth = self.truth(v)
            return Value(self.op(f"arith.xori {truth}, {self.const(True, BOOL).ssa} : i1"),
                         result)
        assert isinstance(result, Scalar)
        v = self.convert(v, result)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.USub):
            if result.kind == "complex":
                return self.complex_neg(v)
            if result.kind == "float":
                return Value(self.op(f"arith.negf {v.ssa} : {result.mlir}"), result)
            zero = self.const(0, result).ssa
            return Value(self.op(f"arith.subi {zero}, {v.ssa} : {result.mlir}"), result)
        ones = self.const(-1, result).ssa
        return Value(self.op(f"arith.xori {v.ssa}, {ones} : {result.mlir}"), result)

    def short_circuit(self, node: ast.BoolOp, result: JType) -> Value:
        """``a and b`` / ``a or b``: Python's value (an operand), b evaluated only if needed."""
        done = self.label()
        arg = self.fresh()
        assert isinstance(result, Scalar)
        for value in node.values[:-1]:
            v = self.convert(self.expr(value), result)
            truth = self.truth(v)
            rest = self.label()
            if isinstance(node.op, ast.And):
                self.do(f"cf.cond_br {truth}, ^{rest}, ^{done}({v.ssa} : {result.mlir})")
            else:
                self.do(f"cf.cond_br {truth}, ^{done}({v.ssa} : {result.mlir}), ^{rest}")
            self.start(rest)
        last = self.convert(self.expr(node.values[-1]), result)
        self.do(f"cf.br ^{done}({last.ssa} : {result.mlir})")
        self.lines.append(f"  ^{done}({arg}: {result.mlir}):")
        return Value(arg, result)

    def chained(self, node: ast.Compare) -> Value:
        """``a < b < c``: ``a < b and b < c`` with b evaluated once."""
        left = self.expr(node.left)
        if len(node.ops) == 1:
            return Value(self.compare(node.ops[0], left, self.expr(node.comparators[0])), BOOL)
        done, arg = self.label(), self.fresh()
        false = self.const(False, BOOL).ssa
        for op, right_node in zip(node.ops[:-1], node.comparators[:-1]):
            right = self.expr(right_node)
            c = self.compare(op, left, right)
            rest = self.label()
            self.do(f"cf.cond_br {c}, ^{rest}, ^{done}({false} : i1)")
            self.start(rest)
            left = right
        c = self.compare(node.ops[-1], left, self.expr(node.comparators[-1]))
        self.do(f"cf.br ^{done}({c} : i1)")
        self.lines.append(f"  ^{done}({arg}: i1):")
        return Value(arg, BOOL)

    def conditional(self, node: ast.IfExp, result: JType) -> Value:
        """``a if c else b``: only the branch taken is evaluated."""
        if not isinstance(result, (Scalar, Optional)):
            raise self.error(node, f"conditional expressions of {result} are not supported",
                             "use an if statement")
        parts = result.items if isinstance(result, Optional) else (result,)
        cond = self.truth(self.expr(node.test))
        then, other, done = self.label(), self.label(), self.label()
        args = [self.fresh() for _ in parts]
        types = ", ".join(p.mlir for p in parts)
        self.branch(cond, then, other)
        for label, branch in ((then, node.body), (other, node.orelse)):
            self.start(label)
            v = self.convert(self.expr(branch), result)
            values = [i.ssa for i in v.items] if isinstance(result, Optional) else [v.ssa]
            self.do(f"cf.br ^{done}({', '.join(values)} : {types})")
        self.lines.append(f"  ^{done}({', '.join(f'{a}: {p.mlir}' for a, p in zip(args, parts))}):")
        self.terminated = False
        if isinstance(result, Optional):
            return Value("", result, tuple(Value(a, p) for a, p in zip(args, parts)))
        return Value(args[0], result)


def _nonzero(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
        and node.value != 0

