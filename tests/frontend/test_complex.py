"""Complex numbers in @jit code, compiled against plain Python and numpy."""

from __future__ import annotations

import cmath
import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pymlirjit import jit, prange
from pymlirjit.frontend import JitTypeError

FINITE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
COMPLEX = st.builds(complex, FINITE, FINITE)
FAST = settings(max_examples=60, deadline=None)


def bits(a: object, b: object) -> bool:
    """The same value, bit for bit (NaNs equal, signed zeros distinct)."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(bits, a, b))
    if type(a) is bool or type(b) is bool or isinstance(a, (np.bool_, int)):
        return bool(a == b)
    ca, cb = complex(a), complex(b)  # type: ignore[arg-type]
    return all((math.isnan(x) and math.isnan(y)) or
               (x == y and math.copysign(1, x) == math.copysign(1, y))
               for x, y in ((ca.real, cb.real), (ca.imag, cb.imag)))


def agree(f: object, *args: object) -> bool:
    """``f`` compiled and as Python give the same bits, or raise the same type."""
    try:
        want = f.py_func(*args)  # type: ignore[attr-defined]
    except OverflowError:
        return True  # compiled: inf, as for floats (docs/jit.md)
    except ArithmeticError as exc:
        with pytest.raises(type(exc)):
            f(*args)  # type: ignore[operator]
        return True
    return bits(f(*args), want)  # type: ignore[operator]


@jit
def ops(a, b):
    return a + b, a - b, a * b, a / b, a == b, a != b, -a, a ** 2, a ** 3, a ** -2


@FAST
@given(COMPLEX, COMPLEX.filter(lambda b: b != 0))
def test_operators_match_python_bit_for_bit(a: complex, b: complex) -> None:
    assert agree(ops, a, b)


@FAST
@given(COMPLEX, FINITE.filter(lambda b: abs(b) > 1e-6), st.integers(-1000, 1000).filter(bool))
def test_mixed_with_float_and_int(z: complex, x: float, n: int) -> None:
    assert agree(ops, z, x)
    # (float ** 2 is x * x compiled, libm's pow in Python: not a complex matter)
    assert bits(ops(x, z + 1)[:7], ops.py_func(x, z + 1)[:7])
    assert agree(ops, z, n)


@jit
def functions(z):
    return (abs(z), cmath.exp(z), cmath.log(z), cmath.sqrt(z), np.exp(z), np.log(z),
            np.sqrt(z), np.abs(z), cmath.sin(z), cmath.cos(z), cmath.tan(z), cmath.tanh(z))


@FAST
@given(st.builds(complex, st.floats(-20, 20), st.floats(-20, 20)).filter(
    lambda z: abs(z) > 1e-150))  # subnormal parts: MLIR's log loses digits (docs/jit.md)
def test_functions_match_cmath_closely(z: complex) -> None:
    for i, (got, want) in enumerate(zip(functions(z), functions.py_func(z))):
        assert type(got) is type(complex(0)) or isinstance(got, float)
        # MLIR's sin/cos/tan/tanh: ~50 ulps at worst, or 1e-15 absolute near zero; each
        # times the function's condition number |z f'(z) / f(z)| where it is large (log's
        # real part near |z| = 1: MLIR takes the log of |z|), and tan's and tanh's times
        # |f(z)|^2 near their poles, where MLIR's formula cancels (docs/jit.md; CI found
        # 150 ulps at tan(4.6875+0.015625j), hypothesis 5e5 at tan(1.5703125+2e-4j)).
        tolerance, floor = (4e-15, 1e-300) if i < 8 else (3e-14, 1e-15)
        derivative = _DERIVATIVES[i]
        if derivative is not None and want != 0:
            value = complex(want)
            tolerance *= max(1.0, abs(z * derivative(z) / value),
                             abs(value) ** 2 if i >= 10 else 1.0)
        assert cmath.isclose(got, want, rel_tol=tolerance, abs_tol=floor), (z, got, want)


#: The derivatives of ``functions``' results in order (``None``: abs, real-valued).
_DERIVATIVES: tuple[Callable[[complex], complex] | None, ...] = (
    None, cmath.exp, lambda z: 1 / z, lambda z: 0.5 / cmath.sqrt(z),
    cmath.exp, lambda z: 1 / z, lambda z: 0.5 / cmath.sqrt(z), None,
    cmath.cos, lambda z: -cmath.sin(z), lambda z: 1 + cmath.tan(z) ** 2,
    lambda z: 1 - cmath.tanh(z) ** 2)


SPECIAL = [0.0, -0.0, 1.5, -2.0, math.inf, -math.inf, math.nan, 1e308, 5e-324]


def test_operators_on_infinities_nans_zeros_and_subnormals() -> None:
    @jit
    def arithmetic(a, b):
        return a + b, a - b, a * b, a / b, a == b, a != b, -a

    for a, b, c, d in itertools.product(SPECIAL, repeat=4):
        x, y = complex(a, b), complex(c, d)
        if y != 0:
            assert bits(arithmetic(x, y), arithmetic.py_func(x, y)), (x, y)


@jit
def parts(z, x, n):
    return (z.real, z.imag, z.conjugate(), x.real, x.imag, x.conjugate(), n.real, n.imag,
            complex(x, n), complex(z), np.real(z), np.imag(z), np.conj(z), bool(z))


def test_parts_and_constructors() -> None:
    for z in (3 - 4j, -0.0 + 0j, complex(math.inf, -1)):
        assert bits(parts(z, 2.5, 7), parts.py_func(z, 2.5, 7))


def test_complex64_stays_complex64_under_nep50() -> None:
    @jit
    def scale(z):
        w = z * 2.0 + 1j
        return w, w.real

    z = np.complex64(1.5 - 2j)
    got = scale(z)
    want = scale.py_func(z)
    assert bits(got, want)
    assert "-> (complex<f32>, f32)" in scale.inspect_mlir()
    x32 = np.float32(2)
    got2 = scale(x32 * 1j)
    assert bits(got2, scale.py_func(x32 * 1j))


def test_complex64_division_close_to_numpy() -> None:
    a = np.complex64(1.25 + 3j)
    b = np.complex64(-0.5 + 0.75j)
    got = ops(a, b)
    want = ops.py_func(a, b)
    for g, w in zip(got, want):
        assert cmath.isclose(complex(g), complex(w), rel_tol=1e-6)


def test_division_by_zero() -> None:
    @jit
    def div(a, b):
        return a / b

    with pytest.raises(ZeroDivisionError):
        div(1 + 1j, 0j)
    with pytest.raises(ZeroDivisionError):
        div(1 + 1j, 0.0)

    @jit(error_model="numpy")
    def div_np(a, b):
        return a / b

    with np.errstate(all="ignore"):
        want = np.complex128(2 + 1j) / np.complex128(0)
    assert bits(div_np(2 + 1j, 0j), want)


@pytest.mark.parametrize("source, message", [
    ("return a < b", "no order"),
    ("return a // b", "//"),
    ("return a % b", "%"),
    ("return int(a)", "cannot convert a complex"),
    ("return math.sqrt(a)", "cmath"),
    ("return a & b", "not defined"),
])
def test_what_python_refuses_is_a_compile_error(source: str, message: str) -> None:
    namespace: dict[str, object] = {"math": math}
    import linecache
    text = f"def bad(a, b):\n    {source}\n"
    filename = f"<complex-{abs(hash(source))}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(compile(text, filename, "exec"), namespace)
    with pytest.raises(JitTypeError, match=message):
        jit(namespace["bad"])(1j, 2j)


@jit
def array_ops(a, b):
    c = a * b + 1j
    total = 0j
    for v in c:
        total += v
    return c, np.abs(a), np.exp(a), a.sum(), a.mean(), a.prod(), total, -a


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_arrays(dtype: type) -> None:
    a = (np.arange(6) * (0.5 - 0.25j)).astype(dtype)
    b = (np.arange(6) + 2j).astype(dtype)
    got = array_ops(a, b)
    want = array_ops.py_func(a, b)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype or np.ndim(g) == 0
        np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == np.complex64 else 1e-14)


def test_array_elements_and_allocation() -> None:
    @jit
    def fill(n, z):
        out = np.zeros(n, dtype=np.complex128)
        for i in range(n):
            out[i] = z ** 2 * i
        return out

    assert np.array_equal(fill(5, 1 + 2j), fill.py_func(5, 1 + 2j))


@jit
def mandel(x, y, max_iters):
    c = complex(x, y)
    z = 0.0j
    for i in range(max_iters):
        z = z * z + c
        if (z.real * z.real + z.imag * z.imag) >= 4:
            return i
    return max_iters


def test_mandelbrot_with_complex_arithmetic() -> None:
    for x in np.linspace(-2, 1, 13):
        for y in np.linspace(-1, 1, 7):
            assert mandel(x, y, 50) == mandel.py_func(x, y, 50)


def test_parameters_and_results_cross_natively() -> None:
    @jit
    def twice(z: complex) -> complex:
        return z + z

    twice.compile()
    assert twice.kernel()._compiled.native_entry is not None
    assert twice(1 + 2j) == 2 + 4j
    assert twice(np.complex128(1j)) == 2j
    with pytest.raises(TypeError):
        twice("1j")


def test_prange_complex_reduction() -> None:
    @jit(parallel=True)
    def total(a):
        s = 0j
        for i in prange(len(a)):
            s += a[i]
        return s

    a = np.arange(1000) * (1 + 0.5j)
    assert cmath.isclose(total(a), a.sum(), rel_tol=1e-12)
