"""Signatures from annotations, MLIR strings and func ops; comparisons."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Literal

import pytest

import pymlirjit
from pymlirjit import MemRef, SignatureError, f32, i32
from pymlirjit.boundary.signature import as_signature
from pymlirjit.typing import MemRef as TypedMemRef
from pymlirjit.typing import Tensor, UnrankedMemRef, f64, index


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


def test_argument_labels_count_from_one_and_never_show_positional_names() -> None:
    from pymlirjit.boundary.signature import argument_label

    assert argument_label(1, "k") == "argument 2 ('k')"
    assert argument_label(0, "arg0") == "argument 1"
    assert argument_label(1, "arg0") == "argument 2 ('arg0')"


@pytest.mark.parametrize(("annotation", "mlir", "fits"), [
    (int, "i8", True), (int, "i64", True), (int, "index", True), (int, "i1", False),
    (int, "f32", False), (float, "f16", True), (float, "bf16", True), (float, "f64", True),
    (float, "i32", False), (complex, "complex<f32>", True), (complex, "f64", False),
    (bool, "i1", True), (bool, "i8", False), ("np.ndarray", "memref<?xf32>", True),
    ("np.ndarray", "f32", True), (f32, "f32", True), (f32, "f64", False),
    (MemRef[f32, None], "memref<?xf32, strided<[?], offset: ?>>", True),
    (MemRef[f32, None], "memref<?xf64>", False),
    ("Annotated[np.ndarray, MemRef[f32, None]]", "memref<?xf32>", True),
    ("Annotated[np.ndarray, MemRef[f32, None]]", "memref<?xi32>", False),
    ("Annotated[float, f32]", "f32", True), ("Annotated[float, f32]", "f64", False),
])
def test_stub_annotations_admit_what_a_numba_user_means(annotation: object, mlir: str,
                                                        fits: bool) -> None:
    from typing import Annotated

    import numpy as np

    from pymlirjit.boundary.signature import check_annotation
    from pymlirjit.boundary.types import parse_type

    if isinstance(annotation, str):
        annotation = eval(annotation, {"np": np, "Annotated": Annotated, "MemRef": MemRef,
                                       "f32": f32})
    if fits:
        check_annotation(annotation, parse_type(mlir), "argument 1 ('x')", "@k")
    else:
        with pytest.raises(SignatureError, match=rf"argument 1 \('x'\): the stub says .*, MLIR "
                                                 rf"has {re.escape(mlir)}"):
            check_annotation(annotation, parse_type(mlir), "argument 1 ('x')", "@k")


def test_a_partial_leaves_the_parameters_it_does_not_bind() -> None:
    import functools

    def model(x: f32, rate: f32, k: i32) -> f32: ...

    assert as_signature(None, functools.partial(model, k=2)).mlir == "(f32, f32) -> f32"
    assert as_signature(None, functools.partial(model, 1.0)).mlir == "(f32, i32) -> f32"
    assert [p.name for p in as_signature(None, functools.partial(model, 1.0, k=3)).params] == [
        "rate"]
    with pytest.raises(SignatureError, match="parameter 'k' follows one the partial binds by "
                                             "keyword"):
        as_signature(None, functools.partial(model, rate=2.0))


def test_annotations_in_the_type_checkers_spelling() -> None:
    assert TypedMemRef is MemRef  # at run time, the same spellers

    def cb(a: TypedMemRef[f64, None, Literal[3]], b: Tensor[pymlirjit.f32, Literal[2]],
           c: UnrankedMemRef[i32], n: index) -> f64: ...

    assert as_signature(None, cb).mlir == (
        "(memref<?x3xf64>, tensor<2xf32>, memref<*xi32>, index) -> f64")


def test_a_signature_of_other_widths_is_told_what_to_write() -> None:
    # (Linking widens a callback annotated int; check_matches itself compares types.)
    def cb(n: int) -> float: ...

    with pytest.raises(SignatureError, match=r"argument 1 \('n'\): i64 versus index \(annotate "
                                             r"it as pymlirjit.index, or as int for any width "
                                             r"of its kind\)"):
        as_signature(None, cb).check_matches(as_signature("(index) -> f64"), "callback @cb",
                                             "annotations", "declaration")
    with pytest.raises(SignatureError, match=r"result #0: f64 versus f32 \(annotate it as "
                                             r"pymlirjit.f32"):
        as_signature(None, cb).check_matches(as_signature("(i64) -> f32"), "callback @cb",
                                             "annotations", "declaration")


def test_every_type_survives_the_cache_encoding() -> None:
    from pymlirjit.boundary.signature import decode_signature, encode_signature

    text = ("(!llvm.ptr, i1, index, f16, bf16, complex<f32>, memref<?x3xf64>, "
            "memref<*xi8>, tensor<2xi32>) -> (!llvm.ptr, f64)")
    signature = as_signature(text)
    assert decode_signature(encode_signature(signature)) == signature


def test_a_spec_given_with_a_function_must_be_one_it_can_take() -> None:
    def one(x: float) -> float:
        return x

    with pytest.raises(SignatureError, match=r"^one: its signature has 2 parameter\(s\), but "
                                             r"the function cannot take 2 positional"):
        as_signature("(f64, f64) -> f64", one)
    assert as_signature("(f64) -> f64", one).mlir == "(f64) -> f64"
    assert as_signature("(f64, f64) -> f64").mlir == "(f64, f64) -> f64"  # no function


def test_the_arity_shortcut_for_plain_functions_agrees_with_inspect() -> None:
    """``as_signature`` checks a given signature's parameter count against the function
    without ``inspect.signature`` for plain functions (a first unpickling does it once per
    callback); where the shortcut says yes, binding that many positional arguments works."""
    import inspect

    from pymlirjit.boundary.signature import _plain_function_takes

    def two(x, y): ...  # type: ignore[no-untyped-def]
    def defaulted(x, y=1): ...  # type: ignore[no-untyped-def]
    def star(*args): ...  # type: ignore[no-untyped-def]
    def keyword_only(x, *, k): ...  # type: ignore[no-untyped-def]
    def keyword_defaulted(x, *, k=2): ...  # type: ignore[no-untyped-def]
    def mixed(x, y, z=3, *rest): ...  # type: ignore[no-untyped-def]

    for function in (two, defaulted, star, keyword_only, keyword_defaulted, mixed, len, print):
        for count in range(5):
            try:
                inspect.signature(function).bind(*range(count))
                binds = True
            except (TypeError, ValueError):
                binds = False
            if _plain_function_takes(function, count):
                assert binds, (function, count)
            elif inspect.isfunction(function):
                assert not binds, (function, count)


_EMPTY_SIGNATURE_CHILD = """if True:
    from pymlirjit import SignatureError
    from pymlirjit.boundary.signature import as_signature
    try:
        as_signature("")
    except SignatureError as exc:
        print(exc)
"""


def test_an_empty_signature_string_is_a_signature_error_not_an_abort() -> None:
    # In a child: MLIR's type parser aborts the process on an empty string.
    done = subprocess.run([sys.executable, "-c", _EMPTY_SIGNATURE_CHILD], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "cannot parse MLIR function type '': the string is empty\n"


def test_read_only_parameters_survive_renaming_and_the_disk_cache_encoding() -> None:
    from pymlirjit.boundary.signature import decode_signature, encode_signature

    signature = as_signature("(memref<?xf64>, memref<?xf64>) -> ()").with_read_only({1})
    assert [p.read_only for p in signature.params] == [False, True]
    assert signature == as_signature("(memref<?xf64>, memref<?xf64>) -> ()")  # types only
    renamed = signature.with_names(["a", "b"])
    assert [p.read_only for p in renamed.params] == [False, True]
    decoded = decode_signature(encode_signature(renamed))
    assert [(p.name, p.read_only) for p in decoded.params] == [("a", False), ("b", True)]
