"""Whole-array arithmetic in @jit functions against numpy: broadcasting, NEP 50 promotion,
comparisons, in-place forms, and fusion into one loop."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pymlirjit import jit
from pymlirjit.jit import JitTypeError

from .helpers import check

SPECIAL = np.array([-7.5, 7.5, 0.0, -0.0, 2.0, np.nan, np.inf, -np.inf])


@jit
def arith(a, b):
    return a + b, a - b, a * b, a / b, a // b, a % b


@jit
def compares(a, b):
    return a < b, a <= b, a > b, a >= b, a == b, a != b


@jit
def unary(a):
    return -a, abs(a), +a


@jit
def power(a, b):
    return a ** b


@jit
def axpb(a, x, b):
    return a * x + b


@jit
def hypot(x, y):
    return np.sqrt(x * x + y * y)


def _quiet(f, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check(f, *args)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.uint8])
def test_operators_match_numpy(dtype) -> None:
    if np.dtype(dtype).kind == "f":
        a = SPECIAL.astype(dtype)
        b = np.array([2.0, -2.0, 0.0, 3.0, -0.0, 1.0, np.inf, 2.5]).astype(dtype)
    else:
        a = np.array([-7, 7, 0, 5, -3, 100, 1, 9]).astype(dtype)
        b = np.array([2, -2, 3, 0, 0, 7, -1, 4]).astype(dtype)
    _quiet(arith, a, b)
    _quiet(compares, a, b)
    _quiet(arith, a, 3)      # a Python int: weak, the array's type
    _quiet(arith, 2.5, a)    # a Python float: float64 for ints, the array's width for floats
    _quiet(compares, a, 2.5)
    if np.dtype(dtype) != np.uint8:
        _quiet(unary, a)
    _quiet(arith, a[::2], b[1::2])  # non-contiguous views
    _quiet(arith, a[:0], b[:0])     # empty


def test_int_edges_are_numpy_not_traps() -> None:
    lo = np.iinfo(np.int64).min
    a = np.array([lo, lo, 5, -5], dtype=np.int64)
    b = np.array([-1, 0, 0, -1], dtype=np.int64)
    _quiet(arith, a, b)  # MIN // -1 wraps, // 0 and % 0 give 0 (x86 would trap)


def test_power() -> None:
    _quiet(power, np.array([0.5, 2.0, -1.0, np.nan]), np.array([2.0, 0.5, 3.0, 0.0]))
    _quiet(power, np.arange(5), 3)
    _quiet(power, np.arange(5, dtype=np.float32), 2)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)),
                                    ((4, 1, 3), (2, 1)), ((1,), (5,)), ((0, 3), (3,)),
                                    ((2, 0), (2, 1))])
def test_broadcasting(shapes) -> None:
    sa, sb = shapes
    a = np.arange(float(np.prod(sa))).reshape(sa)
    b = np.arange(float(np.prod(sb))).reshape(sb) - 1.5
    check(axpb, a, b, 2.0)
    check(axpb, b, a, a)  # three arrays broadcast together
    check(compares, a, b)


def test_shapes_that_do_not_broadcast_raise() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        axpb(np.ones(3), np.ones(4), 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        axpb(np.ones((2, 3)), np.ones((3, 2)), 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        axpb(np.ones(0), np.ones(3), 1.0)


def test_nep50_weak_scalars() -> None:
    x32 = np.arange(4, dtype=np.float32)
    assert axpb(2.0, x32, 1).dtype == np.float32
    assert axpb(np.float64(2.0), x32, 1).dtype == np.float64  # a numpy scalar is strong
    i8 = np.arange(4, dtype=np.int8)
    assert axpb(2, i8, 1).dtype == np.int8
    assert axpb(2.0, i8, 1).dtype == np.float64
    check(axpb, 2, i8, 1)


def test_fused_into_one_loop() -> None:
    check(hypot, np.arange(5.0), np.arange(5.0)[::-1].copy())
    check(hypot, np.float32([3, np.inf, np.nan]), np.float32([4, 1, 1]))
    text = hypot.inspect_mlir()
    body = text.split("func.func private")[0]
    placeholders = body.count("func.call @__jit_raise")  # a raise returns a dummy array
    assert body.count("memref.alloc(") - placeholders == 1  # no x * x, y * y, sum arrays


@jit
def in_place(a, b, c):
    a += b
    a[1:] = c[:-1] * 2
    a[0] -= 1
    return a


@jit
def everything(out, x):
    out[...] = x * 2 + 1


@jit
def shift(a):
    a[1:] = a[:-1]  # overlapping: numpy copies the right side first
    return a


def test_in_place_forms_write_through() -> None:
    a, b = np.arange(5.0), np.ones(5)
    check(in_place, a, b, np.arange(5.0))
    check(in_place, np.arange(6.0).reshape(2, 3), np.ones(3), np.ones((2, 3)))
    out = np.zeros((2, 3))
    everything(out, np.arange(3.0))
    assert out.tolist() == [[1.0, 3.0, 5.0]] * 2
    check(everything, np.zeros((2, 3))[:, ::2], np.arange(2.0))  # a strided destination
    check(shift, np.arange(5.0))
    with pytest.raises(ValueError, match="broadcast"):
        everything(np.zeros(3), np.ones(2))


@jit
def add_into_int(a, x):
    a += x


def test_in_place_refuses_unsafe_casts_as_numpy() -> None:
    with pytest.raises(JitTypeError, match="cannot store the f64 result"):
        add_into_int(np.zeros(3, np.int64), 0.5)


@jit
def masks(a, b):
    m = (a > 0) & (b < 2)
    return m, ~m, m | (a == b)


def test_bool_arrays() -> None:
    check(masks, np.array([-1.0, 1.0, 3.0]), np.array([0.0, 1.0, 3.0]))
    got = masks(np.ones(2), np.zeros(2))[0]
    assert got.dtype == np.bool_ and got.tolist() == [True, True]
    check(in_place, np.array([True, False]), np.array([True, True]),
          np.array([False, True]))


@jit
def count_true(a):
    m = a > 0.5
    return m.sum(), m.max(), np.any(m), m.mean()


def test_reductions_of_bool_arrays() -> None:
    check(count_true, np.array([0.1, 0.7, 0.9, 0.2]))
    check(count_true, np.array([[0.6], [0.2]]))


def test_big_results_ask_for_huge_pages() -> None:
    x = np.linspace(0.0, 1.0, 600_000)  # 4.8 MB: madvise(MADV_HUGEPAGE), as numpy's
    check(axpb, 2.0, x, 1.0)
    assert "func.call @madvise" in axpb.inspect_mlir()
