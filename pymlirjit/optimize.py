"""The optimizing passes: fast-math flags, and linalg tiled and vectorized for the host.

Two independent steps run on a parsed module before the lowering pipeline:

- :func:`set_fastmath` marks every floating-point ``arith`` and ``math`` operation with
  ``#arith.fastmath<fast>`` (numba's ``fastmath=True``): LLVM may then reassociate, so
  floating-point reductions vectorize, and contract multiply-adds into FMAs.
- :func:`tile_and_vectorize` runs a transform-dialect script (:data:`MATMUL_SCHEDULE`)
  through ``transform-interpreter``: each ``linalg.matmul`` on memrefs is tiled for the
  cache, then into 8x32 register tiles whose accumulator lives in a stack buffer (so
  LLVM can keep it in vector registers: a buffer of the caller might alias the inputs),
  and vectorized into FMAs of the host's widest vectors; edges of odd sizes are masked.
  :data:`VECTOR_LOWERING` are the passes that lower what it leaves.

>>> from pymlirjit.pipeline import new_context, parse_module
>>> m = parse_module('''func.func @f(%a: f64, %b: f64) -> f64 {
...   %r = arith.addf %a, %b : f64
...   return %r : f64
... }''', new_context())
>>> set_fastmath(m)
1
>>> "fastmath<fast>" in str(m)
True
"""

from __future__ import annotations

from typing import Any

from .errors import MLIRError
from .pipeline import _run_passes

__all__ = ["MATMUL_SCHEDULE", "VECTOR_LOWERING", "has_tileable_ops", "optimize",
           "set_fastmath", "tile_and_vectorize", "with_vector_lowering"]

#: Register tile of a matmul: 8 rows by 32 columns of f32 is 16 AVX-512 (or 32 AVX2)
#: accumulators, one k step at a time (an outer product of a column of A and a row of B).
_REGISTER_TILE = (8, 32)
#: Cache tile (rows, columns, depth): a 256x256 block of B is 256 KB in f32, within L2.
_CACHE_TILE = (64, 256, 256)

#: The transform script, appended to the module and run by ``transform-interpreter``.
MATMUL_SCHEDULE = """
module attributes {{transform.with_named_sequence}} {{
transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %mm = transform.structured.match ops{{["linalg.matmul"]}} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.foreach %mm : !transform.any_op {{
    ^bb0(%op: !transform.any_op):
      %t1, %l1:3 = transform.structured.tile_using_for %op tile_sizes [{c0}, {c1}, {c2}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
                                  !transform.any_op)
      %t2, %l2:2 = transform.structured.tile_using_for %t1 tile_sizes [{r0}, {r1}, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      %p = transform.structured.promote %t2 {{operands_to_promote = [2], use_alloca,
        use_full_tile_buffers = [false, false, true]}} : (!transform.any_op) -> !transform.any_op
      %t3, %l3 = transform.structured.tile_using_for %p tile_sizes [0, 0, 1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %t3 vector_sizes [{r0}, {r1}, 1] : !transform.any_op
    }}
    %f = transform.structured.match ops{{["func.func"]}} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {{
      transform.apply_patterns.vector.lower_masked_transfers
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.canonicalization
    }} : !transform.any_op
    transform.apply_patterns to %f {{
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.canonicalization
    }} : !transform.any_op
    transform.yield
  }}
}}
""".format(c0=_CACHE_TILE[0], c1=_CACHE_TILE[1], c2=_CACHE_TILE[2],
           r0=_REGISTER_TILE[0], r1=_REGISTER_TILE[1])

_MARK = "transform.with_named_sequence"

#: Lower what the schedule leaves (vector transfers, masks, ``ub.poison``): inserted in
#: the default pipeline before its scf and arith lowerings.
VECTOR_LOWERING = {
    "convert-scf-to-cf": "func.func(convert-vector-to-scf{full-unroll=true})",
    "convert-arith-to-llvm": "convert-vector-to-llvm,convert-ub-to-llvm",
}


def set_fastmath(module: Any) -> int:
    """Put ``#arith.fastmath<fast>`` on every ``arith`` and ``math`` op of ``module``
    that takes fast-math flags (the float ones); return how many ops were marked."""
    from mlir import ir

    with module.context:
        fast = ir.Attribute.parse("#arith.fastmath<fast>")
    marked = 0

    def visit(op: Any) -> Any:
        nonlocal marked
        if op.name.startswith(("arith.", "math.")) and _takes_fastmath(type(op.opview)):
            op.attributes["fastmath"] = fast
            marked += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return marked


def _takes_fastmath(opview: type) -> bool:
    return isinstance(getattr(opview, "fastmath", None), property)


def has_tileable_ops(module: Any) -> bool:
    """Whether ``module`` has a ``linalg.matmul`` on memrefs (what the schedule handles;
    tensor ops are bufferized first by the default pipeline's own passes)."""
    from mlir import ir

    found = False

    def visit(op: Any) -> Any:
        nonlocal found
        if op.name == "linalg.matmul" and all(
                isinstance(v.type, ir.MemRefType) for v in op.operands):
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def tile_and_vectorize(module: Any, filename: str = "<source>") -> None:
    """Run :data:`MATMUL_SCHEDULE` on ``module`` in place, then remove the script."""
    from mlir import ir
    from mlir.passmanager import PassManager

    with module.context, ir.Location.unknown():
        schedule = ir.Module.parse(MATMUL_SCHEDULE)  # owns the script until it moves
        script = schedule.body.operations[0]
        script.operation.detach_from_parent()
        # The interpreter looks for its entry point in the root module, which must then
        # say it holds named sequences.
        module.body.append(script)
        attributes = module.operation.attributes
        attributes[_MARK] = ir.UnitAttr.get()
        try:
            _run_passes(PassManager.parse("builtin.module(transform-interpreter)"), module,
                        filename)
        except MLIRError as exc:
            raise MLIRError(f"tiling and vectorizing linalg failed: {exc.summary}",
                            exc.diagnostics) from None
        finally:
            script.operation.erase()
            del attributes[_MARK]


def with_vector_lowering(pipeline: str) -> str:
    """``pipeline`` (normalized) with :data:`VECTOR_LOWERING` inserted, unless it
    lowers the vector dialect already."""
    if "convert-vector-to-llvm" in pipeline:
        return pipeline
    for before, passes in VECTOR_LOWERING.items():
        pipeline = pipeline.replace("," + before, f",{passes},{before}", 1)
    return pipeline


def optimize(module: Any, *, fastmath: bool, tile: bool, filename: str = "<source>") -> bool:
    """Apply the optimizations asked for to ``module`` (parsed, not lowered); return
    whether the lowering pipeline needs :func:`with_vector_lowering`."""
    if fastmath:
        set_fastmath(module)
    if tile and has_tileable_ops(module):
        tile_and_vectorize(module, filename)
        return True
    return False
