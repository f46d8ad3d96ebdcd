"""``prange`` with ``parallel=True``: the loop body becomes a private function (each
iteration's variables on its own stack) called from an ``scf.parallel``.

Variables the body assigns are private to an iteration, except reductions: a scalar the
body only updates as ``s += e``, ``s *= e``, ``s = min(s, e)`` or ``s = max(s, e)``. A loop
with reductions runs as up to :data:`CHUNKS` chunks in parallel, each accumulating its own
partial values in order (an ``scf.for`` in the ``scf.parallel``), then combined in chunk
order: float sums may round differently from the serial loop, as in numba."""

from __future__ import annotations

import ast
import copy
import dataclasses
import sys
from typing import Any

from .calls import mlir_of
from .emit_base import EmitBase, Value
from .emit_calls import flatten_values
from .jtypes import WEAK_INT, JType, Scalar
from .syntax import assigned_names

__all__ = ["CHUNKS", "ParallelMixin"]

#: How many chunks a prange loop with reductions is cut into (at most).
CHUNKS = 64


class ParallelMixin(EmitBase):
    """``prange`` loops as ``scf.parallel``."""

    symbol: str

    def parallel_for(self, stmt: ast.For) -> bool:
        call = stmt.iter
        assert isinstance(call, ast.Call)
        step = 1
        if len(call.args) == 3:
            node = call.args[2]
            if not (isinstance(node, ast.Constant) and isinstance(node.value, int)
                    and node.value > 0):
                return False  # not a positive literal step: run it serially
            step = node.value
        if not isinstance(stmt.target, ast.Name):
            return False
        for inner in _top_level(stmt.body):
            if isinstance(inner, (ast.Break, ast.Return)):
                raise self.error(inner, f"{type(inner).__name__.lower()} inside a prange loop "
                                 f"is not supported", "use range() for a loop that stops "
                                 "early")
        reductions = _reductions(stmt.body)
        assigned = assigned_names(self.source, stmt.body) | {stmt.target.id}
        loaded = {n.id for s in stmt.body for n in ast.walk(s)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        captured = sorted(n for n in loaded - assigned if n in self.info.variables)
        names = sorted(reductions)
        for name in names:
            if not isinstance(self.info.variables.get(name), Scalar):
                return False
        symbol, params = self._outline(stmt, captured, names)
        args = [Value("", WEAK_INT)] + [self.load_var(n) for n in captured]
        start = self.expr(call.args[0]) if len(call.args) > 1 else self.const(0, WEAK_INT)
        stop = self.expr(call.args[1] if len(call.args) > 1 else call.args[0])
        self.at = stmt
        lb = self.to_index(start)
        ub = self.op(f"arith.maxsi {self.to_index(stop)}, {lb} : index")
        st = self.index_const(step)
        flat = [v for a, p in zip(args[1:], params[1:]) for v in flatten_values(
            self.convert(a, p))]
        if not names:
            self.lines.append(f"    scf.parallel (%par.i{self.counter}) = ({lb}) to ({ub}) step "
                              f"({st}) {{")
            iv = f"%par.i{self.counter}"
            i = self.op(f"arith.index_cast {iv} : index to i64")
            self._call(symbol, [i, *(v.ssa for v in flat)],
                       [mlir_of(p) for p in params], [])
            self.lines.append("      scf.reduce")
            self.lines.append(f"    }}{self.source.loc(stmt)}")
            return True
        self._reduce(stmt, symbol, params, flat, names, reductions, lb, ub, st)
        return True

    def _outline(self, stmt: ast.For, captured: list[str],
                 names: list[str]) -> tuple[str, tuple[JType, ...]]:
        """The body as a private function of (index, captured..., partials...)."""
        assert isinstance(stmt.target, ast.Name)
        result: ast.expr | None
        if not names:
            result = None
        elif len(names) == 1:
            result = ast.Name(names[0], ast.Load())
        else:
            result = ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load())
        # A copy: the function's tree is cached and read again by its next specialization.
        body: list[ast.stmt] = [_Continues(result).visit(copy.deepcopy(s)) for s in stmt.body]
        ret = ast.Return(result)
        tail = stmt.body[-1]
        for node in (ret, *(ast.walk(result) if result is not None else ())):
            ast.copy_location(node, tail)
        params = [stmt.target.id, *captured, *names]
        extra: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}
        fdef = ast.FunctionDef(
            name=f"{self.source.name}_prange", body=[*body, ret], decorator_list=[],
            args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params],
                               kwonlyargs=[], kw_defaults=[], defaults=[]),
            returns=None, **extra)
        ast.copy_location(fdef, stmt)
        for a in fdef.args.args:
            ast.copy_location(a, stmt)
        ast.fix_missing_locations(fdef)
        source = dataclasses.replace(self.source, tree=fdef)
        types = (WEAK_INT, *(self.info.variables[n] for n in captured),
                 *(self.info.variables[n] for n in names))
        symbol = self.program.fresh_symbol(f"{self.symbol}__prange")
        self.program.compile_source(source, types, symbol, True)
        return symbol, types

    def _call(self, symbol: str, args: list[str], types: list[str], results: list[str]) -> str:
        outs = ", ".join(results)
        text = f"func.call @{symbol}({', '.join(args)}) : ({', '.join(t for t in types if t)})" \
               f" -> ({outs})"
        if not results:
            self.do(text)
            return ""
        name = self.fresh()
        count = f":{len(results)}" if len(results) > 1 else ""
        self.lines.append(f"      {name}{count} = {text}{self.source.loc(self.at)}")
        return name

    def _reduce(self, stmt: ast.For, symbol: str, params: tuple[JType, ...], flat: list[Value],
                names: list[str], kinds: dict[str, str], lb: str, ub: str, st: str) -> None:
        types = [self.info.variables[n] for n in names]
        scalars = [t for t in types if isinstance(t, Scalar)]
        m = [t.mlir for t in scalars]
        c0, c1 = self.index_const(0), self.index_const(1)
        span = self.op(f"arith.subi {ub}, {lb} : index")
        n = self.op(f"arith.ceildivsi {span}, {st} : index")
        chunks = self.op(f"arith.minsi {n}, {self.index_const(CHUNKS)} : index")
        per = self.op(f"arith.ceildivsi {n}, " + self.op(
            f"arith.maxsi {chunks}, {c1} : index") + " : index")
        partials = [self.op(f"memref.alloc({chunks}) : memref<?x{mt}>") for mt in m]
        c, k = f"%par.c{self.counter}", f"%par.k{self.counter}"
        self.lines.append(f"    scf.parallel ({c}) = ({c0}) to ({chunks}) step ({c1}) {{")
        k0 = self.op(f"arith.muli {c}, {per} : index")
        k1 = self.op(f"arith.minsi {self.op(f'arith.addi {k0}, {per} : index')}, {n} : index")
        inits = [self.const(_identity(kinds[nm], t), t).ssa for nm, t in zip(names, scalars)]
        accs = [f"%par.a{self.counter}_{j}" for j in range(len(names))]
        loop = self.fresh()
        count = f":{len(names)}" if len(names) > 1 else ""
        iters = ", ".join(f"{a} = {i}" for a, i in zip(accs, inits))
        self.lines.append(f"      {loop}{count} = scf.for {k} = {k0} to {k1} step {c1} "
                          f"iter_args({iters}) -> ({', '.join(m)}) {{")
        iv = self.op(f"arith.addi {lb}, {self.op(f'arith.muli {k}, {st} : index')} : index")
        i = self.op(f"arith.index_cast {iv} : index to i64")
        res = self._call(symbol, [i, *(v.ssa for v in flat), *accs],
                         [mlir_of(p) for p in params], m)
        outs = [res] if len(names) == 1 else [f"{res}#{j}" for j in range(len(names))]
        self.lines.append(f"        scf.yield {', '.join(outs)} : {', '.join(m)}")
        self.lines.append("      }")
        got = [loop] if len(names) == 1 else [f"{loop}#{j}" for j in range(len(names))]
        for p, g, mt in zip(partials, got, m):
            self.do(f"memref.store {g}, {p}[{c}] : memref<?x{mt}>")
        self.lines.append("      scf.reduce")
        self.lines.append(f"    }}{self.source.loc(stmt)}")
        # Combined in chunk order, into the value before the loop.
        for name, kind, rt, p in zip(names, (kinds[x] for x in names), scalars, partials):
            acc = self.load_var(name)
            done, body, head = self.label(), self.label(), self.label()
            counter = self.slot(Scalar("int", 64))
            self.do(f"memref.store {self.const(0, Scalar('int', 64)).ssa}, {counter}[] : "
                    f"memref<i64>")
            self.goto(head)
            self.start(head)
            j = self.op(f"memref.load {counter}[] : memref<i64>")
            ji = self.op(f"arith.index_cast {j} : i64 to index")
            more = self.op(f"arith.cmpi slt, {ji}, {chunks} : index")
            self.branch(more, body, done)
            self.start(body)
            part = Value(self.op(f"memref.load {p}[{ji}] : memref<?x{rt.mlir}>"), rt)
            current = self.load_var(name)
            self.store_var(name, self._combine(kind, current, part, rt))
            nxt = self.op(f"arith.addi {j}, {self.const(1, Scalar('int', 64)).ssa} : i64")
            self.do(f"memref.store {nxt}, {counter}[] : memref<i64>")
            self.goto(head)
            self.start(done)
            self.do(f"memref.dealloc {p} : memref<?x{rt.mlir}>")
            del acc

    def _combine(self, kind: str, a: Value, b: Value, t: Scalar) -> Value:
        b = self.convert(b, t)
        a = self.convert(a, t)
        if kind in ("+", "*") and t.kind == "complex":
            return self.binop(ast.Add() if kind == "+" else ast.Mult(), a, b, t)
        if kind in ("+", "*"):
            op = {"+": "add", "*": "mul"}[kind] + ("f" if t.kind == "float" else "i")
            return Value(self.op(f"arith.{op} {a.ssa}, {b.ssa} : {t.mlir}"), t)
        better = self.compare(ast.Lt() if kind == "min" else ast.Gt(), b, a)
        return Value(self.op(f"arith.select {better}, {b.ssa}, {a.ssa} : {t.mlir}"), t)


