"""The subset of Python ``@jit`` compiles: a walk of the function's AST that rejects
everything else at its line, saying what to write instead; and the names a block of
statements assigns (which the loops and branches carry)."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from .source import FunctionSource

__all__ = ["assigned_names", "check_subset", "nodes_by_type", "nodes_of",
           "target_names", "walk"]

_LOOP_HINT = "write a for loop over range() filling an array made by np.empty()"
_CALLBACK_HINT = ("do it in a plain Python function with annotated parameters and return "
                  "type, called from the kernel (it becomes a callback)")
_UNSUPPORTED: dict[type[ast.AST], tuple[str, str]] = {
    ast.List: ("lists are not supported",
               "use a numpy array (np.empty(n)) or a tuple; " + _CALLBACK_HINT),
    ast.Dict: ("dicts are not supported", _CALLBACK_HINT),
    ast.Set: ("sets are not supported", _CALLBACK_HINT),
    ast.ListComp: ("list comprehensions are not supported", _LOOP_HINT),
    ast.SetComp: ("set comprehensions are not supported", _LOOP_HINT),
    ast.DictComp: ("dict comprehensions are not supported", _CALLBACK_HINT),
    ast.GeneratorExp: ("generator expressions are not supported", _LOOP_HINT),
    ast.Lambda: ("lambdas are not supported",
                 "define a plain function at module level: calls to it are compiled too"),
    ast.Yield: ("generators (yield) are not supported", "return an array instead"),
    ast.YieldFrom: ("generators (yield from) are not supported", "return an array instead"),
    ast.Await: ("await is not supported", ""),
    ast.Starred: ("starred expressions (*args) are not supported",
                  "pass the arguments one by one"),
    ast.NamedExpr: ("assignment expressions (:=) are not supported",
                    "assign in a statement of its own"),
    ast.JoinedStr: ("f-strings are not supported",
                    "print(...) takes several arguments: print('x =', x)"),
    ast.Try: ("try/except is not supported",
              "raise and assert are; the exception propagates from the kernel call"),
    ast.With: ("with statements are not supported", _CALLBACK_HINT),
    ast.AsyncWith: ("async with is not supported", ""),
    ast.AsyncFor: ("async for is not supported", ""),
    ast.AsyncFunctionDef: ("async functions are not supported", ""),
    ast.ClassDef: ("classes cannot be defined in a @jit function",
                   "define the class outside; pass arrays and scalars in"),
    ast.FunctionDef: ("nested functions are not supported",
                      "define the function at module level: calls to it are compiled too"),
    ast.Delete: ("del is not supported", ""),
    ast.Global: ("global is not supported",
                 "globals are read-only constants, frozen at compile time; pass an array "
                 "to write into"),
    ast.Nonlocal: ("nonlocal is not supported", ""),
    ast.Import: ("imports inside a @jit function are not supported",
                 "import at module level"),
    ast.ImportFrom: ("imports inside a @jit function are not supported",
                     "import at module level"),
}
if hasattr(ast, "Match"):
    _UNSUPPORTED[ast.Match] = ("match statements are not supported", "use if/elif/else")
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = _UNSUPPORTED[ast.Try]

#: The node types check_subset looks at (one set lookup for every other node).
_CHECKED = frozenset({*_UNSUPPORTED, ast.Constant, ast.Call})

def walk(node: ast.AST) -> list[ast.AST]:
    """The nodes of ``node``'s subtree in :func:`ast.walk`'s order (without its
    generators)."""
    nodes = [node]
    append = nodes.append
    for current in nodes:  # grows as it goes: ast.walk's breadth-first order
        kind = type(current)
        fields = _node_fields.get(kind)
        if fields is None:
            fields = _node_fields[kind] = () if kind is ast.Constant else kind._fields
        for name in fields:
            child = getattr(current, name, None)
            if isinstance(child, list):
                for item in child:
                    if isinstance(item, ast.AST):
                        append(item)
            elif isinstance(child, ast.AST):
                append(child)
    return nodes


#: The fields of each node type that may hold nodes (a constant's hold values only).
_node_fields: dict[type[ast.AST], tuple[str, ...]] = {}


def nodes_of(tree: ast.AST) -> list[ast.AST]:
    """The nodes of ``tree``'s subtree in no particular order."""
    return walk(tree)


_kinds: dict[int, tuple[ast.AST, dict[type[ast.AST], list[ast.AST]]]] = {}


