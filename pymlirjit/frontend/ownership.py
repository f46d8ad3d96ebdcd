"""Which arrays a function allocates it may free itself: those no value outliving the
block of statements that made them can still reach.

A variable bound once to a new array (``np.empty``/``zeros``/``ones`` and ``*_like``, a
whole-array expression, an allocating numpy function, or the array result of a call
into a compiled function or a callback) is freed when its block ends (each iteration,
for a loop body) and on every ``break``, ``continue`` and ``return`` leaving that block,
as numba's reference counting frees it, provided that

- no ``return`` hands it (or a view of it) to the caller, and
- every variable that may hold it or a view of it (``u = t[1:]``, ``v = t.T``,
  ``for row in t``, ``w = helper(t)``: its *aliases*, followed transitively) is read and
  written only inside that block, so nothing uses the memory after it is freed.

A call does not keep its array arguments: a callback sees them as views valid during the
call, and a compiled callee can only hand them on through its result (which then
aliases them). Whether a call's array result is new memory or a view of an argument is
known only when it runs: :class:`~.emit_calls.CallsMixin` compares their base pointers."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import NamedTuple

from .jtypes import Array, JType, Optional, Tuple
from .syntax import nodes_by_type, nodes_of, walk

__all__ = ["Binding", "aliases", "freeable", "has_array", "managed", "name_bindings"]


def has_array(t: JType | None) -> bool:
    """Whether a value of ``t`` holds an array (itself or in a tuple or an optional)."""
    if isinstance(t, Array):
        return True
    if isinstance(t, (Tuple, Optional)):
        return any(has_array(i) for i in t.items)
    return False


def aliases(node: ast.AST | None, types: Mapping[ast.AST, JType],
            fresh: set[ast.AST]) -> set[str]:
    """The variables whose arrays the value of ``node`` may share memory with (none for
    an expression in ``fresh``, which always makes a new array)."""
    if node is None or not has_array(types.get(node)) or node in fresh:
        return set()
    if isinstance(node, ast.Name):
        return {node.id}
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):  # views, tuples, conditionals, calls
        if isinstance(child, ast.keyword):
            child = child.value
        if not isinstance(child, ast.expr):
            continue
        if child in types and not has_array(types[child]):
            continue  # a number, a shape: no memory
        found |= aliases(child, types, fresh) if child in types \
            else _array_names(child, types)
    return found


def _array_names(node: ast.AST, types: Mapping[ast.AST, JType]) -> set[str]:
    """Array variables anywhere in ``node`` (whose own type the inference did not
    record): conservatively, all of them."""
    return {n.id for n in walk(node)
            if isinstance(n, ast.Name) and has_array(types.get(n))}


def _bindings(tree: ast.FunctionDef, types: Mapping[ast.AST, JType],
              variables: Mapping[str, JType],
              fresh: set[ast.AST]) -> list[tuple[str, set[str]]]:
    """Each (array variable, the variables its new value may alias) the function binds."""
    bound: list[tuple[str, set[str]]] = []

    def bind(target: ast.expr, value: set[str]) -> None:
        for name in walk(target):
            if isinstance(name, ast.Name) and has_array(variables.get(name.id)):
                bound.append((name.id, value))

    kinds = nodes_by_type(tree)  # the order of the bindings does not matter
    for node in kinds.get(ast.Assign, ()):
        assert isinstance(node, ast.Assign)
        for target in node.targets:
            bind(target, aliases(node.value, types, fresh))
    for node in kinds.get(ast.AnnAssign, ()):
        assert isinstance(node, ast.AnnAssign)
        if node.value is not None:
            bind(node.target, aliases(node.value, types, fresh))
    for node in kinds.get(ast.For, ()):  # for row in t: row views t
        assert isinstance(node, ast.For)
        bind(node.target, _array_names(node.iter, types))
    return bound


class Binding(NamedTuple):
    """A variable a ``name = value`` or ``a, b = ...`` statement binds."""

    name: str
    value: ast.expr  # the expression whose value (or item ``part`` of it) is bound
    position: int | None  # the variable's place in the target tuple (None: not a tuple)
    part: int | None  # which item of ``value`` (None: all of it)


def name_bindings(stmt: ast.AST) -> list[Binding]:
    """The variables ``stmt`` binds if it is ``name = value``, ``a, b = x, y`` or
    ``a, b = call(...)``; nothing for any other statement."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return []
    target, value = stmt.targets[0], stmt.value
    if isinstance(target, ast.Name):
        return [Binding(target.id, value, None, None)]
    if not isinstance(target, ast.Tuple):
        return []
    if isinstance(value, ast.Tuple):
        if len(target.elts) != len(value.elts):
            return []
        return [Binding(t.id, v, k, None) for k, (t, v) in
                enumerate(zip(target.elts, value.elts)) if isinstance(t, ast.Name)]
    return [Binding(t.id, value, k, k) for k, t in enumerate(target.elts)
            if isinstance(t, ast.Name)]


