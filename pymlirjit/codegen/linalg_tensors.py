"""What the default options (``opt_level`` 2 or 3, the default pipeline) do to linalg on
tensors before the memref schedules run.

- :func:`fuse_elementwise`: chains of elementwise ops (``linalg.add`` into ``linalg.exp``
  into a ``linalg.generic``...) become one loop, as a numba user's hand-written loop is:
  no temporary tensor between them, one pass over memory. The named ops are made generic
  first (only the elementwise ones: a matmul stays named, for its microkernel), then
  MLIR's ``linalg-fuse-elementwise-ops`` fuses each producer into its only consumer.
  The arithmetic is unchanged, element by element, so results are bit-identical.
- :func:`bufferize_contractions`: a module with a matmul, batch matmul or convolution on
  tensors is bufferized now, as the default pipeline would a moment later, so that
  :func:`pymlirjit.codegen.linalg_schedules.tile_and_vectorize` (which works on memrefs) finds
  those ops; the pipeline's own bufferization then has nothing left to do.
"""

from __future__ import annotations

from typing import Any

from ..lowering.pipeline import DEFAULT_PIPELINE, _run_passes, _uses_sparse_tensors
from ..lowering.walk import operations
from .linalg_rewrites import CONVOLUTIONS
from .linalg_schedules import or_restore, run_schedule

__all__ = ["BUFFERIZATION", "CONTRACTIONS", "ELEMENTWISE_OPS", "bufferize_contractions",
           "fuse_elementwise", "prepare_tensors"]

#: linalg's named elementwise ops (every iterator parallel, each operand read at the
#: output's index): what :func:`fuse_elementwise` makes generic.
ELEMENTWISE_OPS = (
    "linalg.abs", "linalg.add", "linalg.ceil", "linalg.div", "linalg.div_unsigned",
    "linalg.elementwise", "linalg.erf", "linalg.exp", "linalg.floor", "linalg.log",
    "linalg.max", "linalg.min", "linalg.mul", "linalg.negf", "linalg.powf",
    "linalg.reciprocal", "linalg.round", "linalg.rsqrt", "linalg.select", "linalg.sqrt",
    "linalg.square", "linalg.sub", "linalg.tanh",
)

#: Ops on tensors that :func:`bufferize_contractions` bufferizes for.
CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", *CONVOLUTIONS)

#: The default pipeline up to and including its bufferization.
BUFFERIZATION = DEFAULT_PIPELINE[:1 + next(
    i for i, p in enumerate(DEFAULT_PIPELINE) if p.startswith("one-shot-bufferize"))]

_GENERALIZE = """
module attributes {transform.with_named_sequence} {
transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %ops = transform.structured.match ops{[@OPS@]} in %root
      : (!transform.any_op) -> !transform.any_op
    %generic = transform.structured.generalize %ops
      : (!transform.any_op) -> !transform.any_op
    transform.yield
}
}"""


def _on_tensors(op: Any) -> bool:
    from mlir import ir

    return any(isinstance(v.type, ir.RankedTensorType) for v in op.operands)


def _is_elementwise(op: Any) -> bool:
    """A named elementwise op, or a ``linalg.generic`` whose iterators are all parallel."""
    from mlir import ir

    if op.name in ELEMENTWISE_OPS:
        return True
    if op.name != "linalg.generic":
        return False
    iterators = ir.ArrayAttr(op.attributes["iterator_types"])
    return all("parallel" in str(kind) for kind in iterators)


def _count(module: Any, wanted: Any) -> int:
    return len(operations(module, lambda op: op.name.startswith("linalg.")
                          and _on_tensors(op) and bool(wanted(op))))


def fuse_elementwise(module: Any, filename: str = "<source>") -> bool:
    """Fuse the chains of elementwise linalg ops on tensors in ``module`` (see the module
    docstring); return whether there were two or more such ops to try it on. Raises
    :class:`pymlirjit.errors.MLIRError` if MLIR refuses (the caller restores the module)."""
    from mlir.passmanager import PassManager

    if _count(module, _is_elementwise) < 2:  # nothing to fuse: spend no compile time
        return False
    with module.context:
        names = ", ".join(f'"{name}"' for name in ELEMENTWISE_OPS)
        run_schedule(module, _GENERALIZE.replace("@OPS@", names), filename)
        _run_passes(PassManager.parse("builtin.module(func.func(linalg-fuse-elementwise-ops))"),
                    module, filename)
    return True


def bufferize_contractions(module: Any, filename: str = "<source>") -> bool:
    """Bufferize ``module`` (the default pipeline's own passes, :data:`BUFFERIZATION`) if
    it has a matmul, batch matmul or 2-D convolution on tensors; return whether it did."""
    from mlir.passmanager import PassManager

    if not _count(module, lambda op: op.name in CONTRACTIONS):
        return False
    with module.context:
        _run_passes(PassManager.parse(f"builtin.module({','.join(BUFFERIZATION)})"),
                    module, filename)
    return True


def prepare_tensors(module: Any, filename: str = "<source>") -> None:
    """Both steps, in order: :func:`fuse_elementwise` (left out if MLIR refuses it: the
    ops then run unfused), then :func:`bufferize_contractions`. A module with sparse
    tensors is left to the sparsifier, which fuses and bufferizes them itself."""
    if _uses_sparse_tensors(module):
        return
    or_restore(module, lambda: fuse_elementwise(module, filename))
    bufferize_contractions(module, filename)