def nodes_by_type(tree: ast.AST) -> dict[type[ast.AST], list[ast.AST]]:
    """The nodes of ``tree``'s subtree by their type, in no particular order (made once
    per tree: the ownership analysis looks for several kinds in turn)."""
    found = _kinds.get(id(tree))
    if found is not None and found[0] is tree:
        return found[1]
    if len(_kinds) > 256:
        _kinds.clear()
    kinds: dict[type[ast.AST], list[ast.AST]] = {}
    for node in nodes_of(tree):
        group = kinds.get(type(node))
        if group is None:
            kinds[type(node)] = [node]
        else:
            group.append(node)
    _kinds[id(tree)] = (tree, kinds)
    return kinds


def check_subset(source: FunctionSource) -> None:
    """Raise :class:`JitSyntaxError` at the first construct outside the subset."""
    tree = source.tree
    args = tree.args
    bad_args: list[tuple[ast.AST, str]] = []
    if args.vararg is not None:
        bad_args.append((args.vararg, "*args parameters are not supported"))
    if args.kwarg is not None:
        bad_args.append((args.kwarg, "**kwargs parameters are not supported"))
    if args.kwonlyargs:
        bad_args.append((args.kwonlyargs[0], "keyword-only parameters are not supported"))
    if args.posonlyargs:
        bad_args.append((args.posonlyargs[0], "positional-only parameters are not supported"))
    for node, what in bad_args:
        raise source.unsupported(node, what, "@jit functions take positional parameters")
    for stmt in tree.body:
        for node in walk(stmt):
            if type(node) not in _CHECKED:
                continue
            found = _UNSUPPORTED.get(type(node))
            if found is not None:
                raise source.unsupported(node, found[0], found[1])
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                raise source.unsupported(node, "bytes constants are not supported",
                                         "bool, int, float and complex are")
            if isinstance(node, ast.Call) and node.keywords and not _keywords_allowed(node):
                raise source.unsupported(node.keywords[0].value if node.keywords[0].arg
                                         else node, "keyword arguments are not supported "
                                         "in this call", "pass them by position")


def _keywords_allowed(node: ast.Call) -> bool:
    # Only the numpy constructors' dtype= (and print's end/sep, handled where called).
    names = {k.arg for k in node.keywords}
    return None not in names and names <= {"dtype", "sep", "end", "axis", "endpoint", "num"}


def target_names(target: ast.AST) -> Iterable[str]:
    """The variable names an assignment target binds (a[i] = ... binds none)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple):
        for item in target.elts:
            yield from target_names(item)


def assignment_counts(source: FunctionSource) -> dict[str, int]:
    """How many places assign each variable (parameters count once); made once per
    function, with the names every block of it assigns (see :func:`assigned_names`)."""
    if source.counts is not None:
        return source.counts
    tree = source.tree
    counts: dict[str, int] = {a.arg: 1 for a in tree.args.args}

    def block(stmts: list[ast.stmt]) -> frozenset[str]:
        names: set[str] = set()
        for stmt in stmts:
            own: list[str] = []
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    own += target_names(target)
            elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For)):
                own += target_names(stmt.target)
            for name in own:
                counts[name] = counts.get(name, 0) + 1
            names.update(own)
            for field in ("body", "orelse"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    names |= block(inner)
        frozen = frozenset(names)
        source.assigned[id(stmts)] = (stmts, frozen)
        return frozen

    block(tree.body)
    source.counts = counts
    return counts


def assigned_names(source: FunctionSource, stmts: list[ast.stmt]) -> frozenset[str]:
    """Every variable some statement of ``stmts`` (nested ones included) assigns (made
    once per list of statements of ``source``: loops ask for theirs several times)."""
    found = source.assigned.get(id(stmts))
    if found is not None and found[0] is stmts:
        return found[1]
    names = frozenset(_assigned_names(stmts))
    source.assigned[id(stmts)] = (stmts, names)
    return names


def _assigned_names(stmts: Iterable[ast.stmt]) -> set[str]:
    found: set[str] = set()
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    found.update(target_names(target))
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
                found.update(target_names(node.target))
    return found


def falls_through(stmts: list[ast.stmt]) -> bool:
    """Whether running ``stmts`` may reach their end (no return or raise on every path)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Return, ast.Raise)):
            return False
        if isinstance(stmt, ast.If) and not falls_through(stmt.body) \
                and not falls_through(stmt.orelse):
            return False
        if isinstance(stmt, ast.While) and isinstance(stmt.test, ast.Constant) \
                and stmt.test.value is True and not any(
                    isinstance(n, ast.Break) for n in walk(stmt)):
            return False
    return True
