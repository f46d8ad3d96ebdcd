"""Whole-array expressions, fused: ``a * x + b``, ``np.sqrt(x * x + y * y)``,
``np.where(a < 0, -a, a)`` become one loop nest computing each element of a new array
from the elements of the arrays in the expression (its *leaves*), with no intermediate
arrays. Shapes broadcast as numpy's (ranks aligned on the right, dims of 1 stretched);
others raise ValueError.

Two loop nests are emitted when every leaf has the result's rank: one for the common
case where all shapes are equal (plain loads, which LLVM vectorizes), one for shapes
that broadcast (each leaf read through a view whose stretched dims have stride 0).

Element operations follow numpy's ufuncs, not Python's scalars: a float division by
zero gives inf or nan, an integer one 0 (numpy warns; it does not raise)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from .emit_base import EmitBase, Value
from .infer_arrays import (
    BINARY_UFUNCS,
    COMPARE_UFUNCS,
    ELEMENTWISE_KINDS,
    element,
    resolve_ufunc,
    ufunc_of,
)
from .intrinsics import Intrinsic
from .jtypes import BOOL, I64, Array, Scalar

__all__ = ["ElementwiseMixin"]


class ElementwiseMixin(EmitBase):
    """Element-by-element operations on arrays, fused."""

    def fusable(self, node: ast.expr) -> bool:
        """Whether ``node`` is computed element by element (an array operation, or a
        call of ``np.where``/``np.sign``/``np.rint`` on scalars)."""
        t = self.info.types.get(node)
        target = self.info.targets.get(node) if isinstance(node, ast.Call) else None
        if isinstance(target, Intrinsic) and target.kind in ("ufunc", "where"):
            return True
        if not isinstance(t, Array):
            return False
        if isinstance(node, ast.BinOp):
            return not isinstance(node.op, ast.MatMult)
        if isinstance(node, (ast.UnaryOp, ast.Compare)):
            return True
        return isinstance(target, Intrinsic) and target.kind in ELEMENTWISE_KINDS

    def fused(self, node: ast.expr) -> Value:
        """A new array (or a scalar) computed by ``node``, in one loop nest."""
        leaves: dict[ast.AST, Value] = {}
        self._leaves(node, leaves, root=True)
        result = self.type_of(node)
        if not isinstance(result, Array):
            return self._element(node, dict(leaves))
        operands = list(leaves.values())
        dims = self.broadcast_dims(operands, result.ndim)
        out = self.new_array(dims, result)
        self.broadcast_loop(out, dims, leaves, lambda env: self._element(node, env))
        for v in operands:
            self.release(v)
        self.fresh_temps.add(out.ssa)
        return out

    def _leaves(self, node: ast.AST, found: dict[ast.AST, Value], root: bool = False) -> None:
        if not root and not self.fusable(node):  # type: ignore[arg-type]
            found[node] = self.expr(node)  # type: ignore[arg-type]
            return
        if isinstance(node, ast.BinOp):
            children: list[ast.AST] = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            children = [node.operand]
        elif isinstance(node, ast.Compare):
            children = [node.left, node.comparators[0]]
        else:
            assert isinstance(node, ast.Call)
            children = list(node.args)
        for child in children:
            self._leaves(child, found)

    # -- shapes and loops ---------------------------------------------------------------

    def broadcast_dims(self, operands: list[Value], ndim: int) -> list[str]:
        """The broadcast shape of ``operands`` (index values); ValueError if they do not
        broadcast."""
        arrays = [v for v in operands if isinstance(v.type, Array)]
        one = self.index_const(1)
        dims: list[str] = []
        for d in range(ndim):
            size = one
            sizes = []
            for v in arrays:
                assert isinstance(v.type, Array)
                k = d - (ndim - v.type.ndim)
                if k < 0:
                    continue
                s = self.dim(v, k)
                sizes.append(s)
                is_one = self.op(f"arith.cmpi eq, {s}, {one} : index")
                size = self.op(f"arith.select {is_one}, {size}, {s} : index")
            if len(sizes) > 1:
                bad = self.const(False, BOOL).ssa
                for s in sizes:
                    is_one = self.op(f"arith.cmpi eq, {s}, {one} : index")
                    same = self.op(f"arith.cmpi eq, {s}, {size} : index")
                    fits = self.op(f"arith.ori {is_one}, {same} : i1")
                    unfit = self.op(f"arith.xori {fits}, {self.const(True, BOOL).ssa} : i1")
                    bad = self.op(f"arith.ori {bad}, {unfit} : i1")
                self.raise_python(ValueError, ("operands could not be broadcast together "
                                               "(their shapes differ)",), when=bad)
            dims.append(size)
        return dims

    def broadcast_loop(self, out: Value, dims: list[str], leaves: dict[ast.AST, Value],
                       compute: Callable[[dict[ast.AST, Value]], Value]) -> None:
        """``out[i...] = compute(leaves at i...)`` over ``dims``, the leaves broadcast."""
        assert isinstance(out.type, Array)
        ndim = out.type.ndim
        arrays = [(n, v) for n, v in leaves.items() if isinstance(v.type, Array)]

        def nest(env_arrays: dict[ast.AST, Value]) -> None:
            def body(idx: list[str]) -> None:
                env = dict(leaves)
                for n, v in env_arrays.items():
                    env[n] = self.load_at(v, idx)
                self.store_at(compute(env), out, idx)
            if not (self.program.parallel and self.parallel_each(dims, body)):
                self.each_element(dims, body)

        same_rank = all(v.type.ndim == ndim for _, v in arrays)  # type: ignore[union-attr]
        if not arrays:
            nest({})
            return
        done = self.label()
        if same_rank:
            equal = self.const(True, BOOL).ssa
            for _, v in arrays:
                for d in range(ndim):
                    e = self.op(f"arith.cmpi eq, {self.dim(v, d)}, {dims[d]} : index")
                    equal = self.op(f"arith.andi {equal}, {e} : i1")
            fast, slow = self.label(), self.label()
            self.branch(equal, fast, slow)
            self.start(fast)
            nest(dict(arrays))
            self.goto(done)
            self.start(slow)
        nest({n: self.stretched(v, dims) for n, v in arrays})
        self.goto(done)
        self.start(done)

    def stretched(self, v: Value, dims: list[str]) -> Value:
        """A view of ``v`` with the shape ``dims``: dims of 1 (and missing leading dims)
        read with stride 0."""
        t = v.type
        assert isinstance(t, Array)
        k, n = t.ndim, len(dims)
        base_t = f"memref<{t.element_mlir}>"
        meta = self.fresh()
        types = ", ".join([base_t] + ["index"] * (1 + 2 * k))
        self.lines.append(f"    {meta}:{2 + 2 * k} = memref.extract_strided_metadata {v.ssa} : "
                          f"{t.mlir} -> {types}{self.source.loc(self.at)}")
        zero, one = self.index_const(0), self.index_const(1)
        strides = []
        for d in range(n):
            j = d - (n - k)
            if j < 0:
                strides.append(zero)
                continue
            size, stride = f"{meta}#{2 + j}", f"{meta}#{2 + k + j}"
            is_one = self.op(f"arith.cmpi eq, {size}, {one} : index")
            strides.append(self.op(f"arith.select {is_one}, {zero}, {stride} : index"))
        view = Array(t.dtype, n, False)
        text = (f"memref.reinterpret_cast {meta}#0 to offset: [{meta}#1], sizes: "
                f"[{', '.join(dims)}], strides: [{', '.join(strides)}] : {base_t} to "
                f"{view.mlir}")
        return Value(self.op(text), view)

    def new_array(self, dims: list[str], t: Array) -> Value:
        """A new array of shape ``dims``. One of 4 MB or more asks the kernel for huge
        pages (``madvise``, as numpy does): writing a fresh 80 MB array otherwise costs
        20000 page faults, more than computing it."""
        out = Value(self.op(f"memref.alloc({', '.join(dims)}) : {t.mlir}"), t)
        count = self.index_const(1)
        for d in dims:
            count = self.op(f"arith.muli {count}, {d} : index")
        i64 = "i64"
        size = self.op(f"arith.index_cast {count} : index to {i64}")
        width = (t.dtype.bits + 7) // 8 if t.dtype.kind != "bool" else 1
        nbytes = self.op(f"arith.muli {size}, {self.const(width, I64).ssa} : i64")
        big = self.op(f"arith.cmpi sge, {nbytes}, {self.const(4 << 20, I64).ssa} : i64")
        advise, done = self.label(), self.label()
        self.branch(big, advise, done)
        self.start(advise)
        self.program.declare("madvise", "(i64, i64, i32) -> i32")
        where = self.op(f"memref.extract_aligned_pointer_as_index {out.ssa} : {t.mlir} -> index")
        start = self.op(f"arith.index_cast {where} : index to i64")
        page = self.const(4095, I64).ssa
        aligned = self.op(f"arith.andi {self.op(f'arith.addi {start}, {page} : i64')}, "
                          f"{self.const(~4095, I64).ssa} : i64")
        end = self.op(f"arith.addi {start}, {nbytes} : i64")
        length = self.op(f"arith.subi {end}, {aligned} : i64")
        huge = self.const(14, Scalar("int", 32)).ssa  # MADV_HUGEPAGE
        self.op(f"func.call @madvise({aligned}, {length}, {huge}) : (i64, i64, i32) -> i32")
        self.goto(done)
        self.start(done)
        return out

    def parallel_each(self, dims: list[str], body: Callable[[list[str]], None]) -> bool:
        """``body(indices)`` for every index of ``dims`` as one ``scf.parallel`` (with
        ``parallel=True``: the runtime's threads share it). False, with nothing emitted,
        if the body needs blocks of its own (a branch), which a parallel loop cannot hold."""
        saved = len(self.lines)
        tag = f"%pe{self.counter}"
        ivs = [f"{tag}_{d}" for d in range(len(dims))]
        zeros = ", ".join([self.index_const(0)] * len(dims))
        ones = ", ".join([self.index_const(1)] * len(dims))
        self.lines.append(f"    scf.parallel ({', '.join(ivs)}) = ({zeros}) to "
                          f"({', '.join(dims)}) step ({ones}) {{")
        body(ivs)
        if any(line.startswith("  ^") or " cf." in line for line in self.lines[saved:]):
            del self.lines[saved:]
            self.terminated = False
            return False
        self.lines.append("      scf.reduce")
        self.lines.append(f"    }}{self.source.loc(self.at)}")
        return True

    # -- one element --------------------------------------------------------------------

    def _element(self, node: ast.AST, env: dict[ast.AST, Value]) -> Value:
        if node in env:
            return env[node]
        kids: list[ast.AST]
        if isinstance(node, ast.BinOp):
            kids = [node.left, node.right]
            ufunc = BINARY_UFUNCS[type(node.op)]
        elif isinstance(node, ast.Compare):
            kids = [node.left, node.comparators[0]]
            ufunc = COMPARE_UFUNCS[type(node.ops[0])]
        elif isinstance(node, ast.UnaryOp):
            kids = [node.operand]
            ufunc = None
        else:
            assert isinstance(node, ast.Call)
            kids = list(node.args)
            target = self.info.targets[node]
            assert isinstance(target, Intrinsic)
            if target.kind == "where":
                c, x, y = (self._element(k, env) for k in kids)
                t = element(self.type_of(node))
                x, y = self.convert(x, t), self.convert(y, t)
                return Value(self.op(f"arith.select {self.truth(c)}, {x.ssa}, {y.ssa} : "
                                     f"{t.mlir}"), t)
            from .resolve import resolve
            ufunc = ufunc_of(resolve(self.source, node.func))
        values = [self._element(k, env) for k in kids]
        types = [element(self.type_of(k)) for k in kids]
        out = element(self.type_of(node))
        if ufunc is not None:
            found = resolve_ufunc(ufunc, types)
            assert found is not None
            ins, out = found
            values = [self.convert(v, t) for v, t in zip(values, ins)]
        if isinstance(node, ast.BinOp):
            return self.ufunc_binop(node.op, values[0], values[1], out)
        if isinstance(node, ast.Compare):
            return Value(self.compare(node.ops[0], values[0], values[1]), BOOL)
        if isinstance(node, ast.UnaryOp):
            v = self.convert(values[0], out)
            if isinstance(node.op, ast.Invert) and out.kind == "bool":
                return Value(self.op(f"arith.xori {v.ssa}, {self.const(True, BOOL).ssa} : i1"),
                             BOOL)
            return self.unary(node, v, out)
        assert isinstance(node, ast.Call)
        target = self.info.targets[node]
        assert isinstance(target, Intrinsic)
        return self.ufunc_call(target, values, out)

    def ufunc_binop(self, op: ast.operator, a: Value, b: Value, t: Scalar) -> Value:
        """``a op b`` of two ``t`` values with numpy's semantics."""
        m = t.mlir
        x, y = a.ssa, b.ssa
        if t.kind == "bool":
            name = {ast.Add: "ori", ast.Mult: "andi", ast.BitAnd: "andi", ast.BitOr: "ori",
                    ast.BitXor: "xori"}.get(type(op))
            if name is None:
                raise self.error(self.at, f"{type(op).__name__} of bools is not supported")
            return Value(self.op(f"arith.{name} {x}, {y} : i1"), t)
        if t.kind == "float":
            simple = {ast.Add: "addf", ast.Sub: "subf", ast.Mult: "mulf", ast.Div: "divf"}
            if type(op) in simple:
                return Value(self.op(f"arith.{simple[type(op)]} {x}, {y} : {m}"), t)
            if isinstance(op, ast.Pow):
                return Value(self.op(f"math.powf {x}, {y} : {m}"), t)
            r = self.float_divmod(op, a, b)
            if isinstance(op, ast.FloorDiv):  # numpy: x // 0.0 is x / 0.0 (inf or nan)
                zero = self.const(0.0, t).ssa
                is_zero = self.op(f"arith.cmpf oeq, {y}, {zero} : {m}")
                q = self.op(f"arith.divf {x}, {y} : {m}")
                r = Value(self.op(f"arith.select {is_zero}, {q}, {r.ssa} : {m}"), t)
            return r
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            # numpy: 0 for a zero divisor; MIN // -1 wraps. Neither may reach the
            # division, which traps on x86.
            zero, one, minus = self.const(0, t).ssa, self.const(1, t).ssa, self.const(-1, t).ssa
            is_zero = self.op(f"arith.cmpi eq, {y}, {zero} : {m}")
            special = is_zero
            if t.kind == "int":
                is_minus = self.op(f"arith.cmpi eq, {y}, {minus} : {m}")
                special = self.op(f"arith.ori {is_zero}, {is_minus} : i1")
            safe = Value(self.op(f"arith.select {special}, {one}, {y} : {m}"), t)
            r = self.binop(op, a, safe, t)
            if isinstance(op, ast.FloorDiv):
                other = zero
                if t.kind == "int":
                    neg = self.op(f"arith.subi {zero}, {x} : {m}")
                    other = self.op(f"arith.select {is_zero}, {zero}, {neg} : {m}")
                return Value(self.op(f"arith.select {special}, {other}, {r.ssa} : {m}"), t)
            return Value(self.op(f"arith.select {special}, {zero}, {r.ssa} : {m}"), t)
        return self.binop(op, a, b, t)

    def ufunc_call(self, f: Intrinsic, args: list[Value], t: Scalar) -> Value:
        """A numpy ufunc on scalars already of its loop's types, ``t`` its result."""
        a = args[0]
        assert isinstance(a.type, Scalar)
        if f.op == "sign":
            m = a.type.mlir
            zero, one = self.const(0, t).ssa, self.const(1, t).ssa
            pos = self.compare(ast.Gt(), a, self.const(0, a.type))
            if t.kind == "uint":
                return Value(self.op(f"arith.select {pos}, {one}, {zero} : {m}"), t)
            neg = self.compare(ast.Lt(), a, self.const(0, a.type))
            minus = self.const(-1, t).ssa
            rest = zero
            if t.kind == "float":  # nan stays nan, -0.0 gives 0.0
                is_zero = self.compare(ast.Eq(), a, self.const(0, a.type))
                rest = self.op(f"arith.select {is_zero}, {zero}, {a.ssa} : {m}")
            rest = self.op(f"arith.select {neg}, {minus}, {rest} : {m}")
            return Value(self.op(f"arith.select {pos}, {one}, {rest} : {m}"), t)
        if f.op in ("floor", "ceil", "trunc", "roundeven") or (f.kind == "abs" and
                                                               t.kind == "bool"):
            if t.kind != "float":
                return self.convert(a, t)  # integers: themselves
            return Value(self.op(f"math.{f.op} {a.ssa} : {t.mlir}"), t)
        return self.intrinsic(f, args, t)

    def elementwise(self, compute: Callable[[list[Value]], Value], operands: list[Value],
                    result: Array) -> Value:
        """``compute`` on the elements of ``operands`` (broadcast) into a new array."""
        keys: list[ast.AST] = [ast.Pass() for _ in operands]
        leaves = dict(zip(keys, operands))
        dims = self.broadcast_dims(operands, result.ndim)
        out = self.new_array(dims, result)
        self.broadcast_loop(out, dims, leaves, lambda env: self.convert(
            compute([env[k] for k in keys]), result.dtype))
        for v in operands:
            self.release(v)
        self.fresh_temps.add(out.ssa)
        return out
