"""The optimizing passes: fast-math flags, and linalg tiled and vectorized for the host.

Two independent steps run on a parsed module before the lowering pipeline:

- :func:`set_fastmath` marks every floating-point ``arith`` and ``math`` operation with
  ``#arith.fastmath<fast>`` (numba's ``fastmath=True``): LLVM may then reassociate, so
  floating-point reductions vectorize, and contract multiply-adds into FMAs.
- :func:`tile_and_vectorize` makes ``linalg.matmul``, ``linalg.batch_matmul`` and 2-D
  convolutions on memrefs fast: f32/f64 matmuls become generated microkernels whose
  register blocks are loop-carried vectors (:func:`matmuls_to_microkernels`), batch
  matmuls and convolutions become such matmuls on views; the other matmuls go through
  transform-dialect scripts (:data:`MATMUL_SCHEDULE`, run by ``transform-interpreter``:
  tiled for the cache, then into 8x32 register tiles whose accumulator lives in a stack
  buffer, so LLVM can keep it in vector registers, a buffer of the caller might alias the
  inputs), vectorized into FMAs of the host's widest vectors; edges of odd sizes are
  masked. :data:`VECTOR_LOWERING` are the passes that lower what they leave.

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

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from .errors import MLIRError
from .pipeline import _run_passes

__all__ = ["BATCH_MATMUL_SCHEDULE", "MATMUL_SCHEDULE", "PARALLEL_MATMUL_SCHEDULE",
           "THREADS_VARIABLE", "VECTOR_LOWERING", "batch_matmuls_to_matmuls", "clamp_upper_bounds",
           "convolutions_to_matmuls", "fork_safe_task_scheduling", "has_tileable_ops",
           "hoist_allocas_out_of_loops", "matmuls_to_microkernels",
           "optimize", "parallel_hooks", "run_schedule", "serialize_nested_parallel_loops",
           "split_for_threads", "set_fastmath", "thread_count",
           "tile_and_vectorize", "with_parallel_loops", "with_vector_lowering"]

#: Register tile of a matmul: 8 rows by 32 columns of f32 is 16 AVX-512 (or 32 AVX2)
#: accumulators, one k step at a time (an outer product of a column of A and a row of B).
_REGISTER_TILE = (8, 32)
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


def _schedule(op_name: str, body: str) -> str:
    """A transform script running ``body`` on each ``op_name`` (bound to ``%op``),
    then :data:`_VECTOR_PATTERNS`."""
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
        r0=_REGISTER_TILE[0], r1=_REGISTER_TILE[1])


#: The transform script, appended to the module and run by ``transform-interpreter``.
MATMUL_SCHEDULE = _schedule("linalg.matmul", """
      %t1, %l1:3 = transform.structured.tile_using_for %op tile_sizes [{c0}, {c1}, {c2}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op,
                                  !transform.any_op)
      %t2, %l2:2 = transform.structured.tile_using_for %t1 tile_sizes [{r0}, {r1}, 0]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
      %p = transform.structured.promote %t2 {{operands_to_promote = [2], use_alloca,
        use_full_tile_buffers = [false, false, true]}} : (!transform.any_op) -> !transform.any_op
      %t3, %l3 = transform.structured.tile_using_for %p tile_sizes [0, 0, 1]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
      transform.structured.vectorize %t3 vector_sizes [{r0}, {r1}, 1] : !transform.any_op""")

#: :data:`MATMUL_SCHEDULE` for ``parallel=True``: the cache tiles of the two parallel
#: dimensions become the iterations of an ``scf.forall`` (run by several threads, see
#: :func:`with_parallel_loops`); the depth stays a sequential loop inside each.
PARALLEL_MATMUL_SCHEDULE = MATMUL_SCHEDULE.replace(
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

#: :data:`MATMUL_SCHEDULE` for ``linalg.batch_matmul``: one matrix of the batch at a
#: time, each as a matmul; vectorized straight into a contraction (the generic path
#: would scalarize it: the unit batch dimension hides the outer products).
BATCH_MATMUL_SCHEDULE = _schedule("linalg.batch_matmul", """
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
        {{create_named_contraction}} : !transform.any_op""")

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


#: Named convolutions rewritten into matmuls (:func:`convolutions_to_matmuls`).
_CONVOLUTIONS = ("linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nchw_fchw")


def _on_memrefs(op: Any) -> bool:
    from mlir import ir

    return all(isinstance(v.type, ir.MemRefType) for v in op.operands)


def _tileable(module: Any) -> set[str]:
    """The names of the ops on memrefs that the schedules handle, found in ``module``."""
    from mlir import ir

    handled = {"linalg.matmul", "linalg.batch_matmul", *_CONVOLUTIONS}
    found: set[str] = set()

    def visit(op: Any) -> Any:
        if op.name in handled and _on_memrefs(op):
            found.add(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def has_tileable_ops(module: Any) -> bool:
    """Whether ``module`` has a ``linalg.matmul``, ``linalg.batch_matmul`` or a 2-D
    convolution on memrefs (what the schedules handle; tensor ops are bufferized first by
    the default pipeline's own passes)."""
    return bool(_tileable(module))


def tile_and_vectorize(module: Any, filename: str = "<source>", parallel: bool = False) -> bool:
    """Tile and vectorize the ops :func:`has_tileable_ops` finds in ``module``, in place.

    Batch matmuls and 2-D convolutions on f32/f64 become matmuls on views
    (:func:`batch_matmuls_to_matmuls`, :func:`convolutions_to_matmuls`); matmuls on f32/f64
    with unit-stride rows become microkernels (:func:`matmuls_to_microkernels`); the
    others get :data:`BATCH_MATMUL_SCHEDULE` and :data:`MATMUL_SCHEDULE`
    (:data:`PARALLEL_MATMUL_SCHEDULE` if ``parallel``). A step that fails leaves the
    module as it was (its ops get the plain lowering). Return whether any step applied."""
    found = _tileable(module)
    matmul = PARALLEL_MATMUL_SCHEDULE if parallel else MATMUL_SCHEDULE

    def scheduled(schedule: str) -> bool:
        run_schedule(module, schedule, filename)
        return True

    steps: list[Callable[[], bool]] = []  # each says whether it changed the module
    if "linalg.batch_matmul" in found:
        steps.append(lambda: batch_matmuls_to_matmuls(module) > 0)
    if found & set(_CONVOLUTIONS):
        steps.append(lambda: convolutions_to_matmuls(module) > 0)
    if found:
        steps.append(lambda: matmuls_to_microkernels(module, parallel) > 0)
    if "linalg.batch_matmul" in found:  # those left: other types or indexing maps
        steps.append(lambda: "linalg.batch_matmul" in _tileable(module)
                     and scheduled(BATCH_MATMUL_SCHEDULE))
    if found:
        # The matmuls left (other types, layouts or indexing maps) get the schedule.
        steps.append(lambda: "linalg.matmul" in _tileable(module) and scheduled(matmul))
    return sum(_or_restore(module, step) for step in steps) > 0


def _or_restore(module: Any, step: Callable[[], bool]) -> bool:
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
    from mlir import ir

    allocas: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "memref.alloca" and not list(op.operands):
            allocas.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    moved = 0
    for alloca in allocas:
        outermost, parent = None, alloca.parent
        while parent is not None and parent.name in ("scf.for", "scf.if"):
            outermost, parent = parent, parent.parent
        if outermost is not None:
            alloca.move_before(outermost)
            moved += 1
    return moved


# -- matmul microkernels ------------------------------------------------------------------

#: Rows of C and depth of A/B per block of the microkernel; its columns are
#: :data:`_LANES` wide: 8 rows of 32 f32 are 16 AVX-512 accumulators.
_MICRO_ROWS, _MICRO_DEPTH = 8, 256
#: Columns per block: two AVX-512 vectors of the element type.
_LANES = {"f32": 32, "f64": 16}
_DEFAULT_MAPS = {
    "linalg.matmul": "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> "
                     "(d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>]",
    "linalg.batch_matmul": "[affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, "
                           "d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> "
                           "(d0, d1, d2)>]"}


def _default_maps(op: Any) -> bool:
    """Whether ``op`` (a matmul or batch matmul) has the indexing maps of its name
    (not transposed or broadcast operands)."""
    return ("indexing_maps" not in op.attributes
            or str(op.attributes["indexing_maps"]) == _DEFAULT_MAPS[op.name])


def _microkernel(name: str, element: str, types: tuple[str, str, str],
                 parallel: bool) -> str:
    """An MLIR function computing ``C += A @ B``: for each panel of :data:`_LANES`
    columns and each block of :data:`_MICRO_DEPTH` of the depth, blocks of
    :data:`_MICRO_ROWS` rows of C stay in vector registers (loop-carried values, so
    they stay there whatever aliases) while rows of B stream through as vectors and A's
    elements are broadcast into FMAs; the last partial panel is masked, the last rows
    are done one at a time. ``parallel`` makes the panels an ``scf.parallel``."""
    ta, tb, tc = types
    lanes, rows = _LANES[element], _MICRO_ROWS
    vt, mt = f"vector<{lanes}x{element}>", f"vector<{lanes}xi1>"
    out = [f"func.func private @{name}(%A: {ta}, %B: {tb}, %C: {tc}) {{"]
    out += [f"  %c{r} = arith.constant {r} : index" for r in range(rows)]
    out += [f"  %rows = arith.constant {rows} : index",
            f"  %lanes = arith.constant {lanes} : index",
            f"  %depth = arith.constant {_MICRO_DEPTH} : index",
            f"  %zero = arith.constant dense<0.0> : {vt}",
            f"  %m = memref.dim %A, %c0 : {ta}",
            f"  %k = memref.dim %A, %c1 : {ta}",
            f"  %n = memref.dim %B, %c1 : {tb}",
            "  %mq = arith.divui %m, %rows : index",
            "  %mf = arith.muli %mq, %rows : index",
            "  %nq = arith.divui %n, %lanes : index",
            "  %nf = arith.muli %nq, %lanes : index",
            "  %nr = arith.subi %n, %nf : index",
            f"  %mask = vector.create_mask %nr : {mt}",
            "  %partial = arith.cmpi ult, %nf, %n : index"]

    def block(first: str, count: int, j: str, masked: bool, pad: str) -> None:
        if count > 1:
            out.extend(f"{pad}%i{r} = arith.addi {first}, %c{r} : index" for r in range(1, count))
        index = [first] + [f"%i{r}" for r in range(1, count)]

        def load(memref: str, row: str, ty: str) -> str:
            if masked:
                return (f"vector.maskedload {memref}[{row}, {j}], %mask, %zero : {ty}, {mt}, "
                        f"{vt} into {vt}")
            return f"vector.load {memref}[{row}, {j}] : {ty}, {vt}"

        out.extend(f"{pad}%acc{r} = {load('%C', index[r], tc)}" for r in range(count))
        carried = ", ".join(f"%x{r} = %acc{r}" for r in range(count))
        vts = ", ".join([vt] * count)
        out.append(f"{pad}%res:{count} = scf.for %p = %k0 to %k1 step %c1 "
                   f"iter_args({carried}) -> ({vts}) {{")
        out.append(f"{pad}  %b = {load('%B', '%p', tb)}")
        for r in range(count):
            out.extend([f"{pad}  %a{r} = memref.load %A[{index[r]}, %p] : {ta}",
                        f"{pad}  %s{r} = vector.broadcast %a{r} : {element} to {vt}",
                        f"{pad}  %y{r} = vector.fma %s{r}, %b, %x{r} : {vt}"])
        out.append(f"{pad}  scf.yield {', '.join(f'%y{r}' for r in range(count))} : {vts}")
        out.append(f"{pad}}}")
        for r in range(count):
            out.append(f"{pad}vector.maskedstore %C[{index[r]}, {j}], %mask, %res#{r} : {tc}, "
                       f"{mt}, {vt}" if masked else
                       f"{pad}vector.store %res#{r}, %C[{index[r]}, {j}] : {tc}, {vt}")

    def panel(j: str, masked: bool, pad: str) -> None:
        out.append(f"{pad}scf.for %k0 = %c0 to %k step %depth {{")
        out.append(f"{pad}  %kend = arith.addi %k0, %depth : index")
        out.append(f"{pad}  %k1 = arith.minui %kend, %k : index")
        out.append(f"{pad}  scf.for %i = %c0 to %mf step %rows {{")
        block("%i", rows, j, masked, pad + "    ")
        out.append(f"{pad}  }}")
        out.append(f"{pad}  scf.for %i = %mf to %m step %c1 {{")
        block("%i", 1, j, masked, pad + "    ")
        out.append(f"{pad}  }}")
        out.append(f"{pad}}}")

    out.append("  scf.parallel (%j) = (%c0) to (%nf) step (%lanes) {" if parallel else
               "  scf.for %j = %c0 to %nf step %lanes {")
    panel("%j", False, "    ")
    if parallel:
        out.append("    scf.reduce")
    out.append("  }")
    out.append("  scf.if %partial {")
    panel("%nf", True, "    ")
    out.append("  }")
    out += ["  return", "}"]
    return "\n".join(out)


def matmuls_to_microkernels(module: Any, parallel: bool = False) -> int:
    """Replace each ``linalg.matmul`` on memrefs of f32 or f64 (one type, the default
    indexing maps) whose B and C have a unit innermost stride known statically by a call
    to a :func:`_microkernel`; return how many were replaced."""
    from mlir import ir

    chosen: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "linalg.matmul" and _on_memrefs(op) and _microkernel_fits(op):
            chosen.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    names = _symbols(module)
    with module.context:
        for op in chosen:
            element = str(ir.MemRefType(op.operands[0].type).element_type)
            unit = f"memref<?x?x{element}, strided<[?, 1], offset: ?>>"
            types = (f"memref<?x?x{element}, strided<[?, ?], offset: ?>>", unit, unit)
            name = _fresh("__pymlirjit_matmul", names)
            _replace_by_call(module, op, name, _microkernel(name, element, types, parallel),
                             types)
    return len(chosen)


def _microkernel_fits(op: Any) -> bool:
    from mlir import ir

    if not _plain_float_memrefs(op) or not _default_maps(op):
        return False
    types = [ir.MemRefType(v.type) for v in op.operands]
    return (str(types[0].element_type) in _LANES
            and all(t.get_strides_and_offset()[0][-1] == 1 for t in types[1:]))


def _symbols(module: Any) -> set[str]:
    from mlir import ir

    return {ir.StringAttr(op.attributes["sym_name"]).value
            for op in module.body.operations if "sym_name" in op.attributes}


def _replace_by_call(module: Any, op: Any, name: str, text: str,
                     types: Sequence[str]) -> None:
    """Append the function ``text`` (named ``name``, taking ``types``) to ``module`` and
    replace ``op`` by a call to it with ``op``'s operands cast to ``types``."""
    from mlir import ir
    from mlir.dialects import func, memref

    owner = ir.Module.parse(text)  # owns the function until it moves
    function = owner.body.operations[0]
    function.operation.detach_from_parent()
    module.body.append(function)
    with ir.InsertionPoint(op), op.location:
        args = []
        for ty, value in zip(types, op.operands, strict=True):
            wanted = ir.MemRefType.parse(ty)
            args.append(value if value.type == wanted else memref.CastOp(wanted, value).result)
        func.CallOp([], ir.FlatSymbolRefAttr.get(name), args)
    op.erase()


_BATCH_AS_MATMULS = """
func.func private @{name}(%A: {TA}, %B: {TB}, %C: {TC}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %q = memref.dim %A, %c0 : {TA}
  %m = memref.dim %A, %c1 : {TA}
  %k = memref.dim %A, %c2 : {TA}
  %n = memref.dim %B, %c2 : {TB}
  scf.for %b = %c0 to %q step %c1 {{
    %a = memref.subview %A[%b, 0, 0] [1, %m, %k] [1, 1, 1] : {TA} to {VA}
    %w = memref.subview %B[%b, 0, 0] [1, %k, %n] [1, 1, 1] : {TB} to {VB}
    %o = memref.subview %C[%b, 0, 0] [1, %m, %n] [1, 1, 1] : {TC} to {VC}
    linalg.matmul ins(%a, %w : {VA}, {VB}) outs(%o : {VC})
  }}
  return
}}
"""


def batch_matmuls_to_matmuls(module: Any) -> int:
    """Replace each ``linalg.batch_matmul`` on memrefs of one float type (default
    indexing maps) by a call to a function running a ``linalg.matmul`` per matrix of
    the batch, on views (which :func:`matmuls_to_microkernels` then takes); return how
    many were replaced."""
    from mlir import ir

    chosen: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "linalg.batch_matmul" and _on_memrefs(op) and \
                _plain_float_memrefs(op) and _default_maps(op):
            chosen.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    names = _symbols(module)
    with module.context:
        for op in chosen:
            types: dict[str, str] = {}
            for role, value in zip("ABC", op.operands, strict=True):
                given = ir.MemRefType(value.type)
                inner = 1 if given.get_strides_and_offset()[0][-1] == 1 else "?"
                element = given.element_type
                types[f"T{role}"] = (f"memref<?x?x?x{element}, strided<[?, ?, {inner}], "
                                     f"offset: ?>>")
                types[f"V{role}"] = f"memref<?x?x{element}, strided<[?, {inner}], offset: ?>>"
            name = _fresh("__pymlirjit_batch_matmul", names)
            _replace_by_call(module, op, name, _BATCH_AS_MATMULS.format(name=name, **types),
                             [types[f"T{role}"] for role in "ABC"])
    return len(chosen)


# A 2-D convolution is a sum of matmuls: for each image, output row and filter tap
# (kh, kw), the output row's (width x channels) block gains the product of the input
# row's block at that tap and the filter's (channels x channels) block at that tap.
# Each such matmul runs on strided views (no copy) and gets the matmul schedule.
_CONV_AS_MATMULS = """
func.func private @{name}(%I: {TI}, %K: {TK}, %O: {TO}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %sh = arith.constant {sh} : index
  %dh = arith.constant {dh} : index
  %dw = arith.constant {dw} : index
  %n = memref.dim %O, %c0 : {TO}
  %oh = memref.dim %O, {oh} : {TO}
  %ow = memref.dim %O, {ow} : {TO}
  %f = memref.dim %O, {of} : {TO}
  %kh = memref.dim %K, {kh} : {TK}
  %kw = memref.dim %K, {kw} : {TK}
  %c = memref.dim %K, {kc} : {TK}
  scf.for %b = %c0 to %n step %c1 {{
    scf.for %y = %c0 to %oh step %c1 {{
      %o = memref.subview %O{out} : {TO} to {VO}
      scf.for %u = %c0 to %kh step %c1 {{
        %yh = arith.muli %y, %sh : index
        %uh = arith.muli %u, %dh : index
        %ys = arith.addi %yh, %uh : index
        scf.for %v = %c0 to %kw step %c1 {{
          %xs = arith.muli %v, %dw : index
          %i = memref.subview %I{inp} : {TI} to {VI}
          %k = memref.subview %K{ker} : {TK} to {VK}
          linalg.matmul ins({lhs}, {rhs} : {VL}, {VR}) outs(%o : {VO})
        }}
      }}
    }}
  }}
  return
}}
"""

#: Per layout: the dimension indices, the views of each tap's matmul, and how far apart
#: the innermost elements of each view are in units of its operand's innermost stride
#: (None: a stride the layout leaves unknown).
_CONV_LAYOUTS: dict[str, dict[str, Any]] = {
    # O[n, oh, :, :] (ow x f) += I[n, ys, xs::sw, :] (ow x c) @ K[u, v, :, :] (c x f)
    "linalg.conv_2d_nhwc_hwcf": dict(
        oh="%c1", ow="%c2", of="%c3", kh="%c0", kw="%c1", kc="%c2",
        out="[%b, %y, 0, 0] [1, 1, %ow, %f] [1, 1, 1, 1]",
        inp="[%b, %ys, %xs, 0] [1, 1, %ow, %c] [1, 1, {sw}, 1]",
        ker="[%u, %v, 0, 0] [1, 1, %c, %f] [1, 1, 1, 1]", lhs="%i", rhs="%k",
        steps=dict(I=1, K=1, O=1)),
    # O[n, :, oh, :] (f x ow) += K[:, :, u, v] (f x c) @ I[n, :, ys, xs::sw] (c x ow)
    "linalg.conv_2d_nchw_fchw": dict(
        oh="%c2", ow="%c3", of="%c1", kh="%c2", kw="%c3", kc="%c1",
        out="[%b, 0, %y, 0] [1, %f, 1, %ow] [1, 1, 1, 1]",
        inp="[%b, 0, %ys, %xs] [1, %c, 1, %ow] [1, 1, 1, {sw}]",
        ker="[0, 0, %u, %v] [%f, %c, 1, 1] [1, 1, 1, 1]", lhs="%k", rhs="%i",
        steps=dict(I="sw", K=None, O=1)),
}


def convolutions_to_matmuls(module: Any) -> int:
    """Replace each 2-D convolution of :data:`_CONVOLUTIONS` on memrefs of one float
    type by a call to a function computing it as ``linalg.matmul`` s on views (see
    ``_CONV_AS_MATMULS``); return how many were replaced."""
    from mlir import ir

    convs: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name in _CONVOLUTIONS and _on_memrefs(op) and _plain_float_memrefs(op):
            convs.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    names = _symbols(module)
    with module.context:
        for op in convs:
            name = _fresh("__pymlirjit_conv", names)
            sh, sw = _pair(op, "strides")
            dh, dw = _pair(op, "dilations")
            layout = dict(_CONV_LAYOUTS[op.name])
            layout["inp"] = layout["inp"].format(sw=sw)
            types: dict[str, str] = {}
            for role, value in zip("IKO", op.operands, strict=True):
                given = ir.MemRefType(value.type)
                # A unit innermost stride known statically keeps the vector loads whole.
                unit = given.get_strides_and_offset()[0][-1] == 1
                step = layout["steps"][role]
                inner = "?" if not unit or step is None else sw if step == "sw" else step
                element = given.element_type
                types[f"T{role}"] = (f"memref<?x?x?x?x{element}, strided<[?, ?, ?, "
                                     f"{1 if unit else '?'}], offset: ?>>")
                types[f"V{role}"] = f"memref<?x?x{element}, strided<[?, {inner}], offset: ?>>"
            types["VL"], types["VR"] = (types["VI"], types["VK"]) if layout["lhs"] == "%i" \
                else (types["VK"], types["VI"])
            del layout["steps"]
            text = _CONV_AS_MATMULS.format(name=name, sh=sh, dh=dh, dw=dw, **layout, **types)
            _replace_by_call(module, op, name, text, [types[f"T{role}"] for role in "IKO"])
    return len(convs)


def _plain_float_memrefs(op: Any) -> bool:
    """Whether ``op``'s operands are memrefs of one float type in the default memory space."""
    from mlir import ir

    types = [ir.MemRefType(v.type) for v in op.operands]
    return (len(types) == 3 and all(t.memory_space is None for t in types)
            and len({str(t.element_type) for t in types}) == 1
            and str(types[0].element_type) in ("f16", "bf16", "f32", "f64"))


def _pair(op: Any, name: str) -> tuple[int, int]:
    from mlir import ir

    if name not in op.attributes:
        return 1, 1
    first, second = ir.DenseIntElementsAttr(op.attributes[name])
    return int(first), int(second)


def _fresh(prefix: str, taken: set[str]) -> str:
    index = 0
    while f"{prefix}_{index}" in taken:
        index += 1
    taken.add(f"{prefix}_{index}")
    return f"{prefix}_{index}"


def with_vector_lowering(pipeline: str) -> str:
    """``pipeline`` (normalized) with :data:`VECTOR_LOWERING` inserted, unless it
    lowers the vector dialect already."""
    if "convert-vector-to-llvm" in pipeline:
        return pipeline
    for before, passes in VECTOR_LOWERING.items():
        pipeline = pipeline.replace("," + before, f",{passes},{before}", 1)
    return pipeline


def optimize(module: Any, *, fastmath: bool, tile: bool, filename: str = "<source>",
             parallel: bool = False) -> bool:
    """Apply the optimizations asked for to ``module`` (parsed, not lowered); return
    whether the lowering pipeline needs :func:`with_vector_lowering`."""
    if fastmath:
        set_fastmath(module)
    return tile and tile_and_vectorize(module, filename, parallel)


# -- parallel=True ------------------------------------------------------------------------

#: The environment variable capping the threads of a parallel loop.
THREADS_VARIABLE = "PYMLIRJIT_NUM_THREADS"


def thread_count() -> int:
    """How many threads a parallel loop is split for: ``PYMLIRJIT_NUM_THREADS`` if set
    (a positive int), else the CPUs this process may run on.

    Raises ``ValueError`` naming the variable if its value is not a positive int.
    """
    value = os.environ.get(THREADS_VARIABLE)
    if value is None or not value.strip():
        try:
            return max(len(os.sched_getaffinity(0)), 1)
        except (AttributeError, OSError):  # not Linux
            return os.cpu_count() or 1
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= _MAX_THREADS:
        raise ValueError(f"{THREADS_VARIABLE} must be a whole number of threads from 1 to "
                         f"{_MAX_THREADS}, got {value[:40]!r}")
    return int(text)


#: A bound on PYMLIRJIT_NUM_THREADS (the pass takes an int32; no machine has more).
_MAX_THREADS = 4096

#: Where :func:`with_parallel_loops` puts its passes in the default pipeline, and what
#: each becomes.
_PARALLEL_PASSES = {
    # Parallel dimensions of linalg ops become scf.parallel (reductions stay scf.for).
    "convert-linalg-to-loops": "convert-linalg-to-parallel-loops",
    # scf.forall (the matmul schedule's tiles, or the user's) and scf.parallel run as
    # tasks of MLIR's async runtime; the calling thread runs the first block itself.
    "async-to-async-runtime": "func.func(scf-forall-to-parallel),"
                              "async-parallel-for{{async-dispatch=true num-workers={threads} "
                              "min-task-size=1}},async-to-async-runtime",
}


def with_parallel_loops(pipeline: str, threads: int) -> str:
    """``pipeline`` (the normalized default one) with the passes that run
    ``scf.parallel``, ``scf.forall`` and linalg's parallel dimensions on ``threads``
    threads of MLIR's async runtime.

    >>> from pymlirjit.pipeline import normalize_pipeline
    >>> "async-parallel-for" in with_parallel_loops(normalize_pipeline(None), 2)
    True
    """
    for anchor, passes in _PARALLEL_PASSES.items():
        pattern = re.compile(rf"(?<=[(,]){re.escape(anchor)}(?=[,)])")
        pipeline, found = pattern.subn(passes.format(threads=threads), pipeline, count=1)
        if not found:
            raise ValueError(f"cannot make loops parallel: no {anchor!r} in the pipeline")
    return pipeline


def split_for_threads(module: Any, threads: int) -> int:
    """Split each outermost ``scf.parallel`` (without reductions) into ``threads``
    chunks of its first dimension, each the original loop over its chunk; return how
    many loops. ``async-parallel-for`` then makes one task per chunk, so that no more
    than ``threads`` threads run one loop; the loops inside become sequential
    (:func:`serialize_nested_parallel_loops`)."""
    from mlir import ir

    outermost: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "scf.parallel" and not op.results and not _inside_parallel(op):
            outermost.append(op.opview)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    with module.context:
        for loop in outermost:
            _split(loop, threads)
    return len(outermost)


def _split(loop: Any, threads: int) -> None:
    from mlir import ir
    from mlir.dialects import arith, scf

    index = ir.IndexType.get()
    with ir.InsertionPoint(loop), loop.location:
        zero, one, count = (arith.ConstantOp(index, v).result for v in (0, 1, threads))
        lower, upper, step = loop.lowerBound[0], loop.upperBound[0], loop.step[0]
        trips = arith.CeilDivSIOp(arith.SubIOp(upper, lower).result, step).result
        per_chunk = arith.CeilDivSIOp(trips, count).result
        chunks = scf.ParallelOp([], [zero], [count], [one], [])
        block = chunks.regions[0].blocks.append(index)

    def bound(first_trip: Any) -> Any:  # the first-dimension value starting a chunk
        trip = arith.MinSIOp(arith.MulIOp(first_trip, per_chunk).result, trips)
        start = arith.AddIOp(lower, arith.MulIOp(trip.result, step).result)
        return arith.MinSIOp(start.result, upper).result

    with ir.InsertionPoint(block), loop.location:
        chunk = block.arguments[0]
        start, stop = bound(chunk), bound(arith.AddIOp(chunk, one).result)
        end = scf.ReduceOp([], 0)
    loop.operation.move_before(end)
    loop.operation.operands[0] = start
    loop.operation.operands[len(loop.lowerBound)] = stop


def serialize_nested_parallel_loops(module: Any) -> int:
    """Turn every ``scf.parallel`` nested in another one into nested ``scf.for`` loops;
    return how many. Run before ``async-parallel-for``: a task of the async runtime
    that waits for tasks of its own (an inner parallel loop) holds a worker while it
    waits, and with every worker waiting nothing runs (a deadlock); the outer loop
    alone already gives every thread work."""
    from mlir import ir
    from mlir.dialects import scf

    nested: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "scf.parallel" and not op.results and _inside_parallel(op):
            nested.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    with module.context:
        for op in reversed(nested):  # innermost first: each body moves once
            _parallel_to_for(op.opview, scf)
    return len(nested)


def clamp_upper_bounds(module: Any) -> None:
    """Give every ``scf.parallel`` an upper bound at least its lower bound: a loop
    from 1 to 0 runs no iteration, but ``async-parallel-for`` computes a negative
    trip count from it and runs blocks outside the loop's range."""
    from mlir import ir
    from mlir.dialects import arith

    loops: list[Any] = []

    def visit(op: Any) -> Any:
        if op.name == "scf.parallel":
            loops.append(op.opview)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    with module.context:
        for loop in loops:
            rank = len(loop.lowerBound)
            with ir.InsertionPoint(loop), loop.location:
                for d in range(rank):
                    clamped = arith.MaxSIOp(loop.upperBound[d], loop.lowerBound[d]).result
                    loop.operation.operands[rank + d] = clamped


def _inside_parallel(op: Any) -> bool:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "scf.parallel":
            return True
        parent = parent.parent
    return False


def _parallel_to_for(parallel: Any, scf: Any) -> None:
    from mlir import ir

    body = parallel.regions[0].blocks[0]
    point = ir.InsertionPoint(parallel)
    inductions = []
    with parallel.location:
        for lower, upper, step in zip(parallel.lowerBound, parallel.upperBound,
                                      parallel.step, strict=True):
            with point:
                loop = scf.ForOp(lower, upper, step)
            with ir.InsertionPoint(loop.body):
                end = scf.YieldOp([])
            point = ir.InsertionPoint(end)
            inductions.append(loop.induction_variable)
    for arg, induction in zip(body.arguments, inductions, strict=True):
        arg.replace_all_uses_with(induction)
    for inner in list(body.operations)[:-1]:  # not the scf.reduce terminator
        inner.move_before(end)
    parallel.operation.erase()


_EXECUTE = "mlirAsyncRuntimeExecute"
_FORK_SAFE_EXECUTE = "__pymlirjit_par_execute"

# A module's tasks go to MLIR's async runtime through this function. The runtime's
# thread pool does not survive a fork: in the child its workers are gone, yet counted,
# and a task given to it never runs (the call waiting for it hangs). The process that
# loads the module, if its pool is sound, claims the pool for it (@__pymlirjit_par_claim,
# see pymlirjit.asyncruntime.claim_task_pool); in any other process (a forked child, or
# a module loaded in one) each task runs on a thread of its own instead.
_FORK_SAFE_SCHEDULING = """
llvm.func @getpid() -> i32
llvm.func @malloc(i64) -> !llvm.ptr
llvm.func @free(!llvm.ptr)
llvm.func @pthread_create(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
llvm.func @pthread_detach(i64) -> i32
llvm.func @mlirAsyncRuntimeExecute(!llvm.ptr, !llvm.ptr)
llvm.mlir.global internal @__pymlirjit_par_pid(0 : i32) {addr_space = 0 : i32} : i32
llvm.func internal @__pymlirjit_par_run(%task: !llvm.ptr) -> !llvm.ptr {
  %handle = llvm.load %task : !llvm.ptr -> !llvm.ptr
  %slot = llvm.getelementptr %task[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  %resume = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  llvm.call @free(%task) : (!llvm.ptr) -> ()
  llvm.call %resume(%handle) : !llvm.ptr, (!llvm.ptr) -> ()
  %null = llvm.mlir.zero : !llvm.ptr
  llvm.return %null : !llvm.ptr
}
llvm.func @__pymlirjit_par_claim() {
  %pid = llvm.call @getpid() : () -> i32
  %owner_slot = llvm.mlir.addressof @__pymlirjit_par_pid : !llvm.ptr
  llvm.store %pid, %owner_slot atomic seq_cst {alignment = 4 : i64} : i32, !llvm.ptr
  llvm.return
}
llvm.func internal @__pymlirjit_par_execute(%handle: !llvm.ptr, %resume: !llvm.ptr) {
  %pid = llvm.call @getpid() : () -> i32
  %owner_slot = llvm.mlir.addressof @__pymlirjit_par_pid : !llvm.ptr
  %zero = llvm.mlir.constant(0 : i32) : i32
  %owner = llvm.load %owner_slot atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
  %in_owner = llvm.icmp "eq" %owner, %pid : i32
  llvm.cond_br %in_owner, ^pool, ^own
^own:
  %size = llvm.mlir.constant(16 : i64) : i64
  %task = llvm.call @malloc(%size) : (i64) -> !llvm.ptr
  llvm.store %handle, %task : !llvm.ptr, !llvm.ptr
  %slot = llvm.getelementptr %task[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
  llvm.store %resume, %slot : !llvm.ptr, !llvm.ptr
  %one = llvm.mlir.constant(1 : i64) : i64
  %id = llvm.alloca %one x i64 : (i64) -> !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  %start = llvm.mlir.addressof @__pymlirjit_par_run : !llvm.ptr
  %status = llvm.call @pthread_create(%id, %null, %start, %task)
    : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> i32
  %started = llvm.icmp "eq" %status, %zero : i32
  llvm.cond_br %started, ^detach, ^failed
^detach:
  %thread = llvm.load %id : !llvm.ptr -> i64
  %detached = llvm.call @pthread_detach(%thread) : (i64) -> i32
  llvm.return
^failed:
  llvm.call @free(%task) : (!llvm.ptr) -> ()
  llvm.br ^pool
^pool:
  llvm.call @mlirAsyncRuntimeExecute(%handle, %resume) : (!llvm.ptr, !llvm.ptr) -> ()
  llvm.return
}
"""


def fork_safe_task_scheduling(module: Any) -> bool:
    """Make the tasks a lowered module hands MLIR's async runtime run in a forked child
    too (see ``_FORK_SAFE_SCHEDULING``); return whether the module schedules any."""
    from mlir import ir

    calls: list[Any] = []
    declared: set[str] = set()

    def visit(op: Any) -> Any:
        if op.name == "llvm.call" and "callee" in op.attributes and \
                ir.FlatSymbolRefAttr(op.attributes["callee"]).value == _EXECUTE:
            calls.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not calls:
        return False
    for op in module.body.operations:
        if "sym_name" in op.attributes:
            declared.add(ir.StringAttr(op.attributes["sym_name"]).value)
    with module.context, ir.Location.unknown():
        target = ir.FlatSymbolRefAttr.get(_FORK_SAFE_EXECUTE)
        for op in calls:
            op.attributes["callee"] = target
        extra = ir.Module.parse(_FORK_SAFE_SCHEDULING)
        for op in list(extra.body.operations):
            if ir.StringAttr(op.attributes["sym_name"]).value in declared:
                continue  # declared by the module already (malloc, free, ...)
            op.operation.detach_from_parent()
            module.body.append(op)
    return True


def parallel_hooks(threads: int) -> dict[str, Callable[[Any], object]]:
    """What runs between the passes of the default pipeline for ``parallel=True`` on
    ``threads`` threads (see :func:`pymlirjit.pipeline.lower`): before
    ``async-parallel-for``, and once the async runtime's calls exist."""
    def make_tasks(module: Any) -> None:
        clamp_upper_bounds(module)
        split_for_threads(module, threads)
        serialize_nested_parallel_loops(module)

    return {"async-parallel-for": make_tasks,
            "reconcile-unrealized-casts": fork_safe_task_scheduling}