def _bound_type(b: Binding, types: Mapping[ast.AST, JType]) -> JType | None:
    t = types.get(b.value)
    if b.part is None:
        return t
    return t.items[b.part] if isinstance(t, Tuple) and b.part < len(t.items) else None


def _block_of(tree: ast.FunctionDef, assign: ast.AST) -> list[ast.stmt]:
    """The statement list that holds ``assign`` itself."""
    for node in nodes_of(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and any(s is assign for s in stmts):
                return stmts
    raise AssertionError("the statement is not in the function")  # pragma: no cover


def _closure(name: str, bindings: list[tuple[str, set[str]]]) -> set[str]:
    """``name`` and the variables that may hold (views of) its arrays, transitively."""
    closure = {name}
    grew = True
    while grew:
        grew = False
        for variable, value in bindings:
            if variable not in closure and value & closure:
                closure.add(variable)
                grew = True
    return closure


def freeable(tree: ast.FunctionDef, types: Mapping[ast.AST, JType],
             variables: Mapping[str, JType], counts: Mapping[str, int],
             fresh: set[ast.AST], new: set[ast.AST]) -> frozenset[str]:
    """The variables of ``tree`` whose array is freed at the end of its block.

    ``types``: the inferred type of each expression; ``variables``: each variable's;
    ``counts``: how many places assign each variable; ``fresh``: the expressions that
    always make a new array (``np.empty`` & co, whole-array expressions, allocating
    numpy functions); ``new``: those too, and calls whose array result may be new
    memory (freed only if it is, see :mod:`.emit_calls`)."""
    if not new:
        return frozenset()
    kinds = nodes_by_type(tree)
    candidates = [(assign, b.name) for assign in kinds.get(ast.Assign, ())
                  for b in name_bindings(assign)
                  if b.value in new and isinstance(_bound_type(b, types), Array)]
    if not candidates:
        return frozenset()
    bindings = _bindings(tree, types, variables, fresh)
    returned: set[str] = set()
    uses: dict[str, list[ast.Name]] = {}
    for node in kinds.get(ast.Return, ()):
        assert isinstance(node, ast.Return)
        returned |= aliases(node.value, types, fresh)
    for node in kinds.get(ast.Name, ()):
        assert isinstance(node, ast.Name)
        uses.setdefault(node.id, []).append(node)
    chosen: set[str] = set()
    for assign, name in candidates:
        if counts.get(name) != 1:
            continue
        closure = _closure(name, bindings)
        if closure & returned:
            continue
        inside = {id(n) for s in _block_of(tree, assign) for n in walk(s)}
        if all(id(use) in inside for v in closure for use in uses.get(v, [])):
            chosen.add(name)
    return frozenset(chosen)


def managed(tree: ast.FunctionDef, types: Mapping[ast.AST, JType],
            variables: Mapping[str, JType], counts: Mapping[str, int],
            fresh: set[ast.AST], new: set[ast.AST]) -> frozenset[str]:
    """The array variables assigned more than once (``x = 0.5 * (x + y)`` in a loop)
    whose arrays the function frees when it assigns them again or returns, keeping in a
    flag whether the current array is its own (see :mod:`.emit_memory`): those that only
    ``name = value`` statements outside ``prange`` bodies assign, that at least one new
    array is assigned to, and that no other variable may view."""
    if not new:
        return frozenset()
    plain: dict[str, int] = {}
    gets_new: set[str] = set()
    kinds = nodes_by_type(tree)
    for node in kinds.get(ast.Assign, ()):
        for b in name_bindings(node):
            plain[b.name] = plain.get(b.name, 0) + 1
            if b.value in new:
                gets_new.add(b.name)
    if not gets_new:
        return frozenset()
    in_prange: set[str] = set()
    for loop in kinds.get(ast.For, ()):
        if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and \
                getattr(loop.iter.func, "id", getattr(loop.iter.func, "attr", "")) == "prange":
            in_prange |= {n.id for n in walk(loop) if isinstance(n, ast.Name)}
    parameters = {a.arg for a in tree.args.args}
    bindings = _bindings(tree, types, variables, fresh)
    return frozenset(
        v for v in gets_new - in_prange
        if isinstance(variables.get(v), Array) and counts.get(v, 0) > 1
        and plain[v] == counts[v] - (v in parameters) and _closure(v, bindings) == {v})
