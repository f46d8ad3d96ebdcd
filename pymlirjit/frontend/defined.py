"""Variables possibly undefined at a use: a compile error at that line (numba silently
reads 0; Python raises UnboundLocalError at run time).

A variable counts as defined after an ``if`` when both branches define it (or the other
one never falls through), after a loop only when defined before it: a loop may run zero
times."""

from __future__ import annotations

import ast

from .diagnostics import JitSyntaxError
from .source import FunctionSource
from .syntax import assigned_names, assignment_counts, target_names, walk

__all__ = ["check_defined"]

Defined = frozenset[str] | None  # None: this point is never reached


def check_defined(source: FunctionSource) -> None:
    """Raise :class:`JitSyntaxError` at the first use of a local variable that may be
    undefined there (parameters are defined; names assigned nowhere are globals)."""
    tree = source.tree
    assignment_counts(source)  # every block's assigned names, in one walk
    local = assigned_names(source, tree.body)
    params = frozenset(a.arg for a in tree.args.args)
    _Walker(source, local).block(tree.body, params)


class _Walker:
    def __init__(self, source: FunctionSource, local: frozenset[str]) -> None:
        self.source = source
        self.local = local

    def uses(self, node: ast.AST | None, defined: Defined) -> None:
        if node is None or defined is None or isinstance(node, ast.Constant):
            return
        for sub in (node,) if isinstance(node, ast.Name) else walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) \
                    and sub.id in self.local and sub.id not in defined:
                raise JitSyntaxError(
                    f"variable {sub.id!r} may be undefined here", self.source.where(sub),
                    "assign it before the if/loop that defines it (a loop may run zero "
                    "times; an if may take the other branch)")

    def block(self, stmts: list[ast.stmt], defined: Defined) -> Defined:
        for stmt in stmts:
            if defined is None:
                return None
            defined = self.stmt(stmt, defined)
        return defined

    def stmt(self, stmt: ast.stmt, defined: frozenset[str]) -> Defined:
        if isinstance(stmt, ast.Assign):
            self.uses(stmt.value, defined)
            for target in stmt.targets:
                self.uses_in_target(target, defined)
                defined = defined | frozenset(target_names(target))
            return defined
        if isinstance(stmt, ast.AnnAssign):
            self.uses(stmt.value, defined)
            return defined | frozenset(target_names(stmt.target)) if stmt.value else defined
        if isinstance(stmt, ast.AugAssign):
            self.uses(stmt.value, defined)
            if isinstance(stmt.target, ast.Name):
                self.uses(ast.Name(stmt.target.id, ast.Load(), lineno=stmt.target.lineno,
                                   col_offset=stmt.target.col_offset,
                                   end_lineno=stmt.target.end_lineno,
                                   end_col_offset=stmt.target.end_col_offset), defined)
            else:
                self.uses_in_target(stmt.target, defined)
            return defined
        if isinstance(stmt, ast.If):
            self.uses(stmt.test, defined)
            then = self.block(stmt.body, defined)
            other = self.block(stmt.orelse, defined)
            if then is None:
                return other
            if other is None:
                return then
            return then & other
        if isinstance(stmt, (ast.For, ast.While)):
            if stmt.orelse:
                raise self.source.unsupported(stmt.orelse[0], "else clauses of loops are "
                                              "not supported", "use a flag variable")
            if isinstance(stmt, ast.For):
                self.uses(stmt.iter, defined)
                self.block(stmt.body, defined | frozenset(target_names(stmt.target)))
            else:
                self.uses(stmt.test, defined)
                self.block(stmt.body, defined)
            return defined
        if isinstance(stmt, (ast.Return, ast.Raise)):
            self.uses(stmt.value if isinstance(stmt, ast.Return) else stmt.exc, defined)
            return None
        if isinstance(stmt, (ast.Break, ast.Continue)):
            return None
        if isinstance(stmt, ast.Assert):
            self.uses(stmt.test, defined)
            self.uses(stmt.msg, defined)
            return defined
        if isinstance(stmt, ast.Expr):
            self.uses(stmt.value, defined)
            return defined
        if isinstance(stmt, ast.Pass):
            return defined
        raise self.source.unsupported(stmt, f"{type(stmt).__name__} statements are not "
                                      f"supported")

    def uses_in_target(self, target: ast.AST, defined: frozenset[str]) -> None:
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            self.uses(target, defined)
        elif isinstance(target, ast.Tuple):
            for item in target.elts:
                self.uses_in_target(item, defined)
