"""Signatures from annotations, MLIR strings and func ops; comparisons."""

from __future__ import annotations

import pytest

from pymlirjit import MemRef, SignatureError, f32, i32
from pymlirjit.signature import as_signature


def test_from_annotations_and_from_string_agree() -> None:
    def scale(x: f32, k: i32) -> tuple[f32, i32]: ...

    from_annotations = as_signature(None, scale)
    assert from_annotations.mlir == "(f32, i32) -> (f32, i32)"
    assert [p.name for p in from_annotations.params] == ["x", "k"]
    assert as_signature("(f32, i32) -> (f32, i32)").param_types == from_annotations.param_types


def test_memref_annotation_fits_any_layout() -> None:
    def look(a: MemRef[f32, None]) -> None: ...

    annotated = as_signature(None, look)
    annotated.check_matches(as_signature("(memref<?xf32, strided<[?], offset: ?>>) -> ()"),
                            "cb", "annotations", "MLIR")
    with pytest.raises(SignatureError, match=r"argument 1 \('a'\)"):
        annotated.check_matches(as_signature("(memref<?xf64>) -> ()"), "cb", "a", "b")


@pytest.mark.parametrize("text", ["f32", "(f32 -> f32", "(vector<4xf32>) -> ()"])
def test_bad_strings(text: str) -> None:
    with pytest.raises(SignatureError):
        as_signature(text)


def test_result_count_difference_is_reported() -> None:
    with pytest.raises(SignatureError, match="1 results versus 0"):
        as_signature("(f32) -> f32").check_matches(as_signature("(f32) -> ()"), "x", "a", "b")
