"""Types: every spelling normalizes, and MLIR / numpy / ctypes round trips hold."""

from __future__ import annotations

from typing import Annotated

import numpy as np
import pytest

from pymlirjit import MemRef, Tensor, UnrankedMemRef, f32, f64, i1, i64
from pymlirjit.types import SCALARS, MemRefType, parse_type, to_python_scalar, to_type


@pytest.mark.parametrize("scalar", SCALARS, ids=lambda t: t.mlir)
def test_scalar_round_trips(scalar: object) -> None:
    assert parse_type(scalar.mlir) is scalar  # type: ignore[attr-defined]
    dtype = scalar.dtype  # type: ignore[attr-defined]
    if scalar.mlir != "index":  # type: ignore[attr-defined]
        assert to_type(dtype) is scalar
    assert np.dtype(dtype).itemsize * 8 >= scalar.bits or scalar.mlir == "i1"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("spelling", "expected"), [
    (float, f64), (int, i64), (bool, i1), (np.float32, f32), (np.dtype("float64"), f64),
    ("f32", f32), (Annotated[np.ndarray, MemRef[f32, 2]], MemRef[f32, 2]),
    (Annotated[float, "a note"], f64),
])
def test_spellings(spelling: object, expected: object) -> None:
    assert to_type(spelling) == expected


def test_memref_spellings_and_layouts() -> None:
    assert MemRef[f32, None, 4].mlir == "memref<?x4xf32>"
    assert UnrankedMemRef[np.int8].mlir == "memref<*xi8>"
    assert Tensor[f64, 2].mlir == "tensor<2xf64>"
    strided = parse_type("memref<?x4xf32, strided<[?, 1], offset: ?>>")
    assert strided == MemRefType(f32, (None, 4), (None, 1), None)
    assert parse_type(strided.mlir) == strided


@pytest.mark.parametrize("bad", [list, "memref<?xvector<4xf32>>", np.dtype("U3")])
def test_unknown_types_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError):
        to_type(bad)


def test_bad_dims() -> None:
    with pytest.raises(TypeError, match="non-negative"):
        MemRef[f32, -1]


def test_scalar_checks() -> None:
    assert to_python_scalar(parse_type("i8"), 255, "x") == -1  # unsigned range wraps
    with pytest.raises(ValueError, match="out of range for i8"):
        to_python_scalar(parse_type("i8"), 256, "x")
    with pytest.raises(TypeError, match="expected an int"):
        to_python_scalar(i64, 1.0, "x")
    with pytest.raises(TypeError, match="expected a float"):
        to_python_scalar(f64, "1", "x")
    assert to_python_scalar(f64, np.float32(0.5), "x") == 0.5


def test_identity_layout_memref_strings() -> None:
    assert to_type("memref<?xf64>") == MemRef[f64, None]
    assert to_type(Annotated[np.ndarray, "memref<2x3xf32>"]) == MemRef[f32, 2, 3]
