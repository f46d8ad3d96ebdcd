"""parallel=True with arrays: prange bodies that use arrays and reductions, and
whole-array expressions run as scf.parallel loops."""

from __future__ import annotations

import numpy as np

from pymlirjit import jit, prange

from .helpers import check


@jit(parallel=True)
def pdot(x, y):
    s = 0.0
    for i in prange(len(x)):
        s += x[i] * y[i]
    return s


@jit(parallel=True)
def rows(m, out):
    total = 0.0
    for i in prange(m.shape[0]):
        r = m[i] * 2.0 + 1.0          # a whole-array temporary per iteration, freed
        out[i] = r.sum()
        m[i, :] = np.sqrt(np.abs(m[i]))
        total += out[i]
    return total


def test_prange_with_arrays_and_reductions() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.random(1000), rng.random(1000)
    assert abs(pdot(x, y) - x @ y) < 1e-9
    assert pdot(x[:0], y[:0]) == 0.0
    m = rng.random((50, 7))
    out, expected_out = np.zeros(50), np.zeros(50)
    m1, m2 = m.copy(), m.copy()
    np.testing.assert_allclose(rows(m1, out), rows.py_func(m2, expected_out))
    np.testing.assert_allclose(out, expected_out)
    np.testing.assert_allclose(m1, m2)


@jit(parallel=True)
def fused(a, x, b):
    return a * x + b, np.sqrt(x * x + b * b)


def test_whole_array_expressions_run_as_parallel_loops() -> None:
    x = np.arange(12.0).reshape(3, 4)
    check(fused, 2.0, x, np.arange(4.0))
    check(fused, 2.0, x[:, ::2], 1.5)
    check(fused, 2.0, x[:0], 1.5)
    assert "scf.parallel" in fused.inspect_mlir()
    serial = jit(fused.py_func)
    check(serial, 2.0, x, 1.5)
    assert "scf.parallel" not in serial.inspect_mlir()
