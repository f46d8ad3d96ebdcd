"""Casts a generic kernel's binding makes between equal types: identities, not errors.

A generic source widens its element type with ``arith.extf %x : !T to f64``; bound to
``!T = f64`` that cast is invalid MLIR (``extf`` must widen). :func:`identity_casts`
rewrites each such cast (``extf``, ``truncf``, ``extsi``, ``extui``, ``trunci``,
``sitofp``, ``uitofp``, ``fptosi``, ``fptoui``, ``index_cast``, ``index_castui``,
``bitcast``) whose two types are equal once the aliases are bound into a
``builtin.unrealized_conversion_cast`` between them, on the same line (locations stay
the user's); :func:`fold_identity_casts` then replaces each cast of a value to its own
type by the value, once the module is parsed.

>>> identity_casts("%y = arith.extf %x : !T to f64", {"T": "f64"})
'%y = builtin.unrealized_conversion_cast %x : !T to f64'
>>> identity_casts("%y = arith.extf %x : !T to f64", {"T": "f32"})
'%y = arith.extf %x : !T to f64'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["fold_identity_casts", "identity_casts"]

_CASTS = ("extf", "truncf", "extsi", "extui", "trunci", "sitofp", "uitofp", "fptosi",
          "fptoui", "index_castui", "index_cast", "bitcast")
# `%r = arith.<cast> %x [attributes] : <type> to <type>` (the custom form, one line).
_CAST = re.compile(
    r"(?P<head>%[\w$.-]+\s*=\s*)arith\.(?:" + "|".join(_CASTS) + r")\s+"
    r"(?P<operand>%[\w$.#-]+)[^:\n]*?:\s*(?P<source>\S+)\s+to\s+(?P<target>[^\s,)]+)")
_ALIAS = re.compile(r"!([A-Za-z_][\w$]*)(?![\w$.<])")


def _bound(type_text: str, binding: Mapping[str, str]) -> str:
    return _ALIAS.sub(lambda m: binding.get(m[1], m[0]), type_text).replace(" ", "")


def identity_casts(text: str, binding: Mapping[str, str]) -> str:
    """``text`` with every cast between types equal under ``binding`` (alias -> MLIR
    type) made an identity (see the module's docstring); other text unchanged."""
    def rewrite(match: re.Match[str]) -> str:
        source, target = match["source"], match["target"]
        if _bound(source, binding) != _bound(target, binding):
            return match[0]
        return (f"{match['head']}builtin.unrealized_conversion_cast {match['operand']} : "
                f"{source} to {target}")
    return _CAST.sub(rewrite, text)


def fold_identity_casts(module: Any) -> None:
    """Replace each ``builtin.unrealized_conversion_cast`` of one value to its own type
    in ``module`` by that value (what :func:`identity_casts` makes; bufferization would
    refuse it on a tensor, and it means nothing anywhere)."""
    from mlir import ir

    found: list[Any] = []

    def visit(op: Any) -> Any:
        if (op.name == "builtin.unrealized_conversion_cast" and len(op.operands) == 1
                and len(op.results) == 1 and op.operands[0].type == op.results[0].type):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
