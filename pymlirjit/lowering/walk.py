"""The operations of an MLIR module (or of any op) that a rewrite or a check looks for:
one walk, written once; and a module's top-level symbols by name.

>>> from mlir import ir
>>> module = ir.Module.parse('''
... func.func @f(%x: f64) -> f64 {
...   %y = arith.addf %x, %x : f64
...   %z = arith.mulf %y, %y : f64
...   return %z : f64
... }''', ir.Context())
>>> [op.name for op in operations(module, names={"arith.addf", "arith.mulf"})]
['arith.addf', 'arith.mulf']
>>> len(operations(module, lambda op: op.name.startswith("arith."), limit=1))
1
>>> list(top_level_symbols(module))
['f']
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

__all__ = ["operations", "top_level_symbols"]


def operations(root: Any, where: Callable[[Any], bool] | None = None, *,
               names: Container[str] | None = None, limit: int | None = None) -> list[Any]:
    """The operations nested in ``root`` (a module or an op; ``root`` itself included),
    in MLIR's walk order (post-order: an op after the ops inside it), whose name is in
    ``names`` (when given) and for which ``where(op)`` is true (when given). The walk
    stops at the ``limit``-th one found (when given).

    The ops are ``ir.Operation`` objects (``.opview`` gives the op's class). Collect them
    first, then rewrite: MLIR's walk must not see the ops it walks replaced or erased.
    An exception raised by ``where`` stops the walk and propagates as itself (MLIR would
    wrap it in a ``RuntimeError`` naming no op)."""
    if isinstance(names, str):  # `in` would match substrings of the one name
        raise TypeError(f"operations(names=...) takes a collection of op names, got the "
                        f"string {names!r} (write {{{names!r}}})")
    from mlir import ir

    found: list[Any] = []
    failure: list[BaseException] = []

    def visit(op: Any) -> Any:
        if names is not None and op.name not in names:
            return ir.WalkResult.ADVANCE
        if where is not None:
            try:
                wanted = where(op)
            except BaseException as exc:  # re-raised below, once MLIR's walk returned
                failure.append(exc)
                return ir.WalkResult.INTERRUPT
            if not wanted:
                return ir.WalkResult.ADVANCE
        found.append(op)
        if limit is not None and len(found) >= limit:
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    if limit is None or limit > 0:
        root.operation.walk(visit)
    if failure:
        raise failure[0]
    return found


def top_level_symbols(module: Any) -> dict[str, Any]:
    """The ops of ``module``'s body that define a symbol, by symbol name."""
    from mlir import ir

    return {ir.StringAttr(op.operation.attributes["sym_name"]).value: op
            for op in module.body.operations if "sym_name" in op.operation.attributes}
