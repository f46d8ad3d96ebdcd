"""The optimizing passes: fast-math flags, and linalg tiled and vectorized for the host.

Two independent steps run on a parsed module before the lowering pipeline:

- :func:`set_fastmath` marks every floating-point ``arith`` and ``math`` operation with
  ``#arith.fastmath<fast>`` (numba's ``fastmath=True``): LLVM may then reassociate, so
  floating-point reductions vectorize, and contract multiply-adds into FMAs.
- :func:`tile_and_vectorize` (:mod:`pymlirjit.codegen.linalg_schedules`), with the default
  options (:attr:`~pymlirjit.codegen.options.CompileOptions.tiles_linalg`) on a module that
  has linalg ops (:func:`has_linalg_ops`), makes ``linalg.matmul``,
  ``linalg.batch_matmul`` and 2-D convolutions on memrefs fast: f32/f64 matmuls become
  generated microkernels whose register blocks are loop-carried vectors, batch matmuls
  and convolutions become such matmuls on views (:mod:`pymlirjit.codegen.linalg_rewrites`); the
  other matmuls go through transform-dialect scripts (:data:`MATMUL_SCHEDULE`, run by
  ``transform-interpreter``: tiled for the cache, then into 8x32 register tiles whose
  accumulator lives in a stack buffer, so LLVM can keep it in vector registers, a buffer
  of the caller might alias the inputs), vectorized into FMAs of the host's widest
  vectors; edges of odd sizes are masked. :data:`VECTOR_LOWERING` are the passes that
  lower what they leave.

>>> from pymlirjit.lowering.pipeline import new_context, parse_module
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

from ..lowering.walk import operations
from .linalg_schedules import (
    BATCH_MATMUL_SCHEDULE,
    MATMUL_SCHEDULE,
    PARALLEL_MATMUL_SCHEDULE,
    has_tileable_ops,
    run_schedule,
    tile_and_vectorize,
)
from .linalg_tensors import prepare_tensors

__all__ = ["BATCH_MATMUL_SCHEDULE", "LOOP_ANNOTATIONS_BEFORE", "MATMUL_SCHEDULE",
           "PARALLEL_MATMUL_SCHEDULE", "VECTOR_LOWERING", "attach_loop_annotations",
           "has_linalg_ops", "has_tileable_ops", "optimize", "run_schedule", "set_fastmath",
           "tile_and_vectorize", "with_vector_lowering"]

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
    marked = operations(module, lambda op: op.name.startswith(("arith.", "math."))
                        and _takes_fastmath(type(op.opview)))
    for op in marked:
        op.attributes["fastmath"] = fast
    return len(marked)


def _takes_fastmath(opview: type) -> bool:
    return isinstance(getattr(opview, "fastmath", None), property)


def with_vector_lowering(pipeline: str) -> str:
    """``pipeline`` (normalized) with :data:`VECTOR_LOWERING` inserted, unless it
    lowers the vector dialect already."""
    if "convert-vector-to-llvm" in pipeline:
        return pipeline
    for before, passes in VECTOR_LOWERING.items():
        pipeline = pipeline.replace("," + before, f",{passes},{before}", 1)
    return pipeline


#: The pass before which :func:`attach_loop_annotations` runs: the first after
#: ``convert-cf-to-llvm``, which makes the ``llvm.br`` ops.
LOOP_ANNOTATIONS_BEFORE = "convert-index-to-llvm"


def attach_loop_annotations(module: Any) -> int:
    """Make each ``llvm.loop_annotation`` that ``scf.for`` passed down to a branch (a
    discardable attribute, which the translation to LLVM IR ignores) the branch's own
    ``loop_annotation``, which becomes ``!llvm.loop`` metadata; return how many moved.
    (The microkernels' depth loops say ``unroll = disable``: LLVM unrolled them 2-8
    times, 4x the FMAs to compile, for no speed.)"""
    from mlir import ir

    moved = 0

    def visit(op: Any) -> Any:
        nonlocal moved
        if op.name in ("llvm.br", "llvm.cond_br") and "llvm.loop_annotation" in op.attributes:
            op.attributes["loop_annotation"] = op.attributes["llvm.loop_annotation"]
            del op.attributes["llvm.loop_annotation"]
            moved += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return moved


def has_linalg_ops(module: Any) -> bool:
    """Whether ``module`` has an op of the linalg dialect (named or generic): what decides,
    once a module is parsed, whether the linalg steps of :func:`optimize` run at all (a
    module without one is lowered by the same pipeline as with ``tile=False``)."""
    from mlir import ir

    # A compile's context loads a dialect when it parses one of its ops (or a pass needs
    # it): no linalg dialect loaded, no linalg op, and no walk over every op.
    if not module.context.is_registered_operation("linalg.generic"):
        return False
    found = False

    def visit(op: Any) -> Any:
        nonlocal found
        if op.name.startswith("linalg."):
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def optimize(module: Any, *, fastmath: bool, tile: bool, filename: str = "<source>",
             parallel: bool = False, threads: int = 0,
             deferred_microkernels: bool = False) -> bool:
    """Apply the optimizations asked for to ``module`` (parsed, not lowered); return
    whether the lowering pipeline needs :func:`with_vector_lowering`. ``tile`` applies to
    modules with linalg ops (:func:`has_linalg_ops`) only; ``threads``: those a parallel
    loop is split for (0: unknown); ``deferred_microkernels``: matmul microkernels only
    declared (:mod:`~pymlirjit.codegen.microkernelrecipes`: defined by the caller)."""
    if fastmath:
        set_fastmath(module)
    if not tile or not has_linalg_ops(module):
        return False
    prepare_tensors(module, filename)
    return tile_and_vectorize(module, filename, parallel, threads, deferred_microkernels)
