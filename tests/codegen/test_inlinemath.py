"""exp and tanh inline (pymlirjit.codegen.inlinemath): the polynomial, accuracy within an ulp
or two down to subnormal results (compiled, against long-double numpy), and the
AVX-512 scaling in the machine code. Special values and the 4-ulp bound of every
function: tests/test_vectormath.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pymlirjit import Session
from pymlirjit.codegen import inlinemath
from tests.codegen.test_vectormath import _LD, VECTOR_LANES, _kernel, _source, _ulps


def test_exp_polynomial_is_within_a_hundredth_of_an_ulp() -> None:
    # The economized polynomial, evaluated in long doubles over the reduced range.
    r = np.linspace(-inlinemath._EXP_REDUCED, inlinemath._EXP_REDUCED, 100_001, dtype=_LD)
    for degree, bound in ((11, 1e-17), (7, 1e-9)):  # f64, f32
        p = np.zeros_like(r)
        for coefficient in reversed(inlinemath._exp_coefficients(degree)):
            p = p * r + _LD(coefficient)
        assert float(np.max(np.abs(p / np.exp(r) - 1))) < bound, degree


#: (function, element, low, high, most ulps): exp down to subnormal results, tanh.
INLINE_RANGES = [("exp", "f64", -746.0, 710.0, 1.0), ("exp", "f64", -745.2, -708.0, 1.0),
                 ("exp", "f64", -1.0, 1.0, 1.0), ("exp", "f32", -104.0, 89.0, 1.0),
                 ("exp", "f32", -103.9, -87.0, 1.0), ("exp", "f32", -1.0, 1.0, 1.0),
                 ("tanh", "f64", -20.0, 20.0, 2.0), ("tanh", "f64", -1.0, 1.0, 2.0),
                 ("tanh", "f32", -10.0, 10.0, 2.0), ("tanh", "f32", -1.0, 1.0, 2.0)]


@pytest.mark.parametrize(("function", "element", "low", "high", "bound"), INLINE_RANGES)
def test_inline_exp_and_tanh_stay_within_an_ulp_or_two(function: str, element: str,
                                                       low: float, high: float,
                                                       bound: float) -> None:
    dtype = np.float64 if element == "f64" else np.float32
    module = Session(fastmath=True).compile(_source([function], element))
    lanes = VECTOR_LANES[element]
    x = np.random.default_rng(5).uniform(low, high, lanes * 4000).astype(dtype)
    reference = getattr(np, function)(x.astype(_LD))
    for kind in ("s", "v"):
        out = np.empty_like(x)
        getattr(module, f"{kind}_{function}")(x, x, out)
        assert float(np.max(_ulps(out, reference, dtype))) <= bound, (kind, function)


def test_exp_scales_by_the_power_of_two_in_one_instruction_on_avx512() -> None:
    if "avx512f" not in inlinemath.cpu_flags():
        pytest.skip("vscalefpd is AVX-512's")
    code = _kernel(_source(["exp"], "f64"), "s_exp", fastmath=True).inspect_asm()
    assert re.search(r"vscalefpd\s+%zmm", code)
    assert not re.search(r"\bcall\w*\s+ldexp", code)
