"""A callback at the widths of the declaration it links to.

A callback annotated with Python's ``int``, ``float`` or ``complex`` takes any width of
that kind, as a kernel stub does: linked to ``func.func private @f(i32, index) -> i32``,
``def f(x: int, n: int) -> int`` is served by a callback of that exact C signature (its
own native entry), and its results are range-checked for the declared widths. Explicit
widths (``pymlirjit.i32``, ``np.float32``) and signature strings stay exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .signature import Parameter, Signature, annotations_of
from .types import MemRefType, ScalarType, to_type

if TYPE_CHECKING:
    from .callback import Callback

__all__ = ["any_width_positions", "at_declared_widths"]

#: Python's number types, as a callback's annotations: any width of their kind.
_ANY_WIDTH = {int: "int", float: "float", complex: "complex"}


def any_width_positions(function: Any, signature: Signature) -> frozenset[int]:
    """The positions in ``(*params, *results)`` of ``signature`` that ``function``
    annotates with ``int``, ``float`` or ``complex`` and that have the type such an
    annotation reads as (``i64``, ``f64``, ``complex<f64>``): a signature given as a
    string or with explicit widths has none."""
    try:
        hints = annotations_of(function)
    except Exception:  # unreadable annotations: the signature came from elsewhere
        return frozenset()
    names = [p.name for p in signature.params]
    annotations: list[Any] = [hints.get(name) for name in names]
    returned = hints.get("return")
    results = getattr(returned, "__args__", None) if len(signature.results) > 1 else None
    annotations += list(results) if results is not None else [returned]
    types = (*signature.param_types, *signature.results)
    return frozenset(i for i, (annotation, t) in enumerate(zip(annotations, types))
                     if isinstance(annotation, type) and annotation in _ANY_WIDTH
                     and t is to_type(annotation))


def _widened(mine: Any, declared: Any, flexible: bool) -> bool:
    """Whether ``declared`` may stand for ``mine`` at a position (``flexible``: any width)."""
    return (flexible and isinstance(mine, ScalarType) and isinstance(declared, ScalarType)
            and mine.kind == declared.kind and mine.kind in _ANY_WIDTH.values())


def at_declared_widths(cb: Callback, declared: Signature) -> Callback:
    """``cb``, or a callback of the same function, name and parameter names with the
    widths of ``declared`` where ``cb``'s annotations say ``int``, ``float`` or
    ``complex`` and ``declared`` has another width of that kind. Anything else stays
    ``cb`` (whose signature check then names the difference)."""
    signature = cb.signature
    if signature == declared or len(signature.params) != len(declared.params) or (
            len(signature.results) != len(declared.results)):
        return cb
    flexible = any_width_positions(cb.__wrapped__, signature)
    if not flexible:
        return cb
    mine = (*signature.param_types, *signature.results)
    theirs = (*declared.param_types, *declared.results)
    chosen = []
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a == b or (isinstance(a, MemRefType) and isinstance(b, MemRefType)
                      and b.same_as_annotation(a)):
            chosen.append(a)
        elif _widened(a, b, i in flexible):
            chosen.append(b)
        else:
            return cb
    count = len(signature.params)
    widened = Signature(tuple(Parameter(p.name, t) for p, t in zip(signature.params, chosen)),
                        tuple(chosen[count:]))
    return cb.with_signature(widened)
