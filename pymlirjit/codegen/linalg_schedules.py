"""Transform-dialect schedules for linalg ops, and :func:`tile_and_vectorize`, which
makes matmuls, batch matmuls and 2-D convolutions on memrefs fast: the rewrites of
:mod:`pymlirjit.codegen.linalg_rewrites` first (microkernels), the schedules for the ops they
leave (:data:`MATMUL_SCHEDULE`, :data:`BATCH_MATMUL_SCHEDULE`, run by
``transform-interpreter``). A step MLIR refuses leaves the module as it was."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..errors import MLIRError
from ..lowering.pipeline import _run_passes
from ..lowering.walk import operations
from .linalg_rewrites import (
    CONVOLUTIONS,
    batch_matmuls_to_matmuls,
    convolutions_to_matmuls,
    matmuls_to_microkernels,
    on_memrefs,
)
from .microkernelshapes import host_shape

__all__ = ["BATCH_MATMUL_SCHEDULE", "MATMUL_SCHEDULE", "PARALLEL_MATMUL_SCHEDULE",
           "has_tileable_ops", "hoist_allocas_out_of_loops", "host_schedules", "or_restore",
           "run_schedule", "tile_and_vectorize"]

#: Register tile of a matmul: 8 rows by 32 columns of f32 is 16 AVX-512 (or 32 AVX2)
#: accumulators, one k step at a time (an outer product of a column of A and a row of B).
_REGISTER_TILE = (8, 32)
#: On hosts without AVX-512 (256-bit microkernels, :func:`host_shape`): 8 rows by 16 columns (16 ymm
#: of f32). On a Zen 2, 512^3 matmuls the microkernel does not take (B transposed by its
#: indexing map, or read with a stride), 8x16 against 8x32: f64 0.61x and 0.32x the time,
#: f32 0.94x and 0.39x (benchmarks/results/2026-12-05-avx2-matmul.md).
_AVX2_REGISTER_TILE = (8, 16)
#: Cache tile (rows, columns, depth): a 256x256 block of B is 256 KB in f32, within L2.
_CACHE_TILE = (64, 256, 256)

#: What every schedule ends with: vector transfers, masks and contractions lowered to
#: outer products, i.e. broadcasts and FMAs of the host's widest vectors.
_VECTOR_PATTERNS = """
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
    }} : !transform.any_op"""


def _schedule(op_name: str, body: str, tile: tuple[int, int] = _REGISTER_TILE) -> str:
    """A transform script running ``body`` on each ``op_name`` (bound to ``%op``),
    then :data:`_VECTOR_PATTERNS`; ``tile``: the register tile."""
    return ("""
