"""numpy functions in @jit functions against numpy: ufuncs on arrays and scalars,
reductions with and without axis=, matrix products through linalg, constructors, views."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pymlirjit import jit
from pymlirjit.jit import JitTypeError

from .helpers import check, same

X = np.array([-1.5, 0.0, -0.0, 2.5, np.nan, np.inf, -np.inf, 0.25])
Y = np.array([1.0, -1.0, 2.0, np.nan, 2.0, 1.0, -3.0, 0.5])


@jit
def exact_ufuncs(a, b):
    return (np.minimum(a, b), np.maximum(a, b), np.fmin(a, b), np.fmax(a, b), np.sqrt(a),
            np.floor(a), np.ceil(a), np.trunc(a), np.rint(a), abs(a), np.fabs(a),
            np.sign(a), np.isnan(a), np.isinf(a), np.isfinite(a), np.where(a > b, a, b),
            np.power(a, 2))


@jit
def transcendental(a, b):
    return (np.exp(a), np.log(np.abs(a)), np.log1p(np.abs(a)), np.expm1(a), np.sin(a),
            np.cos(a), np.tan(a), np.arcsin(a / 10), np.arccos(a / 10), np.arctan(a),
            np.arctan2(a, b), np.sinh(a / 4), np.cosh(a / 4), np.tanh(a), np.hypot(a, b))


def _close(got, expected) -> None:
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ufuncs_on_arrays(dtype) -> None:
    a, b = X.astype(dtype), Y.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(exact_ufuncs, a, b)
        check(exact_ufuncs, a.reshape(2, 4), b[:4])          # broadcast
        check(exact_ufuncs, a[::2], b[1::2])                 # strided
        _close(transcendental(a, b), transcendental.py_func(a, b))
        _close(transcendental(a[::3], 2.0), transcendental.py_func(a[::3], 2.0))


def test_ufuncs_on_integers_and_scalars() -> None:
    a, b = np.array([-3, 0, 7, 2]), np.array([2, 5, -1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(exact_ufuncs, a, b)
        check(exact_ufuncs, a.astype(np.int32), 3)
        check(exact_ufuncs, 2.5, -1.0)  # scalars: np.sign, np.rint and np.where too


@jit
def reductions(a):
    return (a.sum(), a.sum(axis=0), np.sum(a, 1), a.prod(0), np.min(a, axis=-1),
            a.max(axis=0), a.mean(0), np.mean(a, axis=1), a.argmin(), np.argmax(a),
            a.argmin(axis=0), np.argmax(a, 1), np.any(a > 2), a.all(), np.any(a, axis=0),
            np.all(a > 0, 1))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_reductions_match_numpy(dtype) -> None:
    a = np.array([[3, 1, 4, 1], [5, 9, 2, 6], [5, 3, 5, 8]]).astype(dtype)
    got, expected = reductions(a), reductions.py_func(a)
    for g, e in zip(got, expected):
        if isinstance(e, np.ndarray):  # (scalar results are Python numbers)
            assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6)
    got = reductions(a[:, ::2])  # a strided view
    np.testing.assert_allclose(got[1], reductions.py_func(a[:, ::2])[1])


def test_reductions_with_nan_and_empty() -> None:
    a = np.array([[1.0, np.nan, 3.0], [-1.0, 2.0, np.nan]])
    for g, e in zip(reductions(a), reductions.py_func(a)):
        assert same(np.asarray(g), np.asarray(e)) or np.allclose(g, e, equal_nan=True)
    with pytest.raises(ValueError):
        reductions(np.ones((0, 3)))  # min of an empty axis
    check(empty_axes, np.ones((0, 3)))


@jit
def empty_axes(a):
    return a.sum(0), np.any(a, 1), a.prod(axis=1)


@jit
def matmul(a, b):
    return a @ b


@jit
def dots(a, b):
    return np.dot(a, b), np.matmul(a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_matrix_products(dtype) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 5, (7, 5)).astype(dtype)
    b = rng.integers(-5, 5, (5, 9)).astype(dtype)
    x, y = rng.integers(-5, 5, 5).astype(dtype), rng.integers(-5, 5, 7).astype(dtype)
    for left, right in ((a, b), (a, x), (y, a), (x, x), (a.T.copy().T, b), (a[:, ::2], b[::2]),
                        (np.ones((0, 5), dtype), b), (a[:, :0], b[:0])):
        check(matmul, left, right)
        check(dots, left, right)
    text = matmul.inspect_mlir(("memref<?x?x" + matmul.signatures[0][0].split("x")[-1],
                                matmul.signatures[0][1]))
    assert "linalg.matmul" in text
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(a, a)
    check(matmul, a.astype(np.float32), b)  # mixed: float64, as numpy


def test_matmul_is_fast_linalg() -> None:
    a = np.random.default_rng(1).random((64, 48), dtype=np.float32)
    b = np.random.default_rng(2).random((48, 80), dtype=np.float32)
    np.testing.assert_allclose(matmul(a, b), a @ b, rtol=1e-5)
    lowered = matmul.kernel().lowered_mlir
    assert "linalg" not in lowered and "vector" in matmul.inspect_llvm()


@jit
def constructors(n, x):
    return (np.arange(n), np.arange(1, n, 2), np.arange(0.5, n), np.arange(n, 0, -2),
            np.linspace(0, 1, n), np.linspace(-1.0, x, n, endpoint=False),
            np.full((2, n), x), np.full(n, 7), np.full(n, 2, np.float32))


def test_constructors() -> None:
    for n in (0, 1, 5):
        check(constructors, n, 2.5)
    with pytest.raises(ZeroDivisionError):
        zero_step(3)


@jit
def zero_step(n):
    return np.arange(0, n, 0)


@jit
def copies_and_views(a):
    b = a.T
    return (np.copy(a), a.copy(), a.astype(np.float32), a.astype(np.int32), b,
            np.transpose(a), b.copy(), np.cumsum(a), np.cumsum(a, axis=0),
            np.cumsum(a, axis=1), np.outer(a[0], a[:, 0]))


@jit
def reshapes(a):
    b = a.reshape(3, -1)
    b[0, 0] = 99.0  # a view: writes reach a
    return b, a.reshape((2, 3)), a.reshape(6)


def test_copies_views_reshape() -> None:
    a = np.arange(6.0).reshape(2, 3) - 2.5
    t = check(copies_and_views, a)[4]
    assert not t.flags.c_contiguous and t.shape == (3, 2)
    check(copies_and_views, np.arange(12).reshape(3, 4)[:, ::2])
    check(reshapes, np.arange(6.0))
    with pytest.raises(ValueError, match="reshape"):
        reshapes(np.arange(5.0))


@jit
def unsupported(a):
    return np.linalg.norm(a)


def test_unsupported_numpy_function_names_it() -> None:
    with pytest.raises(JitTypeError, match=r"np\.linalg\.norm\(\) is not supported") as info:
        unsupported(np.ones(3))
    assert "return np.linalg.norm(a)" in str(info.value)
