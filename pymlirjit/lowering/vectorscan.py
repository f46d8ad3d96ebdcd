"""``vector.scan`` lowered before a pipeline converts the vector dialect to LLVM.

MLIR 22 has the patterns that lower a scan to strided slices and arith ops, but no
registered pass runs them: ``convert-vector-to-llvm`` and ``convert-to-llvm`` leave
``vector.scan`` as it is, and mlir-opt's ``-test-vector-scan-lowering`` is test-only. So no
pipeline MLIR 22 can spell lowers a scan. The transform dialect reaches the patterns
(``transform.apply_patterns.vector.lower_scan``): :func:`lower_vector_scans` applies them
just before a pipeline stage that converts vector ops to the LLVM dialect, in any pipeline
(the default one included), and only to a module that has a scan.
"""

from __future__ import annotations

import re
from typing import Any

from .transformscripts import apply_script
from .walk import operations

__all__ = ["lower_vector_scans"]

#: A stage that converts vector ops to the LLVM dialect, and would leave a scan there.
_CONVERTS_VECTORS = re.compile(
    r"(?<![\w-])(?:convert-vector-to-llvm|convert-to-llvm|sparsifier)(?![\w-])")

#: Lowers the scans of each function that has one. Matched in C++: a walk from Python
#: costs ~20 ms per 20k ops; this costs ~2 ms, and leaves a module without scans as it
#: was. Small modules are searched from Python first (:func:`_may_have_scans`).
_SCHEDULE = """
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %scans = transform.structured.match ops{["vector.scan"]} in %root
      : (!transform.any_op) -> !transform.any_op
    %functions = transform.get_parent_op %scans {isolated_from_above, deduplicate}
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %functions {
      transform.apply_patterns.vector.lower_scan
    } : !transform.any_op
    transform.yield
  }
}
"""


def lower_vector_scans(module: Any, stage: str, filename: str = "<source>") -> bool:
    """Lower every ``vector.scan`` of ``module`` in place if pipeline ``stage`` converts
    vector ops to the LLVM dialect; return whether the stage does.

    Raises :class:`MLIRError` with MLIR's diagnostics if the rewrite fails."""
    if not _CONVERTS_VECTORS.search(stage):
        return False
    # No scan without the vector dialect loaded; and running the transform interpreter
    # would load the dialects its extensions depend on (sparse_tensor among them) into
    # every compile's context.
    if not module.context.is_registered_operation("vector.scan"):
        return True
    if _may_have_scans(module):
        apply_script(module, _SCHEDULE, filename, "lowering vector.scan failed")
    return True


#: Modules of up to this many ops are searched for a scan from Python (~1.1 us an op)
#: before the schedule runs, whose first parse in a compile's context costs ~1.8 ms, a
#: tenth of a small module's compile. At this stage a matmul module at the default
#: options has ~340 ops, a small kernel tens.
_SEARCHED = 1000


def _may_have_scans(module: Any) -> bool:
    """Whether ``module`` holds a ``vector.scan``, or has more than :data:`_SEARCHED`
    ops (not searched: the schedule finds its scans faster)."""
    seen = 0

    def is_scan_or_past_limit(op: Any) -> bool:
        nonlocal seen
        seen += 1
        return seen > _SEARCHED or op.name == "vector.scan"

    return bool(operations(module, is_scan_or_past_limit, limit=1))
