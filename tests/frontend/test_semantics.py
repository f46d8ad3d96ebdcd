"""Python's arithmetic semantics, compiled, against plain Python (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pymlirjit import jit

from .helpers import check

INTS = st.integers(-(2**31), 2**31)
SMALL = st.integers(-50, 50)
FLOATS = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
FAST = settings(max_examples=60, deadline=None)


@jit
def ops(a, b):
    return a + b, a - b, a * b, a // b, a % b, a / b, a < b, a <= b, a == b, a != b


@jit
def power(a, b):
    return a ** b


@FAST
@given(INTS, INTS.filter(lambda b: b != 0))
def test_int_ops(a: int, b: int) -> None:
    check(ops, a, b)


@FAST
@given(FLOATS, FLOATS.filter(lambda b: b != 0))
def test_float_ops(a: float, b: float) -> None:
    check(ops, a, b)


@FAST
@given(INTS, FLOATS.filter(lambda b: b != 0))
def test_mixed_ops(a: int, b: float) -> None:
    check(ops, a, b)
    if a != 0:
        check(ops, b, a)


@FAST
@given(st.integers(-20, 20), st.integers(0, 12))
def test_int_power(a: int, b: int) -> None:
    check(power, a, b)


@FAST
@given(st.floats(0.001, 100.0), st.floats(-5, 5))
def test_float_power(a: float, b: float) -> None:
    got, want = power(a, b), power.py_func(a, b)
    assert got == want or abs(got - want) <= 1e-12 * abs(want)


@FAST
@given(st.floats(-100, 100).filter(lambda a: a == 0 or abs(a) > 1e-3), st.integers(-3, 3))
def test_float_int_power(a: float, b: int) -> None:
    if a == 0 and b < 0:
        return
    got, want = power(a, b), power.py_func(a, b)
    assert got == want or abs(got - want) <= 1e-12 * abs(want)


@jit
def f32_ops(x, b):
    return x[0] * b, x[0] // b, x[0] % b, x[0] / b


@FAST
@given(st.floats(-1e3, 1e3, width=32), st.floats(-1e3, 1e3).filter(lambda b: abs(b) > 1e-3))
def test_weak_python_float_keeps_f32(a: float, b: float) -> None:
    x = np.array([a], dtype=np.float32)
    got = f32_ops(x, b)
    want = f32_ops.py_func(x, b)
    for g, w in zip(got, want):
        assert np.float32(g) == w or (np.isnan(g) and np.isnan(w))


@jit
def rsum(start, stop, step):
    s = 0
    n = 0
    for i in range(start, stop, step):
        s += i
        n += 1
    return s, n


@FAST
@given(SMALL, SMALL, st.integers(-7, 7).filter(lambda s: s != 0))
def test_range_bounds_and_steps(start: int, stop: int, step: int) -> None:
    check(rsum, start, stop, step)


@jit
def index(x, i, j):
    return x[i], x[i:j].size if i < j else 0


@FAST
@given(st.integers(1, 8), st.data())
def test_negative_indices_and_slices(n: int, data: st.DataObject) -> None:
    x = np.arange(float(n))
    i = data.draw(st.integers(-n, n - 1))
    j = data.draw(st.integers(-n - 2, n + 2))
    check(index, x, i, j)


@jit
def ints8(x, y):
    return x[0] + y[0], x[0] * 3, x[0] // y[0], x[0] % y[0]


@FAST
@given(st.integers(-128, 127), st.integers(-128, 127).filter(lambda v: v != 0))
def test_narrow_ints_wrap_like_numpy(a: int, b: int) -> None:
    x, y = np.array([a], np.int8), np.array([b], np.int8)
    with np.errstate(over="ignore"):
        want = ints8.py_func(x, y)
    got = ints8(x, y)
    assert [int(v) for v in got] == [int(v) for v in want]
