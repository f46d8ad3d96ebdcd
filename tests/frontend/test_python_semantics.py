"""Semantics found wrong before, each compared with the plain Python function:
``int ** negative int`` and the messages of divisions by zero."""

from __future__ import annotations

import numpy as np
import pytest

from pymlirjit import jit

from .helpers import check, same


@jit
def powers(a, b):
    return a ** -1, a ** -2, 2 ** -1, (-a) ** -3, a ** 3, a ** b, a ** 0


def test_int_to_a_literal_negative_power_is_a_float() -> None:
    for a, b in ((2, 3), (-4, 2), (1, 5), (3, 0), (-1, 7)):
        got = check(powers, a, b)
        assert [type(v) for v in got] == [float, float, float, float, int, int, int], got
    assert powers(2, 3)[:3] == (0.5, 0.25, 0.5)
    assert "math.powf" in powers.inspect_mlir()


@jit
def power_in_place(n):
    x = n
    x **= -1
    return x


def test_augmented_negative_power() -> None:
    check(power_in_place, 4)
    assert same(power_in_place(4), 0.25)


@jit
def divide(a, b, k):
    if k == 0:
        return a / b
    if k == 1:
        return a // b
    return a % b


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("a, b", [(1.0, 0.0), (1.0, -0.0), (1, 0), (2.5, 0), (3, 0.0)])
def test_division_by_zero_says_what_python_says(a: object, b: object, k: int) -> None:
    with pytest.raises(ZeroDivisionError) as python:
        divide.py_func(a, b, k)
    with pytest.raises(ZeroDivisionError) as compiled:
        divide(a, b, k)
    message = str(compiled.value)
    assert message.startswith(str(python.value) + " in @divide ("), (message, python.value)
    assert "test_python_semantics.py" in message


@jit
def complex_divide(a, b):
    return a / b


def test_complex_division_by_zero_message() -> None:
    for b in (0j, 0.0, 0):
        with pytest.raises(ZeroDivisionError, match=r"^complex division by zero in @"):
            complex_divide(1 + 1j, b)
        with pytest.raises(ZeroDivisionError, match=r"^complex division by zero$"):
            complex_divide.py_func(1 + 1j, b)


@jit(error_model="numpy")
def divide_numpy(a, b):
    return a / b, a // b, a % b


def test_numpy_error_model_still_gives_values() -> None:
    got = divide_numpy(1.0, 0.0)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])
