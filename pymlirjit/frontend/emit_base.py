"""The emitter's ground floor: MLIR text lines with the user's locations, SSA names,
constants and stack slots hoisted to the entry block, scalar conversions, and the joins
of the control-flow graph.

Scalar variables live in ``memref.alloca`` slots of the entry block (LLVM's mem2reg makes
them registers, as numba's allocas); arrays are SSA values, passed as block arguments
where branches and loops join (a loop that swaps two arrays carries them)."""

from __future__ import annotations

import ast
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .diagnostics import JitTypeError
from .host import Host
from .jtypes import BOOL, Array, JType, NoneT, Optional, Scalar, Tuple
from .source import FunctionSource

if TYPE_CHECKING:
    from .infer import Inference

__all__ = ["EmitBase", "Join", "Value"]


@dataclass(frozen=True)
class Value:
    """An SSA value (``ssa``) of ``type``; a tuple holds its ``items`` instead."""

    ssa: str
    type: JType
    items: tuple[Value, ...] = ()


@dataclass
class Join:
    """A block several edges branch to. ``fixed``: a loop header, whose carried arrays
    (its block arguments) are known before its edges; otherwise the arguments are the
    arrays whose values differ between the edges, known once all are emitted."""

    label: str
    fixed: dict[str, Value] | None = None
    edges: list[tuple[int, dict[str, Value]]] = field(default_factory=list)


_FLOAT_BITS = {16: ("<e", "<H", 4), 32: ("<f", "<I", 8), 64: ("<d", "<Q", 16)}


def float_literal(value: float, bits: int) -> str:
    """``value`` as an MLIR float literal of ``bits`` (hex for inf and nan)."""
    if math.isfinite(value):
        return f"{value:.17e}"
    pack, unpack, digits = _FLOAT_BITS[bits]
    raw = struct.unpack(unpack, struct.pack(pack, value))[0]
    return f"0x{raw:0{digits}X}"


