"""Types of a function's variables and expressions, to a fixpoint.

One type per variable (numba's unification): every assignment unifies into it, so
``acc = 0`` then ``acc += x[i]`` with a float32 ``x`` makes ``acc`` a float32 (the literal
is weak). Arrays never unify across dtype or rank: the error shows both assignments."""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from . import complexes
from .calls import Target
from .diagnostics import JitTypeError
from .host import Host
from .infer_access import attribute_type, subscript_type
from .infer_arrays import array_binop, array_compare, array_unary, in_place_type
from .infer_calls import type_call
from .intrinsics import CONSTANTS, scalar_type_of
from .jtypes import (
    F64,
    NONE,
    WEAK_BOOL,
    WEAK_COMPLEX,
    WEAK_FLOAT,
    WEAK_INT,
    Array,
    JType,
    NoneT,
    Optional,
    Scalar,
    Tuple,
    from_dtype,
    literal_int,
    promote,
    unify,
)
from .resolve import resolve
from .source import FunctionSource
from .syntax import assigned_names, falls_through

__all__ = ["Inference", "literal_type"]

_MAX_ROUNDS = 20


def literal_type(value: Any) -> Scalar | None:
    """The type of a Python or numpy number frozen into the code (None: not a number)."""
    if isinstance(value, bool):
        return WEAK_BOOL
    if isinstance(value, int):
        return WEAK_INT
    if isinstance(value, float):
        return WEAK_FLOAT
    if isinstance(value, complex):
        return WEAK_COMPLEX
    if isinstance(value, (np.bool_, np.integer, np.floating, np.complexfloating)):
        try:
            return from_dtype(value.dtype)
        except TypeError:
            return None
    return None


