"""Calls: intrinsics (``math``, numpy scalar functions, ``abs``/``min``/``max``, casts,
``len``, ``np.empty``...), Python functions compiled into the module (``func.call``),
callbacks into Python (``@callback``, automatic ones, ``print``), and ``raise``."""

from __future__ import annotations

import ast
from typing import Any

from .calls import Callee, ForeignCall, mlir_of
from .complexes import part_type
from .emit_base import EmitBase, Value
from .intrinsics import Intrinsic, fill_of
from .jtypes import BOOL, WEAK_FLOAT, WEAK_INT, Array, JType, NoneT, Optional, Scalar, Tuple
from .resolve import resolve

__all__ = ["CallsMixin", "flatten_values", "rebuild"]


def flatten_values(v: Value) -> list[Value]:
    if isinstance(v.type, (Tuple, Optional)):
        return [x for i in v.items for x in flatten_values(i)]
    if isinstance(v.type, NoneT):
        return []
    return [v]


def flat_types(t: JType) -> list[JType]:
    if isinstance(t, (Tuple, Optional)):
        return [x for i in t.items for x in flat_types(i)]
    if isinstance(t, NoneT):
        return []
    return [t]


def rebuild(t: JType, values: list[Value]) -> tuple[Value, list[Value]]:
    """A value of ``t`` from the front of ``values`` (flattened), and the rest."""
    if isinstance(t, (Tuple, Optional)):
        items = []
        for item in t.items:
            v, values = rebuild(item, values)
            items.append(v)
        return Value("", t, tuple(items)), values
    if isinstance(t, NoneT):
        return Value("", t), values
    return values[0], values[1:]