class EmitBase:
    """State and primitives shared by the emitter's parts (see :mod:`.emit`)."""

    def __init__(self, program: Host, source: FunctionSource, info: Inference) -> None:
        self.program, self.source, self.info = program, source, info
        self.lines: list[str] = []
        self.entry: list[str] = []
        self.counter = 0
        self.blocks = 0
        self.terminated = False
        self.at: ast.AST = source.tree
        self.slots: dict[str, list[tuple[str, Scalar]]] = {}
        self.arrays: dict[str, Value] = {}
        self.consts: dict[tuple[str, str], str] = {}
        # Per block of statements being emitted: the arrays it allocated and frees on
        # leaving (see :mod:`.ownership`).
        self.scopes: list[list[Value]] = []
        # Arrays whole-array expressions made that nothing holds yet (freed once used).
        self.fresh_temps: set[str] = set()
        # Arrays a call returned that are new memory only if an i1 says so (a compiled
        # callee or a linked kernel may return a view of an argument): array -> that i1.
        self.owned_if: dict[str, str] = {}
        # Variables assigned new arrays more than once: whether the current one is ours
        # (an i8 slot, see :mod:`.ownership`).
        self.own_slots: dict[str, str] = {}

    def free(self, depth: int) -> None:
        raise NotImplementedError

    def dealloc(self, v: Value) -> None:
        raise NotImplementedError

    def settle_ownership(self, args: list[Value], result: Value) -> None:
        raise NotImplementedError

    def replace_owned(self, name: str, value: Value) -> None:
        raise NotImplementedError

    def free_managed(self, kept: set[str]) -> None:
        raise NotImplementedError

    # -- given by the parts of the emitter (:mod:`.emit` and its mixins) ---------------

    def expr(self, node: ast.expr) -> Value:
        raise NotImplementedError

    def block(self, stmts: list[ast.stmt]) -> None:
        raise NotImplementedError

    def assign(self, target: ast.expr, value: Value) -> None:
        raise NotImplementedError

    def compare(self, op: ast.cmpop, a: Value, b: Value) -> str:
        raise NotImplementedError

    def binop(self, op: ast.operator, a: Value, b: Value, result: JType,
              divisor: ast.expr | None = None) -> Value:
        raise NotImplementedError

    def dim(self, a: Value, d: int) -> str:
        raise NotImplementedError

    def flat(self, a: Value) -> Value:
        raise NotImplementedError

    def nonneg(self, node: ast.expr) -> bool:
        raise NotImplementedError

    def raise_python(self, cls: type, args: tuple[object, ...], when: str | None = None) -> None:
        raise NotImplementedError

    def allocate(self, node: ast.Call, like: bool, fill: str, t: JType) -> Value:
        raise NotImplementedError

    def each_element(self, dims: list[str], body: Callable[[list[str]], None]) -> None:
        raise NotImplementedError

    def elementwise(self, compute: Callable[[list[Value]], Value], operands: list[Value],
                    result: Array) -> Value:
        raise NotImplementedError

    def release(self, v: Value) -> None:
        raise NotImplementedError

    def fusable(self, node: ast.expr) -> bool:
        raise NotImplementedError

    def new_array(self, dims: list[str], t: Array) -> Value:
        raise NotImplementedError

    def fused(self, node: ast.expr) -> Value:
        raise NotImplementedError

    def ufunc_binop(self, op: ast.operator, a: Value, b: Value, t: Scalar) -> Value:
        raise NotImplementedError

    def broadcast_loop(self, out: Value, dims: list[str], leaves: dict[ast.AST, Value],
                       compute: Callable[[dict[ast.AST, Value]], Value]) -> None:
        raise NotImplementedError

    def intrinsic(self, f: Any, args: list[Value], t: JType) -> Value:
        raise NotImplementedError

    def float_divmod(self, op: ast.operator, a: Value, b: Value) -> Value:
        raise NotImplementedError

    def unary(self, node: ast.UnaryOp, v: Value, result: JType) -> Value:
        raise NotImplementedError

    def parallel_for(self, stmt: ast.For) -> bool:
        raise NotImplementedError

    def complex_literal(self, value: complex, t: Scalar) -> str:
        raise NotImplementedError

    def complex_cast(self, x: str, t: Scalar, to: Scalar) -> str:
        raise NotImplementedError

    def complex_binop(self, op: ast.operator, a: Value, b: Value, t: Scalar,
                      right: ast.expr | None) -> Value:
        raise NotImplementedError

    def complex_compare(self, op: ast.cmpop, x: str, y: str, t: Scalar) -> str:
        raise NotImplementedError

    def complex_neg(self, v: Value) -> Value:
        raise NotImplementedError

    def parts(self, v: Value) -> tuple[str, str]:
        raise NotImplementedError

    def make(self, re: str, im: str, t: Scalar) -> Value:
        raise NotImplementedError

    def complex_intrinsic(self, f: Any, args: list[Value], t: JType) -> Value | None:
        raise NotImplementedError

    def random_call(self, op: str, args: list[Value], t: JType) -> Value:
        raise NotImplementedError

    # -- text -------------------------------------------------------------------------

    def fresh(self) -> str:
        self.counter += 1
        return f"%{self.counter}"

    def label(self) -> str:
        self.blocks += 1
        return f"bb{self.blocks}"

    def op(self, text: str) -> str:
        """Emit ``%new = text`` at the current node's location; return ``%new``."""
        self.counter += 1
        name = f"%{self.counter}"
        self.lines.append(f"    {name} = {text}{self.source.loc(self.at)}")
        return name

    def do(self, text: str) -> None:
        """Emit an op without results at the current node's location."""
        self.lines.append(f"    {text}{self.source.loc(self.at)}")

    def error(self, node: ast.AST, message: str, hint: str = "") -> JitTypeError:
        return JitTypeError(message, self.source.where(node), hint)

    def type_of(self, node: ast.AST) -> JType:
        return self.info.types[node]

    # -- constants and slots ------------------------------------------------------------

    def const(self, value: complex | float | int | bool, t: Scalar) -> Value:
        """A constant of type ``t`` (hoisted to the entry block, made once)."""
        if t.kind == "complex":
            key = (self.complex_literal(complex(value), t), t.mlir)
            if key not in self.consts:
                self.consts[key] = self.fresh()
                self.entry.append(f"    {self.consts[key]} = {key[0]}")
            return Value(self.consts[key], t)
        if isinstance(value, complex):
            value = value.real
        if t.kind == "bool":
            text = "true" if value else "false"
        elif t.kind == "float":
            text = float_literal(float(value), t.bits)
        else:
            n = int(value) & ((1 << t.bits) - 1)
            text = str(n - (1 << t.bits) if n >= 1 << (t.bits - 1) else n)
        key = (text, t.mlir)
        name = self.consts.get(key)
        if name is None:
            name = self.consts[key] = self.fresh()
            typed = "" if t.kind == "bool" else f" : {t.mlir}"
            self.entry.append(f"    {name} = arith.constant {text}{typed}")
        return Value(name, t)

    def index_const(self, n: int) -> str:
        key = (str(n), "index")
        name = self.consts.get(key)
        if name is None:
            name = self.consts[key] = self.fresh()
            self.entry.append(f"    {name} = arith.constant {n} : index")
        return name

    def slot(self, t: Scalar) -> str:
        """A stack slot for a ``t`` (a byte for a bool: MLIR 22 cannot lower i1 memrefs)."""
        name = self.fresh()
        self.entry.append(f"    {name} = memref.alloca() : memref<{_slot_type(t)}>")
        return name

    def slots_of(self, name: str, t: JType) -> list[tuple[str, Scalar]]:
        found = self.slots.get(name)
        if found is None:
            found = self.slots[name] = [(self.slot(s), s) for s in _flat(t, self.at, self)]
        return found

    def load_var(self, name: str) -> Value:
        t = self.info.variables[name]
        if isinstance(t, Array):
            return self.arrays[name]
        values = []
        for s, st in self.slots_of(name, t):
            loaded = self.op(f"memref.load {s}[] : memref<{_slot_type(st)}>")
            if st.kind == "bool":
                loaded = self.op(f"arith.trunci {loaded} : i8 to i1")
            values.append(Value(loaded, st))
        return _unflatten(t, values)

    def store_var(self, name: str, value: Value) -> None:
        t = self.info.variables[name]
        original, value = value, self.convert(value, t)
        if isinstance(t, Array):
            self.fresh_temps.discard(value.ssa)  # held by the variable now
            if original.ssa in self.owned_if:  # a cast of a call's result
                self.owned_if.setdefault(value.ssa, self.owned_if[original.ssa])
            self.arrays[name] = value
            return
        for (s, st), item in zip(self.slots_of(name, t), _flatten(value)):
            stored = item.ssa
            if st.kind == "bool":
                stored = self.op(f"arith.extui {stored} : i1 to i8")
            self.do(f"memref.store {stored}, {s}[] : memref<{_slot_type(st)}>")

    def load_at(self, a: Value, idx: list[str]) -> Value:
        """The element of the array ``a`` at ``idx`` (index values)."""
        t = a.type
        assert isinstance(t, Array)
        v = self.op(f"memref.load {a.ssa}[{', '.join(idx)}] : {t.mlir}")
        if t.dtype.kind == "bool":
            v = self.op(f"arith.trunci {v} : i8 to i1")
        return Value(v, t.dtype)

    def store_at(self, v: Value, a: Value, idx: list[str]) -> None:
        """Store ``v`` (converted to the element type) into ``a`` at ``idx``."""
        t = a.type
        assert isinstance(t, Array)
        x = self.convert(v, t.dtype).ssa
        if t.dtype.kind == "bool":
            x = self.op(f"arith.extui {x} : i1 to i8")
        self.do(f"memref.store {x}, {a.ssa}[{', '.join(idx)}] : {t.mlir}")

    # -- conversions --------------------------------------------------------------------

    def convert(self, v: Value, to: JType) -> Value:
        """``v`` as a value of type ``to`` (numpy's casts; C-contiguous arrays to views)."""
        t = v.type
        if t == to:
            return v
        if isinstance(to, Optional):  # None, a number, or another optional
            if isinstance(t, NoneT):
                return Value("", to, (self.const(False, BOOL), self.const(0, to.item)))
            if isinstance(t, Optional):
                return Value("", to, (v.items[0], self.convert(v.items[1], to.item)))
            return Value("", to, (self.const(True, BOOL), self.convert(v, to.item)))
        if isinstance(t, Optional):
            return self.convert(self.unwrap(v), to)
        if isinstance(t, Scalar) and isinstance(to, Scalar):
            return Value(self._scalar_cast(v.ssa, t, to), to)
        if isinstance(t, Array) and isinstance(to, Array) and t.dtype == to.dtype \
                and t.ndim == to.ndim and not to.contiguous:
            return Value(self.op(f"memref.cast {v.ssa} : {t.mlir} to {to.mlir}"), to)
        if isinstance(t, Tuple) and isinstance(to, Tuple) and len(t.items) == len(to.items):
            items = tuple(self.convert(i, it) for i, it in zip(v.items, to.items))
            return Value("", to, items)
        raise self.error(self.at, f"cannot convert {t} to {to}")

    def _scalar_cast(self, x: str, t: Scalar, to: Scalar) -> str:
        if "complex" in (t.kind, to.kind) and t.mlir != to.mlir:
            return self.complex_cast(x, t, to)
        if t.mlir == to.mlir and (t.kind == to.kind or (t.kind != "float" and to.kind not in (
                "float", "bool"))):
            return x
        if to.kind == "bool":
            zero = self.const(0, t).ssa
            if t.kind == "float":
                return self.op(f"arith.cmpf une, {x}, {zero} : {t.mlir}")
            return self.op(f"arith.cmpi ne, {x}, {zero} : {t.mlir}")
        if t.kind in ("bool", "int", "uint") and to.kind in ("int", "uint"):
            if to.bits > t.bits:
                ext = "extsi" if t.kind == "int" else "extui"
                return self.op(f"arith.{ext} {x} : {t.mlir} to {to.mlir}")
            if to.bits < t.bits:
                return self.op(f"arith.trunci {x} : {t.mlir} to {to.mlir}")
            return x
        if to.kind == "float" and t.kind != "float":
            conv = "sitofp" if t.kind == "int" else "uitofp"
            return self.op(f"arith.{conv} {x} : {t.mlir} to {to.mlir}")
        if t.kind == "float" and to.kind != "float":
            conv = "fptosi" if to.kind == "int" else "fptoui"
            return self.op(f"arith.{conv} {x} : {t.mlir} to {to.mlir}")
        if to.bits > t.bits:
            return self.op(f"arith.extf {x} : {t.mlir} to {to.mlir}")
        return self.op(f"arith.truncf {x} : {t.mlir} to {to.mlir}")

    def unwrap(self, v: Value) -> Value:
        """The number an optional holds; TypeError if it is None (as Python's would be)."""
        flag, value = v.items
        fail, ok = self.label(), self.label()
        self.branch(flag.ssa, ok, fail)
        self.start(fail)
        self.raise_python(TypeError, ("None used as a number (the value of a function that "
                                      "returned None)",))
        self.start(ok)
        return value

    def truth(self, v: Value) -> str:
        """An i1: ``bool(v)``."""
        if not isinstance(v.type, Scalar):
            raise self.error(self.at, f"the truth value of {v.type} is ambiguous")
        return self.convert(v, BOOL).ssa

    def to_index(self, v: Value) -> str:
        assert isinstance(v.type, Scalar)
        i64 = self.convert(v, Scalar("int", 64)).ssa
        return self.op(f"arith.index_cast {i64} : i64 to index")

    # -- blocks and joins ---------------------------------------------------------------

    def start(self, label: str) -> None:
        self.lines.append(f"  ^{label}:")
        self.terminated = False

    def branch(self, cond: str, then: str, other: str) -> None:
        self.do(f"cf.cond_br {cond}, ^{then}, ^{other}")
        self.terminated = True

    def goto(self, label: str) -> None:
        self.do(f"cf.br ^{label}")
        self.terminated = True

    def loop_header(self, carried: list[str]) -> Join:
        """A join whose block arguments are the arrays in ``carried`` defined here."""
        names = [n for n in carried if n in self.arrays]
        return Join(self.label(), {n: Value(self.fresh(), self.arrays[n].type) for n in names})

    def jump(self, join: Join) -> None:
        """Branch to ``join``, passing the current arrays (nothing if unreachable)."""
        if self.terminated:
            return
        if join.fixed is not None:
            args = [self.arrays[n] for n in join.fixed]
            self.do(f"cf.br ^{join.label}{_args(args)}")
        else:
            join.edges.append((len(self.lines), dict(self.arrays)))
            self.lines.append("")  # rendered by enter(), once every edge is known
        self.terminated = True

    def enter(self, join: Join) -> bool:
        """Start ``join``'s block (False: no edge reaches it; the code after is dead)."""
        if join.fixed is not None:
            params = ", ".join(f"{v.ssa}: {v.type.mlir}" for v in join.fixed.values()
                               if isinstance(v.type, Array))
            self.lines.append(f"  ^{join.label}({params}):" if params else f"  ^{join.label}:")
            self.arrays.update(join.fixed)
            self.terminated = False
            return True
        if not join.edges:
            self.terminated = True
            return False
        envs = [env for _, env in join.edges]
        names = [n for n in envs[0] if all(n in e for e in envs[1:])]
        merged: dict[str, Value] = {}
        carried: list[str] = []
        for n in names:
            first = envs[0][n]
            if all(e[n].ssa == first.ssa for e in envs[1:]):
                merged[n] = first
            else:
                carried.append(n)
                merged[n] = Value(self.fresh(), self.info.variables.get(n, first.type))
        for (where, env) in join.edges:
            saved, self.lines = self.lines, []
            args = [self.convert(env[n], merged[n].type) for n in carried]
            casts, self.lines = self.lines, saved
            # One element of the list: the indices other joins keep stay valid.
            self.lines[where] = "\n".join([*casts, f"    cf.br ^{join.label}{_args(args)}"])
        params = ", ".join(f"{v.ssa}: {v.type.mlir}" for v in (merged[n] for n in carried)
                           if isinstance(v.type, Array))
        self.lines.append(f"  ^{join.label}({params}):" if params else f"  ^{join.label}:")
        self.arrays = merged
        self.terminated = False
        return True


