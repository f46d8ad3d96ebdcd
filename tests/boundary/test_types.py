"""Types: every spelling normalizes, and MLIR / numpy / ctypes round trips hold."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Annotated

import numpy as np
import pytest

from pymlirjit import MemRef, Tensor, UnrankedMemRef, f32, f64, i1, i64
from pymlirjit.boundary.types import (
    SCALARS,
    MemRefType,
    ScalarType,
    parse_type,
    to_python_scalar,
    to_type,
)


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


@pytest.mark.parametrize("mlir", ["f32", "f64", "complex<f64>"])
def test_an_int_beyond_every_float_is_a_value_error_naming_it(mlir: str) -> None:
    # What a callback returns is converted without exact=True: float(10**400) overflows.
    with pytest.raises(ValueError, match=r"^callback 'cb': result #0: int 1000.* is out of "
                                         rf"range for {re.escape(mlir)}$"):
        to_python_scalar(parse_type(mlir), 10**400, "callback 'cb': result #0")


def test_identity_layout_memref_strings() -> None:
    assert to_type("memref<?xf64>") == MemRef[f64, None]
    assert to_type(Annotated[np.ndarray, "memref<2x3xf32>"]) == MemRef[f32, 2, 3]


# -- the 8-bit floats: a row in types.py each, crossing in memrefs and as scalars ------------

ml_dtypes = pytest.importorskip("ml_dtypes")

_F8_COPY = """
func.func @copy(%a: memref<?x{t}>, %b: memref<?x{t}>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?x{t}>
  scf.for %i = %c0 to %n step %c1 {{
    %x = memref.load %a[%i] : memref<?x{t}>
    memref.store %x, %b[%i] : memref<?x{t}>
  }}
  call @look(%b) : (memref<?x{t}>) -> ()
  return
}}
func.func private @look(memref<?x{t}>)
func.func @same(%x: {t}) -> {t} {{
  return %x : {t}
}}
"""


@pytest.mark.parametrize(("name", "dtype"), [("f8E4M3FN", "float8_e4m3fn"),
                                             ("f8E5M2", "float8_e5m2")])
def test_f8_memrefs_cross_into_kernels_and_callbacks(name: str, dtype: str) -> None:
    import pymlirjit
    from pymlirjit import Session, callback
    from pymlirjit.boundary.types import f8E4M3FN, f8E5M2

    scalar = {"f8E4M3FN": f8E4M3FN, "f8E5M2": f8E5M2}[name]
    assert getattr(pymlirjit, name) is scalar and to_type(np.dtype(getattr(ml_dtypes, dtype))) \
        is scalar
    session = Session()
    seen: list[np.ndarray] = []

    @callback(f"(memref<?x{name}>) -> ()", session=session)
    def look(a: np.ndarray) -> None:
        seen.append(a.copy())

    assert look.signature.param_types == (MemRef[scalar, None],)

    module = session.compile(_F8_COPY.format(t=name))
    values = np.array([1, 2.5, -3, 0.125, 0], dtype=getattr(ml_dtypes, dtype))
    out = np.zeros_like(values)
    module.copy(values, out)
    assert out.tobytes() == values.tobytes()
    assert len(seen) == 1 and seen[0].dtype == values.dtype
    assert seen[0].tobytes() == values.tobytes()
    assert module.same(2.5) == 2.5
    assert module.same(np.float32(-0.125)) == -0.125
    assert module.same(0.3) == float(np.array(0.3, dtype=getattr(ml_dtypes, dtype)))
    with pytest.raises(TypeError, match="argument 1"):
        module.same("x")


_EMPTY_TYPE_CHILD = """if True:
    from pymlirjit.boundary.types import to_type
    for text in ("", "  "):
        try:
            to_type(text)
        except TypeError as exc:
            print(exc)
"""


def test_an_empty_type_string_is_a_type_error_not_an_abort() -> None:
    # In a child: MLIR's type parser aborts the process on an empty string.
    done = subprocess.run([sys.executable, "-c", _EMPTY_TYPE_CHILD], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["'' is not an MLIR type: the string is empty",
                                        "'  ' is not an MLIR type: the string is empty"]


@pytest.mark.parametrize("t", [t for t in SCALARS if t.dtype_module == "ml_dtypes"],
                         ids=lambda t: t.mlir)
def test_a_scalar_of_an_ml_dtypes_type_is_taken_for_its_own_type(t: object) -> None:
    """bfloat16(1.5) for bf16 (a kernel argument, a callback's result): ml_dtypes' scalar
    types are no np.floating, and were refused as not being floats."""
    pytest.importorskip("ml_dtypes")
    assert isinstance(t, ScalarType)
    value = t.dtype.type(1.5)
    assert to_python_scalar(t, value, "x", exact=True) == 1.5
    assert to_python_scalar(t, value, "x") == 1.5
    with pytest.raises(TypeError, match=r"x: expected a float for f32, got"):
        to_python_scalar(f32, value, "x")


def test_a_type_string_may_have_surrounding_whitespace() -> None:
    # MLIR's parser alone reads " i32" as i3 followed by a stray "2".
    assert to_type(" i32") is to_type("i32")
    assert to_type(" memref<?x4xf32>\n").mlir == "memref<?x4xf32>"
    with pytest.raises(TypeError, match=r"'i32, f32' is not an MLIR type: .*trailing"):
        to_type("i32, f32")
