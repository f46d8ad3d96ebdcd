"""convert: every scalar type's Python value survives its C form, both directions."""

from __future__ import annotations

import ctypes

import pytest

from pymlirjit.boundary.convert import from_c, from_memory, to_c, to_memory
from pymlirjit.boundary.types import SCALARS, ScalarType

_SAMPLES = {"bool": [True, False], "int": [0, 1, -1, 100], "float": [0.0, 1.5, -2.0, 0.25],
            "complex": [0j, 1 + 2j, -0.5 - 4j]}


@pytest.mark.parametrize("t", SCALARS, ids=lambda t: t.mlir)
def test_values_round_trip_through_their_boundary_and_memory_forms(t: ScalarType) -> None:
    if t.dtype_module is not None:
        pytest.importorskip(t.dtype_module)
    for value in _SAMPLES[t.kind]:
        c_values = to_c(t)(value, "v")
        assert len(c_values) == len(t.boundary)
        for c_value, part in zip(c_values, t.boundary):
            part.ctype(c_value)  # each fits its boundary type's C form
        assert from_c(t)(*c_values) == value
        field = to_memory(t, value, "v")

        class Holder(ctypes.Structure):
            _fields_ = [("x", t.ctype)]

        assert from_memory(t)(Holder(field).x) == value


def test_errors_name_the_value() -> None:
    from pymlirjit.boundary.types import f8E5M2, i8

    with pytest.raises(ValueError, match="parameter 'n'"):
        to_c(i8)(1000, "parameter 'n'")
    with pytest.raises(TypeError, match="result #0"):
        to_c(f8E5M2)("text", "result #0")


def test_to_c_exact_converts_other_widths_only_when_exact() -> None:
    import numpy as np

    from pymlirjit.boundary.types import complex64, f16, f32, i8

    assert to_c(f32)(np.float64(0.1), "x") == (0.1,)  # results of callbacks round
    with pytest.raises(ValueError, match=r"x: float64 np.float64\(0.1\) is not exactly "
                                         r"representable in f32"):
        to_c(f32, exact=True)(np.float64(0.1), "x")
    assert to_c(f32, exact=True)(np.float64(0.25), "x") == (0.25,)
    assert to_c(f32, exact=True)(0.1, "x") == (0.1,)  # a Python float rounds (ctypes does)
    with pytest.raises(ValueError, match=r"70000\.0 is out of range for f16"):
        to_c(f16, exact=True)(70000.0, "x")
    with pytest.raises(ValueError, match="not exactly representable in complex<f32>"):
        to_c(complex64, exact=True)(np.complex128(0.1 + 0.5j), "x")
    assert to_c(complex64, exact=True)(np.float32(0.1), "x") == (float(np.float32(0.1)), 0.0)
    with pytest.raises(ValueError, match="out of range for i8"):
        to_c(i8, exact=True)(np.int64(300), "x")


def test_a_callback_result_rounds_but_must_not_overflow() -> None:
    import math

    import numpy as np

    from pymlirjit.boundary.convert import result_scalar
    from pymlirjit.boundary.types import bf16, complex64, f8E4M3FN, f16, f32, f64

    assert result_scalar(f32, np.float64(0.1), "r") == 0.1  # rounds: not exact only
    assert result_scalar(f32, float.fromhex("0x1.fffffefp127"), "r") > 3e38  # rounds down
    assert result_scalar(f8E4M3FN, 460.0, "r") == 460.0  # 448 once in memory
    assert result_scalar(f64, 1e308, "r") == 1e308
    for t, value in ((f32, 1e300), (f16, -70000.0), (bf16, 10**39), (f8E4M3FN, 1000.0),
                     (complex64, complex(1.0, 1e300)), (f32, np.float64(1e39))):
        with pytest.raises(ValueError, match=r"^r: .* is out of range for "):
            result_scalar(t, value, "r")
        with pytest.raises(ValueError, match="out of range"):
            to_c(t)(value, "r")
        with pytest.raises(ValueError, match="out of range"):
            to_memory(t, value, "r")
    for t in (f32, f16, bf16, complex64):
        for special in (math.inf, -math.inf):
            assert result_scalar(t, special, "r") == special
        assert math.isnan(abs(result_scalar(t, math.nan, "r")))
    with pytest.raises(ValueError, match=r"r: 1000000000000000000000000000000000000\.\.\. "
                                         r"is out of range for f32"):
        result_scalar(f32, 10**100, "r")