def _slot_type(t: Scalar) -> str:
    return "i8" if t.kind == "bool" else t.mlir


def _args(values: list[Value]) -> str:
    if not values:
        return ""
    return "(" + ", ".join(v.ssa for v in values) + " : " + ", ".join(
        v.type.mlir for v in values if isinstance(v.type, (Array, Scalar))) + ")"


def _flat(t: JType, node: ast.AST, emitter: EmitBase) -> list[Scalar]:
    if isinstance(t, Scalar):
        return [t]
    if isinstance(t, (Tuple, Optional)):
        return [s for i in t.items for s in _flat(i, node, emitter)]
    if isinstance(t, NoneT):
        return []
    raise emitter.error(node, "a tuple holding arrays cannot be kept in a variable",
                        "unpack it at once: a, b = f(...)")


def _flatten(v: Value) -> list[Value]:
    if isinstance(v.type, (Tuple, Optional)):
        return [s for i in v.items for s in _flatten(i)]
    return [v]


def _unflatten(t: JType, values: list[Value]) -> Value:
    if isinstance(t, (Tuple, Optional)):
        items = []
        for item in t.items:
            n = len(_flat(item, ast.Pass(), None))  # type: ignore[arg-type]
            items.append(_unflatten(item, values[:n]))
            values = values[n:]
        return Value("", t, tuple(items))
    return values[0]
