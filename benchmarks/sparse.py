"""i. Sparse kernels (issue 30): SpMV on a 20000x20000 CSR matrix with 10^6 entries,
a kernel over ``tensor<?x?xf64, #CSR>`` called with the scipy.sparse matrix, against
scipy's ``A @ x`` in the same run; and what passing a CSR matrix costs: the same kernel
called with a small matrix, against its wrapper called with the matrix's buffers."""

from __future__ import annotations

from typing import Any

import numpy as np

from pymlirjit import Session

from ._timing import CaseResult, Config, Target, interleaved, per_call, per_unit

__all__ = ["run"]


def spmv_source(widths: str) -> str:
    """A CSR SpMV kernel ``@spmv(A, x, y) -> A x`` whose encoding has ``widths``."""
    return f"""
#CSR = #sparse_tensor.encoding<{{ map = (i, j) -> (i : dense, j : compressed){widths} }}>
func.func @spmv(%a: tensor<?x?xf64, #CSR>, %x: tensor<?xf64>, %y: tensor<?xf64>)
    -> tensor<?xf64> {{
  %r = linalg.matvec ins(%a, %x : tensor<?x?xf64, #CSR>, tensor<?xf64>)
      outs(%y : tensor<?xf64>) -> tensor<?xf64>
  return %r : tensor<?xf64>
}}
"""


def run(config: Config) -> CaseResult:
    import scipy.sparse as sp

    result = CaseResult("i", "sparse kernels: scipy.sparse in, against scipy (ns per call)")
    n = config.pick(20_000, 2_000)
    entries = config.pick(1_000_000, 10_000)
    a = sp.random_array((n, n), density=entries / n / n, format="csr", rng=0)
    x = np.random.default_rng(1).random(n)
    y = np.zeros(n)
    session = Session()
    narrow = session.compile(spmv_source(", posWidth = 32, crdWidth = 32")).spmv
    # index widths: scipy's int32 indices converted to int64 on the first call, kept after
    wide = session.compile(spmv_source("")).spmv
    expected = a @ x
    for kernel in (narrow, wide):
        if not np.allclose(kernel(a, x, y), expected):
            raise AssertionError("spmv: pymlirjit's result is not scipy's")
    calls = config.pick(20, 5)

    def spmv(f: Any, *args: Any) -> Any:
        return lambda: per_unit(lambda: f(*args), units=1, number=calls, repeat=1)

    scipy_ns, narrow_ns, wide_ns = interleaved(
        spmv(a.__matmul__, x), spmv(narrow, a, x, y), spmv(wide, a, x, y),
        repeat=config.repeat)
    label = f"SpMV {n}x{n} CSR {a.nnz:.0e}"
    result.add("scipy", f"{label}: scipy A @ x", scipy_ns, "scipy")
    result.add("narrow", f"{label}: pymlirjit, i32 indices (scipy's)", narrow_ns, "scipy")
    result.add("wide", f"{label}: pymlirjit, index (int32 converted once)", wide_ns,
               "scipy")
    ratio = result.ratio("narrow", "scipy")
    result.targets.append(Target("SpMV 20000x20000 CSR, 10^6 entries: <= 1.3x scipy's A @ x",
                                 ratio <= 1.3 if not config.quick else None, f"{ratio:.2f}x"))

    small = sp.random_array((50, 50), density=0.1, format="csr", rng=2)
    xs, ys = np.random.default_rng(3).random(50), np.zeros(50)
    buffers = (small.indptr, small.indices, small.data, 50, 50, xs, ys)
    flat = narrow._python_call.inner  # the wrapper, called with the buffers themselves
    if not np.allclose(flat(*buffers), small @ xs):
        raise AssertionError("spmv wrapper: wrong result")
    many = config.pick(20_000, 300)
    passed, raw, scipy_small = interleaved(
        lambda: per_call(narrow, (small, xs, ys), calls=many, repeat=1),
        lambda: per_call(flat, buffers, calls=many, repeat=1),
        lambda: per_call(small.__matmul__, (xs,), calls=many, repeat=1),
        repeat=config.repeat)
    result.add("raw", "50x50 CSR SpMV: the wrapper, given the buffers", raw, "raw")
    result.add("passed", "50x50 CSR SpMV: the function, given the matrix", passed, "raw")
    result.add("scipy small", "50x50 CSR SpMV: scipy A @ x", scipy_small, "raw")
    cost = passed.median - raw.median
    result.targets.append(Target("passing a CSR matrix (no index conversion): <= 2 us",
                                 cost <= 2000 if not config.quick else None,
                                 f"{cost:,.0f} ns"))
    return result
