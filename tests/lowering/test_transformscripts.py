"""Transform scripts left in a module: erased before the JIT sees them, in both places
upstream's files keep them, and nothing else goes with them."""

from __future__ import annotations

import numpy as np

from pymlirjit import Session
from pymlirjit.lowering.pipeline import lower, new_context, parse_module
from pymlirjit.lowering.transformscripts import erase_schedules

SCALE = """
func.func @scale(%m: memref<6xf32>) {
  %c2 = arith.constant 2.0 : f32
  linalg.generic {indexing_maps = [affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      outs(%m : memref<6xf32>) {
  ^bb0(%x: f32):
    %y = arith.mulf %x, %c2 : f32
    linalg.yield %y : f32
  }
  return
}
"""
SEQUENCE = """
transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
  %g = transform.structured.match ops{["linalg.generic"]} in %root
    : (!transform.any_op) -> !transform.any_op
  %t, %l = transform.structured.tile_using_for %g tile_sizes [4]
    : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
  transform.yield
}
"""
NESTED = SCALE + "module attributes {transform.with_named_sequence} {" + SEQUENCE + "}"
AT_ROOT = "module attributes {transform.with_named_sequence} {" + SCALE + SEQUENCE + "}"
#: Applies the schedule (tiles by 4 of 6: a partial tile), then lowers what it made.
APPLYING = ("builtin.module(transform-interpreter,convert-linalg-to-loops,convert-scf-to-cf,"
            "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,"
            "convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
            "reconcile-unrealized-casts)")


def _ops(module: object) -> list[str]:
    return [op.operation.name for op in module.body.operations]  # type: ignore[attr-defined]


def test_a_nested_module_of_named_sequences_goes() -> None:
    module = parse_module(NESTED, new_context())
    assert erase_schedules(module) == 1
    assert _ops(module) == ["func.func"]


def test_named_sequences_in_the_root_go_with_its_mark() -> None:
    module = parse_module(AT_ROOT, new_context())
    assert erase_schedules(module) == 1
    assert _ops(module) == ["func.func"]
    assert "transform.with_named_sequence" not in module.operation.attributes


def test_other_nested_modules_stay() -> None:
    text = SCALE + 'module @plain { func.func private @f() }\n' + (
        'module @mixed attributes {transform.with_named_sequence} {\n'
        'func.func private @g()\n' + SEQUENCE + '}')
    module = parse_module(text, new_context())
    assert erase_schedules(module) == 0
    assert _ops(module) == ["func.func", "builtin.module", "builtin.module"]


def test_a_pipeline_applying_the_schedule_leaves_no_transform_op() -> None:
    for text in (NESTED, AT_ROOT):
        text = str(lower(parse_module(text, new_context()), APPLYING))
        assert "transform." not in text
        assert "llvm.intr.smin" in text or "llvm.select" in text  # the partial tile's bound


def test_kernels_over_a_module_with_a_schedule_run(session: Session) -> None:
    # The default pipeline runs the code as written; a given one may apply the schedule.
    for pipeline in (None, APPLYING):
        for text in (NESTED, AT_ROOT):
            scale = session.compile(text, pipeline=pipeline)["scale"]
            data = np.arange(6, dtype=np.float32)
            scale(data)
            np.testing.assert_array_equal(data, 2 * np.arange(6, dtype=np.float32))