class Inference:
    """Run on one function specialized for ``params``: fills :attr:`variables`,
    :attr:`types` (per expression node), :attr:`targets` (per call), :attr:`constants`
    (globals read as numbers) and :attr:`result`."""

    def __init__(self, program: Host, source: FunctionSource,
                 params: tuple[JType, ...]) -> None:
        self.program, self.source = program, source
        self.locals = assigned_names(source, source.tree.body) | {
            a.arg for a in source.tree.args.args}
        self.variables: dict[str, JType] = {}
        self.sites: dict[str, ast.AST] = {}
        self.types: dict[ast.AST, JType] = {}
        self.targets: dict[ast.Call, Target] = {}
        self.constants: dict[ast.AST, Any] = {}
        self.result: JType = NONE
        self.final = False
        self.unknown = 0  # expressions of unknown type in this round
        for arg, t in zip(source.tree.args.args, params):
            self.variables[arg.arg] = t
            self.sites[arg.arg] = arg

    def run(self) -> None:
        stable = False
        for _ in range(_MAX_ROUNDS):
            before = dict(self.variables)
            self.returns: list[tuple[JType | None, ast.AST]] = []
            self.unknown = 0
            self.block(self.source.tree.body)
            if before == self.variables:
                stable = True
                break
        self.final = True
        if not stable or self.unknown:
            # The final round raises where a type is still unknown. A round that
            # changed no variable and met no unknown type is that final round already.
            self.returns = []
            self.block(self.source.tree.body)
        result: JType | None = None
        if falls_through(self.source.tree.body):
            self.returns.append((NONE, self.source.tree))
        for t, node in self.returns:
            assert t is not None
            merged = t if result is None else unify(result, t)
            if merged is None:
                hint = ("optional results (None on some paths) hold numbers only"
                        if isinstance(t, NoneT) or isinstance(result, NoneT) else
                        "return the same kind of value on every path")
                raise JitTypeError(f"this returns {t}, another return of the function "
                                   f"returns {result}", self.source.where(node), hint)
            result = merged
        self.result = result if result is not None else NONE

    def error(self, node: ast.AST, message: str, hint: str = "") -> JitTypeError:
        return JitTypeError(message, self.source.where(node), hint)

    # -- statements -------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            t = self.expr(stmt.value, keep=all(isinstance(t, ast.Name) for t in stmt.targets))
            for target in stmt.targets:
                self.bind(target, t, stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is None:
                return
            t = self.expr(stmt.value)
            wanted = scalar_type_of(self._static(stmt.annotation))
            if wanted is not None and t is not None:
                t = wanted if wanted.kind != "float" or wanted.bits != 64 else WEAK_FLOAT
            self.bind(stmt.target, t, stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            value = self.expr(stmt.value)
            current = self.expr(_as_load(stmt.target))
            if value is None or current is None:
                return
            if isinstance(current, Array):
                self._elementwise(current, value, stmt.value)  # a += v, a[1:] += v: in place
                t = in_place_type(self, stmt, current, value)
            else:
                t = self.binop(stmt.op, current, value, stmt)
            self.types[stmt] = t
            if isinstance(stmt.target, ast.Name) and not isinstance(current, Array):
                self.bind(stmt.target, t, stmt)
        elif isinstance(stmt, ast.If):
            self.test(stmt.test)
            self.block(stmt.body)
            self.block(stmt.orelse)
        elif isinstance(stmt, ast.While):
            self.test(stmt.test)
            self.block(stmt.body)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, ast.Return):
            t = NONE if stmt.value is None else self.expr(stmt.value, keep=True)
            if isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                t = NONE
            self.returns.append((t, stmt))
        elif isinstance(stmt, ast.Raise):
            self.raise_(stmt)
        elif isinstance(stmt, ast.Assert):
            self.test(stmt.test)
            if stmt.msg is not None and not (isinstance(stmt.msg, ast.Constant)
                                             and isinstance(stmt.msg.value, str)):
                raise self.error(stmt.msg, "an assert's message must be a string literal")
        elif isinstance(stmt, ast.Expr) and not (isinstance(stmt.value, ast.Constant)
                                                 and isinstance(stmt.value.value, str)):
            self.expr(stmt.value)

    def raise_(self, stmt: ast.Raise) -> None:
        exc = stmt.exc
        if exc is None:
            raise self.error(stmt, "a bare raise is not supported", "raise SomeError('text')")
        call = exc if isinstance(exc, ast.Call) else None
        cls = self._static(call.func if call else exc)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise self.error(exc, "raise needs an exception class (raise ValueError('text'))")
        for arg in call.args if call else ():
            if not isinstance(arg, ast.Constant):
                raise self.error(arg, "an exception's arguments must be literals",
                                 "runtime values in messages are not supported yet; "
                                 "print() them before raising")
        self.constants[exc] = cls

    def test(self, node: ast.expr) -> None:
        t = self.expr(node)
        if t is not None and not isinstance(t, Scalar):
            raise self.error(node, f"the truth value of {t} is ambiguous",
                             "compare explicitly (n > 0, a.size > 0)")

    def bind(self, target: ast.expr, t: JType | None, value: ast.AST) -> None:
        if t is None:
            return
        if isinstance(target, ast.Name):
            name = target.id
            old = self.variables.get(name)
            if isinstance(t, NoneT):
                raise self.error(value, f"cannot assign None to {name!r}",
                                 "variables hold numbers, arrays or tuples")
            if old is None:
                self.variables[name] = t
                self.sites[name] = value
                return
            merged = unify(old, t)
            if merged is None:
                raise JitTypeError(
                    f"variable {name!r} is assigned {t} here and {old} elsewhere",
                    self.source.where(value), "give it one type on every path (for a "
                    "float32 accumulator: s = np.float32(0))",
                    also=self.source.where(self.sites.get(name)))
            self.variables[name] = merged
        elif isinstance(target, ast.Tuple):
            if not isinstance(t, Tuple) or len(t.items) != len(target.elts):
                raise self.error(value, f"cannot unpack {t} into {len(target.elts)} names")
            for item, item_type in zip(target.elts, t.items):
                self.bind(item, item_type, value)
        elif isinstance(target, ast.Subscript):
            element = self.expr(_as_load(target))
            if isinstance(element, Array):
                self._elementwise(element, t, value)  # a[1:] = v
            elif not isinstance(t, Scalar):
                raise self.error(value, f"cannot store {t} into an array element")
        else:
            raise self.error(target, "this assignment target is not supported",
                             "assign to names, tuples of names and array elements")

    def _elementwise(self, view: Array, value: JType, node: ast.AST) -> None:
        """Check ``view[...] = value``: a scalar, or an array that broadcasts to it."""
        if isinstance(value, Array) and value.ndim > view.ndim:
            raise self.error(node, f"cannot assign a {value.ndim}-d array to a "
                             f"{view.ndim}-d view")
        if not isinstance(value, (Scalar, Array)):
            raise self.error(node, f"cannot assign {value} to an array view")

    def loop(self, stmt: ast.For) -> None:
        it = stmt.iter
        bindings: JType | None = None
        kind = self._iter_kind(it) if isinstance(it, ast.Call) else None
        if kind is not None:
            assert isinstance(it, ast.Call)
            args = [self.expr(a) for a in it.args]
            if kind in ("range", "prange"):
                if not 1 <= len(args) <= 3:
                    raise self.error(it, f"{kind}() takes 1 to 3 arguments")
                for a, node in zip(args, it.args):
                    if a is not None and not (isinstance(a, Scalar) and a.kind != "float"):
                        raise self.error(node, f"{kind}() takes integers, got {a}")
                bindings = WEAK_INT
            elif kind == "enumerate":
                if len(args) != 1:
                    raise self.error(it, "enumerate() takes one array here")
                e = self._element(args[0], it.args[0])
                bindings = None if e is None else Tuple((WEAK_INT, e))
            else:
                if not args:
                    raise self.error(it, "zip() needs arrays")
                items = [self._element(a, n) for a, n in zip(args, it.args)]
                bindings = None if any(i is None for i in items) else Tuple(
                    tuple(i for i in items if i is not None))
        else:
            bindings = self._element(self.expr(it), it)
        self.bind(stmt.target, bindings, stmt.target)
        self.block(stmt.body)

    def _iter_kind(self, call: ast.Call) -> str | None:
        obj = self._static_or_none(call.func)
        from .intrinsics import find
        found = find(obj) if obj is not None else None
        return found.op if found is not None and found.kind == "iter" else None

    def _element(self, t: JType | None, node: ast.AST) -> JType | None:
        if t is None:
            return None
        if isinstance(t, Array):
            return t.dtype if t.ndim == 1 else Array(t.dtype, t.ndim - 1, False)
        raise self.error(node, f"cannot iterate over {t}",
                         "iterate over range(), an array, enumerate() or zip() of arrays")

    # -- expressions ------------------------------------------------------------------

    def expr(self, node: ast.expr, keep: bool = False) -> JType | None:
        """The type of ``node``; an optional's number unless ``keep`` (where an optional
        may stay one: assigned to a name, returned, compared with ``is None``)."""
        t = self._expr(node)
        if t is None:
            self.unknown += 1
            if self.final:
                raise self.error(node, "cannot infer the type of this expression")
        if isinstance(t, Optional) and not keep:
            t = t.item  # used as a number: TypeError at run time if it is None
        if t is not None:
            self.types[node] = t
        return t

    def _static(self, node: ast.expr) -> Any:
        return resolve(self.source, node)

    def _static_or_none(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name) and node.id in self.locals:
            return None
        if isinstance(node, ast.Attribute) and not isinstance(node.value, (ast.Name,
                                                                           ast.Attribute)):
            return None
        if isinstance(node, ast.Attribute):
            root: ast.expr = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.locals:
                return None
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return None
        return self._static(node)

    def _expr(self, node: ast.expr) -> JType | None:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return NONE
            t = literal_type(node.value)
            if t is None:
                raise self.error(node, f"{type(node.value).__name__} values are not "
                                 f"supported here", "strings are only print() arguments "
                                 "and exception messages")
            return t
        if isinstance(node, ast.Name) and node.id in self.locals:
            return self.variables.get(node.id)
        static = self._static_or_none(node) if isinstance(node, (ast.Name, ast.Attribute)) \
            else None  # the others are never resolved
        if static is not None or isinstance(node, ast.Name):
            t = literal_type(static)
            if t is None:
                raise self.error(node, f"{getattr(static, '__name__', type(static).__name__)}"
                                 f" cannot be used as a value here",
                                 "globals are frozen into the code as constants: numbers only")
            if id(static) in CONSTANTS or isinstance(static, (bool, int, float, complex,
                                                                     np.generic)):
                self.constants[node] = static
            return t
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp):
            a, b = self.expr(node.left), self.expr(node.right)
            return None if a is None or b is None else self.binop(node.op, a, b, node)
        if isinstance(node, ast.UnaryOp):
            u = self.expr(node.operand)
            if u is None:
                return None
            if isinstance(u, Array):
                return array_unary(self, node, u)
            if not isinstance(u, Scalar):
                raise self.error(node, f"unary operators on {u} are not supported")
            if isinstance(node.op, ast.Not):
                return WEAK_BOOL
            if isinstance(node.op, ast.Invert) and u.kind in ("float", "complex"):
                raise self.error(node, "~ needs an integer")
            return WEAK_INT if u.kind == "bool" and not isinstance(node.op, ast.Not) else u
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot))
                                                 for op in node.ops):
            if len(node.ops) != 1 or not any(isinstance(n, ast.Constant) and n.value is None
                                             for n in (node.left, node.comparators[0])):
                raise self.error(node, "is and is not compare with None only",
                                 "write x is None or x is not None")
            self.expr(node.left, keep=True)
            self.expr(node.comparators[0], keep=True)
            return WEAK_BOOL
        if isinstance(node, ast.Compare):
            compared = [self.expr(operand) for operand in [node.left, *node.comparators]]
            sides = compared[:2]
            if any(isinstance(c, Array) for c in sides):
                if sides[0] is None or sides[1] is None:
                    return None
                return array_compare(self, node, sides[0], sides[1])
            for operand, c in zip([node.left, *node.comparators], compared):
                if c is not None and not isinstance(c, Scalar):
                    raise self.error(operand, f"comparisons of {c} are not supported",
                                     "compare elements in a loop")
            complexes.check_compare(self, node, compared)
            for op in node.ops:
                if isinstance(op, (ast.In, ast.NotIn)):
                    raise self.error(node, f"the {type(op).__name__} operator is not supported")
            return WEAK_BOOL
        if isinstance(node, ast.BoolOp):
            types = [self.expr(v) for v in node.values]
            if any(t is None for t in types):
                return None
            result: JType | None = types[0]
            for bt, v in zip(types[1:], node.values[1:]):
                assert bt is not None and result is not None
                result = unify(result, bt)
                if result is None or not isinstance(result, Scalar):
                    raise self.error(v, "the operands of and/or must be numbers of "
                                     "compatible types")
            return result
        if isinstance(node, ast.IfExp):
            self.test(node.test)
            a, b = self.expr(node.body, keep=True), self.expr(node.orelse, keep=True)
            if a is None or b is None:
                return a or b if self.final is False else None
            merged = unify(a, b)
            if merged is None:
                raise self.error(node, f"the two results have types {a} and {b}")
            return merged
        if isinstance(node, ast.Tuple):
            items = [self.expr(e) for e in node.elts]
            return None if any(i is None for i in items) else Tuple(
                tuple(i for i in items if i is not None))
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.error(node, f"{type(node).__name__} expressions are not supported")

    def attribute(self, node: ast.Attribute) -> JType | None:
        return attribute_type(self, node)

    def subscript(self, node: ast.Subscript) -> JType | None:
        return subscript_type(self, node)

    def binop(self, op: ast.operator, a: JType, b: JType, node: ast.AST) -> JType:
        if isinstance(a, Array) or isinstance(b, Array):
            return array_binop(self, op, a, b, node)
        if not isinstance(a, Scalar) or not isinstance(b, Scalar):
            raise self.error(node, f"arithmetic on {a} and {b} is not supported")
        if isinstance(op, ast.MatMult):
            raise self.error(node, "@ is not supported")
        on_complex = complexes.binop_type(self, op, a, b, node)
        if on_complex is not None:
            return on_complex
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            if a.kind == "bool" and b.kind == "bool":
                return WEAK_BOOL if a.weak and b.weak else a.strong
            if a.is_float or b.is_float:
                raise self.error(node, "bitwise operators need integers")
            return promote(a, b)
        if isinstance(op, (ast.LShift, ast.RShift)):
            if a.is_float or b.is_float:
                raise self.error(node, "shifts need integers")
            return promote(a, b)
        result = promote(a, b)
        if isinstance(op, ast.Div) and not result.is_float:
            return WEAK_FLOAT if result.weak else F64
        exponent = getattr(node, "right", getattr(node, "value", None))  # x ** n, x **= n
        if isinstance(op, ast.Pow) and result.is_int and (literal_int(exponent) or 0) < 0:
            return WEAK_FLOAT if result.weak else F64  # Python's 2 ** -1 == 0.5
        return result

    def call(self, node: ast.Call) -> JType | None:
        return type_call(self, node)


def _as_load(target: ast.expr) -> ast.expr:
    """``target`` read (an augmented assignment reads it first)."""
    if isinstance(target, ast.Name):
        node = ast.Name(target.id, ast.Load())
        return ast.copy_location(node, target)
    return target