def _identity(kind: str, t: Scalar) -> float | int:
    if kind == "+":
        return 0
    if kind == "*":
        return 1
    if t.kind == "float":
        return float("inf") if kind == "min" else float("-inf")
    bits = t.bits - (0 if t.kind == "uint" else 1)
    high = (1 << bits) - 1
    low = 0 if t.kind == "uint" else -(1 << bits)
    return high if kind == "min" else low


def _top_level(stmts: list[ast.stmt]) -> list[ast.AST]:
    """The statements of a loop body, not those of the loops nested in it."""
    found: list[ast.AST] = []
    for s in stmts:
        found.append(s)
        if isinstance(s, ast.If):
            found += _top_level(s.body) + _top_level(s.orelse)
    return found


def _reductions(body: list[ast.stmt]) -> dict[str, str]:
    """The scalars ``body`` only updates as reductions, with their operator."""
    kinds: dict[str, str] = {}
    uses: dict[str, int] = {}
    for s in body:
        for node in ast.walk(s):
            if isinstance(node, ast.Name):
                uses[node.id] = uses.get(node.id, 0) + 1
    counted: dict[str, int] = {}
    for s in body:
        for node in ast.walk(s):
            name, kind, own = _reduction(node)
            if name is None:
                continue
            if kinds.setdefault(name, kind) != kind:
                kinds[name] = "mixed"
            counted[name] = counted.get(name, 0) + own
    return {n: k for n, k in kinds.items() if k != "mixed" and counted[n] == uses.get(n)}


