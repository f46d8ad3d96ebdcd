"""pymlirjit.lowering.packs: linalg.pack/unpack rewritten into ops bufferization takes."""

from __future__ import annotations

import numpy as np

import pymlirjit
from pymlirjit.lowering.packs import decompose_packs
from pymlirjit.lowering.pipeline import new_context, parse_module

PACK_UNPACK = """
func.func @roundtrip(%m: tensor<5x6xf32>, %height: index) -> tensor<5x6xf32> {
  %pad = arith.constant -1.0 : f32
  %e = tensor.empty() : tensor<3x2x2x4xf32>
  %p = linalg.pack %m padding_value(%pad : f32) inner_dims_pos = [0, 1] inner_tiles = [2, 4]
      into %e : tensor<5x6xf32> -> tensor<3x2x2x4xf32>
  %d = tensor.cast %p : tensor<3x2x2x4xf32> to tensor<?x2x?x4xf32>
  %e2 = tensor.empty() : tensor<5x6xf32>
  %u = linalg.unpack %d inner_dims_pos = [0, 1] inner_tiles = [%height, 4]
      into %e2 : tensor<?x2x?x4xf32> -> tensor<5x6xf32>
  return %u : tensor<5x6xf32>
}
"""


def test_every_pack_and_unpack_is_rewritten() -> None:
    module = parse_module(PACK_UNPACK, new_context())
    assert decompose_packs(module) == 2
    text = str(module)
    assert "linalg.pack" not in text and "linalg.unpack" not in text
    assert "pymlirjit.unit_tiles" not in text


def test_a_module_without_packs_is_left_alone() -> None:
    source = "func.func @f(%x: f32) -> f32 {\n  return %x : f32\n}\n"
    module = parse_module(source, new_context())
    before = str(module)
    assert decompose_packs(module) == 0
    assert str(module) == before


def test_the_default_pipeline_compiles_a_pack_and_unpack() -> None:
    """Without the rewrite, one-shot bufferization failed: "op was not bufferized"."""
    # Bufferization copies slices with memrefCopy, as in mlir-runner.
    compiled = pymlirjit.Session(shared_libs=["mlir_c_runner_utils"]).compile(PACK_UNPACK)
    matrix = np.arange(30, dtype=np.float32).reshape(5, 6)
    np.testing.assert_array_equal(compiled.roundtrip(matrix, 2), matrix)
