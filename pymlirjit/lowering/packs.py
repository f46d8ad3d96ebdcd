"""``linalg.pack`` and ``linalg.unpack``, which one-shot bufferization cannot bufferize,
rewritten before it runs into ops it can.

Upstream's runner tests lower them with a transform script of their own (tile to unit
outer dimensions, then decompose); the default pipeline drops such scripts, so a file
run without its RUN line's passes failed with "op was not bufferized". Here every pack
and unpack is tiled to steps of 1 over its iteration domain (the packed side's outer
dimensions), which leaves ops whose outer dimensions are all 1; MLIR's decomposition
turns those into ``tensor.extract_slice``/``insert_slice``, ``linalg.fill`` and
``linalg.transpose``. Unlike ``transform.structured.lower_pack``, this also takes inner
tiles of dynamic size. It is element by element: correct, not fast.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .transformscripts import apply_script
from .walk import operations

__all__ = ["BUFFERIZATION", "PACK_OPS", "decompose_packs"]

#: The pass the rewrite runs before (as a hook of :func:`pymlirjit.lowering.pipeline.lower`).
BUFFERIZATION = "one-shot-bufferize"
PACK_OPS = ("linalg.pack", "linalg.unpack")
#: Marks the ops of one rank for the script (``transform.structured.match`` by attribute).
_TAG = "pymlirjit.unit_tiles_"


def _script(ranks: list[int]) -> str:
    tiles = "".join(f"""
    %ops{rank} = transform.structured.match ops{{["linalg.pack", "linalg.unpack"]}}
      attributes{{{_TAG}{rank}}} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %ops{rank} : !transform.any_op {{
    ^bb0(%op: !transform.any_op):
      %tiled, %loops:{rank} = transform.structured.tile_using_for %op
        tile_sizes [{", ".join("1" * rank)}]
        : (!transform.any_op) -> (!transform.any_op{", !transform.any_op" * rank})
    }}""" for rank in ranks)
    return f"""
module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(
      %root: !transform.any_op {{transform.readonly}}) {{{tiles}
    %funcs = transform.structured.match ops{{["func.func"]}} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {{
      transform.apply_patterns.linalg.decompose_pack_unpack
      transform.apply_patterns.linalg.decompose_pad
      transform.apply_patterns.canonicalization
    }} : !transform.any_op
    transform.yield
  }}
}}"""


def _domain_rank(op: Any) -> int:
    """The rank of a pack's or unpack's iteration domain: its unpacked side's."""
    unpacked = op.operands[0] if op.name == "linalg.pack" else op.results[0]
    return int(unpacked.type.rank)


def decompose_packs(module: Any, filename: str = "<source>") -> int:
    """Rewrite every ``linalg.pack``/``linalg.unpack`` in ``module`` in place (see the
    module's docstring); return how many there were. Raises :class:`MLIRError` if MLIR
    refuses the rewrite."""
    from mlir import ir

    by_rank: dict[int, list[Any]] = defaultdict(list)
    for op in operations(module, names=PACK_OPS):
        by_rank[_domain_rank(op)].append(op)
    if not by_rank:
        return 0
    with module.context:
        for rank, ops in by_rank.items():
            for op in ops:
                op.attributes[f"{_TAG}{rank}"] = ir.UnitAttr.get()
    apply_script(module, _script(sorted(by_rank)), filename,
                 "cannot decompose linalg.pack/linalg.unpack before bufferization")
    return sum(len(ops) for ops in by_rank.values())
