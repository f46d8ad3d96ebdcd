"""Calls from @jit code: other @jit functions and plain functions (compiled into the same
module), @callback functions, annotated Python callables (automatic callbacks), print."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest

from pymlirjit import callback, f64, jit
from tests.threads import run_in_threads

from .helpers import check


@jit
def sq(v):
    return v * v


def cube(v):  # no decorator: compiled too
    return v * sq(v)


@jit
def sumsq(x):
    s = 0.0
    for v in x:
        s += sq(v) + cube(v)
    return s


def test_jit_and_plain_callees_compile_into_the_module() -> None:
    check(sumsq, np.arange(5.0))
    check(sumsq, np.arange(5, dtype=np.float32))
    text = sumsq.inspect_mlir()
    assert "func.func private @sq__" in text and "func.func private @cube__" in text
    assert "callback" not in text


def test_numba_dispatchers_compile_from_py_func() -> None:
    numba = pytest.importorskip("numba")

    @numba.njit
    def twice(v):
        return 2 * v

    @jit
    def use(x):
        return twice(x) + 1

    assert use(3) == 7
    assert "func.func private @twice__" in use.inspect_mlir()


@callback
def weight(v: f64) -> f64:
    return math.sqrt(v) + 1.0


TABLE = {0: 1.5, 1: 2.5}


def lookup(i: int) -> float:
    return TABLE[i]  # a dict: not compiled; annotated, so a callback


@jit
def weighted(x):
    s = 0.0
    for i in range(len(x)):
        s += weight(x[i]) * lookup(i % 2)
    return s


def test_callbacks_and_automatic_callbacks() -> None:
    check(weighted, np.arange(4.0))
    assert "__jit_cb_lookup" in weighted.inspect_mlir()


def failing(i: int) -> float:
    raise KeyError(f"no entry {i}")


@jit
def calls_failing(n):
    total = 0.0
    for i in range(n):
        total += failing(i)
    return total


def test_exception_in_automatic_callback_propagates() -> None:
    with pytest.raises(KeyError, match="no entry 0"):
        calls_failing(3)
    assert calls_failing(0) == 0.0


@jit
def talk(n, x):
    print("n is", n, "and x is", x)
    print(n * 2, end="!\n")
    return n


def test_print_goes_through_sys_stdout() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        talk(3, 1.5)
        talk(4, np.float32(0.1))
    assert out.getvalue() == "n is 3 and x is 1.5\n6!\nn is 4 and x is 0.1\n8!\n"


def reenter(v: float) -> float:
    return float(sq(v)) + 1.0  # the @jit function, from inside a kernel call


@jit
def outer(x):
    s = 0.0
    for v in x:
        s += reenter(v)
    return s


def test_reentering_a_jit_function_from_a_callback() -> None:
    assert outer(np.arange(3.0)) == (0 + 1 + 4) + 3.0


def test_threads_compile_each_specialization_once() -> None:
    @jit
    def poly(x, k):
        s = 0.0
        for v in x:
            s += v * k
        return s

    results = run_in_threads(lambda i: poly(np.arange(4.0), i), range(4))
    assert results == [0.0, 6.0, 12.0, 18.0]
    assert poly.signatures == [("memref<?xf64>", "i64")]


def test_mlir_kernels_and_externs_are_called_as_declared() -> None:
    import ctypes

    from pymlirjit import extern, mlir_kernel

    @mlir_kernel(source="""
    func.func @mlir_twice(%x: f64) -> f64 {
      %two = arith.constant 2.0 : f64
      %r = arith.mulf %x, %two : f64
      return %r : f64
    }""")
    def mlir_twice(x: float) -> float: ...

    libm = ctypes.CDLL(None)
    cbrt = extern("cbrt", libm.cbrt, "(f64) -> f64")

    @jit
    def use(v):
        return mlir_twice(v) + cbrt(v)

    assert use(8.0) == 18.0