module attributes {{transform.with_named_sequence}} {{
transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %mm = transform.structured.match ops{{["@OP@"]}} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.foreach %mm : !transform.any_op {{
    ^bb0(%op: !transform.any_op):@BODY@
    }}@TAIL@
    transform.yield
  }}
}}
""".replace("@OP@", op_name).replace("@BODY@", body)
            .replace("@TAIL@", _VECTOR_PATTERNS)).format(
        c0=_CACHE_TILE[0], c1=_CACHE_TILE[1], c2=_CACHE_TILE[2],
        r0=tile[0], r1=tile[1])


#: The transform script, appended to the module and run by ``transform-interpreter``.
_MATMUL_BODY = """
      %t1, %l1:3 = transform.structured.tile_using_for %op tile_sizes [{c0}, {c1}, {c2}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
                                  !transform.any_op)
      %t2, %l2:2 = transform.structured.tile_using_for %t1 tile_sizes [{r0}, {r1}, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      %p = transform.structured.promote %t2 {{operands_to_promote = [2], use_alloca,
        use_full_tile_buffers = [false, false, true]}} : (!transform.any_op) -> !transform.any_op
      %t3, %l3 = transform.structured.tile_using_for %p tile_sizes [0, 0, 1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %t3 vector_sizes [{r0}, {r1}, 1] : !transform.any_op"""
MATMUL_SCHEDULE = _schedule("linalg.matmul", _MATMUL_BODY)

#: :data:`MATMUL_SCHEDULE` for ``parallel=True``: the cache tiles of the two parallel
#: dimensions become the iterations of an ``scf.forall`` (run by several threads, see
#: :func:`pymlirjit.codegen.parallel.with_parallel_loops`); the depth stays a sequential loop
#: inside each.
_PARALLEL_TILING = (
    "%t1, %l1:3 = transform.structured.tile_using_for %op tile_sizes "
    f"[{_CACHE_TILE[0]}, {_CACHE_TILE[1]}, {_CACHE_TILE[2]}]\n"
    "        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,\n"
    "                                  !transform.any_op)",
    "%t0, %l0 = transform.structured.tile_using_forall %op tile_sizes "
    f"[{_CACHE_TILE[0]}, {_CACHE_TILE[1]}]\n"
    "        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
    "      %t1, %l1 = transform.structured.tile_using_for %t0 tile_sizes "
    f"[0, 0, {_CACHE_TILE[2]}]\n"
    "        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)")
PARALLEL_MATMUL_SCHEDULE = MATMUL_SCHEDULE.replace(*_PARALLEL_TILING)

#: :data:`MATMUL_SCHEDULE` for ``linalg.batch_matmul``: one matrix of the batch at a
#: time, each as a matmul; vectorized straight into a contraction (the generic path
#: would scalarize it: the unit batch dimension hides the outer products).
_BATCH_MATMUL_BODY = """
      %t1, %l1:4 = transform.structured.tile_using_for %op tile_sizes [1, {c0}, {c1}, {c2}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
                                  !transform.any_op, !transform.any_op)
      %t2, %l2:2 = transform.structured.tile_using_for %t1 tile_sizes [0, {r0}, {r1}, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      %p = transform.structured.promote %t2 {{operands_to_promote = [2], use_alloca,
        use_full_tile_buffers = [false, false, true]}} : (!transform.any_op) -> !transform.any_op
      %t3, %l3 = transform.structured.tile_using_for %p tile_sizes [0, 0, 0, 1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %t3 vector_sizes [1, {r0}, {r1}, 1]
        {{create_named_contraction}} : !transform.any_op"""
BATCH_MATMUL_SCHEDULE = _schedule("linalg.batch_matmul", _BATCH_MATMUL_BODY)


@functools.cache
def host_schedules() -> tuple[str, str, str]:
    """The matmul, parallel matmul and batch matmul schedules for the host: those above
    on AVX-512 hosts, with :data:`_AVX2_REGISTER_TILE` on the others."""
    if host_shape().bits == 512:
        return MATMUL_SCHEDULE, PARALLEL_MATMUL_SCHEDULE, BATCH_MATMUL_SCHEDULE
    tile = _AVX2_REGISTER_TILE
    matmul = _schedule("linalg.matmul", _MATMUL_BODY, tile)
    return (matmul, matmul.replace(*_PARALLEL_TILING),
            _schedule("linalg.batch_matmul", _BATCH_MATMUL_BODY, tile))

_MARK = "transform.with_named_sequence"

def _tileable(module: Any) -> set[str]:
    """The names of the ops on memrefs that the schedules handle, found in ``module``."""
    handled = {"linalg.matmul", "linalg.batch_matmul", *CONVOLUTIONS}
    return {op.name for op in operations(module, on_memrefs, names=handled)}


def has_tileable_ops(module: Any) -> bool:
    """Whether ``module`` has a ``linalg.matmul``, ``linalg.batch_matmul`` or a 2-D
    convolution on memrefs (what the schedules handle; tensor ops are bufferized first by
    the default pipeline's own passes)."""
    return bool(_tileable(module))


def tile_and_vectorize(module: Any, filename: str = "<source>", parallel: bool = False,
                       threads: int = 0, deferred_microkernels: bool = False) -> bool:
    """Tile and vectorize the ops :func:`has_tileable_ops` finds in ``module``, in place.

    Batch matmuls and 2-D convolutions on f32/f64 become matmuls on views
    (:func:`batch_matmuls_to_matmuls`, :func:`convolutions_to_matmuls`); matmuls on f32/f64
    with unit-stride rows become microkernels (:func:`matmuls_to_microkernels`); the
    others get :data:`BATCH_MATMUL_SCHEDULE` and :data:`MATMUL_SCHEDULE`
    (:data:`PARALLEL_MATMUL_SCHEDULE` if ``parallel``, on ``threads`` threads: 0 if
    unknown; ``deferred_microkernels``: only declared, see
    :mod:`~pymlirjit.codegen.microkernelrecipes`). A step that fails leaves the module as
    it was (its ops get the plain lowering). Return whether any step applied."""
    found = _tileable(module)
    serial, parallel_matmul, batch_matmul = host_schedules()
    matmul = parallel_matmul if parallel else serial

    def scheduled(schedule: str) -> bool:
        run_schedule(module, schedule, filename)
        return True

    steps: list[Callable[[], bool]] = []  # each says whether it changed the module
    if "linalg.batch_matmul" in found:
        steps.append(lambda: batch_matmuls_to_matmuls(module) > 0)
    if found & set(CONVOLUTIONS):
        steps.append(lambda: convolutions_to_matmuls(module) > 0)
    if found:
        steps.append(lambda: matmuls_to_microkernels(
            module, parallel, threads=threads, deferred=deferred_microkernels) > 0)
    if "linalg.batch_matmul" in found:  # those left: other types or indexing maps
        steps.append(lambda: "linalg.batch_matmul" in _tileable(module)
                     and scheduled(batch_matmul))
    if found:
        # The matmuls left (other types, layouts or indexing maps) get the schedule.
        steps.append(lambda: "linalg.matmul" in _tileable(module) and scheduled(matmul))
    return sum(or_restore(module, step) for step in steps) > 0


def or_restore(module: Any, step: Callable[[], bool]) -> bool:
    """Run ``step``; if MLIR refuses it, put ``module`` back as it was before. Return
    whether the step changed the module."""
    from mlir import ir

    backup = module.operation.clone()
    try:
        changed = step()
    except (MLIRError, ir.MLIRError):
        for op in list(module.body.operations):
            op.operation.erase()
        for op in list(backup.regions[0].blocks[0].operations):
            op.operation.detach_from_parent()
            module.body.append(op)
        return False
    finally:
        backup.erase()
    return changed


def run_schedule(module: Any, schedule: str, filename: str = "<source>") -> None:
    """Run the transform script ``schedule`` on ``module`` in place, then remove it.

    Raises :class:`MLIRError` if it fails (the module may then be half transformed)."""
    from mlir import ir
    from mlir.passmanager import PassManager

    with module.context, ir.Location.unknown():
        # The schedule module owns the script until it moves.
        owner = ir.Module.parse(schedule)
        script = owner.body.operations[0]
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
    hoist_allocas_out_of_loops(module)


def hoist_allocas_out_of_loops(module: Any) -> int:
    """Move each ``memref.alloca`` of a static shape out of the ``scf.for`` and
    ``scf.if`` around it (up to a function or a parallel loop's body, where each thread
    needs its own); return how many moved. An alloca in a loop takes new stack on every
    iteration, freed only when the function returns: the register tiles' buffers of a
    1024^3 matmul overflowed an 8 MB stack."""
    allocas = operations(module, lambda op: not list(op.operands), names={"memref.alloca"})
    moved = 0
    for alloca in allocas:
        outermost, parent = None, alloca.parent
        while parent is not None and parent.name in ("scf.for", "scf.if"):
            outermost, parent = parent, parent.parent
        if outermost is not None:
            alloca.move_before(outermost)
            moved += 1
    return moved