class CallsMixin(EmitBase):
    """Calls, ``raise`` and ``print``."""

    def call(self, node: ast.Call) -> Value:
        target = self.info.targets.get(node)
        result = self.type_of(node)
        if isinstance(target, Intrinsic) and target.kind in ("alloc", "alloc_like"):
            obj = resolve(self.source, node.func)  # np.empty & co
            like = "like" in getattr(obj, "__name__", "")
            return self.allocate(node, like, fill_of(obj), result)
        if isinstance(target, Intrinsic):
            if target.kind == "print":
                return self.print_(node)
            if target.kind == "reduce":
                arg = node.args[0] if node.args else node.func.value  # type: ignore[attr-defined]
                return self.reduce(self.expr(arg), target.op, result)
            operands = node.args or ([node.func.value]  # z.conjugate()
                                     if isinstance(node.func, ast.Attribute)
                                     and target.kind == "npcomplex" else [])
            return self.intrinsic(target, [self.expr(a) for a in operands], result)
        args = [self.expr(a) for a in node.args]
        assert isinstance(target, (Callee, ForeignCall))
        value = self.call_function(target.symbol, target.params, args, target.result)
        self.settle_ownership(args, value)
        return value

    def call_function(self, symbol: str, params: tuple[JType, ...], args: list[Value],
                      result: JType) -> Value:
        flat: list[Value] = []
        for a, p in zip(args, params):
            flat += flatten_values(self.convert(a, p))
        results = flat_types(result)
        types = ", ".join(mlir_of(v.type) for v in flat)
        outs = ", ".join(mlir_of(t) for t in results)
        text = f"func.call @{symbol}({', '.join(v.ssa for v in flat)}) : ({types}) -> ({outs})"
        if not results:
            self.do(text)
            return Value("", result)
        if len(results) == 1:
            return Value(self.op(text), result)
        name = self.fresh()
        self.lines.append(f"    {name}:{len(results)} = {text}{self.source.loc(self.at)}")
        values = [Value(f"{name}#{i}", t) for i, t in enumerate(results)]
        return rebuild(result, values)[0]

    def intrinsic(self, f: Intrinsic, args: list[Value], t: JType) -> Value:
        kind, op = f.kind, f.op
        if isinstance(t, Array) and kind in ("np1", "abs"):  # np.sqrt(a): element by element
            dtype = t.dtype
            return self.elementwise(lambda v: self.intrinsic(f, v, dtype), args, t)
        if kind == "random":
            return self.random_call(op, args, t)
        on_complex = self.complex_intrinsic(f, args, t)
        if on_complex is not None:
            return on_complex
        if kind == "len":
            a = args[0]
            if isinstance(a.type, Tuple):
                return self.const(len(a.type.items), WEAK_INT)
            return Value(self.op(f"arith.index_cast {self.dim(a, 0)} : index to i64"), WEAK_INT)
        if kind in ("cast", "npcast"):
            if t == WEAK_FLOAT or (isinstance(t, Scalar) and t.kind != "bool"):
                return self.convert(args[0], t)
            return Value(self.truth(args[0]), t)
        if kind == "math_round":
            a = args[0]
            if isinstance(a.type, Scalar) and a.type.kind == "float":
                r = self.op(f"math.{op} {a.ssa} : {a.type.mlir}")
                return self.convert(Value(r, a.type), WEAK_INT)
            return self.convert(a, WEAK_INT)
        assert isinstance(t, Scalar)
        if kind in ("math1", "np1"):
            x = self.convert(args[0], t)
            return Value(self.op(f"math.{op} {x.ssa} : {t.mlir}"), t)
        if kind in ("math2", "np2", "pow", "minmax2"):
            x, y = self.convert(args[0], t), self.convert(args[1], t)
            m = t.mlir
            if op == "hypot":
                xx = self.op(f"arith.mulf {x.ssa}, {x.ssa} : {m}")
                yy = self.op(f"arith.mulf {y.ssa}, {y.ssa} : {m}")
                s = self.op(f"arith.addf {xx}, {yy} : {m}")
                return Value(self.op(f"math.sqrt {s} : {m}"), t)
            if op == "pow":
                name = "math.powf" if t.kind == "float" else "math.ipowi"
                return Value(self.op(f"{name} {x.ssa}, {y.ssa} : {m}"), t)
            if kind == "minmax2" and t.kind != "float":
                letter = "u" if t.kind in ("uint", "bool") else "s"
                name = ("min" if "min" in op else "max") + letter + "i"
                return Value(self.op(f"arith.{name} {x.ssa}, {y.ssa} : {m}"), t)
            dialect = "arith" if kind == "minmax2" else "math"
            return Value(self.op(f"{dialect}.{op} {x.ssa}, {y.ssa} : {m}"), t)
        if kind == "test":
            a = args[0]
            assert isinstance(a.type, Scalar)
            if a.type.kind != "float":
                return self.const(op == "isfinite", BOOL)
            m = a.type.mlir
            if op == "isnan":
                return Value(self.op(f"arith.cmpf uno, {a.ssa}, {a.ssa} : {m}"), t)
            mag = self.op(f"math.absf {a.ssa} : {m}")
            inf = self.const(float("inf"), a.type).ssa
            pred = "oeq" if op == "isinf" else "olt"
            return Value(self.op(f"arith.cmpf {pred}, {mag}, {inf} : {m}"), t)
        if kind == "abs":
            x = self.convert(args[0], t)
            if t.kind == "float":
                return Value(self.op(f"math.absf {x.ssa} : {t.mlir}"), t)
            if t.kind == "uint":
                return x
            zero = self.const(0, t).ssa
            neg = self.op(f"arith.cmpi slt, {x.ssa}, {zero} : {t.mlir}")
            minus = self.op(f"arith.subi {zero}, {x.ssa} : {t.mlir}")
            return Value(self.op(f"arith.select {neg}, {minus}, {x.ssa} : {t.mlir}"), t)
        if kind == "minmax":
            from .emit_ops import OpsMixin
            best = self.convert(args[0], t)
            cmp = ast.Lt() if op == "min" else ast.Gt()
            for other in args[1:]:
                o = self.convert(other, t)
                better = OpsMixin.compare(self, cmp, o, best)  # type: ignore[arg-type]
                best = Value(self.op(f"arith.select {better}, {o.ssa}, {best.ssa} : "
                                     f"{t.mlir}"), t)
            return best
        raise self.error(self.at, f"{op} is not supported here")

    def reduce(self, a: Value, op: str, t: JType) -> Value:
        """``a.sum()`` & co over every element, in order (numpy sums floats pairwise:
        the last bits may differ); min/max of an empty array raise ValueError."""
        arr = a.type
        assert isinstance(arr, Array) and isinstance(t, Scalar)
        dims = [self.dim(a, d) for d in range(arr.ndim)]
        acc = self.slot(t)
        wide = t  # mean: a float type already (numpy: f64 for integer arrays)
        if t.kind == "complex" and op in ("min", "max"):
            raise self.error(self.at, f"{op}() of complex numbers is not supported",
                             "compare abs() or .real in a loop")
        if op in ("min", "max"):
            count = self.const(1, Scalar("int", 64)).ssa
            for d in dims:
                n = self.op(f"arith.index_cast {d} : index to i64")
                count = self.op(f"arith.muli {count}, {n} : i64")
            empty = self.op(f"arith.cmpi eq, {count}, {self.const(0, Scalar('int', 64)).ssa}"
                            f" : i64")
            self.raise_python(ValueError, (f"zero-size array to reduction operation {op}imum "
                                           f"which has no identity",), when=empty)
            first = self.load_at(a, [self.index_const(0)] * len(dims))
            init = self.convert(first, t).ssa
        else:
            init = self.const(1 if op == "prod" else 0, wide).ssa
        self.do(f"memref.store {init}, {acc}[] : memref<{wide.mlir}>")
        name = {"sum": "add", "mean": "add", "prod": "mul"}.get(op, op)

        def step(idx: list[str]) -> None:
            v = self.convert(self.load_at(a, idx), wide)
            cur = self.op(f"memref.load {acc}[] : memref<{wide.mlir}>")
            if wide.kind == "complex":  # CPython's product, as z * w
                step = self.binop(ast.Add() if name == "add" else ast.Mult(),
                                  Value(cur, wide), v, wide, None)
                self.do(f"memref.store {step.ssa}, {acc}[] : memref<{wide.mlir}>")
                return
            if wide.kind == "float":
                fname = {"add": "addf", "mul": "mulf", "min": "minimumf", "max": "maximumf"}
            else:
                letter = "u" if wide.kind == "uint" else "s"
                fname = {"add": "addi", "mul": "muli", "min": f"min{letter}i",
                         "max": f"max{letter}i"}
            new = self.op(f"arith.{fname[name]} {cur}, {v.ssa} : {wide.mlir}")
            self.do(f"memref.store {new}, {acc}[] : memref<{wide.mlir}>")

        self.each_element(dims, step)
        self.release(a)  # (a * b).sum(): the product is not needed any more
        total = Value(self.op(f"memref.load {acc}[] : memref<{wide.mlir}>"), wide)
        if op != "mean":
            return total
        pt = part_type(wide).strong
        count = self.const(1.0, pt).ssa
        for d in dims:
            n = self.op(f"arith.index_cast {d} : index to i64")
            count = self.op(f"arith.mulf {count}, "
                            f"{self.op(f'arith.sitofp {n} : i64 to {pt.mlir}')} : {pt.mlir}")
        if wide.kind == "complex":  # numpy's (re / n, im / n)
            re, im = self.parts(total)
            return self.make(self.op(f"arith.divf {re}, {count} : {pt.mlir}"),
                             self.op(f"arith.divf {im}, {count} : {pt.mlir}"), wide)
        return Value(self.op(f"arith.divf {total.ssa}, {count} : {wide.mlir}"), wide)

    def print_(self, node: ast.Call) -> Value:
        parts: list[str | None] = []
        values: list[Value] = []
        for a in node.args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                parts.append(a.value)
            else:
                v = self.expr(a)
                parts.append(None)
                values.append(v)
        options: dict[str | None, Any] = {k.arg: k.value.value for k in node.keywords
                   if isinstance(k.value, ast.Constant) and k.arg in ("sep", "end")}
        types = tuple(v.type for v in values)
        symbol = self.program.print_callback(tuple(parts), types, options)
        params = tuple(t.strong if isinstance(t, Scalar) else t for t in types)
        self.call_function(symbol, params, values, NoneT())
        return Value("", NoneT())

    def raise_python(self, cls: type, args: tuple[object, ...], when: str | None = None) -> None:
        """Raise ``cls(*args)`` from the kernel call (a callback raising it), then leave
        the function (the code after never runs). With ``when`` (an i1), only where it
        holds: the code after runs where it does not."""
        if when is not None:
            fail, ok = self.label(), self.label()
            self.branch(when, fail, ok)
            self.start(fail)
        symbol = self.program.raise_callback(cls, args, str(self.source.where(self.at)))
        self.do(f"func.call @{symbol}() : () -> ()")
        self.leave()
        if when is not None:
            self.start(ok)

    def raise_(self, stmt: ast.Raise) -> None:
        exc = stmt.exc
        assert exc is not None
        cls = self.info.constants[exc]
        args = tuple(a.value for a in exc.args) if isinstance(exc, ast.Call) else ()  # type: ignore[attr-defined]
        self.raise_python(cls, args)

    def assertion(self, stmt: ast.Assert) -> None:
        cond = self.truth(self.expr(stmt.test))
        message = stmt.msg.value if isinstance(stmt.msg, ast.Constant) else ""
        escaped = str(message).replace("\\", "\\\\").replace('"', '\\"')
        self.do(f'cf.assert {cond}, "{escaped}"')

    def leave(self) -> None:
        """Return placeholder values (after a raise: never used)."""
        values: list[str] = []
        types: list[str] = []
        for t in flat_types(self.info.result):
            if isinstance(t, Scalar):
                values.append(self.const(0, t).ssa)
            else:
                assert isinstance(t, Array)
                zeros = ", ".join([self.index_const(0)] * t.ndim)
                m = self.op(f"memref.alloc({zeros}) : {Array(t.dtype, t.ndim).mlir}")
                if not t.contiguous:
                    m = self.op(f"memref.cast {m} : {Array(t.dtype, t.ndim).mlir} to {t.mlir}")
                values.append(m)
            types.append(mlir_of(t))
        self.do(f"func.return {', '.join(values)} : {', '.join(types)}" if values
                else "func.return")
        self.terminated = True