def _reduction(node: ast.AST) -> tuple[str | None, str, int]:
    """(name, operator, names of it the statement holds) if ``node`` is a reduction."""
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
            isinstance(node.op, (ast.Add, ast.Mult)):
        name = node.target.id
        inner = sum(1 for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id == name)
        return (name, "+" if isinstance(node.op, ast.Add) else "*", 1) if not inner \
            else (None, "", 0)
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
            isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) and \
            isinstance(node.value.func, ast.Name) and node.value.func.id in ("min", "max") \
            and len(node.value.args) == 2:
        name = node.targets[0].id
        args = node.value.args
        mine = [a for a in args if isinstance(a, ast.Name) and a.id == name]
        other = [a for a in args if not (isinstance(a, ast.Name) and a.id == name)]
        inner = sum(1 for a in other for n in ast.walk(a)
                    if isinstance(n, ast.Name) and n.id == name)
        if len(mine) == 1 and not inner:
            return name, node.value.func.id, 2
    return None, "", 0


class _Continues(ast.NodeTransformer):
    """``continue`` of the prange loop itself: the outlined body returns."""

    def __init__(self, result: ast.expr | None) -> None:
        self.result = result

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return ast.copy_location(ast.Return(self.result), node)

    def visit_For(self, node: ast.For) -> ast.AST:
        return node  # its continue is its own

    def visit_While(self, node: ast.While) -> ast.AST:
        return node


